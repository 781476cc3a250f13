//! [`process_cpu_time`]: a process's CPU time from `/proc`, for the benchmarks' costs per
//! decision (of a spawned Redis, or of the benchmark's own process, the client).

use std::time::Duration;

/// CPU time (user + system) process `pid` has used so far, from `/proc/<pid>/stat`: unlike
/// throughput, it hardly moves when other processes load the machine. Ticks of 10 ms.
///
/// # Panics
/// When `/proc/<pid>/stat` cannot be read or parsed.
pub fn process_cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("cannot read /proc/{pid}/stat: {e}"));
    // After the command name (in parentheses): utime and stime are the 14th and 15th fields
    // of the whole line, in clock ticks (100 per second on Linux).
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| -> u64 {
        fields
            .get(i)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no field {i} in /proc/{pid}/stat: {stat}"))
    };
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}
