//! The reference service's settings a migration carries over, on the real binary (`tollgate
//! serve`) with a tonic client and a scrape of `GET /metrics`: `RESPONSE_DYNAMIC_METADATA`,
//! `MERGE_DOMAIN_CONFIG`, `value_to_metric`, `NEAR_LIMIT_RATIO` and the service-level
//! statistics, each checked against the reference's own files (`tollgate-envoy/tests/reference/`,
//! unchanged) and the expectations of its tests (`test/config/config_test.go`,
//! `src/service/ratelimit_test.go`) and README.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use serde_json::json;
use tollgate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    RateLimitOverride,
};
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse,
};
use tollgate_envoy::envoy_types::pb::google::protobuf::UInt64Value;

use crate::binary::{Process, config_file};
use crate::grpc::{Client, code, connect, descriptor};
use crate::support::{eventually, request};

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

const METADATA: &str = include_str!("../../../tollgate-envoy/tests/reference/metadata.yaml");
const MERGE_1: &str =
    include_str!("../../../tollgate-envoy/tests/reference/merge_domain_key1.yaml");
const MERGE_2: &str =
    include_str!("../../../tollgate-envoy/tests/reference/merge_domain_key2.yaml");
const SHARE_THRESHOLD: &str =
    include_str!("../../../tollgate-envoy/tests/reference/share_threshold.yaml");

/// A config dir `ratelimit` holding `files` (name, text), next to a `tollgate.toml` with a
/// gRPC listener (when `grpc`) and `[envoy] config_dir = "ratelimit"` plus `envoy`.
fn layout(
    files: &[(&str, &str)],
    grpc: bool,
    envoy: &str,
) -> (tempfile::TempDir, std::path::PathBuf) {
    let server = if grpc {
        // Port 0: the process binds a free port itself (`Process::grpc`).
        "[server]
grpc = \"127.0.0.1:0\"

"
        .to_owned()
    } else {
        String::new()
    };
    let (dir, path) = config_file(&format!(
        "{server}[envoy]\nconfig_dir = \"ratelimit\"\nalgorithm = \"gcra\"\n{envoy}\n"
    ));
    let yaml = dir.path().join("ratelimit");
    std::fs::create_dir_all(&yaml).expect("mkdir");
    for (name, text) in files {
        std::fs::write(yaml.join(name), text).expect("write yaml");
    }
    (dir, path)
}

fn req(domain: &str, descriptors: Vec<RateLimitDescriptor>, hits_addend: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend,
    }
}

async fn ask(client: &mut Client, request: RateLimitRequest) -> RateLimitResponse {
    client
        .should_rate_limit(request)
        .await
        .expect("ShouldRateLimit answers")
        .into_inner()
}

/// The response's dynamic metadata in protobuf's JSON mapping (`Null` when absent).
fn dynamic_metadata(r: &RateLimitResponse) -> serde_json::Value {
    tollgate_envoy::response_json(r)["dynamicMetadata"].clone()
}

async fn scrape(addr: SocketAddr) -> String {
    let r = request(addr, "GET", "/metrics", Bytes::new(), &[]).await;
    assert_eq!(r.status, 200);
    r.text
}

/// The value of the series `name{labels}` (`name` alone when `labels` is empty) in a
/// Prometheus exposition, 0 when absent.
fn series(text: &str, name: &str, labels: &str) -> f64 {
    let prefix = if labels.is_empty() {
        format!("{name} ")
    } else {
        format!("{name}{{{labels}}} ")
    };
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0.0, |v| v.trim().parse().expect("a number"))
}

