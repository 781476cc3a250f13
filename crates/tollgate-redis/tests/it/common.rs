//! What every test module shares: the spawned server and cluster, fixtures, key inspection.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate::{Algorithm, FakeClock, Limit, Namespace, OnStoreError, Quota};
use tollgate_redis::RedisStore;
use tollgate_testkit::{Fixture, RedisCluster, RedisServer};

/// Timeout for stores in tests that are not about timeouts: generous, since the machine's
/// two cores are shared with builds.
pub(crate) const TEST_TIMEOUT: Duration = Duration::from_secs(5);

static SERVER: OnceLock<RedisServer> = OnceLock::new();
static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
static NEXT: AtomicU64 = AtomicU64::new(0);

/// The Redis server shared by this test binary.
pub(crate) fn server() -> &'static RedisServer {
    SERVER.get_or_init(RedisServer::start)
}

/// The Redis Cluster shared by this test binary.
pub(crate) fn cluster() -> &'static RedisCluster {
    CLUSTER.get_or_init(RedisCluster::start)
}

/// A namespace no other test (or process) uses.
pub(crate) fn unique_namespace(what: &str) -> Namespace {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    Namespace::new(format!("tg{}-{what}-{n}", std::process::id())).expect("valid prefix")
}

/// A store on the shared server.
pub(crate) async fn redis_store() -> RedisStore {
    RedisStore::builder(server().url())
        .timeout(TEST_TIMEOUT)
        .build()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "connect to {}: {e}\nlog:\n{}",
                server().url(),
                server().log()
            )
        })
}

/// A store on the shared cluster.
pub(crate) async fn cluster_store() -> RedisStore {
    RedisStore::cluster_builder(cluster().urls())
        .timeout(TEST_TIMEOUT)
        .build()
        .await
        .unwrap_or_else(|e| panic!("connect to cluster: {e}\n{}", cluster().logs()))
}

/// The conformance suite's fixture on the shared server.
pub(crate) async fn redis_fixture(_clock: FakeClock) -> Fixture<RedisStore> {
    Fixture {
        store: redis_store().await,
        namespace: unique_namespace("conf"),
        guard: Box::new(()),
    }
}

/// The conformance suite's fixture on the shared cluster.
pub(crate) async fn cluster_fixture(_clock: FakeClock) -> Fixture<RedisStore> {
    Fixture {
        store: cluster_store().await,
        namespace: unique_namespace("cconf"),
        guard: Box::new(()),
    }
}

/// Every key matching `pattern` on `server`, by SCAN.
pub(crate) fn scan(server: &RedisServer, pattern: &str) -> Vec<String> {
    let mut con = redis::Client::open(server.url())
        .and_then(|c| c.get_connection())
        .unwrap_or_else(|e| panic!("connect: {e}\nlog:\n{}", server.log()));
    let keys: Vec<String> = redis::cmd("SCAN")
        .cursor_arg(0)
        .arg("MATCH")
        .arg(pattern)
        .arg("COUNT")
        .arg(1000)
        .clone()
        .iter(&mut con)
        .expect("scan")
        .collect::<Result<_, _>>()
        .expect("scan keys");
    keys
}

/// Keys matching `pattern` that have no expiry (TTL -1).
pub(crate) fn keys_without_ttl(server: &RedisServer, pattern: &str) -> Vec<String> {
    let mut con = redis::Client::open(server.url())
        .and_then(|c| c.get_connection())
        .expect("connect");
    scan(server, pattern)
        .into_iter()
        .filter(|k| {
            let ttl: i64 = redis::cmd("PTTL").arg(k).query(&mut con).expect("pttl");
            ttl == -1
        })
        .collect()
}

/// A GCRA limit no load reaches (a million a second per user), keyed by `user`, refusing
/// when the store fails: for tests that hammer a store and count its failures.
pub(crate) fn unreachable_gcra(name: &str) -> Limit {
    Limit::new(
        name,
        Algorithm::Gcra,
        Quota::per_second(1_000_000).expect("valid"),
    )
    .expect("valid")
    .keyed_by(["user"])
    .expect("valid")
    .on_store_error(OnStoreError::Deny)
}

/// Polls `done` every 10 ms until it holds (true) or `within` has passed (false).
pub(crate) async fn eventually(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

/// The limit of [`race`]: nothing replenishes within a day.
pub(crate) const RACE_LIMIT: u64 = 50;

/// GCRA and fixed window limits of [`RACE_LIMIT`] a day, keyed by `user`, refusing when the
/// store fails: the pair every Redis-topology test races on.
pub(crate) fn race_limits() -> Vec<Limit> {
    day_limits(RACE_LIMIT)
}

/// GCRA and fixed window limits of `limit` a day, keyed by `user`, refusing when the store
/// fails (nothing replenishes during a test).
pub(crate) fn day_limits(limit: u64) -> Vec<Limit> {
    [Algorithm::Gcra, Algorithm::FixedWindow]
        .into_iter()
        .map(|a| {
            Limit::new(
                a.name(),
                a,
                Quota::new(limit, Duration::from_secs(86_400)).expect("valid"),
            )
            .expect("valid")
            .keyed_by(["user"])
            .expect("valid")
            .on_store_error(OnStoreError::Deny)
        })
        .collect()
}

/// `tasks` concurrent tasks, each checking every [`race_limits`] limit `calls` times for
/// `user` through one limiter on `store`: how many each limit admitted, in that order. Any
/// store failure fails the test (these stores are healthy).
pub(crate) async fn race(
    store: RedisStore,
    ns: &Namespace,
    user: &str,
    tasks: usize,
    calls: usize,
) -> Vec<u64> {
    let limits = race_limits();
    let mut builder = tollgate::Limiter::builder(store).namespace(ns.clone());
    for l in &limits {
        builder = builder.limit(l.clone());
    }
    let limiter = std::sync::Arc::new(builder.build().expect("valid limiter"));
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let limiter = std::sync::Arc::clone(&limiter);
        let names: Vec<String> = limits.iter().map(|l| l.name().to_owned()).collect();
        let user = user.to_owned();
        handles.push(tokio::spawn(async move {
            let mut admitted = vec![0u64; names.len()];
            for _ in 0..calls {
                for (i, name) in names.iter().enumerate() {
                    let verdict = limiter
                        .check(name, &[("user", user.as_str())])
                        .await
                        .expect("a known limit");
                    match verdict.outcome() {
                        tollgate::Outcome::Allowed => admitted[i] += 1,
                        tollgate::Outcome::Limited { .. } => {}
                        other => panic!("{name}: the store failed: {other:?}"),
                    }
                }
            }
            admitted
        }));
    }
    let mut total = vec![0u64; limits.len()];
    for h in handles {
        for (t, a) in total.iter_mut().zip(h.await.expect("task")) {
            *t += a;
        }
    }
    total
}
