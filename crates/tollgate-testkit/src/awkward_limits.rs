//! [`awkward_limits`]: the limits that randomized store tests decide, two of every
//! algorithm, with awkward numbers.

use std::time::Duration;

use tollgate::{Algorithm, Limit, Quota};

/// Two limits of every algorithm with awkward numbers: periods not divisible by limits,
/// bursts apart from limits, bucket counts that do not divide periods. Names: `fw`, `fw2`,
/// `sl`, `sl2`, `sw`, `sw2`, `tb`, `tb2`, `gcra`, `gcra2`; unkeyed.
pub fn awkward_limits() -> Vec<Limit> {
    let q = |limit: u64, ms: u64| Quota::new(limit, Duration::from_millis(ms)).expect("valid");
    let l = |name: &str, a: Algorithm, q: Quota| Limit::new(name, a, q).expect("valid");
    vec![
        l("fw", Algorithm::FixedWindow, q(7, 1_000)),
        l("fw2", Algorithm::FixedWindow, q(3, 250)),
        l("sl", Algorithm::SlidingLog, q(5, 1_000)),
        l("sl2", Algorithm::SlidingLog, q(9, 333)),
        l("sw", Algorithm::SlidingWindow { buckets: 7 }, q(8, 1_000)),
        l("sw2", Algorithm::SlidingWindow { buckets: 3 }, q(4, 100)),
        l("tb", Algorithm::TokenBucket, q(3, 1_000)),
        l(
            "tb2",
            Algorithm::TokenBucket,
            q(7, 300).with_burst(4).expect("valid"),
        ),
        l("gcra", Algorithm::Gcra, q(3, 1_000)),
        l(
            "gcra2",
            Algorithm::Gcra,
            q(6, 700).with_burst(11).expect("valid"),
        ),
    ]
}
