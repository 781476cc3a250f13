//! How long the store takes to recover when the network drops its connection silently — not a
//! test: it needs root and a private network namespace, and it measures.
//!
//! A Redis host that vanishes without a reset (a cable, a partition, a failover that moves the
//! address) leaves the store's connection open with no one behind it. Each call then times
//! out and the limits follow their failure policy, which is right; but the connection itself
//! is only abandoned when the kernel gives up on it. Without `TCP_USER_TIMEOUT` that is
//! Linux's retransmission limit (`tcp_retries2` = 15: about 15 minutes), and every decision
//! fails until then although a fresh connection would work.
//!
//! The run: a spawned `redis-server`, a `RedisStore` (50 ms timeout) checking one key every
//! 10 ms; after a second, a `tc` filter on the loopback drops every packet bound for the
//! store's connection (its client port, read from `CLIENT LIST`): what Redis sends it never
//! arrives, its bytes are never acknowledged. New connections use another port and get
//! through. It prints when checks started failing and when they succeeded again.
//!
//! ```sh
//! cargo build --release -p tollgate-redis --example blackhole
//! sudo unshare -n sh -c 'ip link set lo up && target/release/examples/blackhole [seconds]'
//! ```
//!
//! (`unshare -n`: the filter then touches a loopback of the run's own.) Gives up after
//! `seconds` (default 60).
//!
//! `blackhole resets [seconds]` does the same to the reset listener's subscription
//! ([`tollgate_redis::RedisStore::listen_for_resets`]), which sends nothing while it waits, and prints
//! when a new subscription replaced it (keep-alive finds the silent peer).
//!
//! `blackhole idle [seconds]` drops the store's packets and then makes no call for 20 s, as a
//! quiet instance would, before checking again: keep-alive has found the dead connection by
//! then, so the checks meet a new one instead of the black hole.

use std::process::Command;
use std::time::{Duration, Instant};

use tollgate::{Algorithm, Entry, Key, Limit, Namespace, Op, Quota, Request, Store};
use tollgate_redis::RedisStore;
use tollgate_testkit::RedisServer;

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// How long `blackhole idle` makes no call after the packets are dropped.
const IDLE: Duration = Duration::from_secs(20);

