//! The harness: a store that can be taken down (the testkit's `FailingStore`), a service on a
//! free port, request builders.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use metrics_util::debugging::{DebuggingRecorder, Snapshotter};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tollgate::{FakeClock, Limit, Limiter, MemoryStore, Timestamp};
use tollgate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse,
};
use tollgate_envoy::tonic::transport::Channel;
use tollgate_envoy::{EnvoyRules, RateLimitService, Snapshot};
use tollgate_testkit::FailingStore;

/// A start time on a minute boundary, so fixed windows reset after exactly 60 s.
pub(crate) const START_MS: u64 = 1_700_000_040_000;

pub(crate) type St = FailingStore;

/// The service on a free port, with a connected client.
pub(crate) struct Rls {
    pub(crate) client: RateLimitServiceClient<Channel>,
    pub(crate) clock: FakeClock,
    pub(crate) store: St,
    pub(crate) snapshots: Arc<ArcSwap<Snapshot<St>>>,
    pub(crate) addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<()>>,
}

/// Parses an `[envoy]` section.
pub(crate) fn rules(toml_text: &str) -> EnvoyRules {
    #[derive(serde::Deserialize)]
    struct File {
        envoy: EnvoyRules,
    }
    toml::from_str::<File>(toml_text)
        .expect("valid [envoy] section")
        .envoy
}

impl Rls {
    /// Starts the service with `limits` and the `[envoy]` section `rules_toml`.
    pub(crate) async fn start(limits: Vec<Limit>, rules_toml: &str) -> Rls {
        Rls::start_with(limits, rules(rules_toml)).await
    }

    /// Starts the service with the reference's YAML files `files` (name, text) as
    /// `config_dir`, the limits generated for them and the `[envoy]` options `rules_toml`.
    pub(crate) async fn start_imported(files: &[(&str, &str)], rules_toml: &str) -> Rls {
        let (limits, envoy) = imported(files, rules_toml);
        Rls::start_with(limits, envoy).await
    }

    /// Swaps in the YAML files `files` and the `[envoy]` options `rules_toml` (same store and
    /// clock), as a reload does.
    pub(crate) fn swap_imported(&self, files: &[(&str, &str)], rules_toml: &str) {
        let (limits, envoy) = imported(files, rules_toml);
        let limiter = limiter(&self.store, &self.clock, limits);
        let snapshot = Snapshot::new(&envoy, limiter)
            .expect("rules fit the limits")
            .with_clock(self.clock.clone());
        self.snapshots.store(Arc::new(snapshot));
    }

    /// Starts the service as [`Rls::start_imported`] does, its limiter with a deny cache of
    /// `entries` refusals (as `tollgate serve` has on Redis).
    pub(crate) async fn start_imported_cached(
        files: &[(&str, &str)],
        rules_toml: &str,
        entries: usize,
    ) -> Rls {
        let (limits, envoy) = imported(files, rules_toml);
        Rls::start_cached(limits, envoy, entries).await
    }

    /// Starts the service with `limits` and the `[envoy]` section `envoy`.
    pub(crate) async fn start_with(limits: Vec<Limit>, envoy: EnvoyRules) -> Rls {
        Rls::start_cached(limits, envoy, 0).await
    }

    /// [`Rls::start_with`], with a deny cache of `entries` refusals (0: none).
    async fn start_cached(limits: Vec<Limit>, envoy: EnvoyRules, entries: usize) -> Rls {
        let clock = FakeClock::new(Timestamp::from_millis(START_MS));
        let store: St = FailingStore::new(
            MemoryStore::builder()
                .clock(clock.clone())
                .sweep_interval(None)
                .build(),
        );
        let limiter = Arc::new(
            Limiter::builder(store.clone())
                .limits(limits)
                .clock(clock.clone())
                .deny_cache(entries)
                .build()
                .expect("distinct limit names"),
        );
        let snapshot = Snapshot::new(&envoy, limiter)
            .expect("rules fit the limits")
            .with_clock(clock.clone());
        let snapshots = Arc::new(ArcSwap::from_pointee(snapshot));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let (tx, rx) = oneshot::channel::<()>();
        let service = RateLimitService::new(snapshots.clone());
        let server = tokio::spawn(async move {
            tollgate_envoy::serve(listener, service, async {
                let _ = rx.await;
            })
            .await
            .expect("server runs");
        });
        let client = RateLimitServiceClient::connect(format!("http://{addr}"))
            .await
            .expect("client connects");
        Rls {
            client,
            clock,
            store,
            snapshots,
            addr,
            shutdown: Some(tx),
            server: Some(server),
        }
    }

