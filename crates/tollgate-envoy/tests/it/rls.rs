//! The service's answers, through a real tonic client.

use std::time::Duration;

use tollgate::{Algorithm, Limit, OnStoreError, Quota};
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus,
};
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use tollgate_envoy::envoy_types::pb::google::protobuf::UInt64Value;
use tollgate_envoy::tonic;

use crate::support::{Rls, counter, metrics, request};

fn fixed(name: &str, limit: u64, period: Duration, key: &[&str]) -> Limit {
    Limit::new(
        name,
        Algorithm::FixedWindow,
        Quota::new(limit, period).expect("quota"),
    )
    .expect("limit")
    .keyed_by(key.iter().copied())
    .expect("key")
}

fn per_minute(name: &str, limit: u64, key: &[&str]) -> Limit {
    fixed(name, limit, Duration::from_secs(60), key)
}

const PER_IP: &str = r#"
[[envoy.rules]]
domain = "edge"
limit = "per_ip"
descriptor = [{ key = "remote_address", part = "ip" }]
"#;

fn code(r: &RateLimitResponse) -> Code {
    Code::try_from(r.overall_code).expect("known code")
}

fn status_code(s: &DescriptorStatus) -> Code {
    Code::try_from(s.code).expect("known code")
}

fn remaining(r: &RateLimitResponse, i: usize) -> u32 {
    r.statuses[i].limit_remaining
}

/// Allowed until the quota is used, then OVER_LIMIT; the status names the limit, its unit,
/// what remains and when it resets; the window's end restores the quota.
#[tokio::test]
async fn codes_and_descriptor_status() {
    let mut rls = Rls::start(vec![per_minute("per_ip", 2, &["ip"])], PER_IP).await;
    let ip: &[(&str, &str)] = &[("remote_address", "10.0.0.1")];
    let first = rls.call(request("edge", &[ip], 0)).await;
    assert_eq!(code(&first), Code::Ok, "{first:?}");
    let s = &first.statuses[0];
    assert_eq!(status_code(s), Code::Ok);
    let limit = s.current_limit.as_ref().expect("current_limit");
    assert_eq!(limit.name, "per_ip");
    assert_eq!(limit.requests_per_unit, 2);
    assert_eq!(Unit::try_from(limit.unit), Ok(Unit::Minute));
    assert_eq!(s.limit_remaining, 1);
    let reset = s.duration_until_reset.expect("duration_until_reset");
    assert_eq!((reset.seconds, reset.nanos), (60, 0));

    let second = rls.call(request("edge", &[ip], 0)).await;
    assert_eq!((code(&second), remaining(&second, 0)), (Code::Ok, 0));
    let third = rls.call(request("edge", &[ip], 0)).await;
    assert_eq!(code(&third), Code::OverLimit, "{third:?}");
    assert_eq!(status_code(&third.statuses[0]), Code::OverLimit);
    assert_eq!(
        third.statuses[0].duration_until_reset.map(|d| d.seconds),
        Some(60)
    );

    // Another IP is another key.
    let other = rls
        .call(request("edge", &[&[("remote_address", "10.0.0.2")]], 0))
        .await;
    assert_eq!((code(&other), remaining(&other, 0)), (Code::Ok, 1));

    rls.clock.advance(Duration::from_secs(60));
    let next_window = rls.call(request("edge", &[ip], 0)).await;
    assert_eq!(
        (code(&next_window), remaining(&next_window, 0)),
        (Code::Ok, 1)
    );
    rls.stop().await;
}

