//! The layer gets lease mode from the limiter it is given: two layers (two instances, each
//! its own limiter and Redis connection) sharing a lease-mode limit on a spawned Redis cost
//! Redis one call per about `k` requests, and admit exactly the limit between them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tollgate::{
    Algorithm, Decisions, Lease, LeaseGrant, LeaseTake, Namespace, Op, Request, Store, StoreError,
    Timestamp,
};
use tollgate_redis::RedisStore;
use tollgate_tower::{Global, RateLimitLayer};

use crate::redis::{server, store};
use crate::support::*;

/// A Redis store counting its calls.
#[derive(Debug, Clone)]
struct Counting {
    inner: RedisStore,
    calls: Arc<AtomicUsize>,
}

impl Store for Counting {
    async fn decide(
        &self,
        request: &Request<'_>,
        op: Op,
        now: Option<Timestamp>,
    ) -> Result<Decisions, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.decide(request, op, now).await
    }

    async fn reset(&self, request: &Request<'_>) -> Result<(), StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.reset(request).await
    }

    async fn take_lease(
        &self,
        take: &LeaseTake<'_>,
        now: Option<Timestamp>,
    ) -> Result<LeaseGrant, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.take_lease(take, now).await
    }

    fn in_process(&self) -> bool {
        self.inner.in_process()
    }
}

/// 2 layers, limit 50 a minute in lease mode with k = 5: 40 requests cost Redis at most 8
/// calls; hammered until both refuse, exactly 50 pass.
#[tokio::test]
async fn layers_get_lease_mode_from_their_limiter() {
    let clock = clock();
    let calls = Arc::new(AtomicUsize::new(0));
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
        let store = Counting {
            inner: store(server(), Duration::from_secs(5)).await,
            calls: Arc::clone(&calls),
        };
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
    let used = calls.load(Ordering::SeqCst);
    assert!(used <= 8, "{used} Redis calls for 40 requests at k = 5");
    for svc in &services {
        while send(svc, from("192.0.2.1")).await.status().as_u16() == 200 {
            admitted += 1;
            assert!(admitted <= 50, "more than the limit passed");
        }
    }
    assert_eq!(admitted, 50);
}
