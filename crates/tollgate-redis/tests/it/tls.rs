//! TLS to Redis (`rediss://`), on one node and on a TLS cluster: decisions stay exact under
//! concurrency, a client certificate answers `tls-auth-clients yes`, and every certificate
//! problem fails the connection at start with a [`StoreError::Tls`] that names the cause
//! (not a transient connection error that a service would retry forever).

use tollgate::StoreError;
use tollgate_redis::{RedisStore, RedisStoreBuilder};
use tollgate_testkit::{RedisCluster, RedisServer, TlsFiles, TlsServer};

use crate::common::{RACE_LIMIT, TEST_TIMEOUT, race, unique_namespace};

fn pem(path: &std::path::Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

async fn build(builder: RedisStoreBuilder, server: &RedisServer) -> RedisStore {
    builder
        .timeout(TEST_TIMEOUT)
        .build()
        .await
        .unwrap_or_else(|e| panic!("connect over TLS: {e:?}\nlog:\n{}", server.log()))
}

/// The message of a start-up failure, causes included.
fn failure(result: Result<RedisStore, StoreError>) -> (StoreError, String) {
    let error = match result {
        Ok(_) => panic!("connected, where the TLS setup must be refused"),
        Err(e) => e,
    };
    let mut text = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    (error, text)
}

/// Over `rediss://` with the test CA, 64 tasks race on one key: exactly the limit passes, for
/// GCRA and the fixed window, coalesced as on plaintext.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_over_tls_are_exact() {
    let tls = TlsFiles::new();
    let server = RedisServer::start_tls(&tls, TlsServer::default());
    let store = build(
        RedisStore::builder(server.tls_url()).tls_ca(pem(tls.ca())),
        &server,
    )
    .await;
    let ns = unique_namespace("tls");
    let admitted = race(store.clone(), &ns, "u", 64, 2).await;
    assert_eq!(admitted, vec![RACE_LIMIT, RACE_LIMIT], "gcra, fixed_window");
    assert!(store.batches() > 0, "calls were coalesced over TLS too");
    // The plaintext port saw none of it: the decisions went over TLS.
    let plain = server.command_stats("evalsha").calls;
    assert!(plain > 0, "the server ran the scripts ({plain})");
}

/// A server that requires client certificates (mTLS) decides for a client that presents one
/// signed by its CA, and refuses one without a certificate at start, saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_needs_a_client_certificate() {
    let tls = TlsFiles::new();
    let server = RedisServer::start_tls(
        &tls,
        TlsServer {
            auth_clients: true,
            ..TlsServer::default()
        },
    );
    let store = build(
        RedisStore::builder(server.tls_url())
            .tls_ca(pem(tls.ca()))
            .tls_client_cert(pem(tls.client_cert()), pem(tls.client_key())),
        &server,
    )
    .await;
    let admitted = race(store, &unique_namespace("mtls"), "u", 16, 5).await;
    assert_eq!(admitted, vec![RACE_LIMIT, RACE_LIMIT]);

    let (error, text) = failure(
        RedisStore::builder(server.tls_url())
            .tls_ca(pem(tls.ca()))
            .timeout(TEST_TIMEOUT)
            .build()
            .await,
    );
    assert!(matches!(error, StoreError::Tls(_)), "{text}");
    assert!(!error.is_transient(), "{text}");
    assert!(text.contains("client certificate"), "{text}");

    let (error, text) = failure(
        RedisStore::builder(server.tls_url())
            .tls_ca(pem(tls.ca()))
            .tls_client_cert(pem(tls.other_client_cert()), pem(tls.other_client_key()))
            .timeout(TEST_TIMEOUT)
            .build()
            .await,
    );
    assert!(matches!(error, StoreError::Tls(_)), "{text}");
    assert!(text.contains("client certificate"), "{text}");
}

/// A server certificate from a CA the client does not trust, and an expired one, each fail
/// at start with the reason in words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_and_expired_certificates_fail_naming_the_cause() {
    let tls = TlsFiles::new();
    let server = RedisServer::start_tls(&tls, TlsServer::default());
    let (error, text) = failure(
        RedisStore::builder(server.tls_url())
            .tls_ca(pem(tls.other_ca()))
            .build()
            .await,
    );
    assert!(matches!(error, StoreError::Tls(_)), "{text}");
    assert!(!error.is_transient());
    assert!(text.contains("not signed by a trusted CA"), "{text}");

    let expired = RedisServer::start_tls(
        &tls,
        TlsServer {
            expired_cert: true,
            ..TlsServer::default()
        },
    );
    let (error, text) = failure(
        RedisStore::builder(expired.tls_url())
            .tls_ca(pem(tls.ca()))
            .build()
            .await,
    );
    assert!(matches!(error, StoreError::Tls(_)), "{text}");
    assert!(text.contains("expired"), "{text}");

    // Verification off: the same expired certificate is accepted (and warned about).
    let store = build(
        RedisStore::builder(expired.tls_url()).tls_insecure(true),
        &expired,
    )
    .await;
    let admitted = race(store, &unique_namespace("insecure"), "u", 4, 20).await;
    assert_eq!(admitted, vec![RACE_LIMIT, RACE_LIMIT]);

    // A TLS option on a plaintext URL is a configuration mistake, named.
    let (error, text) = failure(
        RedisStore::builder(server.url())
            .tls_ca(pem(tls.ca()))
            .build()
            .await,
    );
    assert!(matches!(error, StoreError::Tls(_)), "{text}");
    assert!(text.contains("rediss://"), "{text}");
}

/// A cluster that speaks TLS between its nodes and to clients (`tls-cluster yes`): the store
/// learns the TLS ports from the slot map and decides exactly, on keys spread over slots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_over_a_tls_cluster_are_exact() {
    let tls = TlsFiles::new();
    let cluster = RedisCluster::start_tls(&tls);
    let store = RedisStore::cluster_builder(cluster.tls_urls())
        .tls_ca(pem(tls.ca()))
        .timeout(TEST_TIMEOUT)
        .build()
        .await
        .unwrap_or_else(|e| panic!("connect to the TLS cluster: {e:?}\n{}", cluster.logs()));
    let ns = unique_namespace("tlscluster");
    for user in ["a", "b", "c"] {
        let admitted = race(store.clone(), &ns, user, 32, 2).await;
        assert_eq!(admitted, vec![RACE_LIMIT, RACE_LIMIT], "user {user}");
    }
}
