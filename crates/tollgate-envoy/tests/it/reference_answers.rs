//! The reference service's (envoyproxy/ratelimit) answers on its own YAML files
//! (`tests/reference/`, unchanged), through a real tonic client: the points where tollgate
//! used to answer otherwise (issue #28: `current_limit.name`, `hits_addend` 0, a block list's
//! `duration_until_reset`, `share_threshold` with `detailed_metric`, global shadow mode's
//! `shadow_mode` statistics; then `replaces` from `unlimited` and 0-per-unit entries and of
//! block lists, `duration_until_reset` on a key with no count, a check-only block list with
//! counted refusals, counted refusals' near / over split). Each expectation is one the
//! reference's tests or examples state.

use std::time::Duration;

use tollgate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse,
};
use tollgate_envoy::envoy_types::pb::google::protobuf::UInt64Value;

use crate::support::{Rls, START_MS, counters, metrics};

const BASIC: &str = include_str!("../reference/basic_config.yaml");
const SHADOW: &str = include_str!("../reference/shadowmode_config.yaml");
const SHARE: &str = include_str!("../reference/share_threshold.yaml");
const RELOAD: &str = include_str!("../reference/reload.yaml");

/// A descriptor of `entries` with its own `hits_addend` (`None`: unset).
fn descriptor(entries: &[(&str, &str)], hits_addend: Option<u64>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).to_owned(),
                value: (*v).to_owned(),
            })
            .collect(),
        hits_addend: hits_addend.map(|value| UInt64Value { value }),
        ..RateLimitDescriptor::default()
    }
}

fn req(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: 0,
    }
}

fn code(r: &RateLimitResponse) -> Code {
    Code::try_from(r.overall_code).expect("known code")
}

/// (code, limit_remaining) of status `i`.
fn state(r: &RateLimitResponse, i: usize) -> (Code, u32) {
    let s = &r.statuses[i];
    (
        Code::try_from(s.code).expect("known code"),
        s.limit_remaining,
    )
}

/// `current_limit.name` of status `i`.
fn name(r: &RateLimitResponse, i: usize) -> String {
    r.statuses[i]
        .current_limit
        .as_ref()
        .map(|l| l.name.clone())
        .expect("current_limit")
}

/// The reference's per-rule counter `name{domain, key1[, key2]}` (0 when absent).
fn rule_counter(name: &str, domain: &str, key1: &str, key2: Option<&str>) -> u64 {
    counters()
        .into_iter()
        .filter(|(n, labels, _)| {
            let label = |l: &str| labels.iter().find(|(k, _)| k == l).map(|(_, v)| v.as_str());
            n == name
                && label("domain") == Some(domain)
                && label("key1") == Some(key1)
                && label("key2") == key2
        })
        .map(|(.., value)| value)
        .sum()
}

/// Whether any counter has label `key1` = `key1`.
fn any_series_with_key1(key1: &str) -> bool {
    counters()
        .iter()
        .any(|(_, labels, _)| labels.iter().any(|(k, v)| k == "key1" && v == key1))
}

/// `current_limit.name` is the YAML rule's `name` (`key4_rate_limit` in basic_config.yaml,
/// the reference's config test), empty for a rule without one and for a limit override;
/// `current_limit_name = "limit"` shows tollgate's limit names instead.
#[tokio::test]
async fn current_limit_name_is_the_yaml_rules_name() {
    let over = |rate| RateLimitDescriptor {
        limit: Some(RateLimitOverride {
            requests_per_unit: rate,
            unit: Unit::Minute as i32,
        }),
        ..descriptor(&[("key3", "o")], None)
    };
    let call = || {
        req(
            "test-domain",
            vec![
                descriptor(&[("key4", "foo")], None),
                descriptor(&[("key2", "n")], None),
                descriptor(&[("key1", "value1"), ("subkey1", "s")], None),
                over(9),
            ],
        )
    };
    let mut rls = Rls::start_imported(&[("basic_config.yaml", BASIC)], "[envoy]\n").await;
    let r = rls.call(call()).await;
    assert_eq!(code(&r), Code::Ok, "{r:?}");
    let names: Vec<String> = (0..4).map(|i| name(&r, i)).collect();
    assert_eq!(names, ["key4_rate_limit", "", "", ""], "{r:?}");
    let key4 = r.statuses[0].current_limit.as_ref().expect("limit");
    assert_eq!(
        (key4.requests_per_unit, Unit::try_from(key4.unit)),
        (1, Ok(Unit::Day))
    );
    rls.stop().await;

    let mut rls = Rls::start_imported(
        &[("basic_config.yaml", BASIC)],
        "[envoy]\ncurrent_limit_name = \"limit\"\n",
    )
    .await;
    let r = rls.call(call()).await;
    let names: Vec<String> = (0..4).map(|i| name(&r, i)).collect();
    assert_eq!(
        names,
        [
            "test-domain.key4",
            "test-domain.key2",
            "test-domain.key1_value1.subkey1",
            "envoy.override.minute"
        ],
        "{r:?}"
    );
    rls.stop().await;
}

