//! Section 6: TLS ÷ plaintext through the store (issue #26). One `redis-server` listens on
//! both ports, so the two differ only in the transport; rounds alternate, and each round's
//! ratio compares two runs seconds apart.

use std::time::Duration;

use tokio::runtime::Runtime;
use tollgate::{Algorithm, Namespace};
use tollgate_redis::RedisStore;
use tollgate_testkit::{RedisServer, TlsFiles, TlsServer};

use super::{BenchResult, KEYS, RunResult, drive, micros, spread};

/// The goal for TLS decisions/s ÷ plaintext decisions/s.
const GOAL: f64 = 0.8;

/// The transport of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Plain,
    Tls,
}

/// GCRA, one-limit checks on the server's clock, coalescing on (the default): plaintext and
/// TLS in alternating rounds (`TOLLGATE_BENCH_ROUNDS`, default 3; which goes first alternates
/// too) at 64 and 256 tasks (`TOLLGATE_BENCH_TLS_TASKS`), each round's TLS ÷ plaintext and
/// their median. Starts its own TLS-enabled Redis.
pub(crate) fn tls_section(rt: &Runtime, duration: Duration) -> BenchResult<String> {
    let tasks_list: Vec<usize> = std::env::var("TOLLGATE_BENCH_TLS_TASKS")
        .ok()
        .map(|s| s.split(',').filter_map(|t| t.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![64, 256]);
    let rounds: usize = std::env::var("TOLLGATE_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let files = TlsFiles::new();
    let server = RedisServer::start_tls(&files, TlsServer::default());
    let ca = std::fs::read(files.ca())?;
    let mut out = format!(
        "GCRA, one-limit checks on the server's clock, coalescing on (the default), {KEYS} keys, \
         one multiplexed connection, {} s per run; one `redis-server` listening on a plaintext \
         and a TLS port (`--tls-port`, which speaks only TLS; rustls with ring on the client, \
         no client certificate), so the two runs of a round differ only in the transport. Rounds \
         alternate plaintext and TLS (which goes first alternates too); the ratio is each \
         round's TLS ÷ plaintext decisions/s, two runs seconds apart. Redis CPU: the server \
         process's CPU time (`/proc`) over the run ÷ decisions; client CPU: this process's \
         (the store and the harness's tasks, on one tokio worker) the same way.\n\n",
        duration.as_secs_f64()
    );
    let mut medians = Vec::new();
    for tasks in tasks_list {
        let mut pairs: Vec<(RunResult, RunResult)> = Vec::new();
        for round in 0..rounds {
            let order = if round % 2 == 0 {
                [Transport::Plain, Transport::Tls]
            } else {
                [Transport::Tls, Transport::Plain]
            };
            let (mut plain, mut tls) = (None, None);
            for transport in order {
                let builder = match transport {
                    Transport::Plain => RedisStore::builder(server.url()),
                    Transport::Tls => RedisStore::builder(server.tls_url()).tls_ca(ca.clone()),
                };
                let store = rt.block_on(builder.timeout(Duration::from_secs(5)).build())?;
                let ns = Namespace::new(format!("t{tasks}{transport:?}"))?;
                let r = rt.block_on(drive(
                    &server,
                    &store,
                    Algorithm::Gcra,
                    tasks,
                    duration,
                    &ns,
                ))?;
                eprintln!(
                    "tls round {} {transport:?} × {tasks}: {:.0}/s, Redis {:.2} µs, client {:.2} µs, {:.1} per EVALSHA, p50 {:?}",
                    round + 1,
                    r.rate,
                    r.cpu_per_decision,
                    r.client_cpu_per_decision,
                    r.per_call,
                    r.p50
                );
                match transport {
                    Transport::Plain => plain = Some(r),
                    Transport::Tls => tls = Some(r),
                }
            }
            let (Some(plain), Some(tls)) = (plain, tls) else {
                return Err("a round missed a transport".into());
            };
            pairs.push((plain, tls));
        }
        out.push_str(&format!(
            "**{tasks} tasks**\n\n\
             | round | plaintext decisions/s | TLS decisions/s | TLS ÷ plaintext | Redis CPU / decision, plaintext | TLS | client CPU / decision, plaintext | TLS | requests per EVALSHA, plaintext | TLS | p50, plaintext | TLS |\n\
             |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        ));
        for (i, (p, t)) in pairs.iter().enumerate() {
            out.push_str(&format!(
                "| {} | {:.0} | {:.0} | {:.2}× | {:.2} µs | {:.2} µs | {:.2} µs | {:.2} µs | {:.1} | {:.1} | {} | {} |\n",
                i + 1,
                p.rate,
                t.rate,
                t.rate / p.rate,
                p.cpu_per_decision,
                t.cpu_per_decision,
                p.client_cpu_per_decision,
                t.client_cpu_per_decision,
                p.per_call,
                t.per_call,
                micros(p.p50),
                micros(t.p50),
            ));
        }
        let median = |f: &dyn Fn(&RunResult) -> f64, tls: bool| {
            let mut v: Vec<f64> = pairs
                .iter()
                .map(|(p, t)| f(if tls { t } else { p }))
                .collect();
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
        };
        let mut ratios: Vec<f64> = pairs.iter().map(|(p, t)| t.rate / p.rate).collect();
        ratios.sort_by(f64::total_cmp);
        let ratio = ratios.get(ratios.len() / 2).copied().unwrap_or(f64::NAN);
        out.push_str(&format!(
            "| **median** | {:.0} | {:.0} | **{ratio:.2}×** | {:.2} µs | {:.2} µs | {:.2} µs | {:.2} µs | {:.1} | {:.1} | | |\n\n",
            median(&|r| r.rate, false),
            median(&|r| r.rate, true),
            median(&|r| r.cpu_per_decision, false),
            median(&|r| r.cpu_per_decision, true),
            median(&|r| r.client_cpu_per_decision, false),
            median(&|r| r.client_cpu_per_decision, true),
            median(&|r| r.per_call, false),
            median(&|r| r.per_call, true),
        ));
        out.push_str(&format!(
            "{tasks} tasks, TLS ÷ plaintext within each round: decisions/s {}; Redis CPU per \
             decision {}; client CPU per decision {}.\n\n",
            spread(pairs.iter().map(|(p, t)| t.rate / p.rate)),
            spread(
                pairs
                    .iter()
                    .map(|(p, t)| t.cpu_per_decision / p.cpu_per_decision)
            ),
            spread(
                pairs
                    .iter()
                    .map(|(p, t)| t.client_cpu_per_decision / p.client_cpu_per_decision)
            ),
        ));
        medians.push((tasks, ratio));
    }
    let verdict: Vec<String> = medians
        .iter()
        .map(|(tasks, r)| {
            format!(
                "{tasks} tasks {r:.2}× ({})",
                if *r >= GOAL { "met" } else { "not met" }
            )
        })
        .collect();
    out.push_str(&format!(
        "Goal: TLS ÷ plaintext ≥ {GOAL}. Median ratio: {}.\n",
        verdict.join(", ")
    ));
    Ok(out)
}
