//! Redis refusals a user can act on reach the limiter as their own kinds, not as "script":
//! out of memory, read-only (a replica), each through the limit's failure policy.

use tollgate::{Algorithm, Limit, Limiter, OnStoreError, Outcome, Quota, StoreErrorKind};
use tollgate_redis::RedisStore;
use tollgate_testkit::RedisServer;

use crate::common::TEST_TIMEOUT;

async fn limiter(server: &RedisServer) -> Limiter<RedisStore> {
    let store = RedisStore::builder(server.url())
        .timeout(TEST_TIMEOUT)
        .build()
        .await
        .expect("connect");
    Limiter::builder(store)
        .limits(Algorithm::ALL.into_iter().map(|a| {
            Limit::new(a.name(), a, Quota::per_minute(5).expect("valid"))
                .expect("valid")
                .on_store_error(OnStoreError::Deny)
        }))
        .build()
        .expect("valid")
}

async fn kind_of(limiter: &Limiter<RedisStore>, user: &str) -> Vec<Option<StoreErrorKind>> {
    let mut kinds = Vec::new();
    for a in Algorithm::ALL {
        let v = limiter
            .check(a.name(), &[("user", user)])
            .await
            .expect("valid");
        match v.outcome() {
            Outcome::Unavailable { error, .. } => kinds.push(Some(error)),
            _ => kinds.push(None),
        }
    }
    kinds
}

/// `maxmemory` reached with `noeviction`: a write is refused as `oom`, not `script`.
///
/// Redis decides a script's out-of-memory refusal at its first write command: the sliding
/// log's first write is the trim of old members (`ZREMRANGEBYSCORE`, allowed under OOM), so
/// Redis lets that script run whole and it keeps deciding; every other algorithm's first write
/// adds memory and is refused.
#[tokio::test]
async fn out_of_memory_is_its_own_kind() {
    let server = RedisServer::start();
    let limiter = limiter(&server).await;
    assert_eq!(kind_of(&limiter, "before").await, [None; 5]);
    assert_eq!(
        server.cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]),
        "+OK\r\n"
    );
    assert_eq!(server.cmd(&["CONFIG", "SET", "maxmemory", "1"]), "+OK\r\n");
    let oom = Some(StoreErrorKind::OutOfMemory);
    assert_eq!(Algorithm::ALL[1], Algorithm::SlidingLog);
    assert_eq!(kind_of(&limiter, "new").await, [oom, None, oom, oom, oom]);
    assert_eq!(server.cmd(&["CONFIG", "SET", "maxmemory", "0"]), "+OK\r\n");
    assert_eq!(kind_of(&limiter, "after").await, [None; 5]);
}

/// A primary turned replica (a failover seen from the old primary): `readonly`.
#[tokio::test]
async fn read_only_replica_is_its_own_kind() {
    let server = RedisServer::start();
    let limiter = limiter(&server).await;
    assert_eq!(kind_of(&limiter, "before").await, [None; 5]);
    // A replica of a port nothing listens on: it stays a read-only replica.
    assert_eq!(server.cmd(&["REPLICAOF", "127.0.0.1", "1"]), "+OK\r\n");
    assert_eq!(
        kind_of(&limiter, "new").await,
        [Some(StoreErrorKind::ReadOnly); 5]
    );
    assert_eq!(server.cmd(&["REPLICAOF", "NO", "ONE"]), "+OK\r\n");
}

/// A primary that may not write for want of replicas (`min-replicas-to-write`, the setting
/// that closes a failover's split-brain window on an old primary): `NOREPLICAS`, reported as
/// `readonly` (it refuses writes until the client reaches the new primary; behind Sentinel
/// it makes the store look for it at once), not as a script error.
#[tokio::test]
async fn a_primary_without_its_replicas_is_read_only() {
    let server = RedisServer::start();
    let limiter = limiter(&server).await;
    assert_eq!(kind_of(&limiter, "before").await, [None; 5]);
    assert_eq!(
        server.cmd(&["CONFIG", "SET", "min-replicas-to-write", "1"]),
        "+OK\r\n"
    );
    assert_eq!(
        kind_of(&limiter, "new").await,
        [Some(StoreErrorKind::ReadOnly); 5]
    );
    assert_eq!(
        server.cmd(&["CONFIG", "SET", "min-replicas-to-write", "0"]),
        "+OK\r\n"
    );
}