/// Several descriptors each get their own status, in order; one that matches no rule is OK
/// with no limit; a request matching nothing is OK.
#[tokio::test]
async fn one_status_per_descriptor_and_unmatched_are_ok() {
    let rules = r#"
[[envoy.rules]]
domain = "edge"
limit = "per_ip"
descriptor = [{ key = "remote_address", part = "ip" }]

[[envoy.rules]]
domain = "edge"
limit = "login"
descriptor = [{ key = "generic_key", value = "login" }, { key = "remote_address", part = "ip" }]
"#;
    let mut rls = Rls::start(
        vec![
            per_minute("per_ip", 10, &["ip"]),
            per_minute("login", 3, &["ip"]),
        ],
        rules,
    )
    .await;
    let r = rls
        .call(request(
            "edge",
            &[
                &[("remote_address", "1.2.3.4")],
                &[("path", "/x")],
                &[("generic_key", "login"), ("remote_address", "1.2.3.4")],
                &[("generic_key", "signup"), ("remote_address", "1.2.3.4")],
            ],
            0,
        ))
        .await;
    assert_eq!(code(&r), Code::Ok, "{r:?}");
    assert_eq!(r.statuses.len(), 4);
    let names: Vec<Option<&str>> = r
        .statuses
        .iter()
        .map(|s| s.current_limit.as_ref().map(|l| l.name.as_str()))
        .collect();
    assert_eq!(names, [Some("per_ip"), None, Some("login"), None]);
    assert_eq!((remaining(&r, 0), remaining(&r, 2)), (9, 2));
    assert!(r.statuses.iter().all(|s| status_code(s) == Code::Ok));

    // Nothing matches (other domain, other keys): OK, nothing charged.
    let none = rls
        .call(request("other", &[&[("remote_address", "1.2.3.4")]], 0))
        .await;
    assert_eq!(code(&none), Code::Ok);
    assert_eq!(
        none.statuses[0],
        DescriptorStatus {
            code: Code::Ok as i32,
            ..Default::default()
        }
    );
    let again = rls
        .call(request("edge", &[&[("remote_address", "1.2.3.4")]], 0))
        .await;
    assert_eq!(
        remaining(&again, 0),
        8,
        "only the matched calls were charged"
    );
    rls.stop().await;
}

/// `hits_addend` is the cost (0 means 1); a descriptor's own `hits_addend` overrides it; a
/// cost the limit can never admit is OVER_LIMIT and charges nothing.
#[tokio::test]
async fn hits_addend_is_the_cost() {
    let mut rls = Rls::start(vec![per_minute("per_ip", 5, &["ip"])], PER_IP).await;
    let ip: &[(&str, &str)] = &[("remote_address", "10.0.0.1")];
    let r = rls.call(request("edge", &[ip], 3)).await;
    assert_eq!((code(&r), remaining(&r, 0)), (Code::Ok, 2));
    let r = rls.call(request("edge", &[ip], 3)).await;
    assert_eq!(
        (code(&r), remaining(&r, 0)),
        (Code::OverLimit, 2),
        "denied charges nothing"
    );
    let r = rls.call(request("edge", &[ip], 0)).await;
    assert_eq!((code(&r), remaining(&r, 0)), (Code::Ok, 1), "0 means 1");

    let mut per_descriptor = request("edge", &[ip], 1);
    per_descriptor.descriptors[0].hits_addend = Some(UInt64Value { value: 2 });
    let r = rls.call(per_descriptor).await;
    assert_eq!(
        (code(&r), remaining(&r, 0)),
        (Code::OverLimit, 1),
        "descriptor cost 2 > 1 left"
    );

    let r = rls
        .call(request("edge", &[&[("remote_address", "10.9.9.9")]], 6))
        .await;
    assert_eq!(code(&r), Code::OverLimit, "6 > capacity 5: {r:?}");
    assert_eq!(remaining(&r, 0), 5, "nothing charged");
    rls.stop().await;
}

/// A request's descriptors are checked all or nothing: when one is over, the others are not
/// charged — also when they need different values for the same key part.
#[tokio::test]
async fn descriptors_are_all_or_nothing() {
    let rules = r#"
[[envoy.rules]]
domain = "api"
limit = "tight"
descriptor = [{ key = "user", part = "user" }]

[[envoy.rules]]
domain = "api"
limit = "loose"
descriptor = [{ key = "tenant", part = "tenant" }]

[[envoy.rules]]
domain = "api"
limit = "loose_user"
descriptor = [{ key = "other_user", part = "user" }]
"#;
    let mut rls = Rls::start(
        vec![
            per_minute("tight", 1, &["user"]),
            per_minute("loose", 5, &["tenant"]),
            per_minute("loose_user", 5, &["user"]),
        ],
        rules,
    )
    .await;
    let both: &[&[(&str, &str)]] = &[&[("tenant", "acme")], &[("user", "u1")]];
    let r = rls.call(request("api", both, 0)).await;
    assert_eq!(
        (code(&r), remaining(&r, 0), remaining(&r, 1)),
        (Code::Ok, 4, 0)
    );
    let r = rls.call(request("api", both, 0)).await;
    assert_eq!(code(&r), Code::OverLimit);
    assert_eq!(
        status_code(&r.statuses[0]),
        Code::Ok,
        "the tenant limit admits"
    );
    assert_eq!(status_code(&r.statuses[1]), Code::OverLimit);
    assert_eq!(
        remaining(&r, 0),
        4,
        "tenant not charged by a refused request"
    );

    // Same key part `user`, different values: two check batches, still all or nothing.
    let split: &[&[(&str, &str)]] = &[&[("other_user", "u2")], &[("user", "u1")]];
    let r = rls.call(request("api", split, 0)).await;
    assert_eq!(code(&r), Code::OverLimit);
    assert_eq!(remaining(&r, 0), 5, "loose_user for u2 not charged");
    let r = rls
        .call(request("api", &[&[("other_user", "u2")]], 0))
        .await;
    assert_eq!((code(&r), remaining(&r, 0)), (Code::Ok, 4));
    let split_ok: &[&[(&str, &str)]] = &[&[("other_user", "u4")], &[("user", "u5")]];
    let r = rls.call(request("api", split_ok, 0)).await;
    assert_eq!(
        (code(&r), remaining(&r, 0), remaining(&r, 1)),
        (Code::Ok, 4, 0)
    );
    rls.stop().await;
}

