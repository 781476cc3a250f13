//! The reference service's YAML files served through a real tonic client: the README's
//! examples (which descriptor gets which limit, OK / OVER_LIMIT) on a fake clock.

use std::time::Duration;

use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;

use crate::support::{Rls, request};

type Desc<'a> = &'a [(&'a str, &'a str)];

fn code(r: &RateLimitResponse) -> Code {
    Code::try_from(r.overall_code).expect("known code")
}

fn codes(r: &RateLimitResponse) -> Vec<Code> {
    r.statuses
        .iter()
        .map(|s| Code::try_from(s.code).expect("known code"))
        .collect()
}

/// The limit that decided descriptor `i` (empty when none).
fn limit_of(r: &RateLimitResponse, i: usize) -> String {
    r.statuses[i]
        .current_limit
        .as_ref()
        .map(|l| format!("{}:{}", l.name, l.requests_per_unit))
        .unwrap_or_default()
}

/// The example descriptor file (marketing 2/day per number, any message 100/day, `trusted`
/// whitelisted).
const MESSAGING: &str = include_str!("../../../../examples/envoy-ratelimit/config/messaging.yaml");

/// README example 2: nested key-only entries count per value; both descriptors of one request
/// are decided; a refusal charges nothing.
#[tokio::test]
async fn nested_descriptors_per_value() {
    let mut rls = Rls::start_imported(&[("messaging.yaml", MESSAGING)], "[envoy]\n").await;
    let marketing: Desc<'_> = &[("message_type", "marketing"), ("to_number", "2061111111")];
    let number: Desc<'_> = &[("to_number", "2061111111")];
    let r = rls
        .call(request("messaging", &[marketing, number], 0))
        .await;
    assert_eq!(code(&r), Code::Ok, "{r:?}");
    // `current_limit.name` is the YAML's `rate_limit.name`: none here.
    assert_eq!(limit_of(&r, 0), ":2");
    assert_eq!(limit_of(&r, 1), ":100");
    let r = rls
        .call(request("messaging", &[marketing, number], 0))
        .await;
    assert_eq!(code(&r), Code::Ok, "{r:?}");
    let r = rls
        .call(request("messaging", &[marketing, number], 0))
        .await;
    assert_eq!(codes(&r), [Code::OverLimit, Code::Ok], "{r:?}");
    // The refused request charged nothing: two taken before it, this one is the third.
    let r = rls.call(request("messaging", &[number], 0)).await;
    assert_eq!(
        (code(&r), r.statuses[0].limit_remaining),
        (Code::Ok, 97),
        "{r:?}"
    );
    // Another number has its own counters.
    let other: Desc<'_> = &[("message_type", "marketing"), ("to_number", "2062222222")];
    let r = rls.call(request("messaging", &[other], 0)).await;
    assert_eq!(code(&r), Code::Ok, "{r:?}");
    // A day later (aligned fixed window) the quota is back.
    rls.clock.advance(Duration::from_secs(86_400));
    let r = rls.call(request("messaging", &[marketing], 0)).await;
    assert_eq!(
        (code(&r), r.statuses[0].limit_remaining),
        (Code::Ok, 1),
        "{r:?}"
    );
    rls.stop().await;
}

/// README example 3: key+value beats the key-only default; 0 per unit is always over limit.
/// Example 4: a descriptor longer or shorter than the tree matches nothing.
#[tokio::test]
async fn most_specific_match_and_levels() {
    let yaml = r#"
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit: { unit: second, requests_per_unit: 10 }
  - key: remote_address
    value: 50.0.0.5
    rate_limit: { unit: second, requests_per_unit: 0 }
"#;
    let mut rls = Rls::start_imported(&[("ip.yaml", yaml)], "[envoy]\n").await;
    let r = rls
        .call(request(
            "edge_proxy_per_ip",
            &[&[("remote_address", "50.0.0.1")]],
            0,
        ))
        .await;
    assert_eq!((code(&r), limit_of(&r, 0)), (Code::Ok, ":10".to_owned()));
    let r = rls
        .call(request(
            "edge_proxy_per_ip",
            &[&[("remote_address", "50.0.0.5")]],
            0,
        ))
        .await;
    assert_eq!(
        (code(&r), limit_of(&r, 0)),
        (Code::OverLimit, ":0".to_owned()),
        "{r:?}"
    );
    let longer: Desc<'_> = &[("remote_address", "50.0.0.1"), ("extra", "x")];
    let r = rls.call(request("edge_proxy_per_ip", &[longer], 0)).await;
    assert_eq!(
        (code(&r), limit_of(&r, 0)),
        (Code::Ok, String::new()),
        "{r:?}"
    );
    rls.stop().await;
}