    /// Swaps in new limits (same store and clock) and rules.
    pub(crate) fn swap(&self, limits: Vec<Limit>, rules_toml: &str) {
        let limiter = limiter(&self.store, &self.clock, limits);
        let snapshot = Snapshot::new(&rules(rules_toml), limiter)
            .expect("rules fit the limits")
            .with_clock(self.clock.clone());
        self.snapshots.store(Arc::new(snapshot));
    }

    /// One `ShouldRateLimit` call that must succeed at the gRPC level.
    pub(crate) async fn call(&mut self, request: RateLimitRequest) -> RateLimitResponse {
        self.client
            .should_rate_limit(request)
            .await
            .expect("ShouldRateLimit answers")
            .into_inner()
    }

    /// Stops the server and waits for it.
    pub(crate) async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(server) = self.server.take() {
            server.await.expect("server task ends cleanly");
        }
    }
}

/// The `[envoy]` section `rules_toml` with the YAML files `files` (name, text) as its
/// `config_dir`, and the limits generated for them.
fn imported(files: &[(&str, &str)], rules_toml: &str) -> (Vec<Limit>, EnvoyRules) {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("write yaml");
    }
    let mut envoy = rules(rules_toml);
    envoy.imported = tollgate_envoy::load_dir_with(dir.path(), envoy.merge_domain_config)
        .expect("valid yaml files");
    let limits = envoy
        .imported
        .limits(
            envoy.algorithm.unwrap_or(tollgate::Algorithm::FixedWindow),
            envoy
                .on_store_error
                .unwrap_or(tollgate::OnStoreError::Allow),
        )
        .expect("generated limits");
    (limits, envoy)
}

fn limiter(store: &St, clock: &FakeClock, limits: Vec<Limit>) -> Arc<Limiter<St>> {
    Arc::new(
        Limiter::builder(store.clone())
            .limits(limits)
            .clock(clock.clone())
            .build()
            .expect("distinct limit names"),
    )
}

/// A request for `domain` with these descriptors (each a list of key/value entries).
pub(crate) fn request(
    domain: &str,
    descriptors: &[&[(&str, &str)]],
    hits_addend: u32,
) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: descriptors
            .iter()
            .map(|entries| RateLimitDescriptor {
                entries: entries
                    .iter()
                    .map(|(k, v)| Entry {
                        key: (*k).to_owned(),
                        value: (*v).to_owned(),
                    })
                    .collect(),
                ..RateLimitDescriptor::default()
            })
            .collect(),
        hits_addend,
    }
}

/// The process-wide debugging metrics recorder (installed on first use).
pub(crate) fn metrics() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().expect("no other metrics recorder");
        snapshotter
    })
}

/// A series' labels, as (key, value).
pub(crate) type Labels = Vec<(String, String)>;

/// Every counter's total so far, as `(name, labels)`. A snapshot of the debugging recorder
/// drains its counters, and tests running in parallel take snapshots: each snapshot's values
/// are added here, so that no test loses another's counts.
pub(crate) fn counters() -> Vec<(String, Labels, u64)> {
    type Totals = std::collections::HashMap<(String, Labels), u64>;
    static TOTALS: OnceLock<std::sync::Mutex<Totals>> = OnceLock::new();
    let mut totals = TOTALS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for (key, .., value) in metrics().snapshot().into_vec() {
        if let metrics_util::debugging::DebugValue::Counter(n) = value {
            let labels = key
                .key()
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            *totals
                .entry((key.key().name().to_owned(), labels))
                .or_default() += n;
        }
    }
    totals
        .iter()
        .map(|((name, labels), n)| (name.clone(), labels.clone(), *n))
        .collect()
}

/// The value of counter `name` with label `limit` = `limit` (0 when never incremented).
pub(crate) fn counter(name: &str, limit: &str) -> u64 {
    counters()
        .into_iter()
        .filter(|(n, labels, _)| {
            n == name && labels.iter().any(|(k, v)| k == "limit" && v == limit)
        })
        .map(|(.., value)| value)
        .sum()
}