/// Two descriptors on one limit: different keys are checked all or nothing; the same key
/// twice counts twice (and is refused as a whole when the sum does not fit).
#[tokio::test]
async fn one_limit_several_descriptors() {
    let mut rls = Rls::start(vec![per_minute("per_ip", 1, &["ip"])], PER_IP).await;
    let ip = |v: &'static str| [("remote_address", v)];
    let r = rls.call(request("edge", &[&ip("a"), &ip("b")], 0)).await;
    assert_eq!(
        (code(&r), remaining(&r, 0), remaining(&r, 1)),
        (Code::Ok, 0, 0)
    );
    let r = rls.call(request("edge", &[&ip("c"), &ip("a")], 0)).await;
    assert_eq!(code(&r), Code::OverLimit);
    assert_eq!(status_code(&r.statuses[0]), Code::Ok);
    assert_eq!(status_code(&r.statuses[1]), Code::OverLimit);
    let r = rls.call(request("edge", &[&ip("c")], 0)).await;
    assert_eq!(
        code(&r),
        Code::Ok,
        "c was not charged by the refused request"
    );

    let r = rls.call(request("edge", &[&ip("d"), &ip("d")], 0)).await;
    assert_eq!(
        code(&r),
        Code::OverLimit,
        "the same key twice is 2 units > 1: {r:?}"
    );
    // As the reference answers: the first d is the 1st unit (OK), the second the 2nd (over).
    assert_eq!(status_code(&r.statuses[0]), Code::Ok, "{r:?}");
    assert_eq!(status_code(&r.statuses[1]), Code::OverLimit, "{r:?}");
    let r = rls.call(request("edge", &[&ip("d")], 0)).await;
    assert_eq!(code(&r), Code::Ok, "d was not charged");
    rls.stop().await;
}

const POLICIES: &str = r#"
[[envoy.rules]]
domain = "d"
limit = "deny"
descriptor = [{ key = "k", value = "deny" }]

[[envoy.rules]]
domain = "d"
limit = "allow"
descriptor = [{ key = "k", value = "allow" }]

[[envoy.rules]]
domain = "d"
limit = "local"
descriptor = [{ key = "k", value = "local" }]
"#;

fn policy_limits() -> Vec<Limit> {
    let with = |name: &str, policy| per_minute(name, 1, &[]).on_store_error(policy);
    vec![
        with("deny", OnStoreError::Deny),
        with("allow", OnStoreError::Allow),
        with("local", OnStoreError::Local),
    ]
}

