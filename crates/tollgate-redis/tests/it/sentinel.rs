//! Behind Sentinel: with TLS and authentication (the store reaches the sentinels and the
//! data nodes over TLS with the test CA, and authenticates to password-protected data nodes
//! with the builder's password; the sentinels' own credentials are separate), decisions stay
//! exact; and the store follows the master the sentinels name, not the one it happens to be
//! on nor the one a single sentinel names: through a planned failover while the old master
//! still accepts writes, past a stale or garbled sentinel listed first, and past a named node
//! that accepts a connection and then answers nothing.

use std::time::{Duration, Instant};

use tollgate::{Algorithm, Limit, Limiter, OnStoreError, Outcome, Quota};
use tollgate_redis::RedisStore;
use tollgate_testkit::{FakeSentinel, RedisServer, SentinelGroup, TlsFiles};

use crate::common::{RACE_LIMIT, TEST_TIMEOUT, race, unique_namespace};
use crate::failover::HEAVY;

/// How long a test waits for the store to follow a master the sentinels name: far more than
/// it needs (it checks every second, and hears announcements at once), far less than
/// forever, which is what it waited before.
const FOLLOW_WITHIN: Duration = Duration::from_secs(20);

/// A limiter on `store` with one GCRA limit, `l`, that no test reaches, keyed by `user`,
/// refusing when the store fails.
fn probe_limiter(store: RedisStore) -> Limiter<RedisStore> {
    let limit = Limit::new(
        "l",
        Algorithm::Gcra,
        Quota::per_second(1_000_000).expect("valid"),
    )
    .and_then(|l| l.keyed_by(["user"]))
    .expect("valid")
    .on_store_error(OnStoreError::Deny);
    Limiter::builder(store)
        .namespace(unique_namespace("follow"))
        .limit(limit)
        .build()
        .expect("valid")
}

/// Checks `l` for `user` once: whether the store decided it, and the Redis key it wrote.
async fn probe(limiter: &Limiter<RedisStore>, user: &str) -> (bool, String) {
    let key = [("user", user)];
    let name = limiter.prepare(&["l"], &key, 1).expect("valid").entries()[0]
        .key()
        .as_str()
        .to_owned();
    let decided = match limiter.check("l", &key).await.expect("known").outcome() {
        Outcome::Allowed => true,
        Outcome::Unavailable { .. } => false,
        other => panic!("refused by a limit no test reaches: {other:?}"),
    };
    (decided, name)
}

/// Whether `node` holds `key` (false when it cannot be asked: killed).
fn holds(node: &RedisServer, key: &str) -> bool {
    node.is_running() && node.integer(&["EXISTS", key]) == 1
}