/// A descriptor's `hits_addend` 0 checks without charging (the reference's "check only, do
/// not increment", which its `examples/envoy/proxy.yaml` route `/tokenquota` relies on: a
/// check before the request, a charge of 1 when its stream is done). basic_config.yaml's
/// `key3` allows 1 per hour.
#[tokio::test]
async fn hits_addend_zero_checks_without_charging() {
    metrics(); // installed before the rules take their counters
    let mut rls = Rls::start_imported(&[("basic_config.yaml", BASIC)], "[envoy]\n").await;
    let domain = "test-domain";
    let a = [("key3", "a")];
    // The check before the request: OK with the key's remaining, as often as asked.
    for _ in 0..3 {
        let r = rls.call(req(domain, vec![descriptor(&a, Some(0))])).await;
        assert_eq!((code(&r), state(&r, 0)), (Code::Ok, (Code::Ok, 1)), "{r:?}");
    }
    // The charge when the stream is done.
    let r = rls.call(req(domain, vec![descriptor(&a, Some(1))])).await;
    assert_eq!(state(&r, 0), (Code::Ok, 0), "{r:?}");
    // The next request's check: no unit left.
    let r = rls.call(req(domain, vec![descriptor(&a, Some(0))])).await;
    assert_eq!(
        (code(&r), state(&r, 0)),
        (Code::OverLimit, (Code::OverLimit, 0)),
        "{r:?}"
    );

    // A check-only descriptor over its limit refuses the request, and (all or nothing) the
    // other descriptor is not charged: basic_config.yaml's key1=value1/subkey1, 5 per second.
    let sub = [("key1", "value1"), ("subkey1", "x")];
    let r = rls
        .call(req(
            domain,
            vec![descriptor(&a, Some(0)), descriptor(&sub, None)],
        ))
        .await;
    assert_eq!(code(&r), Code::OverLimit, "{r:?}");
    assert_eq!(state(&r, 0), (Code::OverLimit, 0), "{r:?}");
    assert_eq!(state(&r, 1), (Code::Ok, 5), "not charged: {r:?}");

    // Under its limit, it lets the others be charged and is not charged itself.
    let b = [("key3", "b")];
    let r = rls
        .call(req(
            domain,
            vec![descriptor(&b, Some(0)), descriptor(&sub, None)],
        ))
        .await;
    assert_eq!(code(&r), Code::Ok, "{r:?}");
    assert_eq!((state(&r, 0), state(&r, 1)), ((Code::Ok, 1), (Code::Ok, 4)));
    // The same key checked and charged in one call: charged once; the check answers the
    // state before the charge (the reference adds 0, then 1, in one pipeline).
    let r = rls
        .call(req(
            domain,
            vec![descriptor(&b, Some(0)), descriptor(&b, None)],
        ))
        .await;
    assert_eq!((state(&r, 0), state(&r, 1)), ((Code::Ok, 1), (Code::Ok, 0)));
    let r = rls.call(req(domain, vec![descriptor(&b, Some(0))])).await;
    assert_eq!(state(&r, 0), (Code::OverLimit, 0), "{r:?}");
    // Checks add no hits to the reference's statistics: key3 was charged twice.
    assert_eq!(
        rule_counter(tollgate_envoy::TOTAL_HITS, "test-domain", "key3", None),
        2
    );
    rls.stop().await;
}

/// The reference's limits in `test/redis/fixed_cache_impl_test.go` (`key3=value3`, 10 per
/// hour), for the check-only tests below.
const KEY3_HOURLY: &str = "domain: check-only\ndescriptors:\n  - key: key3\n    value: value3\n    rate_limit:\n      unit: hour\n      requests_per_unit: 10\n  - key: key1\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n";

/// With `refusals = "charged"` a counter can pass its limit, and a check-only descriptor
/// (`hits_addend` 0) answers as the reference's does (`limitAfterIncrease > limit`, nothing
/// added): `OK` with 0 left at the limit, `OVER_LIMIT` only past it, as its
/// `fixed_cache_impl_test.go` expects of a count of 11 over 10 per hour (`OVER_LIMIT`, 0
/// remaining, no hit counted); an over-limit check does not keep the call's other
/// descriptors from being charged (the reference charges them too).
#[tokio::test]
async fn check_only_with_charged_refusals_answers_as_the_reference() {
    metrics();
    let mut rls = Rls::start_imported(
        &[("check_only.yaml", KEY3_HOURLY)],
        "[envoy]\nrefusals = \"charged\"\n",
    )
    .await;
    let domain = "check-only";
    let key3 = [("key3", "value3")];
    let check = || req(domain, vec![descriptor(&key3, Some(0))]);
    let charge = || req(domain, vec![descriptor(&key3, None)]);
    assert_eq!(state(&rls.call(check()).await, 0), (Code::Ok, 10));
    for left in (0..10).rev() {
        let r = rls.call(charge()).await;
        assert_eq!(state(&r, 0), (Code::Ok, left), "{r:?}");
    }
    // The count is 10, the limit 10: the reference answers OK with nothing left.
    for _ in 0..2 {
        let r = rls.call(check()).await;
        assert_eq!((code(&r), state(&r, 0)), (Code::Ok, (Code::Ok, 0)), "{r:?}");
    }
    // The 11th charge is counted though refused: 11 > 10.
    let r = rls.call(charge()).await;
    assert_eq!(state(&r, 0), (Code::OverLimit, 0), "{r:?}");
    let hits = rule_counter(tollgate_envoy::TOTAL_HITS, domain, "key3_value3", None);
    let over = rule_counter(tollgate_envoy::OVER_LIMIT, domain, "key3_value3", None);
    assert_eq!((hits, over), (11, 1));
    let r = rls.call(check()).await;
    assert_eq!(
        (code(&r), state(&r, 0)),
        (Code::OverLimit, (Code::OverLimit, 0)),
        "{r:?}"
    );
    // Over limit, a check refuses the call, and the other descriptor is charged anyway.
    let other = [("key1", "x")];
    let r = rls
        .call(req(
            domain,
            vec![descriptor(&key3, Some(0)), descriptor(&other, None)],
        ))
        .await;
    assert_eq!(code(&r), Code::OverLimit, "{r:?}");
    assert_eq!(
        (state(&r, 0), state(&r, 1)),
        ((Code::OverLimit, 0), (Code::Ok, 4))
    );
    // Checks add no hits, and an over-limit check no over_limit hits.
    let hits = rule_counter(tollgate_envoy::TOTAL_HITS, domain, "key3_value3", None);
    let over = rule_counter(tollgate_envoy::OVER_LIMIT, domain, "key3_value3", None);
    assert_eq!((hits, over), (11, 1));
    // The next window: a fresh count.
    rls.clock.advance(Duration::from_secs(3600));
    assert_eq!(state(&rls.call(check()).await, 0), (Code::Ok, 10));
    rls.stop().await;
}

