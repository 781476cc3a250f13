//! The reference's service tests (`test/service/ratelimit_test.go` in envoyproxy/ratelimit)
//! that mix quota mode with global shadow mode or with response metadata, and that no other
//! test here checks, on the real binary (`tollgate serve`) with a tonic client, on the memory
//! store and on Redis.
//!
//! Each Go test mocks the cache: it hands the service a table of limits and the statuses the
//! cache would answer. Here the table is a YAML file (the `quota-domain` of the Go tests: a
//! `regular=limit` and a `quota=limit` descriptor with the table's rate, quota mode and
//! metadata), earlier calls bring the counters to the state whose statuses the mock returns,
//! and the call under test must get the Go test's expected answer: the overall code, each
//! status's code, current limit and remaining, the `global_shadow_mode` counter, the merged
//! `metadata`.
//!
//! The limits are the Go tests': fixed windows of one minute on the real clock. A case whose
//! calls straddle a minute's edge is run again on a fresh process and store (three runs at
//! most), and only a run within one minute is compared: a retry, not a wait.

use bytes::Bytes;
use serde_json::json;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse,
};

use crate::binary::EnvoyServe;
use crate::envoy_quota::{On, minute};
use crate::grpc::{Client, connect, descriptor};
use crate::support::request;

/// One row of a Go test's limits table.
#[derive(Debug, Clone, Copy)]
struct Row {
    /// `RequestsPerUnit`, per minute.
    per_minute: u32,
    /// `QuotaMode`.
    quota_mode: bool,
    /// The limit's `Metadata`: one (key, string value).
    metadata: Option<(&'static str, &'static str)>,
}

const fn row(per_minute: u32, quota_mode: bool) -> Row {
    Row {
        per_minute,
        quota_mode,
        metadata: None,
    }
}

const REGULAR: &[(&str, &str)] = &[("regular", "limit")];
const QUOTA: &[(&str, &str)] = &[("quota", "limit")];

/// The YAML of the Go tests' `quota-domain`: `regular=limit` decided by `regular`,
/// `quota=limit` by `quota`.
fn quota_domain(regular: Row, quota: Row) -> String {
    let mut yaml = String::from("domain: quota-domain\ndescriptors:\n");
    for ((key, value), row) in [(REGULAR[0], regular), (QUOTA[0], quota)] {
        yaml.push_str(&format!(
            "  - key: {key}\n    value: {value}\n    quota_mode: {}\n    rate_limit:\n      \
             unit: minute\n      requests_per_unit: {}\n",
            row.quota_mode, row.per_minute
        ));
        if let Some((k, v)) = row.metadata {
            yaml.push_str(&format!("    metadata:\n      {k}: {v}\n"));
        }
    }
    yaml
}

/// One Go test: its limits, the `[envoy]` settings standing for its environment variables,
/// and how many single-descriptor calls of `regular=limit` and `quota=limit` come before the
/// call under test (a request of both, `hits_addend` 1).
struct Case {
    name: &'static str,
    regular: Row,
    quota: Row,
    envoy: &'static str,
    before: (usize, usize),
}

/// What the call under test answered.
#[derive(Debug, PartialEq)]
struct Seen {
    /// The overall code.
    overall: Code,
    /// Per status: code, requests per unit, unit, remaining.
    statuses: Vec<(Code, u32, Unit, u32)>,
    /// The merged `metadata` of the response's dynamic metadata (`Null` when absent).
    metadata: serde_json::Value,
    /// `ratelimit_service_global_shadow_mode` after the call.
    global_shadow: f64,
}

async fn ask(client: &mut Client, descriptors: &[&[(&str, &str)]]) -> RateLimitResponse {
    client
        .should_rate_limit(RateLimitRequest {
            domain: "quota-domain".to_owned(),
            descriptors: descriptors.iter().map(|d| descriptor(d)).collect(),
            hits_addend: 1,
        })
        .await
        .expect("ShouldRateLimit answers")
        .into_inner()
}

/// `case` on a fresh `tollgate serve` (and a fresh Redis): what the call under test answered,
/// or `None` when the run straddled a minute's edge.
async fn run_once(on: On, case: &Case) -> Option<Seen> {
    let yaml = quota_domain(case.regular, case.quota);
    let served = EnvoyServe::start(
        matches!(on, On::Redis),
        case.envoy,
        &[("quota.yaml", &yaml)],
    );
    let process = &served.process;
    let mut client = connect(process.grpc.expect("grpc address")).await;
    let start = minute();
    for (entries, times) in [(REGULAR, case.before.0), (QUOTA, case.before.1)] {
        for call in 0..times {
            let r = ask(&mut client, &[entries]).await;
            assert_eq!(
                r.overall_code,
                Code::Ok as i32,
                "{}: call {call} of {entries:?} before: {r:?}",
                case.name
            );
        }
    }
    let r = ask(&mut client, &[REGULAR, QUOTA]).await;
    if minute() != start {
        return None;
    }
    let metrics = request(process.addr, "GET", "/metrics", Bytes::new(), &[]).await;
    assert_eq!(metrics.status, 200, "{}", metrics.text);
    let global_shadow = metrics
        .text
        .lines()
        .find_map(|l| l.strip_prefix("ratelimit_service_global_shadow_mode "))
        .map_or(0.0, |v| v.trim().parse().expect("a number"));
    Some(Seen {
        overall: Code::try_from(r.overall_code).expect("known code"),
        statuses: r
            .statuses
            .iter()
            .map(|s| {
                let limit = s.current_limit.as_ref().expect("a current limit");
                (
                    Code::try_from(s.code).expect("known code"),
                    limit.requests_per_unit,
                    Unit::try_from(limit.unit).expect("known unit"),
                    s.limit_remaining,
                )
            })
            .collect(),
        metadata: tollgate_envoy::response_json(&r)["dynamicMetadata"]["metadata"].clone(),
        global_shadow,
    })
}