/// Whitelist (no rate_limit, no children), unlimited (OK, remaining at its maximum), shadow
/// (OK whatever the count), wildcard (its own counter per value, or one shared one).
#[tokio::test]
async fn whitelist_unlimited_shadow_wildcard() {
    let yaml = r#"
domain: internal
descriptors:
  - key: trusted
  - key: ldap
    rate_limit: { unlimited: true }
  - key: soft
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: path
    value: "/files/*"
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: path
    value: "/shared/*"
    share_threshold: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
"#;
    let mut rls = Rls::start_imported(&[("internal.yaml", yaml)], "[envoy]\n").await;
    for _ in 0..3 {
        let r = rls
            .call(request(
                "internal",
                &[&[("trusted", "a")], &[("ldap", "b")], &[("soft", "c")]],
                0,
            ))
            .await;
        assert_eq!(codes(&r), [Code::Ok, Code::Ok, Code::Ok], "{r:?}");
        assert!(r.statuses[0].current_limit.is_none());
        assert_eq!(r.statuses[1].limit_remaining, u32::MAX);
    }
    let a = rls
        .call(request("internal", &[&[("path", "/files/a")]], 0))
        .await;
    let b = rls
        .call(request("internal", &[&[("path", "/files/b")]], 0))
        .await;
    assert_eq!(
        (code(&a), code(&b)),
        (Code::Ok, Code::Ok),
        "own counter per value"
    );
    let a = rls
        .call(request("internal", &[&[("path", "/shared/a")]], 0))
        .await;
    let b = rls
        .call(request("internal", &[&[("path", "/shared/b")]], 0))
        .await;
    assert_eq!(
        (code(&a), code(&b)),
        (Code::Ok, Code::OverLimit),
        "one shared counter"
    );
    rls.stop().await;
}

/// README example 7: a limit that `replaces` another by name drops it when both match.
#[tokio::test]
async fn replaces_drops_the_replaced_limit() {
    let yaml = r#"
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit: { name: specific_limit, requests_per_unit: 1, unit: second }
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces: [{ name: specific_limit }]
          requests_per_unit: 2
          unit: second
"#;
    let mut rls = Rls::start_imported(&[("e7.yaml", yaml)], "[envoy]\n").await;
    let one: Desc<'_> = &[("key_1", "value_1"), ("user", "bkthomps")];
    let two: Desc<'_> = &[("key_2", "value_2"), ("user", "bkthomps")];
    for _ in 0..2 {
        let r = rls.call(request("example7", &[one, two], 0)).await;
        assert_eq!(code(&r), Code::Ok, "{r:?}");
        assert!(r.statuses[0].current_limit.is_none(), "replaced: {r:?}");
    }
    let r = rls.call(request("example7", &[one, two], 0)).await;
    assert_eq!(codes(&r), [Code::Ok, Code::OverLimit], "{r:?}");
    // Alone, the replaced limit is untouched by the calls above; its `current_limit.name` is
    // the YAML's `name`, as the reference answers.
    let r = rls.call(request("example7", &[one], 0)).await;
    assert_eq!(
        (code(&r), r.statuses[0].limit_remaining),
        (Code::Ok, 0),
        "{r:?}"
    );
    assert_eq!(limit_of(&r, 0), "specific_limit:1");
    rls.stop().await;
}

/// `[envoy] shadow = true` makes every imported limit a shadow entry.
#[tokio::test]
async fn global_shadow() {
    let mut rls = Rls::start_imported(&[("m.yaml", MESSAGING)], "[envoy]\nshadow = true\n").await;
    let number: Desc<'_> = &[("to_number", "1")];
    for _ in 0..5 {
        let r = rls.call(request("messaging", &[number], 0)).await;
        assert_eq!(code(&r), Code::Ok, "{r:?}");
    }
    rls.stop().await;
}

/// Store down: imported limits fail open by default (as the reference does), and `[envoy]
/// on_store_error = "deny"` makes the call fail with `UNAVAILABLE`.
#[tokio::test]
async fn store_down_fails_open_unless_told_otherwise() {
    let number: Desc<'_> = &[("to_number", "1")];
    let mut open = Rls::start_imported(&[("m.yaml", MESSAGING)], "[envoy]\n").await;
    open.store.set_down(true);
    let r = open.call(request("messaging", &[number], 0)).await;
    assert_eq!(code(&r), Code::Ok, "{r:?}");
    open.stop().await;

    let mut closed = Rls::start_imported(
        &[("m.yaml", MESSAGING)],
        "[envoy]\non_store_error = \"deny\"\n",
    )
    .await;
    closed.store.set_down(true);
    let status = closed
        .client
        .should_rate_limit(request("messaging", &[number], 0))
        .await
        .expect_err("deny policy refuses");
    assert_eq!(
        status.code(),
        tollgate_envoy::tonic::Code::Unavailable,
        "{status:?}"
    );
    closed.stop().await;
}