/// `response_dynamic_metadata = true`, over the reference's `metadata.yaml`: the domain, each
/// descriptor's entries (and its own `hitsAddend`, its limit override), the request's
/// `hitsAddend` when not 0, and the merged `metadata` of the descriptors that passed — as the
/// reference's `TestRatelimitToMetadata` and `TestMetadataReturnedForPassedDescriptors`
/// expect; `POST /json` carries the same as `dynamicMetadata`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_metadata_carries_the_metadata_of_the_descriptors_that_passed() {
    let (_dir, path) = layout(
        &[("metadata.yaml", METADATA)],
        true,
        "response_dynamic_metadata = true",
    );
    let process = Process::serve(&path);
    let mut client = connect(process.grpc.expect("grpc address")).await;
    let sub = [("key1", "value1"), ("subkey1", "x")];
    let both = || {
        req(
            "test-domain",
            vec![
                descriptor(&sub),
                descriptor(&[("key2", "y")]),
                descriptor(&[("nothing", "z")]),
            ],
            0,
        )
    };
    let r = ask(&mut client, both()).await;
    assert_eq!(code(&r), Code::Ok, "{r:?}");
    let expected = json!({
        "descriptors": [
            {"entries": ["key1=value1", "subkey1=x"]},
            {"entries": ["key2=y"]},
            {"entries": ["nothing=z"]},
        ],
        "domain": "test-domain",
        "metadata": {"name": "service_1", "service_with_quota": {"name": "service_2"}},
    });
    assert_eq!(dynamic_metadata(&r), expected, "{r:?}");

    // The first descriptor over its limit (6 hits of 5 per second: never admitted): only the
    // second's metadata; a limit override carries none, and is shown as protobuf text.
    let mut costly = descriptor(&sub);
    costly.hits_addend = Some(UInt64Value { value: 6 });
    let mut overridden = descriptor(&[("key2", "o")]);
    overridden.limit = Some(RateLimitOverride {
        requests_per_unit: 3,
        unit: 3,
    });
    let r = ask(
        &mut client,
        req(
            "test-domain",
            vec![costly, descriptor(&[("key2", "y")]), overridden],
            1,
        ),
    )
    .await;
    assert_eq!(code(&r), Code::OverLimit, "{r:?}");
    assert_eq!(
        dynamic_metadata(&r),
        json!({
            "descriptors": [
                {"entries": ["key1=value1", "subkey1=x"], "hitsAddend": 6},
                {"entries": ["key2=y"]},
                {"entries": ["key2=o"], "limit": "requests_per_unit:3 unit:HOUR"},
            ],
            "domain": "test-domain",
            "hitsAddend": 1,
            "metadata": {"service_with_quota": {"name": "service_2"}},
        }),
        "{r:?}"
    );

    // POST /json answers the same metadata.
    let body = r#"{"domain":"test-domain","descriptors":[
        {"entries":[{"key":"key1","value":"value1"},{"key":"subkey1","value":"x"}]},
        {"entries":[{"key":"key2","value":"y"}]},{"entries":[{"key":"nothing","value":"z"}]}]}"#;
    let reply = request(process.addr, "POST", "/json", Bytes::from(body), &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json["dynamicMetadata"], expected, "{}", reply.text);
}

/// `merge_domain_config = true`: the reference's `merge_domain_key1.yaml` and
/// `merge_domain_key2.yaml` make one domain (`TestDomainMerge`: key1=value1 10 per minute,
/// key2=value2 20 per minute). Without the setting the second file is refused, as the
/// reference refuses it; with it, the same top-level key in two files is refused
/// (`TestDuplicateKeyDomainMerge`). Dynamic metadata is off by default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_domain_config_merges_a_domain_spread_over_files() {
    let files = [
        ("merge_domain_key1.yaml", MERGE_1),
        ("merge_domain_key2.yaml", MERGE_2),
    ];
    let (_dir, path) = layout(&files, true, "merge_domain_config = true");
    let process = Process::serve(&path);
    let mut client = connect(process.grpc.expect("grpc address")).await;
    for (key, value, rate) in [("key1", "value1", 10), ("key2", "value2", 20)] {
        let r = ask(
            &mut client,
            req("test-domain", vec![descriptor(&[(key, value)])], 0),
        )
        .await;
        let limit = r.statuses[0].current_limit.clone().expect("a limit");
        assert_eq!(
            (code(&r), limit.requests_per_unit, limit.unit),
            (Code::Ok, rate, 2),
            "{key}: {r:?}"
        );
        assert_eq!(r.dynamic_metadata, None, "off by default: {r:?}");
    }

    let check = |files: &[(&str, &str)], envoy: &str| {
        let (dir, path) = layout(files, false, envoy);
        let out = Command::new(BIN)
            .arg("check-config")
            .arg(&path)
            .output()
            .expect("run check-config");
        drop(dir);
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, stderr) = check(&files, "");
    assert!(!ok, "a domain in two files is refused by default");
    assert!(
        stderr.contains("merge_domain_key2.yaml: domain: duplicate domain \"test-domain\"")
            && stderr.contains("envoy.merge_domain_config"),
        "{stderr}"
    );
    let twice = [
        ("merge_domain_key1.yaml", MERGE_1),
        ("merge_domain_key1_again.yaml", MERGE_1),
    ];
    let (ok, stderr) = check(&twice, "merge_domain_config = true");
    assert!(!ok, "the same top-level key twice is refused");
    assert!(
        stderr.contains(
            "merge_domain_key1_again.yaml: descriptors[0]: duplicate key \"key1_value1\""
        ),
        "{stderr}"
    );
}

