//! Server time: limiters given no clock pass `now: None`, so the script reads Redis's `TIME`
//! and instances whose own clocks disagree (here: two independent stores and limiters, which
//! never read a local clock on this path) decide as one.

use std::time::Duration;

use tollgate::{Algorithm, Limit, Limiter, Quota};

use crate::common::{redis_store, unique_namespace};

/// Two instances, interleaved, count one quota and report one timeline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_share_the_servers_clock() {
    let ns = unique_namespace("time");
    let limits = || {
        Algorithm::ALL
            .into_iter()
            .map(|a| Limit::new(a.name(), a, Quota::per_hour(10).expect("valid")).expect("valid"))
    };
    let a = Limiter::builder(redis_store().await)
        .namespace(ns.clone())
        .limits(limits())
        .build()
        .expect("limiter");
    let b = Limiter::builder(redis_store().await)
        .namespace(ns)
        .limits(limits())
        .build()
        .expect("limiter");
    for alg in Algorithm::ALL {
        let name = alg.name();
        let mut previous_reset = Duration::ZERO;
        for i in 0..12_u64 {
            let instance = if i % 2 == 0 { &a } else { &b };
            let v = instance.check(name, &[("user", "1")]).await.expect("check");
            assert!(v.store_error().is_none(), "{name} call {i}: {v:?}");
            let d = v.decision();
            if i < 10 {
                assert!(
                    d.is_allowed(),
                    "{name} call {i} from instance {}: {d:?}",
                    i % 2
                );
                assert_eq!(d.remaining, 9 - i, "{name} call {i}: {d:?}");
                if alg != Algorithm::FixedWindow {
                    // One timeline: each unit pushes the reset further, whichever instance
                    // took it. With clocks 30 s apart this would jump back and forth.
                    assert!(
                        d.reset_after + Duration::from_secs(1) >= previous_reset,
                        "{name} call {i}: {d:?} after {previous_reset:?}"
                    );
                    previous_reset = d.reset_after;
                }
            } else {
                assert!(!d.is_allowed(), "{name} call {i}: over the limit: {d:?}");
                let retry = d.retry_after().expect("denied has retry_after");
                // At most a period and one sliding-window bucket.
                assert!(retry <= Duration::from_secs(3_660), "{name}: {retry:?}");
            }
        }
    }
}
