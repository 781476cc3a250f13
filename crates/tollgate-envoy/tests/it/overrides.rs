//! Per-request limit overrides on the in-process service, with the fake clock: the override's
//! window is one of its unit, its cost is the descriptor's, descriptors with the same override
//! and entries are one counter, and its failure policy is `[envoy] on_store_error`.

use std::time::Duration;

use tollgate::{Algorithm, Limit, Quota};
use tollgate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use tollgate_envoy::envoy_types::pb::google::protobuf::UInt64Value;

use crate::support::{Rls, request};

const RULES: &str = r#"
[envoy]
on_store_error = "deny"

[[envoy.rules]]
domain = "edge"
limit = "per_user"
descriptor = [{ key = "user", part = "user" }]
"#;

fn limits() -> Vec<Limit> {
    let per_user = Limit::new(
        "per_user",
        Algorithm::Gcra,
        Quota::per_minute(100).expect("quota"),
    )
    .and_then(|l| l.keyed_by(["user"]))
    .expect("limit");
    vec![per_user]
}

/// `descriptors` of `request`, each with the override `per_unit` per `unit`.
fn overridden(mut r: RateLimitRequest, per_unit: u32, unit: Unit) -> RateLimitRequest {
    for d in &mut r.descriptors {
        d.limit = Some(RateLimitOverride {
            requests_per_unit: per_unit,
            unit: unit as i32,
        });
    }
    r
}

fn remaining(
    r: &tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse,
) -> Vec<(i32, u32)> {
    r.statuses
        .iter()
        .map(|s| (s.code, s.limit_remaining))
        .collect()
}

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

/// A fixed window of one unit (the default algorithm of imported limits): refused after 2,
/// admitted again once the clock passes the minute.
#[tokio::test]
async fn an_override_counts_in_windows_of_its_unit() {
    let mut rls = Rls::start(limits(), RULES).await;
    let one = || overridden(request("edge", &[&[("user", "a")]], 0), 2, Unit::Minute);
    assert_eq!(remaining(&rls.call(one()).await), [(OK, 1)]);
    assert_eq!(remaining(&rls.call(one()).await), [(OK, 0)]);
    assert_eq!(remaining(&rls.call(one()).await), [(OVER, 0)]);
    rls.clock.advance(Duration::from_secs(60));
    assert_eq!(remaining(&rls.call(one()).await), [(OK, 1)]);
    rls.stop().await;
}

/// The descriptor's `hits_addend` is the cost; two descriptors with the same override and
/// entries are one counter of their summed cost (refused whole when it does not fit).
#[tokio::test]
async fn costs_and_same_key_descriptors() {
    let mut rls = Rls::start(limits(), RULES).await;
    let mut r = overridden(request("edge", &[&[("user", "b")]], 0), 5, Unit::Hour);
    r.descriptors[0].hits_addend = Some(UInt64Value { value: 2 });
    assert_eq!(remaining(&rls.call(r).await), [(OK, 3)]);
    let twice = || {
        overridden(
            request("edge", &[&[("user", "b")], &[("user", "b")]], 0),
            5,
            Unit::Hour,
        )
    };
    assert_eq!(remaining(&rls.call(twice()).await), [(OK, 1), (OK, 1)]);
    let r = rls.call(twice()).await;
    assert_eq!(r.overall_code, OVER, "{r:?}");
    // Nothing was charged by the refusal.
    let one = overridden(request("edge", &[&[("user", "b")]], 0), 5, Unit::Hour);
    assert_eq!(remaining(&rls.call(one).await), [(OK, 0)]);
    rls.stop().await;
}

/// Store down: the override follows `[envoy] on_store_error` (`deny` → UNAVAILABLE).
#[tokio::test]
async fn an_override_fails_by_the_imported_policy() {
    let mut rls = Rls::start(limits(), RULES).await;
    rls.store.set_down(true);
    let r = overridden(request("edge", &[&[("user", "c")]], 0), 5, Unit::Hour);
    let status = rls
        .client
        .should_rate_limit(r)
        .await
        .expect_err("deny policy refuses");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    rls.store.set_down(false);
    rls.stop().await;
}
