//! The limiter's failure policies, on a store that always fails.

use tollgate::{
    Algorithm, FakeClock, Limit, Limiter, OnStoreError, Outcome, Quota, Source, StoreError,
    StoreErrorKind, Timestamp,
};
use tollgate_testkit::FailingStore;

fn limiter() -> Limiter<FailingStore> {
    let limit = |name: &str, policy| {
        Limit::new(name, Algorithm::Gcra, Quota::per_minute(2).expect("valid"))
            .expect("valid")
            .keyed_by(["user"])
            .expect("valid")
            .on_store_error(policy)
    };
    Limiter::builder(FailingStore::down())
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
        assert!(v.outcome() == Outcome::Allowed);
        assert_eq!(v.store_error(), Some(StoreErrorKind::Connection));
    }
    let v = l.check("closed", &key).await.expect("valid");
    assert!(v.outcome() != Outcome::Allowed);
    assert!(matches!(v.outcome(), Outcome::Unavailable { .. }), "{v:?}");
    assert_eq!(v.retry_after(), Some(std::time::Duration::from_secs(1)));
}

/// `local` counts on this instance with the same quota.
#[tokio::test]
async fn local_counts_in_memory() {
    let l = limiter();
    let key = [("user", "1")];
    assert!(l.check("local", &key).await.expect("valid").outcome() == Outcome::Allowed);
    assert!(l.check("local", &key).await.expect("valid").outcome() == Outcome::Allowed);
    let v = l.check("local", &key).await.expect("valid");
    assert!(
        v.outcome() != Outcome::Allowed,
        "the local fallback enforces the quota"
    );
    assert!(
        !matches!(v.outcome(), Outcome::Unavailable { .. }),
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
            .check_all(&["local", "closed"], &key)
            .await
            .expect("valid");
        assert!(v.outcome() != Outcome::Allowed);
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
    let l = limiter();
    let request = l.prepare(&["open"], &[("user", "1")], 1).expect("valid");
    let err = l.reset(&request).await.expect_err("down");
    assert!(matches!(err, StoreError::Connection(_)), "{err}");
}
