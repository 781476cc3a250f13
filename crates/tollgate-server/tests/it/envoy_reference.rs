//! What a migration from envoyproxy/ratelimit relies on beyond the YAML files, on the real
//! binary (`tollgate serve`) with a tonic client: per-request limit overrides, the
//! reference's per-rule Prometheus counters, its limit headers, global shadow mode, and
//! `POST /json` answering as gRPC does.
//!
//! The limits are GCRA (`[envoy] algorithm = "gcra"`): no window edge can fall inside a test
//! and reset a counter, and within the second a test takes no unit comes back.

use std::net::SocketAddr;

use bytes::Bytes;
use tollgate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse,
};
use tollgate_envoy::tonic;

use crate::binary::{Process, config_file};
use crate::grpc::{Client, code, connect};
use crate::support::request;

/// The reference's YAML: `tenant` 5/hour, `path=/beta` 1/hour in shadow mode, `blocked` 0/hour,
/// `client` 100/hour with `detailed_metric`.
const SHOP: &str = "\
domain: shop
descriptors:
  - key: tenant
    rate_limit: { unit: hour, requests_per_unit: 5 }
  - key: path
    value: /beta
    shadow_mode: true
    rate_limit: { unit: hour, requests_per_unit: 1 }
  - key: blocked
    rate_limit: { unit: hour, requests_per_unit: 0 }
  - key: client
    detailed_metric: true
    rate_limit: { unit: hour, requests_per_unit: 100 }
";

/// A `tollgate serve` of [`SHOP`] plus a `[[envoy.rules]]` rule (`edge`: `user` → 2 per hour),
/// with `extra` added to `[envoy]`.
fn serve(extra: &str) -> (tempfile::TempDir, Process) {
    // Port 0: the process binds a free port itself (`Process::grpc`).
    let grpc = "127.0.0.1:0";
    let (dir, path) = config_file(&format!(
        "[server]\ngrpc = \"{grpc}\"\n\n\
         [[limits]]\nname = \"per_user\"\nalgorithm = \"gcra\"\nlimit = 2\nperiod = \"1h\"\nkey = [\"user\"]\non_store_error = \"allow\"\n\n\
         [envoy]\nconfig_dir = \"ratelimit\"\nalgorithm = \"gcra\"\n{extra}\n\n\
         [[envoy.rules]]\ndomain = \"edge\"\nlimit = \"per_user\"\ndescriptor = [{{ key = \"user\", part = \"user\" }}]\n"
    ));
    let yaml = dir.path().join("ratelimit");
    std::fs::create_dir_all(&yaml).expect("mkdir");
    std::fs::write(yaml.join("shop.yaml"), SHOP).expect("write yaml");
    (dir, Process::serve(&path))
}

/// `grpc::descriptor` of `entries`, with the override `limit` (requests per unit, unit).
fn descriptor(entries: &[(&str, &str)], limit: Option<(u32, i32)>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        limit: limit.map(|(requests_per_unit, unit)| RateLimitOverride {
            requests_per_unit,
            unit,
        }),
        ..crate::grpc::descriptor(entries)
    }
}

fn req(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: 0,
    }
}

async fn ask(client: &mut Client, request: RateLimitRequest) -> RateLimitResponse {
    client
        .should_rate_limit(request)
        .await
        .expect("ShouldRateLimit answers")
        .into_inner()
}

async fn refused(client: &mut Client, request: RateLimitRequest) -> tonic::Status {
    client
        .should_rate_limit(request)
        .await
        .expect_err("the call is refused")
}

/// (code, limit name, requests per unit, unit, remaining) of status `i`.
fn status(r: &RateLimitResponse, i: usize) -> (Code, String, u32, i32, u32) {
    let s = &r.statuses[i];
    let l = s.current_limit.clone().unwrap_or_default();
    (
        Code::try_from(s.code).expect("known code"),
        l.name,
        l.requests_per_unit,
        l.unit,
        s.limit_remaining,
    )
}

const HOUR: i32 = Unit::Hour as i32;

