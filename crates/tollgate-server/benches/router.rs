//! The HTTP API's own cost per request, without the network: the service's router (the same
//! one `tollgate serve` runs, middleware included) called in-process on the shipped example
//! config and the memory store, for `POST /v1/check` (one hot key, so mostly refused, as the
//! wrk runs in docs/benchmarks.md) and `GET /healthz` (which decides nothing).
//!
//! Why: issue #33 measures `/v1/check ÷ /healthz` with wrk on the same two cores as the
//! service, a ratio that moves by ±0.1 between rounds. What tollgate's own code adds to a check
//! is the difference of these two cases, which moves far less; the kernel's and hyper's share
//! (the rest of a wrk request) is the same for any version of the handlers.
//!
//! Only the server's public API is used, so the same file builds in an older tree (copy it
//! there, with its `[[bench]]` entry and the `criterion` dev-dependency; it built unchanged at
//! `5ad208c`) to compare two builds in one sitting.
//!
//! `router_2threads` runs the same two cases on two threads at once, each with its own runtime,
//! as the service's two workers do: against the one-thread time it shows what lines written by
//! every request (counters, the hot key, reference counts) cost when two cores share them.
//!
//! Usage: `cargo bench -p tollgate-server --bench router`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, header};
use criterion::{Criterion, criterion_group, criterion_main};
use tollgate::SystemClock;
use tollgate_server::config::{Config, Overrides};
use tollgate_server::http::{AppState, router};
use tollgate_server::limits::Limits;
use tollgate_server::store::AnyStore;
use tower::ServiceExt;

/// The service's allocator (`src/main.rs`), so that allocations cost here what they cost there.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CHECK: &str = r#"{"limit": "sms", "key": {"user": "42"}}"#;

fn app(rt: &tokio::runtime::Runtime) -> axum::Router {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/tollgate.toml");
    let config = Config::load(&path, &Overrides::default()).expect("the example config loads");
    rt.block_on(async {
        let store = AnyStore::open(&config.store, None::<SystemClock>)
            .await
            .expect("the memory store opens");
        let limits = Limits::build(
            config.limits.clone(),
            &config.envoy,
            store.clone(),
            config.store.namespace.clone(),
            None::<SystemClock>,
        )
        .expect("the example's limits build");
        let state = AppState::new(limits, store, &config.store, None);
        router(Arc::new(state))
    })
}

fn check() -> Request<Body> {
    Request::post("/v1/check")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(CHECK))
        .expect("a valid request")
}

fn healthz() -> Request<Body> {
    Request::get("/healthz")
        .body(Body::empty())
        .expect("a valid request")
}

/// Runs `iters` requests made by `make` through `app`, each answered and its body read.
async fn run(app: &axum::Router, make: fn() -> Request<Body>, iters: u64) -> Duration {
    let started = Instant::now();
    for _ in 0..iters {
        let response = app.clone().oneshot(make()).await.expect("infallible");
        let body = axum::body::to_bytes(response.into_body(), usize::MAX).await;
        std::hint::black_box(body.expect("a whole body"));
    }
    started.elapsed()
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let app = app(&rt);
    // The hot key spent before timing: the timed checks are refusals, as in the wrk runs.
    rt.block_on(run(&app, check, 1_000));
    let mut group = c.benchmark_group("router");
    group.bench_function("check", |b| {
        b.iter_custom(|iters| rt.block_on(run(&app, check, iters)));
    });
    group.bench_function("healthz", |b| {
        b.iter_custom(|iters| rt.block_on(run(&app, healthz, iters)));
    });
    group.finish();
    let mut group = c.benchmark_group("router_2threads");
    for (name, make) in [
        ("check", check as fn() -> Request<Body>),
        ("healthz", healthz),
    ] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| two_threads(&app, make, iters));
        });
    }
    group.finish();
}

/// Runs `iters` requests on each of two threads at once, each thread its own runtime, as the
/// service's two workers do: the time is the slower thread's, so a shared line written by
/// every request (a counter, a lock, a reference count) shows as a longer time than one thread's.
fn two_threads(app: &axum::Router, make: fn() -> Request<Body>, iters: u64) -> Duration {
    let barrier = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        let runs: Vec<_> = (0..2)
            .map(|_| {
                let barrier = &barrier;
                s.spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("a runtime");
                    barrier.wait();
                    rt.block_on(run(app, make, iters))
                })
            })
            .collect();
        runs.into_iter()
            .map(|run| run.join().expect("the thread ran"))
            .max()
            .expect("two threads")
    })
}

criterion_group!(benches, bench);
criterion_main!(benches);