/// A request's domain and entries, and the statistics key the reference gives it.
type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);

/// The README's example 10 (`value_to_metric`, with and without a wildcard), the reference's
/// `share_threshold.yaml` (a shared wildcard keeps its pattern), and the shapes of
/// `TestValueToMetric_DoesNotOverrideDetailedMetric` and `TestValueToMetric_MidLevelOnly`:
/// each request counted under the key the reference's tests expect, split into the
/// Prometheus labels `key1` (first level) and `key2` (the rest).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn value_to_metric_labels_as_the_reference_keys_its_statistics() {
    // README, "Example 10", both YAML blocks as written there.
    let example10 = "\
domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit:
              unit: minute
              requests_per_unit: 60
";
    let example10_wildcard = "\
domain: example10_wildcard
descriptors:
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit:
              unit: minute
              requests_per_unit: 100
";
    // config_test.go's inline configs, as YAML.
    let detailed = "\
domain: domain
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            detailed_metric: true
            rate_limit: { unit: minute, requests_per_unit: 60 }
";
    let mid_level = "\
domain: d
descriptors:
  - key: k1
    descriptors:
      - key: k2
        value_to_metric: true
        descriptors:
          - key: k3
            rate_limit: { unit: second, requests_per_unit: 1 }
";
    let (_dir, path) = layout(
        &[
            ("example10.yaml", example10),
            ("example10_wildcard.yaml", example10_wildcard),
            ("share_threshold.yaml", SHARE_THRESHOLD),
            ("detailed.yaml", detailed),
            ("mid_level.yaml", mid_level),
        ],
        true,
        "",
    );
    let process = Process::serve(&path);
    let mut client = connect(process.grpc.expect("grpc address")).await;
    // (domain, entries, the reference's statistics key: domain.key1[.key2])
    let cases: [Case<'_>; 7] = [
        (
            "example10",
            &[
                ("route", "api"),
                ("http_method", "GET"),
                ("subject_id", "123"),
            ],
            "example10.route_api.http_method_GET.subject_id",
        ),
        (
            "example10",
            &[
                ("route", "web"),
                ("http_method", "POST"),
                ("subject_id", "456"),
            ],
            "example10.route_web.http_method_POST.subject_id",
        ),
        // TestValueToMetric_WithEmptyValue: no `_` for an empty value.
        (
            "example10",
            &[("route", ""), ("http_method", "GET"), ("subject_id", "123")],
            "example10.route.http_method_GET.subject_id",
        ),
        (
            "example10_wildcard",
            &[
                ("user", "alice"),
                ("action", "readfile"),
                ("resource", "documents"),
            ],
            "example10_wildcard.user_alice.action_readfile.resource",
        ),
        // TestShareThreshold, "share_threshold with metrics": the pattern wins.
        (
            "test-domain",
            &[("route", "api/v1"), ("method", "GET")],
            "test-domain.route_api/*.method",
        ),
        // detailed_metric at the leaf wins over value_to_metric.
        (
            "domain",
            &[
                ("route", "draw"),
                ("http_method", "GET"),
                ("subject_id", "123"),
            ],
            "domain.route_draw.http_method_GET.subject_id_123",
        ),
        (
            "d",
            &[("k1", "X"), ("k2", "Y"), ("k3", "Z")],
            "d.k1.k2_Y.k3",
        ),
    ];
    for (domain, entries, _) in &cases {
        let r = ask(&mut client, req(domain, vec![descriptor(entries)], 0)).await;
        assert_eq!(code(&r), Code::Ok, "{domain} {entries:?}: {r:?}");
        assert!(r.statuses[0].current_limit.is_some(), "matched: {r:?}");
    }
    let text = scrape(process.addr).await;
    for (_, _, key) in cases {
        let mut parts = key.splitn(3, '.');
        let (domain, key1, key2) = (
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
        );
        let labels = format!(r#"domain="{domain}",key1="{key1}",key2="{key2}""#);
        assert_eq!(
            series(&text, "ratelimit_service_rate_limit_total_hits", &labels),
            1.0,
            "{key} ({labels}):\n{text}"
        );
    }
    // Without value_to_metric the request's values stay out of the labels.
    assert!(!text.contains("subject_id_456"), "{text}");
    // A value that would make a label set over 256 bytes is counted under the rule's own
    // key: callers' values are not written out at any length (1000 sets of 14 KB made
    // /metrics 71 MB).
    let long = "v".repeat(300);
    let entries = [
        ("route", "draw"),
        ("http_method", "GET"),
        ("subject_id", long.as_str()),
    ];
    let r = ask(&mut client, req("domain", vec![descriptor(&entries)], 0)).await;
    assert_eq!(code(&r), Code::Ok, "{r:?}");
    let text = scrape(process.addr).await;
    assert!(
        text.contains("subject_id") && !text.contains(&long[..100]),
        "{text}"
    );
}

