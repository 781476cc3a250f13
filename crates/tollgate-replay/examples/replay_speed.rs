//! How fast `tollgate replay` goes through a log, on one core: lines per second reading and
//! parsing alone (the baseline), then replaying one limit and three limits on the memory
//! store, over the same generated combined-format log held in memory (no disk in the way).
//!
//! Then `--suggest`'s work ([`tollgate_replay::suggest`], the per-user key, the default
//! share: three passes over the log), as lines of the log per second.
//!
//! `cargo run --release -p tollgate-replay --example replay_speed [lines] [users]`
//! (defaults: 2 000 000 lines, 100 000 users; three rounds, medians).

use std::io::Cursor;
use std::time::{Duration, Instant};

use tollgate::{Algorithm, Limit, Quota};
use tollgate_replay::{
    Event, KeyMapping, LogOptions, LogReader, SuggestOptions, replay_log, suggest,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let lines: u64 = args.next().map_or(Ok(2_000_000), |a| a.parse())?;
    let users: u64 = args.next().map_or(Ok(100_000), |a| a.parse())?;
    let log = generate(lines, users);
    println!(
        "{lines} combined-format lines ({} MB), {users} users, one hour of traffic",
        log.len() / 1_000_000
    );
    let mapping = KeyMapping::parse(&["user=$remote_user", "route=$path"])?;
    let per_user =
        Limit::new("per_user", Algorithm::Gcra, Quota::per_minute(60)?)?.keyed_by(["user"])?;
    let three = vec![
        per_user.clone(),
        Limit::new(
            "per_route",
            Algorithm::SlidingWindow { buckets: 12 },
            Quota::per_second(500)?,
        )?
        .keyed_by(["route"])?,
        Limit::new("global", Algorithm::FixedWindow, Quota::per_second(2_000)?)?,
    ];
    let options = LogOptions {
        mapping: mapping.clone(),
        ..LogOptions::default()
    };
    let rt = tokio::runtime::Builder::new_current_thread().build()?;
    let (mut parse, mut one, mut all, mut sug) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..3 {
        parse.push(timed(|| {
            let mut reader =
                LogReader::new(Cursor::new(log.as_bytes()), None, &mapping, None).expect("reader");
            let mut event = Event::default();
            let mut n = 0_u64;
            while let Some(r) = reader.next_event(&mut event) {
                n += u64::from(r.is_ok());
            }
            assert_eq!(n, lines);
        }));
        one.push(timed(|| {
            let r = rt
                .block_on(replay_log(
                    Cursor::new(log.as_bytes()),
                    "bench",
                    vec![per_user.clone()],
                    &options,
                    &mut |_| {},
                ))
                .expect("replay");
            assert_eq!(r.limits[0].requests, lines);
        }));
        all.push(timed(|| {
            let r = rt
                .block_on(replay_log(
                    Cursor::new(log.as_bytes()),
                    "bench",
                    three.clone(),
                    &options,
                    &mut |_| {},
                ))
                .expect("replay");
            assert_eq!(r.limits.len(), 3);
        }));
        sug.push(timed(|| {
            let s = suggest(
                &mut || Ok(Cursor::new(log.as_bytes())),
                &per_user,
                &options,
                &SuggestOptions::default(),
            )
            .expect("suggest");
            assert_eq!(s.lines, lines);
            assert!(!s.windows.is_empty());
        }));
    }
    let rate = |d: &mut Vec<Duration>| {
        d.sort();
        lines as f64 / d[1].as_secs_f64()
    };
    let (p, o, a, g) = (
        rate(&mut parse),
        rate(&mut one),
        rate(&mut all),
        rate(&mut sug),
    );
    println!("| what | lines/s (median of 3) | ÷ reading alone |");
    println!("|---|---:|---:|");
    println!("| read and parse only | {:.0} | 1.00× |", p);
    println!(
        "| replay, 1 limit (GCRA per user) | {:.0} | {:.2}× |",
        o,
        o / p
    );
    println!(
        "| replay, 3 limits (per user, per route, global) | {:.0} | {:.2}× |",
        a,
        a / p
    );
    println!(
        "| suggest (per user; three passes over the log) | {:.0} | {:.2}× |",
        g,
        g / p
    );
    Ok(())
}

/// How long `f` took: the process's CPU time (user and system, from `/proc/self/stat`, in
/// clock ticks) when it can be read, so that other processes sharing the core do not count;
/// else the wall clock. `TOLLGATE_BENCH_WALL=1`: the wall clock.
fn timed(f: impl FnOnce()) -> Duration {
    let wall = std::env::var_os("TOLLGATE_BENCH_WALL").is_some();
    let cpu = || -> Option<Duration> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let rest = &stat[stat.rfind(')')? + 2..];
        let fields: Vec<&str> = rest.split(' ').collect();
        let ticks: u64 =
            fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        // USER_HZ is 100 on Linux.
        Some(Duration::from_millis(ticks * 10))
    };
    let (start, before) = (Instant::now(), cpu());
    f();
    match (wall, before, cpu()) {
        (false, Some(b), Some(a)) => a - b,
        _ => start.elapsed(),
    }
}

/// `lines` lines over one hour, `users` users (a few heavy), ten routes.
fn generate(lines: u64, users: u64) -> String {
    const MONTHS: &str = "30/Nov/2026";
    let mut out = String::with_capacity(lines as usize * 130);
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    for i in 0..lines {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let secs = i * 3_600 / lines;
        let user = if x.is_multiple_of(10) {
            x % 20
        } else {
            x % users
        };
        let route = (x >> 20) % 10;
        out.push_str(&format!(
            "10.{}.{}.{} - u{user} [{MONTHS}:{:02}:{:02}:{:02} +0000] \"GET /v1/r{route}?page={} HTTP/1.1\" 200 {} \"-\" \"Mozilla/5.0\"\n",
            (x >> 8) % 256,
            (x >> 16) % 256,
            (x >> 24) % 256,
            10 + secs / 3_600,
            secs / 60 % 60,
            secs % 60,
            (x >> 32) % 100,
            (x >> 40) % 5_000
        ));
    }
    out
}