/// An override is decided by its own rate, on a counter of its own (per rate), never the
/// configured limit's: with GCRA (`[envoy] algorithm`, as here), whose state is in the
/// rate's own units, whatever `override_counters` says (its default, `shared`, shares fixed
/// windows only: `envoy_quota.rs`); a bad unit or 0 per unit is INVALID_ARGUMENT naming the field and
/// charges nothing (the other descriptor of that call included); a domain the config does
/// not know ignores overrides, as the reference does. (`current_limit_name = "limit"`: the
/// names say which limit decided.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_overrides_have_their_own_counters_and_are_validated() {
    let (_dir, process) = serve("current_limit_name = \"limit\"");
    let mut client = connect(process.grpc.expect("grpc address")).await;
    let t1 = [("tenant", "t1")];
    let over = |n, unit| req("shop", vec![descriptor(&t1, Some((n, unit)))]);
    let name = "envoy.override.hour".to_owned();
    let r = ask(&mut client, over(2, HOUR)).await;
    assert_eq!(status(&r, 0), (Code::Ok, name.clone(), 2, HOUR, 1), "{r:?}");
    let r = ask(&mut client, over(2, HOUR)).await;
    assert_eq!(status(&r, 0), (Code::Ok, name.clone(), 2, HOUR, 0), "{r:?}");
    let r = ask(&mut client, over(2, HOUR)).await;
    assert_eq!(code(&r), Code::OverLimit, "{r:?}");
    assert_eq!(status(&r, 0).0, Code::OverLimit);

    // The configured limit of the same descriptor was not charged by the overrides.
    let plain = ask(&mut client, req("shop", vec![descriptor(&t1, None)])).await;
    assert_eq!(
        status(&plain, 0),
        (Code::Ok, "shop.tenant".into(), 5, HOUR, 4),
        "{plain:?}"
    );
    // Another rate for the same descriptor: a counter of its own.
    let r = ask(&mut client, over(3, HOUR)).await;
    assert_eq!(status(&r, 0), (Code::Ok, name.clone(), 3, HOUR, 2), "{r:?}");
    // A rule of `[[envoy.rules]]` is overridden too.
    let r = ask(
        &mut client,
        req("edge", vec![descriptor(&[("user", "u")], Some((7, HOUR)))]),
    )
    .await;
    assert_eq!(status(&r, 0), (Code::Ok, name.clone(), 7, HOUR, 6), "{r:?}");

    // Invalid overrides: nothing charged, not even the valid descriptor beside them.
    let t2 = [("tenant", "t2")];
    for (bad, field) in [
        ((2, 0), "descriptors[1].limit.unit"),
        ((2, 42), "descriptors[1].limit.unit"),
        ((0, HOUR), "descriptors[1].limit.requests_per_unit"),
    ] {
        let status = refused(
            &mut client,
            req(
                "shop",
                vec![descriptor(&t2, None), descriptor(&t2, Some(bad))],
            ),
        )
        .await;
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains(field), "{status:?}");
    }
    let r = ask(&mut client, req("shop", vec![descriptor(&t2, None)])).await;
    assert_eq!(status(&r, 0).4, 4, "t2 charged once, by this call: {r:?}");

    // A domain with no config: the override is ignored, nothing is limited.
    let r = ask(
        &mut client,
        req("nowhere", vec![descriptor(&t1, Some((1, HOUR)))]),
    )
    .await;
    assert_eq!(code(&r), Code::Ok);
    assert_eq!(r.statuses[0].current_limit, None, "{r:?}");
}

/// The value of the series `name{labels}` in a Prometheus exposition (0 when absent).
fn series(text: &str, name: &str, labels: &str) -> f64 {
    let prefix = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0.0, |v| v.trim().parse().expect("a number"))
}

async fn metrics(addr: SocketAddr) -> String {
    let r = request(addr, "GET", "/metrics", Bytes::new(), &[]).await;
    assert_eq!(r.status, 200);
    r.text
}

