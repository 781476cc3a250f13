//! Behind Sentinel with TLS and authentication: the store reaches the sentinels and the data
//! nodes over TLS with the test CA, and authenticates to password-protected data nodes with
//! the builder's password (the sentinels' own credentials are separate); decisions stay exact.

use tollgate_redis::RedisStore;
use tollgate_testkit::{SentinelGroup, TlsFiles};

use crate::common::{RACE_LIMIT, TEST_TIMEOUT, race, unique_namespace};
use crate::failover::HEAVY;

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
