//! Measures `ShouldRateLimit` calls per second against the service on the memory store,
//! over loopback, with concurrent tonic clients.
//!
//! ```text
//! cargo run --release -p tollgate-envoy --example load -- [seconds] [concurrency] [connections]
//! ```
//!
//! Each call carries one descriptor (`remote_address`) drawn from 10 000 keys, against a
//! GCRA limit high enough that nearly all calls are admitted (the cost measured is the
//! service's, not refusals). A second run shape adds a second descriptor per call
//! (two limits in one all-or-nothing check).

use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tollgate::{Algorithm, Limit, Limiter, MemoryStore, Quota};
use tollgate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_envoy::tonic::transport::Endpoint;
use tollgate_envoy::{RateLimitService, Snapshot};

const RULES: &str = r#"
[[rules]]
domain = "edge"
limit = "per_ip"
descriptor = [{ key = "remote_address", part = "ip" }]

[[rules]]
domain = "edge"
limit = "per_route"
descriptor = [{ key = "path", part = "route" }]
"#;

fn descriptor(key: &str, value: String) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry {
            key: key.to_owned(),
            value,
        }],
        ..RateLimitDescriptor::default()
    }
}

async fn run(
    addr: std::net::SocketAddr,
    seconds: u64,
    concurrency: usize,
    connections: usize,
    descriptors: usize,
) -> Result<f64, Box<dyn Error>> {
    let mut channels = Vec::new();
    for _ in 0..connections {
        channels.push(
            Endpoint::from_shared(format!("http://{addr}"))?
                .connect()
                .await?,
        );
    }
    let calls = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..concurrency {
        let mut client = RateLimitServiceClient::new(channels[worker % connections].clone());
        let calls = calls.clone();
        tasks.push(tokio::spawn(async move {
            let mut i: u64 = worker as u64;
            while Instant::now() < deadline {
                i = i.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let mut ds = vec![descriptor(
                    "remote_address",
                    format!("10.0.{}", (i >> 33) % 10_000),
                )];
                if descriptors > 1 {
                    ds.push(descriptor("path", format!("/r{}", (i >> 40) % 100)));
                }
                let request = RateLimitRequest {
                    domain: "edge".into(),
                    descriptors: ds,
                    hits_addend: 0,
                };
                client
                    .should_rate_limit(request)
                    .await
                    .expect("call succeeds");
                calls.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    Ok(calls.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>());
    let seconds = args.next().transpose()?.unwrap_or(5);
    let concurrency = args.next().transpose()?.unwrap_or(64) as usize;
    let connections = args.next().transpose()?.unwrap_or(4).max(1) as usize;

    let big = Quota::per_second(1_000_000)?;
    let limiter = Limiter::builder(MemoryStore::new())
        .limit(Limit::new("per_ip", Algorithm::Gcra, big)?.keyed_by(["ip"])?)
        .limit(Limit::new("per_route", Algorithm::Gcra, big)?.keyed_by(["route"])?)
        .build()?;
    let rules: tollgate_envoy::EnvoyRules = toml::from_str(RULES)?;
    let snapshot = Snapshot::new(&rules, Arc::new(limiter))?;
    let service = RateLimitService::new(Arc::new(ArcSwap::from_pointee(snapshot)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(tollgate_envoy::serve(listener, service, async {
        let _ = rx.await;
    }));

    println!("seconds={seconds} concurrency={concurrency} connections={connections}");
    for descriptors in [1, 2] {
        let rate = run(addr, seconds, concurrency, connections, descriptors).await?;
        println!("descriptors={descriptors}: {rate:.0} ShouldRateLimit calls/s");
    }
    let _ = tx.send(());
    server.await??;
    Ok(())
}
