//! The memory store at its key cap: what a known key's check costs, what a new key costs, and
//! the memory per key. A measurement to run by hand (release build), not a test; results and
//! how to read them are in `docs/benchmarks.md` ("Key cap").
//!
//! `cargo run --release -p tollgate --example key_cap -- <keys> [seconds per measurement]`
//!
//! The store holds `keys` GCRA keys (10 per minute, one unit taken at the same instant, so
//! none replenishes during the run: the cap's worst case, where no key is free to drop) and
//! has `max_keys = keys`, no sweeper thread. Then, each for about `seconds`:
//! 1. checks of known keys, in shuffled order, one `SingleRequest` per call;
//! 2. checks of new keys, each meeting the full store;
//! 3. checks of known keys while a second thread sends new keys (the flood of the report),
//!    each call timed: mean and worst.
//!
//! Memory: `VmRSS` from `/proc/self/status` before and after inserting the keys, divided by
//! the key count (the store then owns every key's text).

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tollgate::{
    Algorithm, Key, Limit, MemoryStore, Namespace, Op, Quota, SingleRequest, Timestamp,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let keys: usize = args.next().map_or(Ok(1_000_000), |a| a.parse())?;
    let seconds: f64 = args.next().map_or(Ok(3.0), |a| a.parse())?;
    let budget = Duration::from_secs_f64(seconds);
    let limit = Limit::new("cap", Algorithm::Gcra, Quota::per_minute(10)?)?.keyed_by(["user"])?;
    let ns = Namespace::default();
    let key = |i: usize| Key::new(&ns, &limit, &[("user", &i.to_string())]);
    let now = Timestamp::from_millis(1_000_000_000);
    let store = MemoryStore::builder()
        .max_keys(keys)
        .sweep_interval(None)
        .build();

    let rss_before = rss_bytes()?;
    for i in 0..keys {
        let _ = store.decide_single_at(&SingleRequest::new(&limit, &key(i), 1)?, Op::Check, now)?;
    }
    let rss_after = rss_bytes()?;
    let per_key = (rss_after.saturating_sub(rss_before)) as f64 / keys as f64;
    println!(
        "keys {keys}: held {}, RSS per key {per_key:.0} B",
        store.len()
    );

    // Known keys, shuffled (a fixed LCG permutation step), built before timing.
    let known: Vec<Key> = (0..100_000.min(keys))
        .map(|i| key(i.wrapping_mul(7_919) % keys))
        .collect();
    let (calls, elapsed) = timed(budget, |n| {
        let k = &known[n % known.len()];
        let request = SingleRequest::new(&limit, k, 1).map_err(|e| e.to_string())?;
        let d = store.decide_single_at(&request, Op::Check, now);
        let _ = black_box(d.map_err(|e| e.to_string())?);
        Ok(())
    })?;
    report("known key", calls, elapsed);

    let (calls, elapsed) = timed(budget, |n| {
        let k = key(keys + n);
        let request = SingleRequest::new(&limit, &k, 1).map_err(|e| e.to_string())?;
        // Old store: `Full` after a sweep of every key; new store: evicts. Both are the cost.
        black_box(store.decide_single_at(&request, Op::Check, now).is_ok());
        Ok(())
    })?;
    report("new key at the cap", calls, elapsed);

    let stop = AtomicBool::new(false);
    let (mean, worst, flood) = std::thread::scope(|s| {
        let flood = s.spawn(|| {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let k = key(2 * keys + n);
                if let Ok(request) = SingleRequest::new(&limit, &k, 1) {
                    black_box(store.decide_single_at(&request, Op::Check, now).is_ok());
                }
                n += 1;
            }
            n
        });
        let mut worst = Duration::ZERO;
        let timed = timed(budget, |n| {
            let k = &known[n % known.len()];
            let request = SingleRequest::new(&limit, k, 1).map_err(|e| e.to_string())?;
            let start = Instant::now();
            let d = store.decide_single_at(&request, Op::Check, now);
            worst = worst.max(start.elapsed());
            let _ = black_box(d.map_err(|e| e.to_string())?);
            Ok(())
        });
        stop.store(true, Ordering::Relaxed);
        let flood = flood.join().unwrap_or(0);
        timed.map(|(calls, elapsed)| (elapsed / calls.max(1) as u32, worst, flood))
    })?;
    println!("known key during a flood of {flood} new keys: mean {mean:.2?}, worst {worst:.2?}");
    Ok(())
}

/// Calls `f` with 0, 1, 2, ... until `budget` has passed (time read every 64 calls).
fn timed(
    budget: Duration,
    mut f: impl FnMut(usize) -> Result<(), String>,
) -> Result<(usize, Duration), String> {
    let start = Instant::now();
    let mut n = 0;
    loop {
        f(n)?;
        n += 1;
        if (n % 64 == 0 || n < 64) && start.elapsed() >= budget {
            return Ok((n, start.elapsed()));
        }
    }
}

fn report(what: &str, calls: usize, elapsed: Duration) {
    let ns = elapsed.as_nanos() as f64 / calls as f64;
    println!("{what}: {calls} calls in {elapsed:.2?}, {ns:.0} ns per call");
}

/// This process's resident set, from `/proc/self/status`.
fn rss_bytes() -> Result<u64, Box<dyn std::error::Error>> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .ok_or("no VmRSS line")?
        .trim()
        .parse::<u64>()?;
    Ok(kb * 1024)
}