/// Per rule key, as the reference counts: hits, admitted, past 80 % (the part past it),
/// refused, refused in shadow mode; `detailed_metric` labels by the request's value;
/// overrides by the request's entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_metrics_count_hits_per_rule_key() {
    let (_dir, process) = serve("");
    let mut client = connect(process.grpc.expect("grpc address")).await;
    for _ in 0..6 {
        ask(
            &mut client,
            req("shop", vec![descriptor(&[("tenant", "a")], None)]),
        )
        .await;
    }
    for _ in 0..2 {
        let r = ask(
            &mut client,
            req("shop", vec![descriptor(&[("path", "/beta")], None)]),
        )
        .await;
        assert_eq!(code(&r), Code::Ok, "shadow: {r:?}");
    }
    let r = ask(
        &mut client,
        req("shop", vec![descriptor(&[("blocked", "x")], None)]),
    )
    .await;
    assert_eq!(code(&r), Code::OverLimit);
    ask(
        &mut client,
        req("shop", vec![descriptor(&[("client", "abc")], None)]),
    )
    .await;
    ask(
        &mut client,
        req(
            "shop",
            vec![descriptor(&[("tenant", "o")], Some((9, HOUR)))],
        ),
    )
    .await;
    for _ in 0..3 {
        ask(
            &mut client,
            req("edge", vec![descriptor(&[("user", "u1")], None)]),
        )
        .await;
    }

    let text = metrics(process.addr).await;
    let tenant = r#"domain="shop",key1="tenant""#;
    let got = |name: &str, labels: &str| series(&text, name, labels);
    // 6 hits on 5 per hour: 5 admitted, the 5th past 80 % (4), the 6th refused.
    assert_eq!(
        got("ratelimit_service_rate_limit_total_hits", tenant),
        6.0,
        "{text}"
    );
    assert_eq!(
        got("ratelimit_service_rate_limit_within_limit", tenant),
        5.0
    );
    assert_eq!(got("ratelimit_service_rate_limit_near_limit", tenant), 1.0);
    assert_eq!(got("ratelimit_service_rate_limit_over_limit", tenant), 1.0);
    assert_eq!(got("ratelimit_service_rate_limit_shadow_mode", tenant), 0.0);
    let beta = r#"domain="shop",key1="path_/beta""#;
    assert_eq!(
        got("ratelimit_service_rate_limit_total_hits", beta),
        2.0,
        "{text}"
    );
    assert_eq!(got("ratelimit_service_rate_limit_over_limit", beta), 1.0);
    assert_eq!(got("ratelimit_service_rate_limit_shadow_mode", beta), 1.0);
    let blocked = r#"domain="shop",key1="blocked""#;
    assert_eq!(
        got("ratelimit_service_rate_limit_over_limit", blocked),
        1.0,
        "{text}"
    );
    let detailed = r#"domain="shop",key1="client_abc""#;
    assert_eq!(
        got("ratelimit_service_rate_limit_total_hits", detailed),
        1.0,
        "{text}"
    );
    let overridden = r#"domain="shop",key1="tenant_o""#;
    assert_eq!(
        got("ratelimit_service_rate_limit_within_limit", overridden),
        1.0,
        "{text}"
    );
    // A `[[envoy.rules]]` rule: 2 per hour, 3 hits.
    let user = r#"domain="edge",key1="user""#;
    assert_eq!(
        got("ratelimit_service_rate_limit_within_limit", user),
        2.0,
        "{text}"
    );
    assert_eq!(got("ratelimit_service_rate_limit_over_limit", user), 1.0);
    // The values of a plain key-only rule never become labels.
    assert!(!text.contains("tenant_a"), "{text}");
    assert!(!text.contains("user_u1"), "{text}");
}

