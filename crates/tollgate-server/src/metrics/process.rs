//! The process's own metrics under Prometheus's standard names (`process_resident_memory_bytes`,
//! `process_cpu_seconds_total`, `process_open_fds`, …), read from `/proc/self` at each scrape
//! and appended to `/metrics` as text.
//!
//! Why by hand: the Prometheus exporter crate has no process collector, and these are a few
//! lines of `/proc` reading; why as text: `process_cpu_seconds_total` is a counter of
//! fractional seconds, which the `metrics` facade's integer counters cannot carry. Linux
//! only; elsewhere nothing is appended.

use std::fmt::Write as _;

/// The process metrics in the Prometheus text format, or an empty string off Linux (or if
/// `/proc` cannot be read).
pub(crate) fn render() -> String {
    let mut out = String::new();
    let Some(stat) = read("/proc/self/stat") else {
        return out;
    };
    // Fields after the command, which is in parentheses and may hold spaces.
    let Some(after) = stat.rsplit_once(')').map(|(_, rest)| rest) else {
        return out;
    };
    let fields: Vec<&str> = after.split_whitespace().collect();
    // stat(5), counting from `state` (field 3) as index 0.
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<f64>().ok());
    let ticks = clock_ticks();
    if let (Some(utime), Some(stime)) = (field(14), field(15)) {
        metric(
            &mut out,
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent in seconds.",
            (utime + stime) / ticks,
        );
    }
    if let Some(start) = field(22)
        && let Some(boot) = boot_time()
    {
        metric(
            &mut out,
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since unix epoch in seconds.",
            boot + start / ticks,
        );
    }
    if let Some(status) = read("/proc/self/status") {
        for (field_name, name, help) in [
            (
                "VmSize:",
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
            ),
            (
                "VmRSS:",
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
            ),
        ] {
            if let Some(kb) = kib(&status, field_name) {
                metric(&mut out, name, "gauge", help, kb * 1024.0);
            }
        }
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        // Far below 2^53.
        #[allow(clippy::cast_precision_loss)]
        let open = fds.count() as f64;
        metric(
            &mut out,
            "process_open_fds",
            "gauge",
            "Number of open file descriptors.",
            open,
        );
    }
    if let Some(max) = read("/proc/self/limits").and_then(|l| max_open_files(&l)) {
        metric(
            &mut out,
            "process_max_fds",
            "gauge",
            "Maximum number of open file descriptors.",
            max,
        );
    }
    out
}

fn metric(out: &mut String, name: &str, kind: &str, help: &str, value: f64) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    let _ = writeln!(out, "{name} {value}");
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// The soft limit of "Max open files" in `/proc/self/limits`.
fn max_open_files(limits: &str) -> Option<f64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// Seconds since the epoch at boot (`btime` in `/proc/stat`).
fn boot_time() -> Option<f64> {
    read("/proc/stat")?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// Clock ticks per second (`USER_HZ`): 100 on every Linux this runs on; `getconf CLK_TCK`
/// would need libc.
fn clock_ticks() -> f64 {
    100.0
}

/// A `kB` line of `/proc/self/status`.
fn kib(status: &str, field: &str) -> Option<f64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    /// On Linux, every standard process metric is there with a plausible value.
    #[test]
    #[cfg(target_os = "linux")]
    fn reads_this_process() {
        let text = super::render();
        let value = |name: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name} missing:\n{text}"))
        };
        assert!(value("process_resident_memory_bytes") > 1_000_000.0);
        assert!(value("process_open_fds") >= 3.0);
        assert!(value("process_max_fds") >= value("process_open_fds"));
        assert!(value("process_cpu_seconds_total") >= 0.0);
        assert!(value("process_start_time_seconds") > 1_600_000_000.0);
        assert!(value("process_virtual_memory_bytes") > value("process_resident_memory_bytes"));
        assert!(text.contains("# TYPE process_cpu_seconds_total counter"));
    }
}
