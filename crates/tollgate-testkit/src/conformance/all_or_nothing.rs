//! Requests of several entries: all or nothing across limits and across keys of one limit.

use std::time::Duration;

use tollgate::{Algorithm, CheckError, FakeClock, Limit, Outcome, Quota, Store};

use super::harness::{Harness, from_store, limit_for, name};
use crate::Fixture;

/// Several limits in one check: all are charged, or none is.
pub async fn multi_limit_is_all_or_nothing<S: Store>(clock: FakeClock, fixture: Fixture<S>) {
    let mut limits = Vec::new();
    for a in Algorithm::ALL {
        let tag = a.key_tag();
        limits.push(
            Limit::new(
                format!("global-{tag}"),
                a,
                Quota::per_minute(3).expect("valid"),
            )
            .expect("valid")
            .keyed_by(Vec::<String>::new())
            .expect("valid"),
        );
        limits.push(limit_for("client", a, 2, Duration::from_secs(60)));
    }
    let h = Harness::new(clock, fixture, limits);
    for a in Algorithm::ALL {
        let global = name("global", a);
        let client = name("client", a);
        let both = [global.as_str(), client.as_str()];
        let check = |user: &'static str| {
            let h = &h;
            async move {
                h.limiter
                    .check_all(&both, &[("user", user)])
                    .await
                    .expect("valid")
            }
        };
        let remaining = |user: &'static str, limit: &str| {
            let h = &h;
            let limit = limit.to_owned();
            async move { h.peek(&limit, user, 1).await.decision().remaining }
        };
        assert!(check("a").await.outcome() == Outcome::Allowed, "{global}");
        assert!(check("a").await.outcome() == Outcome::Allowed, "{global}");
        // "a" is over its client limit: the global limit must not be charged.
        let v = check("a").await;
        from_store(&v, &global);
        assert!(v.outcome() != Outcome::Allowed, "{client}: a's third");
        assert!(
            v.decisions()[0].decision.is_allowed(),
            "{global}: global alone would pass"
        );
        assert!(!v.decisions()[1].decision.is_allowed(), "{client}");
        assert_eq!(
            remaining("a", &global).await,
            1,
            "{global}: charged by a denied check"
        );
        // "b" takes the last global unit.
        assert!(check("b").await.outcome() == Outcome::Allowed, "{global}");
        // "c" is refused by the global limit: c's own limit must not be charged.
        let v = check("c").await;
        assert!(v.outcome() != Outcome::Allowed, "{global}: exhausted");
        assert!(!v.decisions()[0].decision.is_allowed(), "{global}");
        assert!(
            v.decisions()[1].decision.is_allowed(),
            "{client}: c alone would pass"
        );
        assert_eq!(
            remaining("c", &client).await,
            2,
            "{client}: charged by a denied check"
        );
        assert_eq!(remaining("b", &client).await, 1, "{client}");
    }
}

/// One limit over two keys in one check (two clients at once): both charged, or neither.
pub async fn one_limit_two_keys_is_all_or_nothing<S: Store>(clock: FakeClock, fixture: Fixture<S>) {
    let limits = Algorithm::ALL
        .into_iter()
        .map(|a| limit_for("pair", a, 2, Duration::from_secs(60)))
        .collect();
    let h = Harness::new(clock, fixture, limits);
    for a in Algorithm::ALL {
        let n = name("pair", a);
        let (ka, kb, kc) = ([("user", "a")], [("user", "b")], [("user", "c")]);
        for _ in 0..2 {
            assert!(
                h.check(&n, "a", 1).await.outcome() == Outcome::Allowed,
                "{n}"
            );
        }
        let both: [(&str, &[(&str, &str)]); 2] = [(&n, &ka), (&n, &kb)];
        let v = h.check_keyed(&both, 1).await.expect("valid");
        from_store(&v, &n);
        assert!(v.outcome() != Outcome::Allowed, "{n}: a is exhausted");
        assert_eq!(
            h.peek(&n, "b", 1).await.decision().remaining,
            2,
            "{n}: b charged by a denied check"
        );
        let both: [(&str, &[(&str, &str)]); 2] = [(&n, &kb), (&n, &kc)];
        let v = h.check_keyed(&both, 1).await.expect("valid");
        assert!(
            v.outcome() == Outcome::Allowed,
            "{n}: b and c both have room"
        );
        assert_eq!(h.peek(&n, "b", 1).await.decision().remaining, 1, "{n}");
        assert_eq!(h.peek(&n, "c", 1).await.decision().remaining, 1, "{n}");
        let twice: [(&str, &[(&str, &str)]); 2] = [(&n, &kb), (&n, &kb)];
        let err = h.check_keyed(&twice, 1).await.expect_err("same key twice");
        assert!(matches!(err, CheckError::DuplicateLimit(_)), "{n}: {err}");
    }
}