/// With `refusals = "charged"`, a descriptor of more hits than its limit can ever admit is
/// charged too, as the reference charges it (`fixed_cache_impl.go` sends its `INCRBY`
/// before `base_limiter.go` tests `limitAfterIncrease > limit`): 11 hits on a fresh count
/// of 10 per hour are `OVER_LIMIT` with 0 remaining, the count is then 11 (a check only is
/// over, the next hit too), and its hits are split as its `checkOverLimitThreshold` splits
/// them (1 over, from the threshold 8 to 10 near). The call's other descriptor is charged
/// anyway. A rule in shadow mode is charged the same and answered `OK` (its
/// `shadow_mode` counting the hit past the limit). (By default a too costly descriptor
/// charges nothing: `rls::hits_addend_is_the_cost`.)
#[tokio::test]
async fn too_costly_with_charged_refusals_is_charged_as_the_reference() {
    metrics();
    let yaml = KEY3_HOURLY.replace("domain: check-only", "domain: charged-costly")
        + "  - key: shadowed\n    shadow_mode: true\n    rate_limit: { unit: hour, requests_per_unit: 10 }\n";
    let mut rls = Rls::start_imported(
        &[("costly.yaml", &yaml)],
        "[envoy]\nrefusals = \"charged\"\n",
    )
    .await;
    let domain = "charged-costly";
    let key3 = [("key3", "value3")];
    let other = [("key1", "x")];
    let r = rls
        .call(req(
            domain,
            vec![descriptor(&key3, Some(11)), descriptor(&other, None)],
        ))
        .await;
    assert_eq!(code(&r), Code::OverLimit, "{r:?}");
    assert_eq!(
        (state(&r, 0), state(&r, 1)),
        ((Code::OverLimit, 0), (Code::Ok, 4)),
        "{r:?}"
    );
    let stat = |series| rule_counter(series, domain, "key3_value3", None);
    use tollgate_envoy::{NEAR_LIMIT, OVER_LIMIT, TOTAL_HITS, WITHIN_LIMIT};
    assert_eq!(
        (
            stat(TOTAL_HITS),
            stat(WITHIN_LIMIT),
            stat(NEAR_LIMIT),
            stat(OVER_LIMIT)
        ),
        (11, 0, 2, 1)
    );
    // The count is 11, past 10: a check only is over, and so is one more hit.
    let r = rls
        .call(req(domain, vec![descriptor(&key3, Some(0))]))
        .await;
    assert_eq!(
        (code(&r), state(&r, 0)),
        (Code::OverLimit, (Code::OverLimit, 0)),
        "{r:?}"
    );
    let r = rls.call(req(domain, vec![descriptor(&key3, None)])).await;
    assert_eq!(
        (code(&r), state(&r, 0)),
        (Code::OverLimit, (Code::OverLimit, 0)),
        "{r:?}"
    );
    // Counted from the limit: all over.
    assert_eq!((stat(TOTAL_HITS), stat(OVER_LIMIT)), (12, 2));
    // In shadow mode: OK, and charged all the same.
    let shadowed = [("shadowed", "x")];
    let r = rls
        .call(req(domain, vec![descriptor(&shadowed, Some(11))]))
        .await;
    assert_eq!((code(&r), state(&r, 0)), (Code::Ok, (Code::Ok, 0)), "{r:?}");
    let r = rls
        .call(req(domain, vec![descriptor(&shadowed, None)]))
        .await;
    assert_eq!((code(&r), state(&r, 0)), (Code::Ok, (Code::Ok, 0)), "{r:?}");
    let shadow = |series| rule_counter(series, domain, "shadowed", None);
    use tollgate_envoy::SHADOW_MODE;
    assert_eq!(
        (shadow(TOTAL_HITS), shadow(OVER_LIMIT), shadow(SHADOW_MODE)),
        (12, 2, 2)
    );
    // The next window: a fresh count.
    rls.clock.advance(Duration::from_secs(3600));
    let r = rls.call(req(domain, vec![descriptor(&key3, None)])).await;
    assert_eq!(state(&r, 0), (Code::Ok, 9), "{r:?}");
    rls.stop().await;
}

/// The default (`refusals = "free"`) is unchanged: a count never passes the limit, and a
/// check-only descriptor is `OVER_LIMIT` once no unit is left (count = limit), so that the
/// check-then-charge pattern admits exactly the limit.
#[tokio::test]
async fn check_only_with_free_refusals_is_over_at_the_limit() {
    // A domain of its own: the statistics are the process's, and the test above reads them.
    let yaml = KEY3_HOURLY.replace("domain: check-only", "domain: check-only-free");
    let mut rls = Rls::start_imported(&[("check_only.yaml", &yaml)], "[envoy]\n").await;
    let domain = "check-only-free";
    let key3 = [("key3", "value3")];
    for _ in 0..10 {
        let r = rls.call(req(domain, vec![descriptor(&key3, None)])).await;
        assert_eq!(code(&r), Code::Ok, "{r:?}");
    }
    let r = rls
        .call(req(domain, vec![descriptor(&key3, Some(0))]))
        .await;
    assert_eq!(
        (code(&r), state(&r, 0)),
        (Code::OverLimit, (Code::OverLimit, 0)),
        "{r:?}"
    );
    rls.stop().await;
}