/// Probes with a new user every 20 ms until a decided check's key is on `node`, for up to
/// [`FOLLOW_WITHIN`]; `meanwhile` runs before each probe (to assert what must hold until the
/// store follows). The number of probes it took, or `None` when the store never followed.
async fn until_a_write_lands_on(
    limiter: &Limiter<RedisStore>,
    node: &RedisServer,
    what: &str,
    mut meanwhile: impl FnMut(),
) -> Option<usize> {
    let deadline = Instant::now() + FOLLOW_WITHIN;
    let mut n = 0;
    while Instant::now() < deadline {
        meanwhile();
        n += 1;
        let (decided, key) = probe(limiter, &format!("{what}-{n}")).await;
        if decided && holds(node, &key) {
            return Some(n);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// Whether the node answers `ROLE` as a master.
fn is_master(node: &RedisServer) -> bool {
    node.array(&["ROLE"]).first().is_some_and(|r| r == "master")
}

/// A planned `SENTINEL FAILOVER` promotes the replica while the old master stays up and
/// accepts writes until Sentinel demotes it, seconds later; every write it takes meanwhile
/// is lost when it resyncs from the new master. The store must move to the new master while
/// nothing fails. Here the old master can never be demoted (`SLAVEOF` and `REPLICAOF` are
/// renamed away on it), so the window stays open for as long as the test needs, and the
/// store has no failing call to tell it: only the sentinels can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_failover_is_followed_while_the_old_master_still_accepts_writes() {
    let _alone = HEAVY.lock().await;
    let group = SentinelGroup::start_with_master_args(&[
        "--rename-command",
        "SLAVEOF",
        "",
        "--rename-command",
        "REPLICAOF",
        "",
    ]);
    let store = RedisStore::sentinel_builder(group.sentinel_urls(), group.master_name())
        .timeout(TEST_TIMEOUT)
        .build()
        .await
        .unwrap_or_else(|e| panic!("connect through the sentinels: {e:?}\n{}", group.logs()));
    let limiter = probe_limiter(store.clone());
    let old_port = group.master_port();
    let old = group.node_by_port(old_port);
    let (decided, key) = probe(&limiter, "before").await;
    assert!(decided && holds(old, &key), "decided on the master first");

    let ok = group.sentinels()[0].array(&["SENTINEL", "FAILOVER", group.master_name()]);
    assert_eq!(ok, ["OK"], "SENTINEL FAILOVER");
    let new_port = group.wait_for_new_master(old_port, Duration::from_secs(30));
    let new = group.node_by_port(new_port);
    let followed = until_a_write_lands_on(&limiter, new, "during", || {
        assert!(
            is_master(old),
            "the old master was demoted after all: the test shows nothing\n{}",
            group.logs()
        );
    })
    .await;
    assert!(
        followed.is_some(),
        "the store kept writing to the old master {old_port} for {FOLLOW_WITHIN:?} after the \
         sentinels named {new_port}\n{}",
        group.logs()
    );
    // From then on, every write goes to the new master, none to the old one.
    for n in 0..20 {
        let (decided, key) = probe(&limiter, &format!("after-{n}")).await;
        assert!(decided, "check {n} after the switch failed");
        assert!(
            holds(new, &key) && !holds(old, &key),
            "check {n} after the switch"
        );
    }
    assert!(is_master(old), "the old master still accepts writes");
    assert!(!store.circuit_open());
}

/// A sentinel listed first that keeps naming the old master (stale, cut off from the others,
/// or wrong) must not keep the store on it: after the master is SIGKILLed and the real
/// sentinels name the promoted replica, the store follows them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_sentinel_listed_first_does_not_block_a_failover() {
    let _alone = HEAVY.lock().await;
    let mut group = SentinelGroup::start();
    let old_port = group.master_port();
    let stale = FakeSentinel::naming(old_port);
    let urls: Vec<String> = std::iter::once(stale.url())
        .chain(group.sentinel_urls())
        .collect();
    let store = RedisStore::sentinel_builder(urls, group.master_name())
        .timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap_or_else(|e| panic!("connect through the sentinels: {e:?}\n{}", group.logs()));
    let limiter = probe_limiter(store.clone());
    let (decided, key) = probe(&limiter, "before").await;
    assert!(decided && holds(group.node_by_port(old_port), &key));

    assert_eq!(group.kill_master(), old_port);
    let new_port = group.wait_for_new_master(old_port, Duration::from_secs(30));
    let followed =
        until_a_write_lands_on(&limiter, group.node_by_port(new_port), "after", || {}).await;
    assert!(
        followed.is_some(),
        "the store did not follow the new master {new_port} within {FOLLOW_WITHIN:?}, the \
         stale sentinel asked {} times\n{}",
        stale.asked(),
        group.logs()
    );
    assert!(stale.asked() > 0, "the stale sentinel was asked");
}

/// A sentinel listed first that names no usable master (an empty host and port 0, as the
/// audit's garbled sentinel did; an address where nothing listens; a node that accepts the
/// connection and never answers) must not stop the store from starting on the master the
/// others name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_sentinel_listed_first_does_not_block_the_start() {
    let _alone = HEAVY.lock().await;
    let group = SentinelGroup::start();
    let master = group.master();
    let closed_port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let frozen = FakeSentinel::start();
    let garbled = FakeSentinel::start();
    garbled.answer_raw(b"*2\r\n$0\r\n\r\n$1\r\n0\r\n");
    let cases = [
        ("an empty host and port 0", garbled),
        (
            "an address where nothing listens",
            FakeSentinel::naming(closed_port),
        ),
        (
            "a node that never answers",
            FakeSentinel::naming(frozen.port()),
        ),
    ];
    for (what, bad) in cases {
        let urls: Vec<String> = std::iter::once(bad.url())
            .chain(group.sentinel_urls())
            .collect();
        let built = tokio::time::timeout(
            FOLLOW_WITHIN,
            RedisStore::sentinel_builder(urls, group.master_name())
                .timeout(TEST_TIMEOUT)
                .build(),
        )
        .await
        .unwrap_or_else(|_| panic!("{what}: the start hung for {FOLLOW_WITHIN:?}"));
        let store = built.unwrap_or_else(|e| {
            panic!(
                "{what}: the start failed though three sentinels name the master: {e:?}\n{}",
                group.logs()
            )
        });
        let limiter = probe_limiter(store);
        let (decided, key) = probe(&limiter, "u").await;
        assert!(decided, "{what}: decided");
        assert!(holds(master, &key), "{what}: decided on the master");
        assert!(bad.asked() > 0, "{what}: the bad sentinel was asked");
    }
}

