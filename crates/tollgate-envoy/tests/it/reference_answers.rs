//! The reference service's (envoyproxy/ratelimit) answers on its own YAML files
//! (`tests/reference/`, unchanged), through a real tonic client: the points where tollgate
//! used to answer otherwise (issue #28: `current_limit.name`, `hits_addend` 0, a block list's
//! `duration_until_reset`, `share_threshold` with `detailed_metric`, global shadow mode's
//! `shadow_mode` statistics). Each expectation is one the reference's tests or examples state.

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

use crate::support::{Rls, counters, metrics};

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
