//! A shadow rule and an enforced rule naming one limit, hit on one key in one call, on the
//! real binary with a tonic client, on the memory store and on Redis: the enforced
//! descriptor is decided first, the shadow one after it on the count it left, and the
//! shadow one never refuses (`decide/calls.rs`, `Calls::charge`). Both stores must answer
//! alike. Windows are hours on the real clock; a run that straddles an hour's edge is run
//! again on a fresh process and store (`envoy_one_counter::in_one_hour`).

use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;

use crate::binary::EnvoyServe;
use crate::envoy_one_counter::in_one_hour;
use crate::envoy_quota::On;
use crate::grpc::{connect, descriptor};

const RULES: &str = r#"
[[envoy.rules]]
domain = "s"
limit = "shared"
descriptor = [{ key = "user", part = "user" }]

[[envoy.rules]]
domain = "s"
limit = "shared"
shadow = true
descriptor = [{ key = "trial_user", part = "user" }]

[[limits]]
name = "shared"
algorithm = "fixed_window"
limit = 3
period = "1h"
key = ["user"]
on_store_error = "deny"
"#;

const OK: Code = Code::Ok;
const OVER: Code = Code::OverLimit;

/// Per call: the overall code, then each status's code and remaining.
type Seen = (Code, Vec<(Code, u32)>);

/// The shadow descriptor first, then the enforced one, on one key.
fn both() -> RateLimitRequest {
    RateLimitRequest {
        domain: "s".to_owned(),
        descriptors: vec![
            descriptor(&[("trial_user", "u")]),
            descriptor(&[("user", "u")]),
        ],
        hits_addend: 1,
    }
}

/// `calls` calls of [`both`] on a fresh `tollgate serve` (`envoy`: more `[envoy]` settings).
async fn run_once(on: On, envoy: &str, calls: usize) -> Vec<Seen> {
    let served = EnvoyServe::start(matches!(on, On::Redis), &format!("{envoy}\n{RULES}"), &[]);
    let mut client = connect(served.process.grpc.expect("grpc address")).await;
    let mut seen = Vec::new();
    for _ in 0..calls {
        let r = client
            .should_rate_limit(both())
            .await
            .expect("ShouldRateLimit answers")
            .into_inner();
        let statuses = r
            .statuses
            .iter()
            .map(|s| (Code::try_from(s.code).expect("code"), s.limit_remaining))
            .collect();
        seen.push((Code::try_from(r.overall_code).expect("code"), statuses));
    }
    seen
}

/// By default: counts 1 and 2; then 3, the shadow one's 4th would be refused (OK all the
/// same); then the enforced one refuses and the shadow one is only reported. With counted
/// refusals (`refusals = "charged"`) both are charged on every call, 1 and 2, 3 and 4, 5 and
/// 6, and answered the same.
async fn enforced_first(on: On) {
    for envoy in ["", "refusals = \"charged\""] {
        let seen = in_one_hour(|| run_once(on, envoy, 3)).await;
        assert_eq!(
            seen,
            [
                (OK, vec![(OK, 1), (OK, 2)]),
                (OK, vec![(OK, 0), (OK, 0)]),
                (OVER, vec![(OK, 0), (OVER, 0)]),
            ],
            "{on:?} {envoy}"
        );
    }
}

#[tokio::test]
async fn a_shadow_rule_on_an_enforced_counter_on_memory() {
    enforced_first(On::Memory).await;
}

#[tokio::test]
async fn a_shadow_rule_on_an_enforced_counter_on_redis() {
    enforced_first(On::Redis).await;
}
