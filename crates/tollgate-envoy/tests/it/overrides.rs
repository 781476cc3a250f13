//! Per-request limit overrides on the in-process service, with the fake clock: the override's
//! window is one of its unit, its cost is the descriptor's, descriptors with the same override
//! and entries are one counter, its failure policy is `[envoy] on_store_error`, and its
//! counter is the descriptor's whatever the rate (`[envoy] override_counters = "shared"`, the
//! reference's) or one per rate (`per_rate`), never answered by a refusal remembered for
//! another rate.

use std::time::Duration;

use tollgate::{Algorithm, Limit, Quota};
use tollgate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use tollgate_envoy::envoy_types::pb::google::protobuf::UInt64Value;

use crate::support::{Rls, request};

/// A YAML file of the reference's format: `user` keys 10 a minute in domain `share`.
const SHARE_YAML: &str = "domain: share\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n      requests_per_unit: 10\n";

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
/// entries are one counter of their summed cost (refused whole when it does not fit), each
/// answered as the reference counts them, one after the other.
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
    // Each answered as counted in turn, as the reference counts (2 + 1, then + 1 of 5).
    assert_eq!(remaining(&rls.call(twice()).await), [(OK, 2), (OK, 1)]);
    // 4 counted: the first would be the 5th (OK), the second the 6th (over); nothing is
    // charged, so each shows the 1 left.
    let r = rls.call(twice()).await;
    assert_eq!(r.overall_code, OVER, "{r:?}");
    assert_eq!(remaining(&r), [(OK, 1), (OVER, 1)]);
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

/// One descriptor `user=<user>` of domain `share`, with the override `per_unit` per `unit`
/// when given.
fn share(user: &str, rate: Option<(u32, Unit)>) -> RateLimitRequest {
    let r = request("share", &[&[("user", user)]], 0);
    match rate {
        Some((per_unit, unit)) => overridden(r, per_unit, unit),
        None => r,
    }
}

/// By default (`override_counters = "shared"`, the reference's cache key: domain, entries,
/// window) an override counts on the counter of the YAML limit of its unit that the
/// descriptor matches, at its own rate, and two rates share it too; an override of another
/// unit has a counter of its own (of that unit), shared by its rates.
#[tokio::test]
async fn shared_overrides_count_on_the_descriptors_counter() {
    let mut rls = Rls::start_imported(&[("share.yaml", SHARE_YAML)], "[envoy]\n").await;
    for left in [9, 8, 7] {
        assert_eq!(remaining(&rls.call(share("a", None)).await), [(OK, left)]);
    }
    // The YAML counter is at 3: 5 a minute leaves 1, then none.
    let five = || share("a", Some((5, Unit::Minute)));
    assert_eq!(remaining(&rls.call(five()).await), [(OK, 1)]);
    assert_eq!(remaining(&rls.call(five()).await), [(OK, 0)]);
    assert_eq!(remaining(&rls.call(five()).await), [(OVER, 0)]);
    // Another rate, the same counter (5); and the YAML limit sees the overrides' hits.
    let twenty = || share("a", Some((20, Unit::Minute)));
    assert_eq!(remaining(&rls.call(twenty()).await), [(OK, 14)]);
    assert_eq!(remaining(&rls.call(share("a", None)).await), [(OK, 3)]);
    // Another unit: its own counter, shared by its rates.
    let hourly = |n| share("a", Some((n, Unit::Hour)));
    assert_eq!(remaining(&rls.call(hourly(3)).await), [(OK, 2)]);
    assert_eq!(remaining(&rls.call(hourly(4)).await), [(OK, 2)]);
    // Another user: untouched.
    assert_eq!(remaining(&rls.call(share("b", None)).await), [(OK, 9)]);
    // A domain of rules only (no YAML limit): two rates of one descriptor share a counter.
    rls.stop().await;
    let mut rls = Rls::start(limits(), RULES).await;
    let one = |n| overridden(request("edge", &[&[("user", "c")]], 0), n, Unit::Minute);
    assert_eq!(remaining(&rls.call(one(3)).await), [(OK, 2)]);
    assert_eq!(remaining(&rls.call(one(10)).await), [(OK, 8)]);
    assert_eq!(remaining(&rls.call(one(2)).await), [(OVER, 0)]);
    rls.stop().await;
}

/// `override_counters = "per_rate"` keeps tollgate's former keying: a counter per rate,
/// shared with neither the YAML limit nor another rate.
#[tokio::test]
async fn per_rate_overrides_count_apart() {
    let mut rls = Rls::start_imported(
        &[("share.yaml", SHARE_YAML)],
        "[envoy]\noverride_counters = \"per_rate\"\n",
    )
    .await;
    for left in [9, 8, 7] {
        assert_eq!(remaining(&rls.call(share("a", None)).await), [(OK, left)]);
    }
    let five = || share("a", Some((5, Unit::Minute)));
    assert_eq!(remaining(&rls.call(five()).await), [(OK, 4)]);
    assert_eq!(remaining(&rls.call(five()).await), [(OK, 3)]);
    let twenty = || share("a", Some((20, Unit::Minute)));
    assert_eq!(remaining(&rls.call(twenty()).await), [(OK, 19)]);
    assert_eq!(remaining(&rls.call(share("a", None)).await), [(OK, 6)]);
    rls.stop().await;
}