/// Store down: `deny` answers gRPC UNAVAILABLE (so that Envoy's failure_mode_deny applies),
/// `allow` answers OK, `local` counts on this instance; a request mixing deny and allow is
/// UNAVAILABLE.
#[tokio::test]
async fn store_down_follows_each_policy() {
    let mut rls = Rls::start(policy_limits(), POLICIES).await;
    rls.store.set_down(true);

    let err = rls
        .client
        .should_rate_limit(request("d", &[&[("k", "deny")]], 0))
        .await
        .expect_err("deny policy refuses");
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");

    for _ in 0..3 {
        let r = rls.call(request("d", &[&[("k", "allow")]], 0)).await;
        assert_eq!(code(&r), Code::Ok, "{r:?}");
    }

    let r = rls.call(request("d", &[&[("k", "local")]], 0)).await;
    assert_eq!((code(&r), remaining(&r, 0)), (Code::Ok, 0));
    let r = rls.call(request("d", &[&[("k", "local")]], 0)).await;
    assert_eq!(code(&r), Code::OverLimit, "local quota of 1 used: {r:?}");

    let err = rls
        .client
        .should_rate_limit(request("d", &[&[("k", "allow")], &[("k", "deny")]], 0))
        .await
        .expect_err("one deny policy refuses the request");
    assert_eq!(err.code(), tonic::Code::Unavailable);

    rls.store.set_down(false);
    let r = rls.call(request("d", &[&[("k", "deny")]], 0)).await;
    assert_eq!(
        (code(&r), remaining(&r, 0)),
        (Code::Ok, 0),
        "store back: decides again"
    );
    rls.stop().await;
}

/// A call whose decision panics (a bug: here the store's) is answered `INTERNAL` with a
/// message saying so, not a reset stream; the connection and the service go on.
#[tokio::test]
async fn a_panicking_call_is_answered_internal_and_the_service_goes_on() {
    let mut rls = Rls::start(vec![per_minute("per_ip", 10, &["ip"])], PER_IP).await;
    rls.store.set_panicking(true);
    for _ in 0..2 {
        let err = rls
            .client
            .should_rate_limit(request("edge", &[&[("remote_address", "10.0.0.1")]], 0))
            .await
            .expect_err("a panicking call fails");
        assert_eq!(err.code(), tonic::Code::Internal, "{err:?}");
        assert_eq!(err.message(), "the call panicked (a bug)", "{err:?}");
    }
    rls.store.set_panicking(false);
    let r = rls
        .call(request("edge", &[&[("remote_address", "10.0.0.1")]], 0))
        .await;
    assert_eq!((code(&r), remaining(&r, 0)), (Code::Ok, 9), "{r:?}");
    rls.stop().await;
}

/// A shadow rule always reports OK, keeps counting, and counts would-be denials; it is not
/// charged when an enforced descriptor refuses the request.
#[tokio::test]
async fn shadow_rules_report_ok_and_count_denials() {
    metrics();
    let rules = r#"
[[envoy.rules]]
domain = "s"
limit = "shadow_trial"
shadow = true
descriptor = [{ key = "user", part = "user" }]

[[envoy.rules]]
domain = "s"
limit = "enforced_gate"
descriptor = [{ key = "gate", part = "gate" }]
"#;
    let mut rls = Rls::start(
        vec![
            per_minute("shadow_trial", 1, &["user"]),
            per_minute("enforced_gate", 1, &["gate"]),
        ],
        rules,
    )
    .await;
    let user: &[(&str, &str)] = &[("user", "u1")];
    for _ in 0..3 {
        let r = rls.call(request("s", &[user], 0)).await;
        assert_eq!(code(&r), Code::Ok, "{r:?}");
        assert_eq!(status_code(&r.statuses[0]), Code::Ok);
        assert_eq!(remaining(&r, 0), 0);
    }
    assert_eq!(counter("tollgate_shadow_denied_total", "shadow_trial"), 2);

    // An enforced refusal: the shadow limit (for another user) is not charged.
    let gate: &[(&str, &str)] = &[("gate", "g")];
    let r = rls.call(request("s", &[gate], 0)).await;
    assert_eq!(code(&r), Code::Ok);
    let r = rls.call(request("s", &[gate, &[("user", "u2")]], 0)).await;
    assert_eq!(code(&r), Code::OverLimit);
    assert_eq!(
        remaining(&r, 1),
        1,
        "shadow not charged for a refused request"
    );
    assert_eq!(
        counter("tollgate_shadow_denied_total", "shadow_trial"),
        2,
        "no new would-be denial (counters are totals: support::counters)"
    );
    rls.stop().await;
}

const SHARED: &str = r#"
[[envoy.rules]]
domain = "s"
limit = "shared_user"
descriptor = [{ key = "user", part = "user" }]

[[envoy.rules]]
domain = "s"
limit = "shared_user"
shadow = true
descriptor = [{ key = "trial_user", part = "user" }]

[[envoy.rules]]
domain = "s"
limit = "shared_gate"
descriptor = [{ key = "gate", part = "gate" }]
"#;