/// A `detailed_metric` value holding `\`, `"` or a control character is a series of its own,
/// with those characters as `_`: the scrape's `total_hits` add up to the hits sent. (The
/// exporter reads a backslash as an escape already written: `c"d` and `c\"d` rendered
/// alike, and so did `e\` and `e\\`, one series overwriting the other, 11 of 18 hits shown.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detailed_values_with_backslashes_and_quotes_keep_their_hits() {
    let (_dir, process) = serve("");
    let mut client = connect(process.grpc.expect("grpc address")).await;
    let sent: [(&str, u32, &str); 5] = [
        (r#"c"d"#, 5, "client_c_d"),
        (r#"c\"d"#, 7, "client_c__d"),
        ("e\\", 2, "client_e_"),
        ("e\\\\", 4, "client_e__"),
        ("f\tg\u{1}", 3, "client_f_g_"),
    ];
    for &(value, n, _) in &sent {
        for _ in 0..n {
            let r = ask(
                &mut client,
                req("shop", vec![descriptor(&[("client", value)], None)]),
            )
            .await;
            assert_eq!(code(&r), Code::Ok, "{value:?}: {r:?}");
        }
    }
    let text = metrics(process.addr).await;
    let total: f64 = text
        .lines()
        .filter(|l| {
            l.starts_with(r#"ratelimit_service_rate_limit_total_hits{domain="shop",key1="client_"#)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(total, 21.0, "the hits sent, 21:\n{text}");
    for &(value, n, key1) in &sent {
        let labels = format!(r#"domain="shop",key1="{key1}""#);
        assert_eq!(
            series(&text, "ratelimit_service_rate_limit_total_hits", &labels),
            f64::from(n),
            "{value:?} as {key1}:\n{text}"
        );
    }
}

fn headers(r: &RateLimitResponse) -> Vec<(String, String)> {
    r.response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect()
}

/// `limit_response_headers`: the reference's three headers, under the configured names, for
/// the descriptor closest to its limit, an over-limit one first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_headers_show_the_descriptor_closest_to_its_limit() {
    let (_dir, process) = serve(
        "limit_response_headers = true\n\
         limit_limit_header = \"X-RateLimit-Limit\"\n\
         limit_remaining_header = \"X-RateLimit-Remaining\"\n\
         limit_reset_header = \"X-RateLimit-Reset\"",
    );
    let mut client = connect(process.grpc.expect("grpc address")).await;
    let two = || {
        req(
            "shop",
            vec![
                descriptor(&[("tenant", "h")], None),
                descriptor(&[("tenant", "h2")], Some((2, HOUR))),
            ],
        )
    };
    let r = ask(&mut client, two()).await;
    let h = headers(&r);
    assert_eq!(h.len(), 3, "{h:?}");
    assert_eq!(h[0], ("X-RateLimit-Limit".into(), "2".into()));
    assert_eq!(h[1], ("X-RateLimit-Remaining".into(), "1".into()));
    assert_eq!(h[2].0, "X-RateLimit-Reset");
    let reset: u64 = h[2].1.parse().expect("whole seconds");
    assert!((1..=3600).contains(&reset), "{h:?}");
    assert_eq!(
        reset,
        u64::try_from(r.statuses[1].duration_until_reset.expect("reset").seconds).expect("≥ 0")
    );
    // Over limit: that descriptor, whatever the others have left.
    let r = ask(
        &mut client,
        req(
            "shop",
            vec![
                descriptor(&[("tenant", "h3")], None),
                descriptor(&[("blocked", "b")], None),
            ],
        ),
    )
    .await;
    assert_eq!(code(&r), Code::OverLimit);
    let h = headers(&r);
    assert_eq!(h[0], ("X-RateLimit-Limit".into(), "0".into()), "{h:?}");
    assert_eq!(h[1], ("X-RateLimit-Remaining".into(), "0".into()));
    // No descriptor with a limit: no headers.
    let r = ask(
        &mut client,
        req("shop", vec![descriptor(&[("none", "x")], None)]),
    )
    .await;
    assert!(r.response_headers_to_add.is_empty(), "{r:?}");
}

/// `[envoy] shadow = true`: every overall code is OK — imported limits, `[[envoy.rules]]` rules
/// and overrides — while every descriptor is still counted (remaining goes down), keeps its
/// own status (`OVER_LIMIT` included, as the reference answers), and would-be refusals are
/// counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_shadow_mode_answers_ok_and_keeps_counting() {
    let (_dir, process) = serve("shadow = true");
    let mut client = connect(process.grpc.expect("grpc address")).await;
    let mut remaining = Vec::new();
    for call in 0..4 {
        let r = ask(
            &mut client,
            req(
                "shop",
                vec![
                    descriptor(&[("tenant", "s")], None),
                    descriptor(&[("tenant", "s2")], Some((1, HOUR))),
                    descriptor(&[("blocked", "b")], None),
                ],
            ),
        )
        .await;
        assert_eq!(code(&r), Code::Ok, "{r:?}");
        let codes: Vec<i32> = r.statuses.iter().map(|s| s.code).collect();
        let override_code = if call == 0 { Code::Ok } else { Code::OverLimit };
        assert_eq!(
            codes,
            [
                Code::Ok as i32,
                override_code as i32,
                Code::OverLimit as i32
            ],
            "call {call}: {r:?}"
        );
        remaining.push(r.statuses[0].limit_remaining);
        let r = ask(
            &mut client,
            req("edge", vec![descriptor(&[("user", "s")], None)]),
        )
        .await;
        assert_eq!(code(&r), Code::Ok, "{r:?}");
    }
    assert_eq!(remaining, [4, 3, 2, 1], "still counted");
    let text = metrics(process.addr).await;
    // Every call had a would-be refusal (`blocked`); `edge` calls 3 and 4 too.
    let global = text
        .lines()
        .find_map(|l| l.strip_prefix("ratelimit_service_global_shadow_mode "))
        .map(|v| v.trim().parse::<f64>().expect("number"));
    assert_eq!(global, Some(6.0), "{text}");
    assert_eq!(
        series(&text, "tollgate_shadow_denied_total", r#"limit="per_user""#),
        2.0,
        "{text}"
    );
    // The per-rule `shadow_mode` series counts rules in shadow mode of their own (none
    // here), as the reference's: global shadow mode counts `over_limit`.
    let edge = r#"domain="edge",key1="user""#;
    assert_eq!(
        series(&text, "ratelimit_service_rate_limit_over_limit", edge),
        2.0,
        "{text}"
    );
    assert_eq!(
        series(&text, "ratelimit_service_rate_limit_shadow_mode", edge),
        0.0
    );
}

/// The status and JSON body of `POST /json`.
async fn post_json(addr: SocketAddr, body: &str) -> (u16, serde_json::Value) {
    let r = request(addr, "POST", "/json", Bytes::from(body.to_owned()), &[]).await;
    (r.status, r.json)
}

/// `v` without the times (`durationUntilReset`, the reset header), which may tick between
/// two calls.
fn timeless(mut v: serde_json::Value) -> serde_json::Value {
    if let Some(statuses) = v.get_mut("statuses").and_then(|s| s.as_array_mut()) {
        for s in statuses {
            if let Some(o) = s.as_object_mut() {
                o.remove("durationUntilReset");
            }
        }
    }
    if let Some(headers) = v
        .get_mut("responseHeadersToAdd")
        .and_then(|s| s.as_array_mut())
    {
        for h in headers {
            if h["key"] == "RateLimit-Reset" {
                h["value"] = serde_json::Value::Null;
            }
        }
    }
    v
}

/// `POST /json` answers what gRPC answers: the same sequence of requests on two tenants gives
/// the same bodies (200, then 429 once over limit), and both charge one counter; a body that
/// is not a request is 400 naming what is wrong, a request gRPC refuses is 400 with gRPC's
/// message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_answers_as_grpc_does() {
    let (_dir, process) = serve("limit_response_headers = true");
    let mut client = connect(process.grpc.expect("grpc address")).await;
    let json_of = |tenant: &str, over: Option<(u32, &str)>| {
        let limit = over.map_or(String::new(), |(n, unit)| {
            format!(r#","limit":{{"requestsPerUnit":{n},"unit":"{unit}"}}"#)
        });
        format!(
            r#"{{"domain":"shop","descriptors":[{{"entries":[{{"key":"tenant","value":"{tenant}"}}]{limit}}},{{"entries":[{{"key":"none","value":"x"}}]}}]}}"#
        )
    };
    let grpc_of = |tenant: &str, over: Option<(u32, i32)>| {
        req(
            "shop",
            vec![
                descriptor(&[("tenant", tenant)], over),
                descriptor(&[("none", "x")], None),
            ],
        )
    };
    for (over_json, over_grpc) in [(None, None), (Some((2, "HOUR")), Some((2, HOUR)))] {
        for i in 0..7 {
            let g = ask(&mut client, grpc_of("g", over_grpc)).await;
            let (status, body) = post_json(process.addr, &json_of("j", over_json)).await;
            let expected = if code(&g) == Code::OverLimit {
                429
            } else {
                200
            };
            assert_eq!(status, expected, "call {i}: {body}");
            let g = tollgate_envoy::response_json(&g);
            assert_eq!(timeless(body.clone()), timeless(g), "call {i}");
            assert!(
                body["statuses"][0]["durationUntilReset"].is_string(),
                "{body}"
            );
        }
    }
    // One counter: /json on gRPC's tenant sees gRPC's charges (5 per hour, all taken).
    let (status, body) = post_json(process.addr, &json_of("g", None)).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["overallCode"], "OVER_LIMIT");
    assert_eq!(body["statuses"][0]["currentLimit"]["requestsPerUnit"], 5);
    assert_eq!(body["statuses"][0]["currentLimit"]["unit"], "HOUR");
    assert_eq!(body["statuses"][1], serde_json::json!({ "code": "OK" }));

    // Bad bodies.
    let (status, body) = post_json(process.addr, "{\"domain\": ").await;
    assert_eq!(status, 400);
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("invalid JSON")),
        "{body}"
    );
    let (status, body) = post_json(
        process.addr,
        r#"{"domain":"shop","descriptors":[{"entries":[{"key":"tenant","vaule":"x"}]}]}"#,
    )
    .await;
    assert_eq!(status, 400);
    let error = body["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("descriptors[0].entries[0]") && error.contains("vaule"),
        "{body}"
    );
    let (status, body) = post_json(process.addr, r#"{"domain":"shop","descriptors":[]}"#).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("descriptors must not be empty"))
    );
    let (status, body) = post_json(process.addr, &json_of("z", Some((0, "HOUR")))).await;
    assert_eq!(status, 400);
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("descriptors[0].limit.requests_per_unit")),
        "{body}"
    );
}