/// With a deny cache (as `tollgate serve` has on Redis) and shared counters, a refusal under
/// one rate never answers for another: not an override's own refusal, and not one the YAML
/// limit left in the cache for the same counter; each is decided by the store.
#[tokio::test]
async fn a_refusal_remembered_for_one_rate_never_answers_for_another() {
    let yaml = SHARE_YAML.replace("requests_per_unit: 10", "requests_per_unit: 3");
    let mut rls = Rls::start_imported_cached(&[("share.yaml", &yaml)], "[envoy]\n", 1_000).await;
    let rate = |n| share("a", Some((n, Unit::Minute)));
    // 2 a minute: refused at the third call (count 2).
    assert_eq!(remaining(&rls.call(rate(2)).await), [(OK, 1)]);
    assert_eq!(remaining(&rls.call(rate(2)).await), [(OK, 0)]);
    assert_eq!(remaining(&rls.call(rate(2)).await), [(OVER, 0)]);
    // The YAML limit (3 a minute) is not answered by that refusal: one unit left.
    assert_eq!(remaining(&rls.call(share("a", None)).await), [(OK, 0)]);
    // Its own refusals (count 3) are remembered and answered from the cache …
    for _ in 0..2 {
        assert_eq!(remaining(&rls.call(share("a", None)).await), [(OVER, 0)]);
    }
    // … but never for another rate: 10 a minute passes (count 3, then 4), and a rate past
    // the count is refused by the store only.
    assert_eq!(remaining(&rls.call(rate(10)).await), [(OK, 6)]);
    assert_eq!(remaining(&rls.call(rate(10)).await), [(OK, 5)]);
    assert_eq!(remaining(&rls.call(rate(4)).await), [(OVER, 0)]);
    assert_eq!(remaining(&rls.call(rate(6)).await), [(OK, 0)]);
    rls.stop().await;
}

/// `share` with both descriptors: `user=<user>` at the YAML rate and the same with the
/// override `per_unit` a minute, in `order` (YAML first when true).
fn yaml_and_override(user: &str, per_unit: u32, yaml_first: bool) -> RateLimitRequest {
    let mut r = request("share", &[&[("user", user)], &[("user", user)]], 0);
    let at = usize::from(yaml_first);
    r.descriptors[at].limit = Some(RateLimitOverride {
        requests_per_unit: per_unit,
        unit: Unit::Minute as i32,
    });
    r
}

/// An override and the YAML descriptor it shares a counter with, in one call: as the
/// reference counts them, one after the other, each at its own rate (10 and 5 a minute).
/// The call is admitted only when both are, and a refused one charges nothing.
#[tokio::test]
async fn an_override_and_its_yaml_limit_in_one_call_count_in_turn() {
    let mut rls = Rls::start_imported(&[("share.yaml", SHARE_YAML)], "[envoy]\n").await;
    let both = |yaml_first| yaml_and_override("a", 5, yaml_first);
    // Counted 0 → 2 → 4: the YAML one sees 1 then 3 of 10, the override 2 then 4 of 5.
    assert_eq!(remaining(&rls.call(both(true)).await), [(OK, 9), (OK, 3)]);
    assert_eq!(remaining(&rls.call(both(true)).await), [(OK, 7), (OK, 1)]);
    // At 4, the override second would be the 6th of 5: refused, nothing charged (4 left
    // show as 6 of 10 and 1 of 5). Deciding the sum at the first's rate admitted it.
    let r = rls.call(both(true)).await;
    assert_eq!(r.overall_code, OVER, "{r:?}");
    assert_eq!(remaining(&r), [(OK, 6), (OVER, 1)]);
    // The override first is the 5th of 5, the YAML one the 6th of 10: both pass.
    let r = rls.call(both(false)).await;
    assert_eq!(r.overall_code, OK, "{r:?}");
    assert_eq!(remaining(&r), [(OK, 0), (OK, 4)]);
    assert_eq!(remaining(&rls.call(share("a", None)).await), [(OK, 3)]);
    // Each descriptor shows its own rate.
    let r = rls.call(both(true)).await;
    let shown: Vec<u32> = r
        .statuses
        .iter()
        .map(|s| s.current_limit.as_ref().expect("limit").requests_per_unit)
        .collect();
    assert_eq!(shown, [10, 5], "{r:?}");
    rls.stop().await;
}

/// The same with refusals charged (`refusals = "charged"`): every call counts both
/// descriptors, and each is over when its own count passes its rate, as the reference
/// answers; the count of a refused call is read back past the clamped remaining.
#[tokio::test]
async fn an_override_and_its_yaml_limit_in_one_call_with_counted_refusals() {
    let mut rls = Rls::start_imported(
        &[("share.yaml", SHARE_YAML)],
        "[envoy]\nrefusals = \"charged\"\n",
    )
    .await;
    let both = || yaml_and_override("a", 5, true);
    assert_eq!(remaining(&rls.call(both()).await), [(OK, 9), (OK, 3)]);
    assert_eq!(remaining(&rls.call(both()).await), [(OK, 7), (OK, 1)]);
    // 4 → 6: the YAML one is the 5th of 10, the override the 6th of 5.
    let r = rls.call(both()).await;
    assert_eq!(r.overall_code, OVER, "{r:?}");
    assert_eq!(remaining(&r), [(OK, 5), (OVER, 0)]);
    // 6 → 8.
    assert_eq!(remaining(&rls.call(both()).await), [(OK, 3), (OVER, 0)]);
    // 8 → 10: the YAML one is the 9th, still within its 10.
    assert_eq!(remaining(&rls.call(both()).await), [(OK, 1), (OVER, 0)]);
    // 10 → 12: now both are past their rates.
    assert_eq!(remaining(&rls.call(both()).await), [(OVER, 0), (OVER, 0)]);
    assert_eq!(remaining(&rls.call(share("a", None)).await), [(OVER, 0)]);
    rls.stop().await;
}