/// A shadow rule and an enforced rule on one limit name one counter for the same key. In
/// one request, the shadow descriptor is decided after the enforced one, on the count it
/// left (as a later request would be): charged when it fits and the request passes, its
/// would-be refusal counted, never refusing. (It was `INVALID_ARGUMENT`: the same limit and
/// key twice.)
#[tokio::test]
async fn a_shadow_rule_sharing_an_enforced_counter_is_decided_after_it() {
    metrics();
    let mut rls = Rls::start(
        vec![
            per_minute("shared_user", 3, &["user"]),
            per_minute("shared_gate", 1, &["gate"]),
        ],
        SHARED,
    )
    .await;
    let both: [&[(&str, &str)]; 2] = [&[("user", "u1")], &[("trial_user", "u1")]];
    let r = rls.call(request("s", &both, 0)).await;
    assert_eq!(code(&r), Code::Ok, "{r:?}");
    assert_eq!(
        (status_code(&r.statuses[0]), remaining(&r, 0)),
        (Code::Ok, 2),
        "{r:?}"
    );
    assert_eq!(
        (status_code(&r.statuses[1]), remaining(&r, 1)),
        (Code::Ok, 1),
        "the shadow descriptor counts after the enforced one: {r:?}"
    );
    let denied = counter("tollgate_shadow_denied_total", "shared_user");

    // The enforced descriptor takes the last unit; the shadow one would be refused.
    let r = rls.call(request("s", &both, 0)).await;
    assert_eq!(
        code(&r),
        Code::Ok,
        "a shadow refusal refuses nothing: {r:?}"
    );
    assert_eq!(
        (status_code(&r.statuses[0]), remaining(&r, 0)),
        (Code::Ok, 0)
    );
    assert_eq!(
        (status_code(&r.statuses[1]), remaining(&r, 1)),
        (Code::Ok, 0)
    );
    assert_eq!(
        counter("tollgate_shadow_denied_total", "shared_user"),
        denied + 1
    );

    // Nothing left: the enforced descriptor refuses; the shadow one is reported, not counted.
    let r = rls.call(request("s", &both, 0)).await;
    assert_eq!(code(&r), Code::OverLimit, "{r:?}");
    assert_eq!(status_code(&r.statuses[0]), Code::OverLimit, "{r:?}");
    assert_eq!(status_code(&r.statuses[1]), Code::Ok, "{r:?}");
    assert_eq!(
        counter("tollgate_shadow_denied_total", "shared_user"),
        denied + 1
    );

    // Refused by another limit: the shared counter is charged by neither descriptor.
    let gate: &[(&str, &str)] = &[("gate", "g")];
    let r = rls.call(request("s", &[gate], 0)).await;
    assert_eq!(code(&r), Code::Ok);
    let three: [&[(&str, &str)]; 3] = [gate, &[("trial_user", "u2")], &[("user", "u2")]];
    let r = rls.call(request("s", &three, 0)).await;
    assert_eq!(code(&r), Code::OverLimit, "{r:?}");
    assert_eq!((remaining(&r, 1), remaining(&r, 2)), (3, 3), "{r:?}");
    let r = rls.call(request("s", &[&[("user", "u2")]], 0)).await;
    assert_eq!((code(&r), remaining(&r, 0)), (Code::Ok, 2), "u2 untouched");
    rls.stop().await;
}

/// A check-only descriptor (`hits_addend` 0) and a charging one on the same key, in a
/// request another descriptor refuses: every descriptor is reported, nothing is charged.
/// (The report put both in one peek: `INVALID_ARGUMENT`.)
#[tokio::test]
async fn a_refused_request_reports_a_check_only_and_a_charging_descriptor_of_one_key() {
    let mut rls = Rls::start(
        vec![
            per_minute("shared_user", 3, &["user"]),
            per_minute("shared_gate", 1, &["gate"]),
        ],
        SHARED,
    )
    .await;
    let user: &[(&str, &str)] = &[("user", "u1")];
    let gate: &[(&str, &str)] = &[("gate", "g")];
    let mut call = request("s", &[user, user, gate], 1);
    call.descriptors[0].hits_addend = Some(UInt64Value { value: 0 });
    call.descriptors[2].hits_addend = Some(UInt64Value { value: 2 });
    let r = rls.call(call).await;
    assert_eq!(
        code(&r),
        Code::OverLimit,
        "2 > the gate's capacity 1: {r:?}"
    );
    assert_eq!(
        (status_code(&r.statuses[0]), remaining(&r, 0)),
        (Code::Ok, 3),
        "{r:?}"
    );
    assert_eq!(
        (status_code(&r.statuses[1]), remaining(&r, 1)),
        (Code::Ok, 3),
        "{r:?}"
    );
    assert_eq!(status_code(&r.statuses[2]), Code::OverLimit, "{r:?}");
    let r = rls.call(request("s", &[user], 0)).await;
    assert_eq!(
        (code(&r), remaining(&r, 0)),
        (Code::Ok, 2),
        "nothing charged"
    );
    // Check only, an enforced and a shadow descriptor of one key: both peeked.
    let mut call = request("s", &[&[("trial_user", "u1")], user], 1);
    for d in &mut call.descriptors {
        d.hits_addend = Some(UInt64Value { value: 0 });
    }
    let r = rls.call(call).await;
    assert_eq!(code(&r), Code::Ok, "{r:?}");
    assert_eq!((remaining(&r, 0), remaining(&r, 1)), (2, 2), "{r:?}");
    rls.stop().await;
}

