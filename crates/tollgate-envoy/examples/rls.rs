//! Serves the Envoy rate limit service from a TOML file of limits and rules, on the memory
//! store, until ctrl-c. A stand-in for `tollgate serve` until it mounts this crate.
//!
//! ```text
//! cargo run -p tollgate-envoy --example rls -- rls.toml
//! ```
//!
//! ```toml
//! grpc = "127.0.0.1:8081"
//!
//! [[limits]]
//! name = "per_ip"
//! algorithm = "fixed_window"
//! limit = 100
//! period = "1m"
//! key = ["ip"]
//! on_store_error = "allow"
//!
//! [envoy]
//! response_headers = true
//!
//! [[envoy.rules]]
//! domain = "edge"
//! limit = "per_ip"
//! descriptor = [{ key = "remote_address", part = "ip" }]
//! ```

use std::error::Error;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use serde::Deserialize;
use tollgate::{Algorithm, Limit, Limiter, MemoryStore, OnStoreError, Quota};
use tollgate_envoy::{EnvoyRules, RateLimitService, Snapshot};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    grpc: SocketAddr,
    #[serde(default)]
    limits: Vec<LimitConfig>,
    #[serde(default)]
    envoy: EnvoyRules,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitConfig {
    name: String,
    algorithm: String,
    limit: u64,
    period: String,
    burst: Option<u64>,
    key: Option<Vec<String>>,
    on_store_error: Option<OnStoreError>,
}

/// `"500ms"`, `"10s"`, `"1m"`, `"2h"`, `"1d"`.
fn duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (n, unit) = text.split_at(split);
    let n: u64 = n.parse().map_err(|_| format!("bad duration {text:?}"))?;
    let ms = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("bad duration unit in {text:?} (ms, s, m, h, d)")),
    };
    Ok(Duration::from_millis(n * ms))
}

fn limit(c: LimitConfig) -> Result<Limit, Box<dyn Error>> {
    let mut quota = Quota::new(c.limit, duration(&c.period)?)?;
    if let Some(burst) = c.burst {
        quota = quota.with_burst(burst)?;
    }
    let mut limit = Limit::new(c.name, c.algorithm.parse::<Algorithm>()?, quota)?;
    if let Some(key) = c.key {
        limit = limit.keyed_by(key)?;
    }
    Ok(limit.on_store_error(c.on_store_error.unwrap_or(OnStoreError::Deny)))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let path = std::env::args().nth(1).ok_or("usage: rls <config.toml>")?;
    let file: File = toml::from_str(&std::fs::read_to_string(&path)?)?;
    let limits = file
        .limits
        .into_iter()
        .map(limit)
        .collect::<Result<Vec<_>, _>>()?;
    let limiter = Arc::new(
        Limiter::builder(MemoryStore::new())
            .limits(limits)
            .build()?,
    );
    let snapshot = Snapshot::new(&file.envoy, limiter)?;
    let service = RateLimitService::new(Arc::new(ArcSwap::from_pointee(snapshot)));
    let listener = tokio::net::TcpListener::bind(file.grpc).await?;
    println!("listening on {}", listener.local_addr()?);
    tollgate_envoy::serve(listener, service, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}