/// A block list (`requests_per_unit: 0`) answers `duration_until_reset`, the time to the end
/// of its unit's window, as the reference does for every limit (reload.yaml's `block`, 0 per
/// second; and 0 per minute, 20 s into the minute: 40 s, in the reset header too), with the
/// rule's name.
#[tokio::test]
async fn block_list_answers_the_window_reset() {
    let mut rls = Rls::start_imported(&[("reload.yaml", RELOAD)], "[envoy]\n").await;
    let r = rls
        .call(req("reload", vec![descriptor(&[("block", "foo")], None)]))
        .await;
    assert_eq!(code(&r), Code::OverLimit, "{r:?}");
    let s = &r.statuses[0];
    let limit = s.current_limit.as_ref().expect("current_limit");
    assert_eq!(
        (limit.requests_per_unit, Unit::try_from(limit.unit)),
        (0, Ok(Unit::Second))
    );
    assert_eq!(s.duration_until_reset.map(|d| d.seconds), Some(1), "{r:?}");
    rls.stop().await;

    let yaml = "domain: d\ndescriptors:\n  - key: banned\n    rate_limit: { name: banned_limit, unit: minute, requests_per_unit: 0 }\n";
    let mut rls = Rls::start_imported(
        &[("d.yaml", yaml)],
        "[envoy]\nlimit_response_headers = true\n",
    )
    .await;
    rls.clock.advance(Duration::from_secs(20));
    let r = rls
        .call(req("d", vec![descriptor(&[("banned", "x")], None)]))
        .await;
    assert_eq!(code(&r), Code::OverLimit, "{r:?}");
    assert_eq!(name(&r, 0), "banned_limit");
    assert_eq!(
        r.statuses[0].duration_until_reset.map(|d| d.seconds),
        Some(40),
        "{r:?}"
    );
    let reset = r
        .response_headers_to_add
        .iter()
        .find(|h| h.key == "RateLimit-Reset")
        .map(|h| h.value.as_str());
    assert_eq!(reset, Some("40"), "{r:?}");
    rls.stop().await;
}

/// `share_threshold` with `detailed_metric` labels the rule's statistics with the wildcard's
/// pattern, not each value (share_threshold.yaml; the reference's config test expects
/// `test-domain.service_svc/*.endpoint_get`), and the values share one counter.
#[tokio::test]
async fn share_threshold_with_detailed_metric_labels_the_pattern() {
    metrics(); // installed before the rules take their counters
    let mut rls = Rls::start_imported(&[("share_threshold.yaml", SHARE)], "[envoy]\n").await;
    let mut remaining = Vec::new();
    for service in ["svc/user", "svc/admin"] {
        let r = rls
            .call(req(
                "test-domain",
                vec![descriptor(
                    &[("service", service), ("endpoint", "get")],
                    None,
                )],
            ))
            .await;
        assert_eq!(code(&r), Code::Ok, "{r:?}");
        remaining.push(r.statuses[0].limit_remaining);
    }
    assert_eq!(remaining, [79, 78], "one shared counter");
    let hits = rule_counter(
        tollgate_envoy::TOTAL_HITS,
        "test-domain",
        "service_svc/*",
        Some("endpoint_get"),
    );
    assert_eq!(hits, 2);
    assert!(!any_series_with_key1("service_svc/user"));
    assert!(!any_series_with_key1("service_svc/admin"));
    rls.stop().await;
}

/// Statistics are named as the reference's `SanitizeStatName` names them: its
/// `TestEscapingInvalidChartersInMetricName` (`test/stats/manager_impl_test.go`) counts the
/// key `path_/foo:*:bar` as `ratelimit.service.rate_limit.path_/foo_*_bar.total_hits`,
/// `path_/foo|bar|baz` as `path_/foo_bar_baz`, and keeps `path_/foo/bar`; the dots of an
/// IPv4 address become `_` too, other dots stay, inside their level. A `detailed_metric`
/// level with an empty value is `key_`, as the reference writes a detailed key (`GetLimit`:
/// `entry.Key + "_" + entry.Value`), but `key` alone where a `share_threshold` wildcard gave
/// a level its pattern (the reference then writes `key` and `_value` only for a value).
#[tokio::test]
async fn stat_names_are_sanitized_as_the_reference() {
    metrics(); // installed before the rules take their counters
    let yaml = "\
domain: sanitized
descriptors:
  - key: path
    value: \"/foo:*:bar\"
    rate_limit: { unit: minute, requests_per_unit: 10 }
  - key: path
    value: \"/foo|bar|baz\"
    rate_limit: { unit: minute, requests_per_unit: 10 }
  - key: path
    value: /foo/bar
    rate_limit: { unit: minute, requests_per_unit: 10 }
  - key: remote_address
    detailed_metric: true
    rate_limit: { unit: minute, requests_per_unit: 10 }
  - key: host
    detailed_metric: true
    rate_limit: { unit: minute, requests_per_unit: 10 }
";
    let mut rls = Rls::start_imported(
        &[("sanitized.yaml", yaml), ("share_threshold.yaml", SHARE)],
        "[envoy]\n",
    )
    .await;
    let calls: [(&str, &[(&str, &str)]); 8] = [
        ("sanitized", &[("path", "/foo:x:bar")]),
        ("sanitized", &[("path", "/foo|bar|baz")]),
        ("sanitized", &[("path", "/foo/bar")]),
        ("sanitized", &[("remote_address", "10.0.0.1")]),
        ("sanitized", &[("host", "api.example.com")]),
        ("sanitized", &[("remote_address", "")]),
        ("test-domain", &[("service", "svc/user"), ("endpoint", "")]),
        ("test-domain", &[("service", "svc/admin"), ("endpoint", "")]),
    ];
    for (domain, entries) in calls {
        let r = rls.call(req(domain, vec![descriptor(entries, None)])).await;
        assert_eq!(code(&r), Code::Ok, "{entries:?}: {r:?}");
        assert!(r.statuses[0].current_limit.is_some(), "matched: {r:?}");
    }
    let hits = |domain, key1, key2| rule_counter(tollgate_envoy::TOTAL_HITS, domain, key1, key2);
    for key1 in [
        "path_/foo_*_bar",
        "path_/foo_bar_baz",
        "path_/foo/bar",
        "remote_address_10_0_0_1",
        "host_api.example.com",
        "remote_address_",
    ] {
        assert_eq!(hits("sanitized", key1, None), 1, "{key1}");
    }
    assert_eq!(hits("test-domain", "service_svc/*", Some("endpoint")), 2);
    for raw in [
        "path_/foo:*:bar",
        "path_/foo|bar|baz",
        "remote_address_10.0.0.1",
        "host_api",
    ] {
        assert!(!any_series_with_key1(raw), "{raw}");
    }
    assert_eq!(hits("sanitized", "remote_address", None), 0);
    assert_eq!(hits("test-domain", "service_svc/*", Some("endpoint_")), 0);
    rls.stop().await;
}