/// `near_limit_ratio = 0.5`: on 10 per hour, the hits past the 5th are near the limit (the
/// reference's `floor(limit × ratio)` threshold); an out-of-range ratio refuses the file,
/// naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn near_limit_ratio_moves_the_near_limit_threshold() {
    let yaml = "domain: shop\ndescriptors:\n  - key: tenant\n    rate_limit: { unit: hour, requests_per_unit: 10 }\n";
    let (_dir, path) = layout(&[("shop.yaml", yaml)], true, "near_limit_ratio = 0.5");
    let process = Process::serve(&path);
    let mut client = connect(process.grpc.expect("grpc address")).await;
    for i in 0..11 {
        let r = ask(
            &mut client,
            req("shop", vec![descriptor(&[("tenant", "t")])], 0),
        )
        .await;
        let expected = if i < 10 { Code::Ok } else { Code::OverLimit };
        assert_eq!(code(&r), expected, "call {i}: {r:?}");
    }
    let text = scrape(process.addr).await;
    let tenant = r#"domain="shop",key1="tenant""#;
    assert_eq!(
        series(&text, "ratelimit_service_rate_limit_near_limit", tenant),
        5.0,
        "{text}"
    );
    assert_eq!(
        series(&text, "ratelimit_service_rate_limit_within_limit", tenant),
        10.0
    );

    for bad in ["0", "1.5", "-0.2", "nan"] {
        let (dir, path) = layout(
            &[("shop.yaml", yaml)],
            false,
            &format!("near_limit_ratio = {bad}"),
        );
        let out = Command::new(BIN)
            .arg("check-config")
            .arg(&path)
            .output()
            .expect("run check-config");
        drop(dir);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad} accepted");
        assert!(
            stderr.contains("envoy.near_limit_ratio: ") && stderr.contains("at most 1"),
            "{bad}: {stderr}"
        );
    }
}