/// On Redis, an override's counter is one for every instance (two processes on one Redis take
/// turns), and its key lives under the store's prefix with a TTL, like every key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overrides_share_one_counter_across_instances_on_redis() {
    let redis = tollgate_testkit::RedisServer::start();
    let start = || {
        // Port 0: the process binds a free port itself (`Process::grpc`).
        let grpc = "127.0.0.1:0";
        let (dir, path) = config_file(&format!(
            "[server]\ngrpc = \"{grpc}\"\n\n[store]\nredis = \"{}\"\nprefix = \"ovr\"\ntimeout = \"2s\"\n\n\
             [[limits]]\nname = \"per_user\"\nalgorithm = \"gcra\"\nlimit = 2\nperiod = \"1h\"\nkey = [\"user\"]\non_store_error = \"deny\"\n\n\
             [envoy]\nalgorithm = \"gcra\"\non_store_error = \"deny\"\n\n\
             [[envoy.rules]]\ndomain = \"edge\"\nlimit = \"per_user\"\ndescriptor = [{{ key = \"user\", part = \"user\" }}]\n",
            redis.url()
        ));
        (dir, Process::serve(&path))
    };
    let (_a_dir, a) = start();
    let (_b_dir, b) = start();
    let mut clients = [
        connect(a.grpc.expect("grpc a")).await,
        connect(b.grpc.expect("grpc b")).await,
    ];
    let over = || req("edge", vec![descriptor(&[("user", "r")], Some((3, HOUR)))]);
    let mut remaining = Vec::new();
    for i in 0..4 {
        let r = ask(&mut clients[i % 2], over()).await;
        remaining.push((code(&r), r.statuses[0].limit_remaining));
    }
    assert_eq!(
        remaining,
        [
            (Code::Ok, 2),
            (Code::Ok, 1),
            (Code::Ok, 0),
            (Code::OverLimit, 0)
        ],
        "redis:\n{}",
        redis.log()
    );
    let keys = redis.cmd(&["KEYS", "ovr:envoy.override.hour:*"]);
    let key = keys
        .lines()
        .find(|l| l.starts_with("ovr:envoy.override.hour:"))
        .unwrap_or_else(|| panic!("an override key in {keys:?}"));
    assert!(
        key.contains("rate=3") && key.contains("domain=edge"),
        "{key}"
    );
    let ttl = redis.integer(&["PTTL", key]);
    assert!(ttl > 0, "the key has a TTL: {ttl}");
}