/// Under `[envoy] shadow = true`, a rule over its limit counts `over_limit` and not
/// `shadow_mode`, which counts only rules with `shadow_mode: true` (the reference: 0), as
/// before (shadowmode_config.yaml: `key2` 20 per minute in shadow mode, `key2=value2` 30 per
/// minute).
#[tokio::test]
async fn global_shadow_counts_shadow_mode_only_for_shadow_rules() {
    metrics(); // installed before the rules take their counters
    let mut rls = Rls::start_imported(
        &[("shadowmode_config.yaml", SHADOW)],
        "[envoy]\nshadow = true\n",
    )
    .await;
    for (value, n) in [("value2", 31), ("other", 21)] {
        for _ in 0..n {
            let r = rls
                .call(req(
                    "test-domain",
                    vec![descriptor(&[("key2", value)], None)],
                ))
                .await;
            assert_eq!(code(&r), Code::Ok, "{r:?}");
        }
    }
    let count = |series, key1| rule_counter(series, "test-domain", key1, None);
    use tollgate_envoy::{OVER_LIMIT, SHADOW_MODE};
    assert_eq!(
        (
            count(OVER_LIMIT, "key2_value2"),
            count(SHADOW_MODE, "key2_value2")
        ),
        (1, 0),
        "a rule shadowed only by [envoy] shadow"
    );
    assert_eq!(
        (count(OVER_LIMIT, "key2"), count(SHADOW_MODE, "key2")),
        (1, 1),
        "a shadow_mode rule"
    );
    rls.stop().await;
}

/// The gRPC health status of each name the service answers for.
/// The health statuses once they are `want`, or as they are after 20 × HEALTH_INTERVAL (the
/// service re-reads them every HEALTH_INTERVAL): bounded polling.
async fn health_becomes(rls: &Rls, want: &[i32]) -> Vec<i32> {
    let deadline = std::time::Instant::now() + tollgate_envoy::HEALTH_INTERVAL * 20;
    loop {
        let got = health(rls).await;
        if got == want || std::time::Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(tollgate_envoy::HEALTH_INTERVAL / 5).await;
    }
}

async fn health(rls: &Rls) -> Vec<i32> {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;

    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", rls.addr))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let mut client = HealthClient::new(channel);
    let mut statuses = Vec::new();
    for service in [
        "",
        "envoy.service.ratelimit.v3.RateLimitService",
        "ratelimit",
    ] {
        let status = client
            .check(HealthCheckRequest {
                service: service.to_owned(),
            })
            .await
            .expect("health answers")
            .into_inner()
            .status;
        statuses.push(status);
    }
    statuses
}

/// `[envoy] healthy_with_at_least_one_config_loaded` (the reference's
/// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`): the gRPC health service reports NOT_SERVING
/// while no domain is loaded, SERVING once one is (duplicate_domain.yaml, a domain with no
/// descriptors, counts, as in the reference), and NOT_SERVING again when it goes; without
/// the option, an empty directory is healthy.
#[tokio::test]
async fn health_waits_for_a_domain_when_asked() {
    use tonic_health::pb::health_check_response::ServingStatus;

    const DUPLICATE: &str = include_str!("../reference/duplicate_domain.yaml");
    let serving = vec![ServingStatus::Serving as i32; 3];
    let not_serving = vec![ServingStatus::NotServing as i32; 3];
    let option = "[envoy]\nhealthy_with_at_least_one_config_loaded = true\n";

    let rls = Rls::start_imported(&[], "[envoy]\n").await;
    assert_eq!(health(&rls).await, serving, "no option: healthy");
    rls.stop().await;

    let rls = Rls::start_imported(&[], option).await;
    assert_eq!(health(&rls).await, not_serving, "no domain yet");
    rls.swap_imported(&[("duplicate_domain.yaml", DUPLICATE)], option);
    assert_eq!(
        health_becomes(&rls, &serving).await,
        serving,
        "a domain loaded"
    );
    rls.swap_imported(&[], option);
    assert_eq!(
        health_becomes(&rls, &not_serving).await,
        not_serving,
        "the last domain removed"
    );
    rls.stop().await;
}

/// The reference's example directory's `rl` domain (example.yaml: `replaces`, a 0-per-unit
/// `banned_limit`, `unlimited` entries).
const EXAMPLE: &str = include_str!("../reference/examples_ratelimit_config/example.yaml");

/// The overall code of `descriptors` in domain `rl` (the Envoy routes of the reference's
/// `examples/envoy/proxy.yaml`: `/twoheader` sends (foo, bar), `/fourheader` adds
/// (source_cluster, destination_cluster), `/fiveheader` adds (category)).
async fn rl(rls: &mut Rls, descriptors: &[&[(&str, &str)]]) -> Code {
    let descriptors = descriptors.iter().map(|d| descriptor(d, None)).collect();
    code(&rls.call(req("rl", descriptors)).await)
}

