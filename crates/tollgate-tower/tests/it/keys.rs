//! Keys: per IP, per header, per user; proxies trusted only as configured; IPv6 grouping;
//! requests without a key get a clear answer.

use std::time::Duration;

use http::{HeaderName, StatusCode};
use tollgate::Algorithm;
use tollgate_tower::{
    ClientIp, FromExtension, Header, IpNet, KeyError, ProxyHeader, RateLimitLayer, Rejection,
    UserId,
};

use crate::support::*;

const MINUTE: Duration = Duration::from_secs(60);

fn per_ip_layer(n: u64, ip: ClientIp) -> RateLimitLayer {
    let clock = clock();
    let limiter = limiter(
        memory(&clock),
        &clock,
        vec![limit("per_ip", Algorithm::FixedWindow, n, MINUTE, &["ip"])],
    );
    RateLimitLayer::new(limiter, ["per_ip"], ip).expect("layer")
}

fn net(s: &str) -> IpNet {
    s.parse().expect("cidr")
}

/// Each peer address has its own quota.
#[tokio::test]
async fn limits_per_ip() {
    let svc = service(&per_ip_layer(2, ClientIp::new()));
    assert_eq!(
        statuses(&svc, 3, || from("203.0.113.1")).await,
        [200, 200, 429]
    );
    assert_eq!(statuses(&svc, 1, || from("203.0.113.2")).await, [200]);
}

/// An API key header is the key; a request without it is a 400 saying which header.
#[tokio::test]
async fn limits_per_header() {
    let clock = clock();
    let limiter = limiter(
        memory(&clock),
        &clock,
        vec![limit("per_key", Algorithm::Gcra, 1, MINUTE, &["api_key"])],
    );
    let key = Header::new(HeaderName::from_static("x-api-key")).part_name("api_key");
    let svc = service(&RateLimitLayer::new(limiter, ["per_key"], key).expect("layer"));
    let with_key = |k: &'static str| request_from("203.0.113.1", move |b| b.header("x-api-key", k));
    assert_eq!(statuses(&svc, 2, || with_key("alpha")).await, [200, 429]);
    assert_eq!(statuses(&svc, 1, || with_key("beta")).await, [200]);

    let resp = send(&svc, from("203.0.113.1")).await;
    assert_status(&resp, StatusCode::BAD_REQUEST);
    assert_eq!(header(&resp, "content-type"), "application/problem+json");
    assert!(matches!(
        resp.extensions().get::<Rejection>(),
        Some(Rejection::NoKey(KeyError::MissingHeader(_)))
    ));
    let body: serde_json::Value = serde_json::from_str(&body_text(resp).await).expect("json body");
    assert_eq!(body["status"], 400);
    assert!(
        body["detail"]
            .as_str()
            .is_some_and(|d| d.contains("x-api-key")),
        "{body}"
    );
}

/// The user set by an earlier authentication layer is the key; its absence is a 500 (the
/// layers are in the wrong order), never an unchecked pass.
#[tokio::test]
async fn limits_per_user() {
    let clock = clock();
    let limiter = limiter(
        memory(&clock),
        &clock,
        vec![limit(
            "per_user",
            Algorithm::SlidingLog,
            1,
            MINUTE,
            &["user"],
        )],
    );
    let svc =
        service(&RateLimitLayer::new(limiter, ["per_user"], FromExtension::user()).expect("layer"));
    let as_user = |u: &str| {
        let mut r = from("203.0.113.1");
        r.extensions_mut().insert(UserId(u.to_owned()));
        r
    };
    assert_eq!(statuses(&svc, 2, || as_user("alice")).await, [200, 429]);
    assert_eq!(statuses(&svc, 1, || as_user("bob")).await, [200]);
    let resp = send(&svc, from("203.0.113.1")).await;
    assert_status(&resp, StatusCode::INTERNAL_SERVER_ERROR);
    let body = body_text(resp).await;
    assert!(body.contains("misconfigured"), "{body}");
}

/// A spoofed `X-Forwarded-For` from a peer that is not a trusted proxy changes nothing: the
/// peer is counted, whatever the header says.
#[tokio::test]
async fn spoofed_forwarded_for_from_untrusted_peer_is_ignored() {
    let ip = ClientIp::new().trusted_proxies([net("10.0.0.0/8")]);
    let svc = service(&per_ip_layer(2, ip));
    let mut n = 0;
    let spoofed = || {
        n += 1;
        let fake = format!("198.51.100.{n}");
        request_from("203.0.113.9", move |b| {
            b.header("x-forwarded-for", fake)
                .header("forwarded", "for=192.0.2.1")
        })
    };
    let mut got = Vec::new();
    let mut make = spoofed;
    for _ in 0..3 {
        got.push(send(&svc, make()).await.status().as_u16());
    }
    assert_eq!(got, [200, 200, 429]);
}