/// `case` until one run stays within one minute (three runs at most).
async fn run(on: On, case: &Case) -> Seen {
    for _ in 0..3 {
        if let Some(seen) = run_once(on, case).await {
            return seen;
        }
    }
    panic!("{}: three runs each straddled a minute's edge", case.name);
}

const M: Unit = Unit::Minute;

/// The Go tests whose quota descriptors meet global shadow mode: an over-limit request is
/// answered `OK` overall, each descriptor keeps its `OVER_LIMIT`, and `global_shadow_mode`
/// counts the call once; and the one where a regular and a quota descriptor both pass.
async fn quota_mode_with_shadow_mode_and_under_the_limit(on: On) {
    // TestServiceMixedPerDescriptorModesUnderLimit: regular 5/min, quota 3/min in quota
    // mode; the mock answers both OK with 0 remaining, the service OK.
    let case = Case {
        name: "TestServiceMixedPerDescriptorModesUnderLimit",
        regular: row(5, false),
        quota: row(3, true),
        envoy: "",
        before: (4, 2),
    };
    let seen = run(on, &case).await;
    assert_eq!(
        (seen.overall, seen.statuses),
        (Code::Ok, vec![(Code::Ok, 5, M, 0), (Code::Ok, 3, M, 0)]),
        "{on:?} {}",
        case.name
    );
    // TestServiceQuotaModeWithShadowMode (both quota descriptors, SHADOW_MODE) and
    // TestServiceMixedModeWithShadowMode (a regular and a quota one, SHADOW_MODE): the mock
    // answers both OVER_LIMIT; the service OK overall, the statuses kept, the counter 1.
    for (name, regular_quota) in [
        ("TestServiceQuotaModeWithShadowMode", true),
        ("TestServiceMixedModeWithShadowMode", false),
    ] {
        let case = Case {
            name,
            regular: row(5, regular_quota),
            quota: row(3, true),
            envoy: "shadow = true",
            before: (5, 3),
        };
        let seen = run(on, &case).await;
        assert_eq!(
            (seen.overall, seen.statuses, seen.global_shadow),
            (
                Code::Ok,
                vec![(Code::OverLimit, 5, M, 0), (Code::OverLimit, 3, M, 0)],
                1.0
            ),
            "{on:?} {name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_mode_with_shadow_mode_answers_as_the_reference_on_memory() {
    quota_mode_with_shadow_mode_and_under_the_limit(On::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_mode_with_shadow_mode_answers_as_the_reference_on_redis() {
    quota_mode_with_shadow_mode_and_under_the_limit(On::Redis).await;
}

/// The Go tests of response metadata under global quota mode (`QUOTA_MODE` and
/// `RESPONSE_DYNAMIC_METADATA`): both descriptors pass, so the metadata of both is merged,
/// and where both set the same key the first descriptor's value is kept.
async fn metadata_of_passed_quota_descriptors(on: On) {
    const ENVOY: &str = "quota_mode = true\nresponse_dynamic_metadata = true";
    let cases = [
        (
            Case {
                name: "TestMetadataReturnedForAllPassedDescriptors",
                regular: Row {
                    metadata: Some(("name", "service_1")),
                    ..row(10, true)
                },
                quota: Row {
                    metadata: Some(("some_other_name", "service_2")),
                    ..row(5, true)
                },
                envoy: ENVOY,
                before: (0, 0),
            },
            json!({"name": "service_1", "some_other_name": "service_2"}),
        ),
        (
            Case {
                name: "TestOverlappingMetadataReturnsTheFirstValue",
                regular: Row {
                    metadata: Some(("name", "service_1")),
                    ..row(10, true)
                },
                quota: Row {
                    metadata: Some(("name", "service_2")),
                    ..row(5, true)
                },
                envoy: ENVOY,
                before: (0, 0),
            },
            json!({"name": "service_1"}),
        ),
    ];
    for (case, metadata) in cases {
        let seen = run(on, &case).await;
        assert_eq!(
            (seen.overall, seen.metadata),
            (Code::Ok, metadata),
            "{on:?} {}",
            case.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_of_passed_quota_descriptors_merges_first_wins_on_memory() {
    metadata_of_passed_quota_descriptors(On::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_of_passed_quota_descriptors_merges_first_wins_on_redis() {
    metadata_of_passed_quota_descriptors(On::Redis).await;
}