/// `replaces` as the reference's `integration-test/scripts/replaces.sh` expects it on
/// example.yaml, call by call, with refusals free (tollgate's default) and charged (the
/// reference's). Its first block is the one that failed: `(proxy, override)` (2 per minute)
/// `replaces: banned_limit`, the 0-per-unit `(foo, bar=banned)`, so the pair passes twice
/// (`constructLimitsToCheck` drops every matched limit a matched limit's `replaces` names,
/// a blocked one included).
#[tokio::test]
async fn replaces_follows_the_reference_script() {
    use Code::{Ok as OK, OverLimit as LIMITED};
    for refusals in ["free", "charged"] {
        let toml = format!("[envoy]\nrefusals = \"{refusals}\"\n");
        let mut rls = Rls::start_imported(&[("example.yaml", EXAMPLE)], &toml).await;
        let banned: &[(&str, &str)] = &[("foo", "bkthomps"), ("bar", "banned")];
        let cluster = |dst| [("source_cluster", "proxy"), ("destination_cluster", dst)];
        let (mock, over) = (cluster("mock"), cluster("override"));
        // Block 1: replaces increases the limit.
        assert_eq!(rl(&mut rls, &[banned]).await, LIMITED, "{refusals}");
        assert_eq!(rl(&mut rls, &[banned, &mock]).await, LIMITED, "{refusals}");
        let seen = [
            rl(&mut rls, &[banned, &over]).await,
            rl(&mut rls, &[banned, &over]).await,
            rl(&mut rls, &[banned, &over]).await,
        ];
        assert_eq!(seen, [OK, OK, LIMITED], "{refusals}: block 1");
        // The replaced descriptor is not decided: OK, no `current_limit`.
        let r = rls
            .call(req(
                "rl",
                vec![descriptor(banned, None), descriptor(&over, None)],
            ))
            .await;
        assert!(r.statuses[0].current_limit.is_none(), "{refusals}: {r:?}");
        assert_eq!(state(&r, 0), (OK, 0), "{refusals}: {r:?}");
        // Block 2: replaces does not affect the original limit.
        let my_foo: &[(&str, &str)] = &[("foo", "my_foo"), ("bar", "bkthomps")];
        let (bk, not_bk) = (cluster("bkthomps"), cluster("not_bkthomps"));
        let seen = [
            rl(&mut rls, &[my_foo, &bk]).await,
            rl(&mut rls, &[my_foo, &bk]).await,
            rl(&mut rls, &[my_foo, &bk]).await,
            rl(&mut rls, &[my_foo, &not_bk]).await,
            rl(&mut rls, &[my_foo, &not_bk]).await,
            rl(&mut rls, &[my_foo, &bk]).await,
        ];
        assert_eq!(
            seen,
            [OK, OK, LIMITED, OK, LIMITED, LIMITED],
            "{refusals}: block 2"
        );
        // Block 3: replaces can replace several limits.
        let (fake, account) = (cluster("fake"), [("category", "account")]);
        let mut seen = Vec::new();
        for _ in 0..5 {
            seen.push(rl(&mut rls, &[my_foo, &fake, &account]).await);
        }
        assert_eq!(seen, [OK, OK, OK, OK, LIMITED], "{refusals}: block 3");
        let foo_2: &[(&str, &str)] = &[("foo", "foo_2"), ("bar", "bkthomps")];
        let foo_3: &[(&str, &str)] = &[("foo", "foo_3"), ("bar", "bar_3")];
        let seen = [
            rl(&mut rls, &[foo_2]).await,
            rl(&mut rls, &[foo_2]).await,
            rl(&mut rls, &[foo_3, &fake]).await,
            rl(&mut rls, &[foo_3, &fake]).await,
            rl(&mut rls, &[foo_3, &fake]).await,
            rl(&mut rls, &[my_foo, &fake, &account]).await,
        ];
        assert_eq!(
            seen,
            [OK, LIMITED, OK, OK, LIMITED, LIMITED],
            "{refusals}: block 3, after"
        );
        rls.stop().await;
    }
}

/// An `unlimited` entry's `replaces`, and a 0-per-unit one's, drop the limits they name, as
/// the reference's `constructLimitsToCheck` records every matched limit's `replaces` before it
/// sets the unlimited ones aside; a replaced 0-per-unit entry is dropped like a counted one.
#[tokio::test]
async fn unlimited_and_blocked_entries_replace_too() {
    let yaml = r#"
domain: replacing
descriptors:
  - key: counted
    rate_limit: { name: counted_limit, unit: minute, requests_per_unit: 1 }
  - key: free
    rate_limit:
      unlimited: true
      replaces: [{ name: counted_limit }]
  - key: blocked
    rate_limit:
      unit: minute
      requests_per_unit: 0
      replaces: [{ name: counted_limit }]
  - key: banned
    rate_limit: { name: banned_limit, unit: minute, requests_per_unit: 0 }
  - key: lifted
    rate_limit:
      unlimited: true
      replaces: [{ name: banned_limit }]
"#;
    let mut rls = Rls::start_imported(&[("replacing.yaml", yaml)], "[envoy]\n").await;
    let counted = [("counted", "a")];
    for _ in 0..3 {
        let r = rls
            .call(req(
                "replacing",
                vec![
                    descriptor(&counted, None),
                    descriptor(&[("free", "x")], None),
                ],
            ))
            .await;
        assert_eq!(code(&r), Code::Ok, "{r:?}");
        assert!(r.statuses[0].current_limit.is_none(), "replaced: {r:?}");
        assert_eq!(state(&r, 1), (Code::Ok, u32::MAX), "unlimited: {r:?}");
    }
    // Blocked, replacing: it refuses, and the replaced limit is not decided.
    let r = rls
        .call(req(
            "replacing",
            vec![
                descriptor(&counted, None),
                descriptor(&[("blocked", "x")], None),
            ],
        ))
        .await;
    assert_eq!(code(&r), Code::OverLimit, "{r:?}");
    assert!(r.statuses[0].current_limit.is_none(), "replaced: {r:?}");
    assert_eq!(state(&r, 1), (Code::OverLimit, 0), "{r:?}");
    // Untouched by all of the above: its one unit is left.
    let r = rls
        .call(req("replacing", vec![descriptor(&counted, None)]))
        .await;
    assert_eq!(state(&r, 0), (Code::Ok, 0), "{r:?}");
    // A block list lifted by an unlimited entry.
    let banned = [("banned", "x")];
    let r = rls
        .call(req("replacing", vec![descriptor(&banned, None)]))
        .await;
    assert_eq!(code(&r), Code::OverLimit, "{r:?}");
    let r = rls
        .call(req(
            "replacing",
            vec![
                descriptor(&banned, None),
                descriptor(&[("lifted", "x")], None),
            ],
        ))
        .await;
    assert_eq!(code(&r), Code::Ok, "{r:?}");
    assert!(r.statuses[0].current_limit.is_none(), "replaced: {r:?}");
    rls.stop().await;
}

