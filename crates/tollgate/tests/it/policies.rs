//! The limiter's failure policies, on a store that always fails.

use std::time::Duration;

use tollgate::{
    Algorithm, Decisions, FakeClock, Limit, Limiter, OnStoreError, Quota, Request, Source, Store,
    StoreError, StoreErrorKind, Timestamp,
};

/// A store whose every call times out.
#[derive(Debug)]
struct DownStore;

impl Store for DownStore {
    async fn check(&self, _: &Request<'_>, _: Option<Timestamp>) -> Result<Decisions, StoreError> {
        Err(StoreError::Timeout(Duration::from_millis(50)))
    }
    async fn peek(&self, _: &Request<'_>, _: Option<Timestamp>) -> Result<Decisions, StoreError> {
        Err(StoreError::Timeout(Duration::from_millis(50)))
    }
    async fn reset(&self, _: &Request<'_>) -> Result<(), StoreError> {
        Err(StoreError::Timeout(Duration::from_millis(50)))
    }
}

fn limiter() -> Limiter<DownStore> {
    let limit = |name: &str, policy| {
        Limit::new(name, Algorithm::Gcra, Quota::per_minute(2).expect("valid"))
            .expect("valid")
            .keyed_by(["user"])
            .expect("valid")
            .on_store_error(policy)
    };
    Limiter::builder(DownStore)
        .clock(FakeClock::new(Timestamp::from_millis(1_900_000_000_000)))
        .limit(limit("open", OnStoreError::Allow))
        .limit(limit("closed", OnStoreError::Deny))
        .limit(limit("local", OnStoreError::Local))
        .build()
        .expect("valid")
}

/// `allow` admits, `deny` refuses as a store failure (not a quota denial).
#[tokio::test]
async fn allow_and_deny() {
    let l = limiter();
    let key = [("user", "1")];
    for _ in 0..5 {
        let v = l.check("open", &key).await.expect("valid");
        assert!(v.is_allowed());
        assert_eq!(v.store_error(), Some(StoreErrorKind::Timeout));
    }
    let v = l.check("closed", &key).await.expect("valid");
    assert!(!v.is_allowed());
    assert!(v.is_store_failure(), "{v:?}");
    assert_eq!(v.retry_after(), Some(tollgate::POLICY_RETRY_AFTER));
}

/// `local` counts on this instance with the same quota.
#[tokio::test]
async fn local_counts_in_memory() {
    let l = limiter();
    let key = [("user", "1")];
    assert!(l.check("local", &key).await.expect("valid").is_allowed());
    assert!(l.check("local", &key).await.expect("valid").is_allowed());
    let v = l.check("local", &key).await.expect("valid");
    assert!(!v.is_allowed(), "the local fallback enforces the quota");
    assert!(
        !v.is_store_failure(),
        "a local quota denial is a 429, not a 503"
    );
    assert!(matches!(
        v.decisions()[0].source,
        Source::Policy {
            policy: OnStoreError::Local,
            ..
        }
    ));
}

/// A `deny` limit in the same check keeps the `local` limit from being charged.
#[tokio::test]
async fn mixed_policies_stay_all_or_nothing() {
    let l = limiter();
    let key = [("user", "1")];
    for _ in 0..3 {
        let v = l
            .check_all(&["local", "closed"], &key, 1)
            .await
            .expect("valid");
        assert!(!v.is_allowed());
    }
    let v = l.check("local", &key).await.expect("valid");
    assert_eq!(
        v.decision().remaining,
        1,
        "denied checks charged the local limit"
    );
}

/// `reset` reports the store failure: no policy applies there.
#[tokio::test]
async fn reset_surfaces_store_errors() {
    let err = limiter()
        .reset(&["open"], &[("user", "1")])
        .await
        .expect_err("down");
    assert!(
        matches!(err, tollgate::CheckError::Store(StoreError::Timeout(_))),
        "{err}"
    );
}