/// Behind trusted proxies the client is the first untrusted hop from the right; changing the
/// leftmost (client-written) entries does not escape the limit.
#[tokio::test]
async fn trusted_proxy_walk_finds_the_client() {
    let ip = ClientIp::new().trusted_proxies([net("10.0.0.0/8"), net("fd00::/8")]);
    let svc = service(&per_ip_layer(2, ip));
    let via =
        |xff: &'static str| request_from("10.0.0.1", move |b| b.header("x-forwarded-for", xff));
    let statuses_of = async |list: &[&'static str]| {
        let mut out = Vec::new();
        for xff in list {
            out.push(send(&svc, via(xff)).await.status().as_u16());
        }
        out
    };
    assert_eq!(
        statuses_of(&[
            "198.51.100.7, 10.0.0.2",
            "1.1.1.1, 198.51.100.7, 10.0.0.3",
            "2.2.2.2, 198.51.100.7",
        ])
        .await,
        [200, 200, 429]
    );
    // another client behind the same proxies has its own quota
    assert_eq!(statuses_of(&["198.51.100.8, fd00::1"]).await, [200]);
    // the proxy itself, with no header, is counted as the client
    assert_eq!(statuses(&svc, 1, || from("10.0.0.1")).await, [200]);
    // a non-address entry written by a trusted hop is refused with 400
    let resp = send(&svc, via("198.51.100.9, unknown")).await;
    assert_status(&resp, StatusCode::BAD_REQUEST);
}

/// `Forwarded` (RFC 7239) is walked the same way when configured.
#[tokio::test]
async fn forwarded_header_walk() {
    let ip = ClientIp::new()
        .trusted_proxies([net("10.0.0.0/8")])
        .proxy_header(ProxyHeader::Forwarded);
    let svc = service(&per_ip_layer(1, ip));
    let via = |fwd: &'static str| request_from("10.0.0.1", move |b| b.header("forwarded", fwd));
    let first = send(
        &svc,
        via(r#"for=6.6.6.6, for="[2001:db8::7]:443";proto=https"#),
    )
    .await;
    assert_status(&first, StatusCode::OK);
    // same /64, spoofed leftmost differs: same key
    let second = send(&svc, via(r#"for=1.1.1.1, for="[2001:db8::8]""#)).await;
    assert_status(&second, StatusCode::TOO_MANY_REQUESTS);
    // X-Forwarded-For is not read in this mode
    let other = request_from("10.0.0.1", |b| {
        b.header("forwarded", "for=198.51.100.1")
            .header("x-forwarded-for", "2001:db8::9")
    });
    assert_status(&send(&svc, other).await, StatusCode::OK);
}

/// IPv6 clients are grouped by /64 by default, or by the configured prefix; IPv4 by /32.
#[tokio::test]
async fn ipv6_grouping() {
    let svc = service(&per_ip_layer(2, ClientIp::new()));
    assert_eq!(statuses(&svc, 1, || from("2001:db8:1:2::1")).await, [200]);
    assert_eq!(
        statuses(&svc, 1, || from("2001:db8:1:2:ffff::1")).await,
        [200]
    );
    assert_eq!(
        statuses(&svc, 1, || from("2001:db8:1:2::abcd")).await,
        [429]
    );
    assert_eq!(statuses(&svc, 1, || from("2001:db8:1:3::1")).await, [200]);
    // IPv4 /32: a neighbour is another client
    assert_eq!(statuses(&svc, 2, || from("192.0.2.1")).await, [200, 200]);
    assert_eq!(statuses(&svc, 1, || from("192.0.2.2")).await, [200]);

    let wide = ClientIp::new().ipv6_prefix(48).expect("prefix");
    let svc = service(&per_ip_layer(1, wide));
    assert_eq!(statuses(&svc, 1, || from("2001:db8:1:2::1")).await, [200]);
    assert_eq!(statuses(&svc, 1, || from("2001:db8:1:ff::1")).await, [429]);
}

/// Without a peer address (no connect info) the answer is a 500 problem, not a pass.
#[tokio::test]
async fn missing_peer_address_is_a_clear_500() {
    let svc = service(&per_ip_layer(2, ClientIp::new()));
    let req = http::Request::builder()
        .uri("/x")
        .body(String::new())
        .expect("request");
    let resp = send(&svc, req).await;
    assert_status(&resp, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(header(&resp, "content-type"), "application/problem+json");
    assert!(matches!(
        resp.extensions().get::<Rejection>(),
        Some(Rejection::NoKey(KeyError::NoPeerAddress))
    ));
}

/// The refusal for a missing key is pluggable.
#[tokio::test]
async fn missing_key_answer_is_configurable() {
    let layer = per_ip_layer(2, ClientIp::new()).respond_with(|rejection| {
        let mut resp = http::Response::new(bytes::Bytes::from_static(b"go away"));
        *resp.status_mut() = match rejection {
            Rejection::NoKey(_) => StatusCode::FORBIDDEN,
            other => other.status(),
        };
        resp
    });
    let svc = service(&layer);
    let req = http::Request::builder()
        .body(String::new())
        .expect("request");
    let resp = send(&svc, req).await;
    assert_status(&resp, StatusCode::FORBIDDEN);
    assert_eq!(body_text(resp).await, "go away");
}