/// With refusals charged (the reference's counting), the shadow descriptor on the enforced
/// one's counter is charged after it whatever either answers, and a count past the limit is
/// its would-be refusal; the enforced descriptor refuses as its own count says.
#[tokio::test]
async fn a_shadow_rule_sharing_an_enforced_counter_with_refusals_charged() {
    metrics();
    let rules = format!("[envoy]\nrefusals = \"charged\"\n{SHARED}");
    let mut rls = Rls::start(
        vec![
            per_minute("shared_charged", 4, &["user"]),
            per_minute("shared_gate", 1, &["gate"]),
        ],
        &rules.replace("shared_user", "shared_charged"),
    )
    .await;
    let both: [&[(&str, &str)]; 2] = [&[("trial_user", "u1")], &[("user", "u1")]];
    let denied = counter("tollgate_shadow_denied_total", "shared_charged");
    let r = rls.call(request("s", &both, 0)).await;
    assert_eq!(code(&r), Code::Ok, "{r:?}");
    assert_eq!((remaining(&r, 1), remaining(&r, 0)), (3, 2), "{r:?}");
    let r = rls.call(request("s", &both, 0)).await;
    assert_eq!(code(&r), Code::Ok, "{r:?}");
    assert_eq!((remaining(&r, 1), remaining(&r, 0)), (1, 0), "{r:?}");
    // Counts 5 and 6 of 4: the enforced descriptor is over, the shadow one would be.
    let r = rls.call(request("s", &both, 0)).await;
    assert_eq!(code(&r), Code::OverLimit, "{r:?}");
    assert_eq!(status_code(&r.statuses[1]), Code::OverLimit, "{r:?}");
    assert_eq!(status_code(&r.statuses[0]), Code::Ok, "{r:?}");
    assert_eq!(
        counter("tollgate_shadow_denied_total", "shared_charged"),
        denied + 1
    );
    rls.stop().await;
}

/// A new snapshot (rules and limits) takes effect on the next call, without a restart.
#[tokio::test]
async fn swapped_snapshot_takes_effect() {
    let mut rls = Rls::start(vec![per_minute("per_ip", 1, &["ip"])], PER_IP).await;
    let ip: &[(&str, &str)] = &[("remote_address", "10.0.0.1")];
    assert_eq!(code(&rls.call(request("edge", &[ip], 0)).await), Code::Ok);
    assert_eq!(
        code(&rls.call(request("edge", &[ip], 0)).await),
        Code::OverLimit
    );

    let generous = r#"
[[envoy.rules]]
domain = "edge"
limit = "generous"
descriptor = [{ key = "remote_address", part = "ip" }]
"#;
    rls.swap(vec![per_minute("generous", 100, &["ip"])], generous);
    let r = rls.call(request("edge", &[ip], 0)).await;
    assert_eq!(code(&r), Code::Ok, "{r:?}");
    let limit = r.statuses[0].current_limit.as_ref().expect("limit");
    assert_eq!(
        (limit.name.as_str(), r.statuses[0].limit_remaining),
        ("generous", 99)
    );

    rls.swap(vec![per_minute("per_ip", 1, &["ip"])], "[envoy]\n");
    let r = rls.call(request("edge", &[ip], 0)).await;
    assert_eq!(code(&r), Code::Ok, "no rules: nothing matches");
    assert_eq!(r.statuses[0].current_limit, None);
    rls.stop().await;
}