/// The reference answers every status that has a limit with `duration_until_reset` the end
/// of the unit's window (`generateResponseDescriptorStatus` → `CalculateReset`), whatever the
/// count: a refused too costly descriptor on a fresh key, a descriptor a refused call did
/// not charge, a check-only descriptor, the `RateLimit-Reset` header. (It was 0 s on a key
/// with no count, as tollgate's "back to a full quota" says of an empty fixed window.)
/// KEY3_HOURLY: 10 per hour; START_MS is 840 s into its hour.
#[tokio::test]
async fn duration_until_reset_is_the_window_end_on_every_status() {
    let yaml = KEY3_HOURLY.replace("domain: check-only", "domain: resets");
    let hour_end = 3600 - (START_MS / 1000) % 3600;
    assert_eq!(hour_end, 2760);
    let reset = |r: &RateLimitResponse, i: usize| {
        r.statuses[i]
            .duration_until_reset
            .map(|d| (d.seconds, d.nanos))
    };
    let header = |r: &RateLimitResponse| {
        r.response_headers_to_add
            .iter()
            .find(|h| h.key == "RateLimit-Reset")
            .map(|h| h.value.clone())
    };
    for refusals in ["free", "charged"] {
        let toml = format!("[envoy]\nrefusals = \"{refusals}\"\nlimit_response_headers = true\n");
        let mut rls = Rls::start_imported(&[("resets.yaml", &yaml)], &toml).await;
        let key3 = |v| [("key3", v)];
        // Too costly (11 of 10) on a fresh key, beside a fresh key the refusal did not charge
        // (free) or did (charged).
        let r = rls
            .call(req(
                "resets",
                vec![
                    descriptor(&key3("value3"), Some(11)),
                    descriptor(&[("key3", "value3"), ("key1", "x")], None),
                ],
            ))
            .await;
        assert_eq!(code(&r), Code::OverLimit, "{refusals}: {r:?}");
        assert_eq!(
            reset(&r, 0),
            Some((i64::try_from(hour_end).expect("small"), 0))
        );
        assert_eq!(header(&r).as_deref(), Some("2760"), "{refusals}: {r:?}");
        // Check only, on a fresh key.
        let r = rls
            .call(req("resets", vec![descriptor(&[("key1", "y")], Some(0))]))
            .await;
        assert_eq!(state(&r, 0), (Code::Ok, 5), "{refusals}: {r:?}");
        assert_eq!(
            reset(&r, 0),
            Some((1, 0)),
            "{refusals}: a second's window: {r:?}"
        );
        // An uncharged descriptor of a refused call (free), or a charged one (charged).
        let r = rls
            .call(req(
                "resets",
                vec![
                    descriptor(&[("key1", "z")], None),
                    descriptor(&key3("value3"), Some(11)),
                ],
            ))
            .await;
        assert_eq!(code(&r), Code::OverLimit, "{refusals}: {r:?}");
        assert_eq!(reset(&r, 0), Some((1, 0)), "{refusals}: {r:?}");
        rls.stop().await;
    }
}

/// With `refusals = "charged"`, a check-only descriptor on a 0-per-unit entry is `OK` with
/// nothing left, as the reference answers it (`limitAfterIncrease` 0 is not above the limit
/// 0, `base_limiter.go`), and does not refuse the call; charged, it is over. By default a
/// check-only descriptor is over once no unit is left, so a block list refuses it.
#[tokio::test]
async fn check_only_on_a_block_list_with_charged_refusals_passes() {
    let yaml = "domain: block-check\ndescriptors:\n  - key: banned\n    rate_limit: { name: banned_limit, unit: minute, requests_per_unit: 0 }\n  - key: key1\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n";
    let banned = [("banned", "x")];
    let other = [("key1", "a")];
    let mut rls =
        Rls::start_imported(&[("block.yaml", yaml)], "[envoy]\nrefusals = \"charged\"\n").await;
    let r = rls
        .call(req(
            "block-check",
            vec![descriptor(&banned, Some(0)), descriptor(&other, None)],
        ))
        .await;
    assert_eq!(code(&r), Code::Ok, "{r:?}");
    assert_eq!((state(&r, 0), state(&r, 1)), ((Code::Ok, 0), (Code::Ok, 4)));
    let limit = r.statuses[0].current_limit.as_ref().expect("current_limit");
    assert_eq!(
        (
            limit.name.as_str(),
            limit.requests_per_unit,
            Unit::try_from(limit.unit)
        ),
        ("banned_limit", 0, Ok(Unit::Minute))
    );
    assert_eq!(
        r.statuses[0].duration_until_reset.map(|d| d.seconds),
        Some(60),
        "{r:?}"
    );
    let r = rls
        .call(req("block-check", vec![descriptor(&banned, None)]))
        .await;
    assert_eq!(
        (code(&r), state(&r, 0)),
        (Code::OverLimit, (Code::OverLimit, 0))
    );
    rls.stop().await;

    let mut rls = Rls::start_imported(&[("block.yaml", yaml)], "[envoy]\n").await;
    let r = rls
        .call(req("block-check", vec![descriptor(&banned, Some(0))]))
        .await;
    assert_eq!(
        (code(&r), state(&r, 0)),
        (Code::OverLimit, (Code::OverLimit, 0))
    );
    rls.stop().await;
}

