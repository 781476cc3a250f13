//! What the layer costs on top of the limiter: the same checks made directly with
//! `Limiter::check_all` and through `RateLimit` (key extraction, headers, boxed futures), on
//! the memory store, one thread. Not a test: it prints ratios.
//!
//! `cargo run --release -p tollgate-tower --example overhead [requests]`

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use tollgate::{Algorithm, Limit, Limiter, MemoryStore, Quota};
use tollgate_tower::{ClientIp, RateLimitLayer};
use tower::{Layer, ServiceExt, service_fn};

fn request(i: u32) -> Request<()> {
    let mut req = Request::new(());
    let ip = IpAddr::V4(Ipv4Addr::from(0xC000_0200 + i % 1000));
    req.extensions_mut().insert(SocketAddr::new(ip, 40_000));
    req
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200_000);
    let limiter = Arc::new(
        Limiter::builder(MemoryStore::new())
            .limit(
                Limit::new("per_ip", Algorithm::Gcra, Quota::per_hour(1_000_000_000)?)?
                    .keyed_by(["ip"])?,
            )
            .build()?,
    );
    let inner = service_fn(|_req: Request<()>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
    });
    let layered = RateLimitLayer::new(limiter.clone(), ["per_ip"], ClientIp::new())?.layer(inner);

    let report = |label: &str, start: Instant| {
        let per = start.elapsed() / n;
        println!("{label:>26}: {per:?} per request");
        per
    };

    let start = Instant::now();
    for i in 0..n {
        let resp = inner
            .oneshot(request(i))
            .await
            .unwrap_or_else(|e| match e {});
        assert_eq!(resp.status(), 200);
    }
    let bare = report("inner service alone", start);

    let start = Instant::now();
    for i in 0..n {
        let ip = IpAddr::V4(Ipv4Addr::from(0xC000_0200 + i % 1000)).to_string();
        let v = limiter
            .check_all(&["per_ip"], &[("ip", ip.as_bytes())])
            .await?;
        assert_eq!(v.outcome(), tollgate::Outcome::Allowed);
    }
    let direct = report("Limiter::check_all", start);

    let start = Instant::now();
    for i in 0..n {
        let resp = layered
            .clone()
            .oneshot(request(i))
            .await
            .unwrap_or_else(|e| match e {});
        assert_eq!(resp.status(), 200);
    }
    let through = report("RateLimit layer + inner", start);

    let layer_only = through.saturating_sub(bare);
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!(
        "layer cost / direct check: {:.2}x (layer adds {:?} per request beyond the check)",
        ratio(layer_only, direct),
        layer_only.saturating_sub(direct)
    );
    Ok(())
}
