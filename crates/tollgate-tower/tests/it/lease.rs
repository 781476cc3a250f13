//! The layer gets lease mode from the limiter it is given: two layers (two instances, each
//! its own limiter and Redis connection) sharing a lease-mode limit on a spawned Redis cost
//! Redis one call per about `k` requests, and admit exactly the limit between them.

use std::sync::Arc;
use std::time::Duration;

use tollgate::{Algorithm, Lease, Namespace};
use tollgate_testkit::CountingStore;
use tollgate_tower::{Global, RateLimitLayer};

use crate::redis::{server, store};
use crate::support::*;

/// 2 layers, limit 50 a minute in lease mode with k = 5: 40 requests cost Redis at most 8
/// calls; hammered until both refuse, exactly 50 pass.
#[tokio::test]
async fn layers_get_lease_mode_from_their_limiter() {
    let clock = clock();
    let mut counted = Vec::new();
    let ns = Namespace::new(format!("tgtowerlease{}", std::process::id())).expect("prefix");
    let hot = limit(
        "hot",
        Algorithm::FixedWindow,
        50,
        Duration::from_secs(60),
        &[],
    )
    .lease(Lease::new().units(5))
    .expect("lease mode");
    let mut services = Vec::new();
    for _ in 0..2 {
        let store = CountingStore::new(store(server(), Duration::from_secs(5)).await);
        counted.push(store.clone());
        let limiter = Arc::new(
            tollgate::Limiter::builder(tollgate::BoxStore::new(store))
                .namespace(ns.clone())
                .limit(hot.clone())
                .clock(clock.clone())
                .build()
                .expect("limiter"),
        );
        let layer = RateLimitLayer::new(limiter, ["hot"], Global).expect("layer");
        services.push(service(&layer));
    }
    let mut admitted = 0;
    for i in 0..40 {
        let status = send(&services[i % 2], from("192.0.2.1"))
            .await
            .status()
            .as_u16();
        assert_eq!(status, 200, "request {i}");
        admitted += 1;
    }
    let used: usize = counted.iter().map(CountingStore::calls).sum();
    assert!(used <= 8, "{used} Redis calls for 40 requests at k = 5");
    for svc in &services {
        while send(svc, from("192.0.2.1")).await.status().as_u16() == 200 {
            admitted += 1;
            assert!(admitted <= 50, "more than the limit passed");
        }
    }
    assert_eq!(admitted, 50);
}
