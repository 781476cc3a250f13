//! The reference service's README examples 1, 4, 5, 6 and 9, each YAML as the README writes it,
//! with the behaviour its text states, through a real tonic client (2, 3 and 7 are in
//! `yaml_rls.rs`). Written from the README's prose, not from its code or tests.

use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;

use crate::support::{Rls, request};

type Desc<'a> = &'a [(&'a str, &'a str)];

fn code(r: &RateLimitResponse) -> Code {
    Code::try_from(r.overall_code).expect("known code")
}

/// The `requests_per_unit` of the limit that decided descriptor `i`, if any.
fn quota_of(r: &RateLimitResponse, i: usize) -> Option<u32> {
    r.statuses[i]
        .current_limit
        .as_ref()
        .map(|l| l.requests_per_unit)
}

/// Calls `n` times with `descriptor`, asserting OK each time.
async fn admit(rls: &mut Rls, domain: &str, descriptor: Desc<'_>, n: usize) {
    for i in 0..n {
        let r = rls.call(request(domain, &[descriptor], 0)).await;
        assert_eq!(code(&r), Code::Ok, "call {i} of {descriptor:?}: {r:?}");
    }
}

/// Example 1: two values of one key, each its own 500 per second; an unlisted value matches
/// nothing.
#[tokio::test]
async fn example_1_key_value_limits() {
    let yaml = r#"
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
"#;
    let mut rls = Rls::start_imported(&[("mongo_cps.yaml", yaml)], "[envoy]\n").await;
    let users: Desc<'_> = &[("database", "users")];
    let default: Desc<'_> = &[("database", "default")];
    admit(&mut rls, "mongo_cps", users, 500).await;
    let r = rls.call(request("mongo_cps", &[users], 0)).await;
    assert_eq!((code(&r), quota_of(&r, 0)), (Code::OverLimit, Some(500)));
    // The other value has its own 500.
    admit(&mut rls, "mongo_cps", default, 500).await;
    let r = rls.call(request("mongo_cps", &[default], 0)).await;
    assert_eq!(code(&r), Code::OverLimit, "{r:?}");
    let r = rls
        .call(request("mongo_cps", &[&[("database", "orders")]], 0))
        .await;
    assert_eq!((code(&r), quota_of(&r, 0)), (Code::Ok, None), "no match");
    rls.stop().await;
}

/// Example 4: a request matches entries at its own depth only: a two-entry descriptor does not
/// match a one-level rule, and does match the same rule nested one level deeper.
#[tokio::test]
async fn example_4_levels_must_match() {
    let flat = r#"
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
"#;
    let nested = r#"
domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
"#;
    let two: Desc<'_> = &[("key", "value"), ("subkey", "subvalue")];
    let mut rls = Rls::start_imported(&[("example4.yaml", flat)], "[envoy]\n").await;
    let r = rls.call(request("example4", &[two], 0)).await;
    assert_eq!((code(&r), quota_of(&r, 0)), (Code::Ok, None), "flat: {r:?}");
    rls.stop().await;

    let mut rls = Rls::start_imported(&[("example4.yaml", nested)], "[envoy]\n").await;
    let r = rls.call(request("example4", &[two], 0)).await;
    assert_eq!(
        (code(&r), quota_of(&r, 0)),
        (Code::Ok, Some(300)),
        "nested: {r:?}"
    );
    rls.stop().await;
}

/// Example 5: an unlimited descriptor is OK with `limit_remaining` at u32::MAX, never counted;
/// its neighbour keeps its 100 per minute.
#[tokio::test]
async fn example_5_unlimited() {
    let yaml = r#"
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true

  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
"#;
    let mut rls = Rls::start_imported(&[("internal.yaml", yaml)], "[envoy]\n").await;
    for _ in 0..150 {
        let r = rls.call(request("internal", &[&[("ldap", "x")]], 0)).await;
        assert_eq!(code(&r), Code::Ok, "{r:?}");
        assert_eq!(r.statuses[0].limit_remaining, u32::MAX, "{r:?}");
    }
    admit(&mut rls, "internal", &[("azure", "x")], 100).await;
    let r = rls.call(request("internal", &[&[("azure", "x")]], 0)).await;
    assert_eq!(code(&r), Code::OverLimit, "{r:?}");
    rls.stop().await;
}

/// Example 6: `user-a` is in shadow mode, never limited past its 10 per second; `user-b` is
/// limited at 20 per second.
#[tokio::test]
async fn example_6_shadow_mode() {
    let yaml = r#"
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
"#;
    let mut rls = Rls::start_imported(&[("example6.yaml", yaml)], "[envoy]\n").await;
    admit(
        &mut rls,
        "example6",
        &[("service", "auth-service"), ("user", "user-a")],
        30,
    )
    .await;
    let b: Desc<'_> = &[("service", "auth-service"), ("user", "user-b")];
    admit(&mut rls, "example6", b, 20).await;
    let r = rls.call(request("example6", &[b], 0)).await;
    assert_eq!(code(&r), Code::OverLimit, "{r:?}");
    rls.stop().await;
}

/// Example 9: a value ending in `*` matches every value with that prefix, each value counted
/// on its own (20 per minute each); another prefix matches nothing.
#[tokio::test]
async fn example_9_wildcard_value() {
    let yaml = r#"
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
"#;
    let mut rls = Rls::start_imported(&[("example9.yaml", yaml)], "[envoy]\n").await;
    for value in ["value_1", "value_2"] {
        let d: &[(&str, &str)] = &[("key1", value)];
        admit(&mut rls, "example9", d, 20).await;
        let r = rls.call(request("example9", &[d], 0)).await;
        assert_eq!(
            (code(&r), quota_of(&r, 0)),
            (Code::OverLimit, Some(20)),
            "{value}: {r:?}"
        );
    }
    let r = rls
        .call(request("example9", &[&[("key1", "other")]], 0))
        .await;
    assert_eq!((code(&r), quota_of(&r, 0)), (Code::Ok, None), "{r:?}");
    rls.stop().await;
}