/// `[envoy] algorithm = "gcra"`: no fixed window, so no quota back at the window's edge.
#[tokio::test]
async fn algorithm_switch() {
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n";
    let k: Desc<'_> = &[("k", "v")];
    for (algorithm, after_edge) in [("fixed_window", Code::Ok), ("gcra", Code::OverLimit)] {
        let mut rls = Rls::start_imported(
            &[("d.yaml", yaml)],
            &format!("[envoy]\nalgorithm = \"{algorithm}\"\n"),
        )
        .await;
        // Just before the window's edge, the whole quota; just after it, again under a fixed
        // window (the 2x edge burst), not under GCRA (one per 30 s).
        rls.clock.advance(Duration::from_secs(59));
        for _ in 0..2 {
            let r = rls.call(request("d", &[k], 0)).await;
            assert_eq!(code(&r), Code::Ok, "{algorithm}: {r:?}");
        }
        rls.clock.advance(Duration::from_secs(2));
        let r = rls.call(request("d", &[k], 0)).await;
        assert_eq!(code(&r), after_edge, "{algorithm}: {r:?}");
        rls.stop().await;
    }
}

/// An imported limit reports its YAML unit and `requests_per_unit` as written, `month`
/// included (a 30-day window that the computed rate would show in another unit).
#[tokio::test]
async fn current_limit_shows_the_yaml_unit() {
    use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;

    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: month, requests_per_unit: 10 }\n";
    let mut rls = Rls::start_imported(&[("d.yaml", yaml)], "[envoy]\n").await;
    let r = rls.call(request("d", &[&[("k", "v")]], 0)).await;
    let limit = r.statuses[0].current_limit.as_ref().expect("current_limit");
    assert_eq!(
        (limit.requests_per_unit, Unit::try_from(limit.unit)),
        (10, Ok(Unit::Month)),
        "{r:?}"
    );
    rls.stop().await;
}

/// A quota entry of 5 an hour, keyed by the request's value.
const QUOTA: &str = "domain: q\ndescriptors:\n  - key: k\n    quota_mode: true\n    rate_limit: { unit: hour, requests_per_unit: 5 }\n";

/// Two quota descriptors of one request on one counter, at a count of 4: the first passes and
/// the second, the 6th unit, is over; by the reference's rule (`OVER_LIMIT` only when every
/// quota descriptor is over) the request passes. Before, the two were one entry of cost 2,
/// refused whole: the statuses said `[OK, OVER_LIMIT]` and the overall code `OVER_LIMIT`.
/// Refusals free: the one that passed is charged, the other not (the count is then 5).
/// Refusals charged: both are, as the reference's two `INCRBY`s (6).
#[tokio::test]
async fn quota_descriptors_on_one_counter_pass_while_one_does() {
    let d: Desc<'_> = &[("k", "a")];
    for (rules, after) in [("[envoy]\n", 5), ("[envoy]\nrefusals = \"charged\"\n", 6)] {
        let mut rls = Rls::start_imported(&[("q.yaml", QUOTA)], rules).await;
        for _ in 0..4 {
            let r = rls.call(request("q", &[d], 0)).await;
            assert_eq!(code(&r), Code::Ok, "{rules}{r:?}");
        }
        let r = rls.call(request("q", &[d, d], 0)).await;
        assert_eq!(codes(&r), [Code::Ok, Code::OverLimit], "{rules}{r:?}");
        assert_eq!(code(&r), Code::Ok, "{rules}{r:?}");
        // The count, read with a check-only call (hits_addend 0 on the descriptor's own).
        let mut peek = request("q", &[d], 0);
        peek.descriptors[0].hits_addend =
            Some(tollgate_envoy::envoy_types::pb::google::protobuf::UInt64Value { value: 0 });
        let r = rls.call(peek).await;
        let remaining = r.statuses[0].limit_remaining;
        assert_eq!(5u32.saturating_sub(remaining), after.min(5), "{rules}{r:?}");
        assert_eq!(code(&r), Code::OverLimit, "{rules}{r:?}");
        rls.stop().await;
    }
}

/// A value too long for a key, matched by a YAML entry, is refused naming the descriptor and
/// the entry (the generated key part, `d0`, is not a name the caller wrote).
#[tokio::test]
async fn an_oversized_value_names_its_descriptor_and_entry() {
    let mut rls = Rls::start_imported(&[("q.yaml", QUOTA)], "[envoy]\n").await;
    let huge = "v".repeat(tollgate::MAX_KEY_VALUE + 1);
    let fine: Desc<'_> = &[("k", "a")];
    let err = rls
        .client
        .should_rate_limit(request("q", &[fine, &[("k", huge.as_str())]], 0))
        .await
        .expect_err("refused");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert_eq!(
        err.message(),
        "descriptors[1].entries[0].value: 1025 bytes, longer than 1024 bytes"
    );
    rls.stop().await;
}