/// A node that the sentinels name and that accepts the connection but then answers nothing
/// (frozen right after it was named, or not Redis at all) must not hold the follower for
/// ever: once the sentinel names another master, the store follows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_node_that_never_answers_does_not_stall_the_follower() {
    let mut first = RedisServer::start();
    let second = RedisServer::start();
    let frozen = FakeSentinel::start();
    let sentinel = FakeSentinel::naming(first.port());
    let store = RedisStore::sentinel_builder([sentinel.url()], "mymaster")
        .timeout(Duration::from_millis(500))
        .build()
        .await
        .expect("connect through the fake sentinel");
    let limiter = probe_limiter(store);
    let (decided, key) = probe(&limiter, "before").await;
    assert!(decided && holds(&first, &key));

    // The master dies; the sentinel names a node that never answers ROLE.
    sentinel.name_master("127.0.0.1", frozen.port());
    first.kill();
    let deadline = Instant::now() + FOLLOW_WITHIN;
    while frozen.roles_asked() == 0 {
        assert!(
            Instant::now() < deadline,
            "the store never checked the named node"
        );
        let _ = probe(&limiter, "failing").await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Then it names a real master.
    sentinel.name_master("127.0.0.1", second.port());
    let followed = until_a_write_lands_on(&limiter, &second, "after", || {}).await;
    assert!(
        followed.is_some(),
        "the store did not follow {} within {FOLLOW_WITHIN:?}: stuck on the silent node",
        second.port()
    );
}

/// Sentinels and data nodes over TLS (`rediss://` sentinels, `tls_ca`), then plaintext
/// sentinels in front of the same TLS data nodes: the master the sentinels name is reached
/// on its TLS port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_over_tls() {
    let _alone = HEAVY.lock().await;
    let tls = TlsFiles::new();
    let group = SentinelGroup::start_tls(&tls);
    let sentinels: Vec<String> = group.sentinels().iter().map(|s| s.tls_url()).collect();
    let ca = std::fs::read(tls.ca()).expect("read the CA");
    let store = RedisStore::sentinel_builder(sentinels, group.master_name())
        .tls_ca(ca)
        .timeout(TEST_TIMEOUT)
        .build()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "connect over TLS through the sentinels: {e:?}\n{}",
                group.logs()
            )
        });
    let admitted = race(store, &unique_namespace("sentinel-tls"), "u", 32, 2).await;
    assert_eq!(admitted, vec![RACE_LIMIT, RACE_LIMIT]);
    // Plaintext sentinels in front of TLS data nodes: TLS (tls_ca) for the data nodes only.
    let ca = std::fs::read(tls.ca()).expect("read the CA");
    let store = RedisStore::sentinel_builder(group.sentinel_urls(), group.master_name())
        .tls_ca(ca)
        .timeout(TEST_TIMEOUT)
        .build()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "plaintext sentinels, TLS data nodes: {e:?}\n{}",
                group.logs()
            )
        });
    let admitted = race(store, &unique_namespace("sentinel-tls2"), "u", 8, 8).await;
    assert_eq!(admitted, vec![RACE_LIMIT, RACE_LIMIT]);
    assert!(
        group.master().command_stats("evalsha").calls > 0,
        "decided on the master"
    );
}