/// With `response_headers`, Envoy is asked to add the draft RateLimit headers, and
/// Retry-After when over limit; without it, nothing.
#[tokio::test]
async fn response_headers_follow_the_draft() {
    let rules = format!("[envoy]\nresponse_headers = true\n{PER_IP}");
    let mut rls = Rls::start(vec![per_minute("per_ip", 2, &["ip"])], &rules).await;
    let ip: &[(&str, &str)] = &[("remote_address", "10.0.0.1")];
    let header = |r: &RateLimitResponse, name: &str| {
        r.response_headers_to_add
            .iter()
            .find(|h| h.key == name)
            .map(|h| h.value.clone())
    };
    let r = rls.call(request("edge", &[ip], 0)).await;
    assert_eq!(
        header(&r, "ratelimit-policy").as_deref(),
        Some("\"per_ip\";q=2;w=60")
    );
    assert_eq!(
        header(&r, "ratelimit").as_deref(),
        Some("\"per_ip\";r=1;t=60")
    );
    assert_eq!(header(&r, "retry-after"), None);
    rls.call(request("edge", &[ip], 0)).await;
    rls.clock.advance(Duration::from_millis(30_500));
    let r = rls.call(request("edge", &[ip], 0)).await;
    assert_eq!(code(&r), Code::OverLimit);
    assert_eq!(
        header(&r, "ratelimit").as_deref(),
        Some("\"per_ip\";r=0;t=30")
    );
    assert_eq!(header(&r, "retry-after").as_deref(), Some("30"));

    rls.swap(vec![per_minute("per_ip", 2, &["ip"])], PER_IP);
    let r = rls.call(request("edge", &[ip], 0)).await;
    assert!(r.response_headers_to_add.is_empty(), "{r:?}");
    rls.stop().await;
}

/// Requests Envoy never sends are refused as INVALID_ARGUMENT, not guessed at.
#[tokio::test]
async fn malformed_requests_are_invalid_argument() {
    let mut rls = Rls::start(vec![per_minute("per_ip", 2, &["ip"])], PER_IP).await;
    for req in [request("", &[&[("a", "b")]], 0), request("edge", &[], 0)] {
        let err = rls
            .client
            .should_rate_limit(req)
            .await
            .expect_err("refused");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    }
    rls.stop().await;
}

/// A descriptor value longer than any face accepts (`MAX_KEY_VALUE`, as the HTTP API) is
/// refused as INVALID_ARGUMENT and makes no counter; one at the bound is counted.
#[tokio::test]
async fn oversized_descriptor_values_are_refused() {
    let mut rls = Rls::start(vec![per_minute("per_ip", 2, &["ip"])], PER_IP).await;
    // Far past the bound, within the message limit (a message over 1 MiB is refused before
    // it is decoded: `a_grpc_message_over_a_mebibyte_is_refused_undecoded` in the server).
    let huge = "1".repeat(64 << 10);
    let err = rls
        .client
        .should_rate_limit(request("edge", &[&[("remote_address", huge.as_str())]], 0))
        .await
        .expect_err("refused");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("longer than 1024 bytes"), "{err:?}");
    assert!(
        err.message()
            .starts_with("descriptors[0] (key part \"ip\"): 65536 bytes"),
        "the descriptor and its rule's key part named: {err:?}"
    );
    assert_eq!(
        rls.store.memory().len(),
        0,
        "a refused descriptor made a counter"
    );
    let at_bound = "1".repeat(tollgate::MAX_KEY_VALUE);
    let r = rls
        .call(request(
            "edge",
            &[&[("remote_address", at_bound.as_str())]],
            0,
        ))
        .await;
    assert_eq!(code(&r), Code::Ok, "{r:?}");
    assert_eq!(rls.store.memory().len(), 1);
    rls.stop().await;
}

/// The standard gRPC health service reports the rate limit service as SERVING, under its
/// own name and under `ratelimit` (the reference's, which Envoy deployments probe).
#[tokio::test]
async fn health_service_reports_serving() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;

    let rls = Rls::start(vec![per_minute("per_ip", 2, &["ip"])], PER_IP).await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", rls.addr))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let mut health = HealthClient::new(channel);
    for service in [
        "",
        "envoy.service.ratelimit.v3.RateLimitService",
        "ratelimit",
    ] {
        let status = health
            .check(HealthCheckRequest {
                service: service.to_owned(),
            })
            .await
            .expect("health answers")
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "service {service:?}");
    }
    rls.stop().await;
}
