//! Several descriptors of one call on one counter, each answered at its own rate as the
//! reference counts them (one `INCRBY` after another), on the real binary with a tonic
//! client, on the memory store and on Redis: a descriptor decided by a YAML limit (10 an
//! hour) and the same descriptor with a `limit` override of 5 an hour, which counts on the
//! YAML limit's counter (`override_counters = "shared"`, the default).
//!
//! With counted refusals a refused call's count is read back by a second peek (its decision
//! is clamped at 0 remaining), which on Redis is a second script call; both stores must
//! answer alike. Windows are hours on the real clock; a run that straddles an hour's edge is
//! run again on a fresh process and store.

use std::time::{SystemTime, UNIX_EPOCH};

use tollgate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

use crate::binary::EnvoyServe;
use crate::envoy_quota::On;
use crate::grpc::{connect, descriptor};

const YAML: &str = "domain: share\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: hour\n      requests_per_unit: 10\n";

const OK: Code = Code::Ok;
const OVER: Code = Code::OverLimit;

/// Per call: the overall code, then each status's code, rate and remaining.
type Seen = (Code, Vec<(Code, u32, u32)>);

fn hour() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch")
        .as_secs()
        / 3600
}

/// What `once` (calls on a fresh process and store) saw, from a run within one clock hour:
/// run again, at most three times, when it straddled an hour's edge (these tests' windows are
/// hours on the real clock).
pub(crate) async fn in_one_hour<T, F, Fut>(mut once: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    for _ in 0..3 {
        let start = hour();
        let seen = once().await;
        if hour() == start {
            return seen;
        }
    }
    panic!("three runs each straddled an hour's edge");
}

/// `user=a` twice, the second (or the first, `override_first`) with 5 an hour.
fn both(override_first: bool) -> RateLimitRequest {
    let mut descriptors = vec![descriptor(&[("user", "a")]), descriptor(&[("user", "a")])];
    descriptors[usize::from(!override_first)].limit = Some(RateLimitOverride {
        requests_per_unit: 5,
        unit: Unit::Hour as i32,
    });
    RateLimitRequest {
        domain: "share".to_owned(),
        descriptors,
        hits_addend: 1,
    }
}

/// The `calls` on a fresh `tollgate serve` (`envoy`: the `[envoy]` settings).
async fn run_once(on: On, envoy: &str, calls: &[bool]) -> Vec<Seen> {
    let served = EnvoyServe::start(matches!(on, On::Redis), envoy, &[("share.yaml", YAML)]);
    let process = &served.process;
    let mut client = connect(process.grpc.expect("grpc address")).await;
    let mut seen = Vec::new();
    for &override_first in calls {
        let r = client
            .should_rate_limit(both(override_first))
            .await
            .expect("ShouldRateLimit answers")
            .into_inner();
        let statuses = r
            .statuses
            .iter()
            .map(|s| {
                let rate = s.current_limit.as_ref().expect("a current limit");
                (
                    Code::try_from(s.code).expect("known code"),
                    rate.requests_per_unit,
                    s.limit_remaining,
                )
            })
            .collect();
        seen.push((
            Code::try_from(r.overall_code).expect("known code"),
            statuses,
        ));
    }
    seen
}

async fn run(on: On, envoy: &str, calls: &[bool]) -> Vec<Seen> {
    in_one_hour(|| run_once(on, envoy, calls)).await
}

/// By default (refusals charge nothing): counted 0 → 2 → 4; at 4 the override second would
/// be the 6th of 5, so the call is refused and charges nothing; the override first is the
/// 5th of 5 and the YAML one the 6th of 10, so that call passes.
async fn in_turn(on: On) {
    let seen = run(on, "", &[false, false, false, true]).await;
    assert_eq!(
        seen,
        [
            (OK, vec![(OK, 10, 9), (OK, 5, 3)]),
            (OK, vec![(OK, 10, 7), (OK, 5, 1)]),
            (OVER, vec![(OK, 10, 6), (OVER, 5, 1)]),
            (OK, vec![(OK, 5, 0), (OK, 10, 4)]),
        ],
        "{on:?}"
    );
}

/// With counted refusals every call counts both: 2, 4, 6, 8, 10, 12; each descriptor is
/// over once its own count passes its rate, as the reference answers.
async fn in_turn_counted(on: On) {
    let seen = run(on, "refusals = \"charged\"", &[false; 6]).await;
    let over = |yaml: u32| (OVER, vec![(OK, 10, yaml), (OVER, 5, 0)]);
    assert_eq!(
        seen,
        [
            (OK, vec![(OK, 10, 9), (OK, 5, 3)]),
            (OK, vec![(OK, 10, 7), (OK, 5, 1)]),
            over(5),
            over(3),
            over(1),
            (OVER, vec![(OVER, 10, 0), (OVER, 5, 0)]),
        ],
        "{on:?}"
    );
}

#[tokio::test]
async fn an_override_and_its_yaml_limit_count_in_turn_on_memory() {
    in_turn(On::Memory).await;
    in_turn_counted(On::Memory).await;
}

#[tokio::test]
async fn an_override_and_its_yaml_limit_count_in_turn_on_redis() {
    in_turn(On::Redis).await;
    in_turn_counted(On::Redis).await;
}