/// Data nodes with a password: the builder's password reaches them; a wrong one is an
/// authentication error at start, not a transient failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_with_a_password_on_the_data_nodes() {
    let _alone = HEAVY.lock().await;
    let group = SentinelGroup::start_with(&["--requirepass", "data-pw"]);
    let store = RedisStore::sentinel_builder(group.sentinel_urls(), group.master_name())
        .password("data-pw")
        .timeout(TEST_TIMEOUT)
        .build()
        .await
        .unwrap_or_else(|e| panic!("connect through the sentinels: {e:?}\n{}", group.logs()));
    let admitted = race(store, &unique_namespace("sentinel-pw"), "u", 16, 4).await;
    assert_eq!(admitted, vec![RACE_LIMIT, RACE_LIMIT]);
    let error = RedisStore::sentinel_builder(group.sentinel_urls(), group.master_name())
        .password("wrong")
        .build()
        .await
        .expect_err("a wrong password is refused");
    assert!(!error.is_transient(), "{error:?}");
    assert_eq!(error.kind().as_str(), "auth", "{error:?}");
    let unknown = RedisStore::sentinel_builder(group.sentinel_urls(), "no-such-master")
        .build()
        .await
        .expect_err("an unknown master name is refused");
    assert!(!unknown.is_transient(), "{unknown:?}");
    assert!(unknown.to_string().contains("no-such-master"), "{unknown}");
}

/// The store's user deleted on the master (which closes its connections) and made again,
/// the master unchanged: the store connects to it again by itself. (The reconnection refused
/// for its credentials stayed the connection for good, and the follower, finding the same
/// master named, kept it: every call failed `auth` until the process restarted.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_deleted_and_made_again_on_the_master_is_connected_again() {
    let _alone = HEAVY.lock().await;
    let group = SentinelGroup::start();
    let make_user = |node: &RedisServer| {
        let reply = node.cmd(&[
            "ACL", "SETUSER", "tollgate", "reset", "on", ">pw", "~*", "&*", "+@all",
        ]);
        assert!(reply.starts_with("+OK"), "ACL SETUSER: {reply}");
    };
    for node in group.data_nodes() {
        make_user(node);
    }
    let store = RedisStore::sentinel_builder(group.sentinel_urls(), group.master_name())
        .username("tollgate")
        .password("pw")
        .timeout(TEST_TIMEOUT)
        .build()
        .await
        .unwrap_or_else(|e| panic!("connect through the sentinels: {e:?}\n{}", group.logs()));
    let limiter = probe_limiter(store);
    assert!(probe(&limiter, "a").await.0, "decides as tollgate");
    let master = group.master_port();
    let reply = group.master().cmd(&["ACL", "DELUSER", "tollgate"]);
    assert!(reply.starts_with(":1"), "ACL DELUSER: {reply}");
    let deadline = tokio::time::Instant::now() + TEST_TIMEOUT;
    while probe(&limiter, "a").await.0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the deleted user still decides"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Long enough for the reconnection, and the follower's look, to be refused.
    for _ in 0..30 {
        assert!(!probe(&limiter, "a").await.0, "no user, yet decided");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The master is connected to again at most once a second while the user is missing
    // (each attempt a failed AUTH there; looks come every 25–100 ms while calls fail).
    let received = || {
        let info = group.master().cmd(&["INFO", "stats"]);
        info.lines()
            .find_map(|l| l.strip_prefix("total_connections_received:"))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .expect("INFO stats")
    };
    let before = received();
    let until = tokio::time::Instant::now() + Duration::from_secs(3);
    while tokio::time::Instant::now() < until {
        assert!(!probe(&limiter, "a").await.0, "no user, yet decided");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // About four: three attempts, and the second INFO's own connection (15 before: every
    // look tried, three times each).
    let made = received() - before;
    assert!(
        made <= 6,
        "{made} connections to the master in 3 s without its user"
    );
    make_user(group.master());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !probe(&limiter, "a").await.0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never connected again; logs:\n{}",
            group.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(group.master_port(), master, "the same master throughout");
}