/// The reference's service-level series under its Prometheus names, with HELP text: config
/// loads at start and on each reload (a refused one counted as an error), `ShouldRateLimit`
/// calls and their time (gRPC only, as the reference's interceptor), and call errors by type:
/// `service_error` for an invalid request (gRPC or `POST /json`), `redis_error` when the
/// store fails (here an unreachable Redis whose limits fail open).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_metrics_count_loads_calls_and_errors() {
    let yaml = "domain: shop\ndescriptors:\n  - key: tenant\n    rate_limit: { unit: hour, requests_per_unit: 10 }\n";
    let (dir, path) = layout(&[("shop.yaml", yaml)], true, "");
    let process = Process::serve(&path);
    let mut client = connect(process.grpc.expect("grpc address")).await;
    for _ in 0..2 {
        ask(
            &mut client,
            req("shop", vec![descriptor(&[("tenant", "t")])], 0),
        )
        .await;
    }
    let refused = client
        .should_rate_limit(req("shop", Vec::new(), 0))
        .await
        .expect_err("no descriptors");
    assert_eq!(refused.code(), tollgate_envoy::tonic::Code::InvalidArgument);
    let json = request(
        process.addr,
        "POST",
        "/json",
        Bytes::from(r#"{"domain":"shop","descriptors":[]}"#),
        &[],
    )
    .await;
    assert_eq!(json.status, 400);

    let text = scrape(process.addr).await;
    let method = r#"grpc_method="ShouldRateLimit""#;
    assert_eq!(
        series(&text, "ratelimit_service_total_requests", method),
        3.0,
        "{text}"
    );
    assert_eq!(
        series(
            &text,
            "ratelimit_service_response_time_seconds_count",
            method
        ),
        3.0,
        "{text}"
    );
    assert_eq!(
        series(
            &text,
            "ratelimit_service_should_rate_limit_error",
            r#"err_type="service_error""#
        ),
        2.0,
        "{text}"
    );
    assert_eq!(
        series(&text, "ratelimit_service_config_load_success", ""),
        1.0,
        "{text}"
    );
    assert!(
        text.contains("ratelimit_service_config_load_error 0"),
        "the error series exists from start: {text}"
    );
    for name in [
        "ratelimit_service_total_requests",
        "ratelimit_service_response_time_seconds",
        "ratelimit_service_should_rate_limit_error",
        "ratelimit_service_config_load_success",
        "ratelimit_service_config_load_error",
    ] {
        assert!(text.contains(&format!("# HELP {name} ")), "{name}:\n{text}");
    }
    assert!(
        text.contains("# TYPE ratelimit_service_response_time_seconds histogram"),
        "{text}"
    );

    // A broken YAML file: the reload is refused and counted; put back, a success again.
    let file = dir.path().join("ratelimit").join("shop.yaml");
    std::fs::write(
        &file,
        "domain: shop\ndescriptors:\n  - key: tenant\n    rate_limit: { unit: fortnight }\n",
    )
    .expect("write");
    process.signal("HUP");
    let load = |name: &'static str, want: f64| {
        let addr = process.addr;
        async move {
            eventually(Duration::from_secs(10), || async move {
                series(&scrape(addr).await, name, "") == want
            })
            .await
        }
    };
    assert!(
        load("ratelimit_service_config_load_error", 1.0).await,
        "{}",
        process.log()
    );
    std::fs::write(&file, yaml).expect("write");
    process.signal("HUP");
    assert!(
        load("ratelimit_service_config_load_success", 2.0).await,
        "{}",
        process.log()
    );

    // Redis unreachable, limits failing open: answered OK, counted as a redis_error.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port");
    // Port 0: the process binds a free port itself (`Process::grpc`).
    let grpc = "127.0.0.1:0";
    let (redis_dir, redis_path) = config_file(&format!(
        "[server]\ngrpc = \"{grpc}\"\n\n[store]\nredis = \"redis://{closed}\"\ntimeout = \"50ms\"\n\n\
         [envoy]\nconfig_dir = \"ratelimit\"\n"
    ));
    std::fs::create_dir_all(redis_dir.path().join("ratelimit")).expect("mkdir");
    std::fs::write(redis_dir.path().join("ratelimit").join("shop.yaml"), yaml).expect("write");
    let down = Process::serve(&redis_path);
    let mut client = connect(down.grpc.expect("grpc address")).await;
    let r = ask(
        &mut client,
        req("shop", vec![descriptor(&[("tenant", "t")])], 0),
    )
    .await;
    assert_eq!(code(&r), Code::Ok, "fails open: {r:?}");
    let text = scrape(down.addr).await;
    assert_eq!(
        series(
            &text,
            "ratelimit_service_should_rate_limit_error",
            r#"err_type="redis_error""#
        ),
        1.0,
        "{text}"
    );
}