/// The five series of `domain`'s `key1` rule: (total, within, near, over, shadow).
fn series(domain: &str, key1: &str) -> [u64; 5] {
    use tollgate_envoy::{NEAR_LIMIT, OVER_LIMIT, SHADOW_MODE, TOTAL_HITS, WITHIN_LIMIT};
    [
        TOTAL_HITS,
        WITHIN_LIMIT,
        NEAR_LIMIT,
        OVER_LIMIT,
        SHADOW_MODE,
    ]
    .map(|name| rule_counter(name, domain, key1, None))
}

/// What one call added to `domain`'s `key1` rule's series.
async fn added(rls: &mut Rls, domain: &str, key1: &str, call: RateLimitRequest) -> [u64; 5] {
    let before = series(domain, key1);
    rls.call(call).await;
    let after = series(domain, key1);
    std::array::from_fn(|i| after[i] - before[i])
}

/// With `refusals = "charged"`, hits that cross the limit are split as the reference's
/// `checkOverLimitThreshold` splits them: those past the limit are over, those between the
/// near-limit threshold (`floor(limit × 0.8)`) and the limit near, none within
/// (`test/redis/fixed_cache_impl_test.go` `TestNearLimit`: 20 per second, a count of 19 and
/// 3 hits: 2 over, 1 near; 15 and 7: 2 over, 4 near; 10 per second at its limit and 3 hits:
/// 3 over). A rule in shadow mode counts `shadow_mode` as `over_limit`
/// (`increaseShadowModeStats`). Two descriptors on one counter are counted one after the
/// other.
#[tokio::test]
async fn charged_refusals_split_crossing_hits_into_near_and_over() {
    metrics(); // installed before the rules take their counters
    let yaml = "domain: near\ndescriptors:\n  - key: key8\n    rate_limit: { unit: hour, requests_per_unit: 20 }\n  - key: key9\n    rate_limit: { unit: hour, requests_per_unit: 20 }\n  - key: key10\n    rate_limit: { unit: hour, requests_per_unit: 10 }\n  - key: shadow\n    shadow_mode: true\n    rate_limit: { unit: hour, requests_per_unit: 20 }\n  - key: twice\n    rate_limit: { unit: hour, requests_per_unit: 20 }\n";
    let mut rls =
        Rls::start_imported(&[("near.yaml", yaml)], "[envoy]\nrefusals = \"charged\"\n").await;
    let one = |key: &str, hits| req("near", vec![descriptor(&[(key, "v")], Some(hits))]);
    // key8: 19, then 3 → 22 of 20.
    assert_eq!(
        added(&mut rls, "near", "key8", one("key8", 19)).await,
        [19, 19, 3, 0, 0]
    );
    assert_eq!(
        added(&mut rls, "near", "key8", one("key8", 3)).await,
        [3, 0, 1, 2, 0]
    );
    // key9: 15, then 7 → 22 of 20.
    assert_eq!(
        added(&mut rls, "near", "key9", one("key9", 15)).await,
        [15, 15, 0, 0, 0]
    );
    assert_eq!(
        added(&mut rls, "near", "key9", one("key9", 7)).await,
        [7, 0, 4, 2, 0]
    );
    // Already past the limit: every hit is over.
    assert_eq!(
        added(&mut rls, "near", "key9", one("key9", 2)).await,
        [2, 0, 0, 2, 0]
    );
    // key10: at its limit 10, then 3: all over.
    assert_eq!(
        added(&mut rls, "near", "key10", one("key10", 10)).await,
        [10, 10, 2, 0, 0]
    );
    assert_eq!(
        added(&mut rls, "near", "key10", one("key10", 3)).await,
        [3, 0, 0, 3, 0]
    );
    // Shadow mode: 19, then 3 → 2 over, 1 near, 2 shadow_mode.
    assert_eq!(
        added(&mut rls, "near", "shadow", one("shadow", 19)).await,
        [19, 19, 3, 0, 0]
    );
    let r = rls.call(one("shadow", 3)).await;
    assert_eq!(code(&r), Code::Ok, "{r:?}");
    assert_eq!(series("near", "shadow"), [22, 19, 4, 2, 2]);
    // Two descriptors on one counter: 17, then 2 (→ 19: within, near 2) and 3 (→ 22: over 2,
    // near 1).
    assert_eq!(
        added(&mut rls, "near", "twice", one("twice", 17)).await,
        [17, 17, 1, 0, 0]
    );
    let twice = req(
        "near",
        vec![
            descriptor(&[("twice", "v")], Some(2)),
            descriptor(&[("twice", "v")], Some(3)),
        ],
    );
    assert_eq!(
        added(&mut rls, "near", "twice", twice).await,
        [5, 2, 3, 2, 0]
    );
    rls.stop().await;
}
