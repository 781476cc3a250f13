//! A shadow limit asked more than it can ever admit, on Redis: its entry reaches the scripts
//! clamped to capacity + 1 (`tollgate::Request`), is refused by the store and charges
//! nothing, in one round trip.

use std::time::Duration;

use tollgate::{Algorithm, Limit, Limiter, Op, Outcome, Quota, Source};
use tollgate_redis::RedisStore;
use tollgate_testkit::RedisServer;

use crate::common::unique_namespace;

/// Every algorithm, on Redis's own clock and a Redis of its own (to count its commands): on a
/// key never seen, a shadow check of `u64::MAX` is a would-be refusal decided by the store (on
/// Redis's clock GCRA answered it as an admit: owing less than its millisecond of skew, the
/// wait it encodes came out positive); after a check of 1, so is it
/// (the GCRA script got `cost × T` wrapped, the sliding log a float for `LIMIT`, the token
/// bucket a reply it could not decode), the key keeps 9, and ten such checks cost ten
/// `EVALSHA`: a refusal no wait can lift is not sent again a millisecond later (the rules
/// answer it with a wait of 0, which the second look took for "due within a millisecond").
#[tokio::test]
async fn a_huge_shadow_cost_is_refused_by_the_store_in_one_call() {
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("connect");
    for algorithm in Algorithm::ALL {
        let trial = Limit::new("trial", algorithm, Quota::per_minute(10).expect("q"))
            .and_then(|l| l.keyed_by(["user"]))
            .expect("valid")
            .shadow(true);
        let l = Limiter::builder(store.clone())
            .namespace(unique_namespace("shadow-cost"))
            .limit(trial)
            .deny_cache(0)
            .build()
            .expect("valid");
        let fresh = l
            .prepare(&["trial"], &[("user", "fresh")], u64::MAX)
            .expect("no error");
        let v = l.decide(&fresh, Op::Check).await;
        assert!(
            v.decisions()[0].shadow_refused(),
            "{algorithm:?}: a key never seen: {v:?}"
        );
        assert_eq!(
            v.decisions()[0].source,
            Source::Store,
            "{algorithm:?}: {v:?}"
        );
        let key = [("user", "1")];
        let first = l.check("trial", &key).await.expect("known");
        assert!(
            first.decisions()[0].decision.is_allowed(),
            "{algorithm:?}: {first:?}"
        );
        let huge = l.prepare(&["trial"], &key, u64::MAX).expect("no error");
        let before = server.command_stats("evalsha").calls;
        for _ in 0..10 {
            let v = l.decide(&huge, Op::Check).await;
            assert_eq!(v.outcome(), Outcome::Allowed, "{algorithm:?}: {v:?}");
            let trial = &v.decisions()[0];
            assert!(trial.shadow_refused(), "{algorithm:?}: {v:?}");
            assert_eq!(trial.source, Source::Store, "{algorithm:?}: {v:?}");
        }
        let calls = server.command_stats("evalsha").calls - before;
        assert_eq!(calls, 10, "{algorithm:?}: one round trip a check");
        let peek = l.prepare(&["trial"], &key, 1).expect("valid");
        let left = l.decide(&peek, Op::Peek).await.decisions()[0]
            .decision
            .remaining;
        assert_eq!(left, 9, "{algorithm:?}: only the first check charged");
    }
}