#[tokio::main(flavor = "current_thread")]
async fn main() -> BenchResult<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let resets = args.first().is_some_and(|a| a == "resets");
    let idle = args.first().is_some_and(|a| a == "idle");
    if resets || idle {
        args.remove(0);
    }
    let give_up: u64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(60);
    let server = RedisServer::start();
    if resets {
        return subscription(&server, give_up).await;
    }
    let store = RedisStore::builder(server.url())
        .timeout(Duration::from_millis(50))
        .build()
        .await?;
    let ns = Namespace::new("blackhole")?;
    let limit = Limit::new("bh", Algorithm::Gcra, Quota::per_second(1_000_000)?)?;
    let key = Key::new(&ns, &limit, &[("user", "u")]);
    let request = Request::new([Entry::new(&limit, key)], 1)?;
    store.decide(&request, Op::Check, None).await?;
    let port = *store_ports(&server)
        .first()
        .ok_or("the store's connection is not in CLIENT LIST")?;

    let started = Instant::now();
    let mut dropped_at = None;
    let mut failing_since = None;
    let mut failures = 0_u64;
    loop {
        let now = started.elapsed();
        if dropped_at.is_none() && now >= Duration::from_secs(1) {
            blackhole(port)?;
            dropped_at = Some(now);
            println!(
                "{:>8.3} s  packets to the store's port {port} dropped",
                secs(now)
            );
        }
        if idle && dropped_at.is_some_and(|at| now < at + IDLE) {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        }
        match store.decide(&request, Op::Check, None).await {
            Ok(_) => {
                if let Some(since) = failing_since {
                    let back = started.elapsed();
                    println!(
                        "{:>8.3} s  decided again, {:.3} s after the first failure ({failures} \
                         failed checks); the store's connections now: ports {:?}",
                        secs(back),
                        secs(back - since),
                        store_ports(&server)
                    );
                    return Ok(());
                }
                if idle && dropped_at.is_some() {
                    println!(
                        "{:>8.3} s  the first check after {} s of silence was decided, no \
                         failure; the store's connections now: ports {:?}",
                        secs(started.elapsed()),
                        IDLE.as_secs(),
                        store_ports(&server)
                    );
                    return Ok(());
                }
            }
            Err(e) => {
                failures += 1;
                if failing_since.is_none() {
                    let at = started.elapsed();
                    println!("{:>8.3} s  first failure: {e}", secs(at));
                    failing_since = Some(at);
                }
            }
        }
        if started.elapsed() > Duration::from_secs(give_up) {
            println!(
                "{:>8.3} s  gave up: still failing ({failures} failed checks)",
                secs(started.elapsed())
            );
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The reset listener's subscription blackholed: how long until it subscribes again.
async fn subscription(server: &RedisServer, give_up: u64) -> BenchResult<()> {
    let store = tollgate_redis::RedisStore::connect(server.url()).await?;
    let listener = store.listen_for_resets("bh", |_| {});
    let started = Instant::now();
    let port = loop {
        if let Some(&port) = ports(server, "cmd=subscribe").first() {
            break port;
        }
        if started.elapsed() > Duration::from_secs(5) {
            return Err("the listener did not subscribe within 5 s".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    blackhole(port)?;
    let dropped = Instant::now();
    println!("packets to the subscription's port {port} dropped");
    loop {
        let now = ports(server, "cmd=subscribe");
        if now.iter().any(|&p| p != port) {
            println!(
                "{:>8.3} s  subscribed again; subscriptions now: ports {now:?}",
                secs(dropped.elapsed())
            );
            break;
        }
        if dropped.elapsed() > Duration::from_secs(give_up) {
            println!(
                "{:>8.3} s  gave up: no new subscription",
                secs(dropped.elapsed())
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    listener.abort();
    Ok(())
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// The client ports of the connections whose last command was `EVALSHA`: the store's.
fn store_ports(server: &RedisServer) -> Vec<u16> {
    ports(server, "cmd=evalsha")
}

/// The client ports of the connections whose `CLIENT LIST` line holds `field`.
fn ports(server: &RedisServer, field: &str) -> Vec<u16> {
    server
        .cmd(&["CLIENT", "LIST"])
        .lines()
        .filter(|l| l.split_whitespace().any(|f| f == field))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|f| f.strip_prefix("addr="))?
                .rsplit_once(':')?
                .1
                .parse()
                .ok()
        })
        .collect()
}

/// Drops, on the loopback, every packet bound for `port`: they go to a class of the loopback's
/// queue that holds one byte, so each packet is dropped as it is queued. (A plain `drop`
/// action needs a kernel module that minimal kernels lack; these are the common `htb`, `u32`
/// and `bfifo`. A slow class with a queue of one packet leaked a packet now and then: enough
/// to keep a keep-alive answered.)
fn blackhole(port: u16) -> BenchResult<()> {
    let port = port.to_string();
    for args in [
        &[
            "qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", "10",
        ][..],
        &[
            "class", "add", "dev", "lo", "parent", "1:", "classid", "1:10", "htb", "rate", "10gbit",
        ],
        &[
            "class", "add", "dev", "lo", "parent", "1:", "classid", "1:20", "htb", "rate", "8bit",
            "ceil", "8bit",
        ],
        &[
            "qdisc", "add", "dev", "lo", "parent", "1:20", "handle", "20:", "bfifo", "limit", "1",
        ],
        &[
            "filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "u32", "match", "ip",
            "dport", &port, "0xffff", "flowid", "1:20",
        ],
    ] {
        let out = Command::new("tc").args(args).output()?;
        if !out.status.success() {
            return Err(format!(
                "tc {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            )
            .into());
        }
    }
    Ok(())
}
