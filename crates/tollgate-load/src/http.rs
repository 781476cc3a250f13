//! The HTTP mode: `POST /v1/check` over keep-alive HTTP/1.1 connections, on the limit picked
//! from `GET /v1/limits`.
//!
//! Plaintext only: an `https://` URL is refused rather than sent to a TLS port in the clear
//! (the gRPC mode has TLS). `--url` is the service's base URL: a path is refused, not
//! silently dropped, and the port defaults to 80. A connection that fails, or a call that
//! fails or times out, is counted as `other` and the connection opened again, after a short
//! pause, until the end of the run ([`Clock`]).

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::clock::Clock;
use crate::drive::{first_key, load};
use crate::tally::{Outcome, Tally};
use crate::{BenchOptions, DEFAULT_TIMEOUT, LoadError, Report};

/// Runs the HTTP benchmark (`POST /v1/check`) and prints a summary, each call bounded by
/// [`DEFAULT_TIMEOUT`].
///
/// # Errors
/// [`LoadError`] when the URL is not a plaintext base URL, or the service cannot be reached,
/// does not answer or lists no limit.
pub async fn run(options: BenchOptions) -> Result<Report, LoadError> {
    run_with_timeout(options, DEFAULT_TIMEOUT).await
}

/// [`run`], each connect and call bounded by `timeout` (a call past it counts as `other`).
///
/// # Errors
/// As [`run`]; [`LoadError::ZeroTimeout`] for a `timeout` of 0.
pub async fn run_with_timeout(
    options: BenchOptions,
    timeout: Duration,
) -> Result<Report, LoadError> {
    if timeout.is_zero() {
        return Err(LoadError::ZeroTimeout);
    }
    let Target { addr, host } = target(&options.url)?;
    let (limit, parts) = tokio::time::timeout(timeout, pick_limit(&addr, options.limit.as_deref()))
        .await
        .map_err(|_| LoadError::NoAnswer {
            url: options.url.clone(),
            what: "GET /v1/limits",
            after: timeout,
        })?
        .map_err(|e| LoadError::ListLimits {
            url: options.url.clone(),
            source: Box::new(e),
        })?;
    let keys = options.keys.max(1);
    let what = format!("checks of {limit:?}");
    let over = format!("{} connections", options.concurrency);
    load(&options, timeout, &what, &over, move |worker, clock| {
        let (addr, host, limit, parts) = (addr.clone(), host.clone(), limit.clone(), parts.clone());
        async move { drive(&addr, &host, &limit, &parts, keys, worker, clock).await }
    })
    .await
}

/// Where the checks go: the address to connect to and the `host` header.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    /// `host:port`.
    addr: String,
    /// The URL's authority.
    host: String,
}

/// The target of a base URL: `http://` (or no scheme), a host, an optional port (80), no path.
fn target(url: &str) -> Result<Target, LoadError> {
    let uri: hyper::Uri = url.parse()?;
    match uri.scheme_str() {
        None | Some("http") => {}
        Some("https") => {
            return Err(LoadError::HttpsWithoutGrpc {
                url: url.to_owned(),
            });
        }
        Some(_) => {
            return Err(LoadError::Scheme {
                url: url.to_owned(),
            });
        }
    }
    let authority = uri.authority().ok_or_else(|| LoadError::NoHost {
        url: url.to_owned(),
    })?;
    if let Some(path) = uri.path_and_query().filter(|p| p.as_str() != "/") {
        return Err(LoadError::Path {
            url: url.to_owned(),
            path: path.as_str().to_owned(),
        });
    }
    Ok(Target {
        addr: format!(
            "{}:{}",
            authority.host(),
            authority.port_u16().unwrap_or(80)
        ),
        host: authority.to_string(),
    })
}

/// One HTTP connection at a time sending checks until the end of the run; one that fails is
/// counted and opened again.
async fn drive(
    addr: &str,
    host: &str,
    limit: &str,
    parts: &[String],
    keys: u64,
    worker: u64,
    clock: Clock,
) -> Result<Tally, LoadError> {
    let mut conn: Option<Conn> = None;
    let mut tally = Tally::new()?;
    let mut failures = 0;
    let mut n = first_key(worker);
    while clock.running() {
        if conn.is_none() {
            match clock.call(connect(addr)).await {
                Ok(Ok(opened)) => conn = Some(opened),
                Ok(Err(_)) => {
                    tally.failed();
                    failures += 1;
                    clock.back_off(failures).await;
                    continue;
                }
                Err(_) => {
                    tally.timed_out();
                    continue;
                }
            }
        }
        let Some(open) = conn.as_mut() else {
            continue;
        };
        n = n.wrapping_add(1);
        let value = (n % keys).to_string();
        let key: serde_json::Map<String, serde_json::Value> = parts
            .iter()
            .map(|p| (p.clone(), serde_json::Value::from(value.as_str())))
            .collect();
        let body = serde_json::json!({ "limit": limit, "key": key }).to_string();
        let request = Request::post("/v1/check")
            .header("host", host)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))?;
        let sent = Instant::now();
        let answer = clock
            .call(async {
                let response = open.sender.send_request(request).await?;
                read(response).await
            })
            .await;
        let outcome = match answer {
            Ok(Ok(200)) => Outcome::Allowed,
            Ok(Ok(429)) => Outcome::Denied,
            Ok(Ok(_)) => Outcome::Other,
            Ok(Err(_)) => {
                tally.failed();
                conn = None;
                failures += 1;
                clock.back_off(failures).await;
                continue;
            }
            Err(_) => {
                tally.timed_out();
                conn = None;
                continue;
            }
        };
        tally.answered(sent, outcome);
        failures = 0;
    }
    Ok(tally)
}

/// The status, once the whole body has been read.
async fn read(response: hyper::Response<Incoming>) -> Result<u16, hyper::Error> {
    let status = response.status().as_u16();
    response.into_body().collect().await?;
    Ok(status)
}

/// An open connection: what sends on it, and the task that drives it, ended with it (a
/// connection given up on, its call still in flight, is closed, not left to the service).
struct Conn {
    sender: http1::SendRequest<Full<Bytes>>,
    driver: tokio::task::JoinHandle<Result<(), hyper::Error>>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

async fn connect(addr: &str) -> Result<Conn, LoadError> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
    Ok(Conn {
        sender,
        driver: tokio::spawn(connection),
    })
}

/// The limit to drive and its key part names, from `GET /v1/limits`.
async fn pick_limit(addr: &str, wanted: Option<&str>) -> Result<(String, Vec<String>), LoadError> {
    let mut conn = connect(addr).await?;
    let request = Request::get("/v1/limits")
        .header("host", addr)
        .body(Full::new(Bytes::new()))?;
    let response = conn.sender.send_request(request).await?;
    let body = response.into_body().collect().await?.to_bytes();
    choose(&serde_json::from_slice(&body)?, wanted)
}

/// The `wanted` limit (or the first) of a `GET /v1/limits` listing, and its key part names.
fn choose(
    listing: &serde_json::Value,
    wanted: Option<&str>,
) -> Result<(String, Vec<String>), LoadError> {
    let limits = listing["limits"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let found = limits
        .iter()
        .find(|l| wanted.is_none_or(|w| l["name"] == w))
        .ok_or_else(|| match wanted {
            Some(w) => LoadError::UnknownLimit(w.to_owned()),
            None => LoadError::NoLimits,
        })?;
    let name = found["name"].as_str().unwrap_or_default().to_owned();
    let parts = found["key"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| p.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    Ok((name, parts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{Checks, OUTER, counts, options, serve_http, silent};

    const TIMEOUT: Duration = Duration::from_millis(200);

    /// A base URL: `http://` or none, the port by default 80, nothing after the authority;
    /// `https://` (which would go out in plaintext, to port 80), another scheme or a path is
    /// refused, saying so.
    #[test]
    fn the_url_is_a_plaintext_base_url() {
        let at = |addr: &str, host: &str| Target {
            addr: addr.to_owned(),
            host: host.to_owned(),
        };
        assert_eq!(
            target("http://example.com").ok(),
            Some(at("example.com:80", "example.com"))
        );
        assert_eq!(target("http://h:8080/").ok(), Some(at("h:8080", "h:8080")));
        assert_eq!(
            target("127.0.0.1:8080").ok(),
            Some(at("127.0.0.1:8080", "127.0.0.1:8080"))
        );

        let https = target("https://h:8443").expect_err("https");
        assert!(
            matches!(https, LoadError::HttpsWithoutGrpc { .. }),
            "{https:?}"
        );
        assert_eq!(
            https.to_string(),
            "--url https://h:8443: the HTTP bench speaks plaintext HTTP only (https:// is supported with --grpc)"
        );
        let path = target("http://h:8080/tollgate").expect_err("a path");
        assert_eq!(
            path.to_string(),
            r#"--url http://h:8080/tollgate: expected the service's base URL without a path (got "/tollgate")"#
        );
        assert!(matches!(
            target("http://h/?a=1"),
            Err(LoadError::Path { .. })
        ));
        assert!(matches!(target("ftp://h"), Err(LoadError::Scheme { .. })));
    }

    /// A service that accepts and never answers fails the run before the clock starts, by
    /// name, instead of holding it forever.
    #[tokio::test]
    async fn a_service_that_never_answers_is_named() {
        let url = silent().await;
        let run = run_with_timeout(options(&url, 1, 300), TIMEOUT);
        let error = tokio::time::timeout(OUTER, run)
            .await
            .expect("the run returns")
            .expect_err("no answer");
        assert_eq!(
            error.to_string(),
            format!("no answer from {url} within 200ms (GET /v1/limits)")
        );
    }

    /// Checks that are never answered time out, count as `other`, and the run still ends
    /// with its report, which the verdict fails.
    #[tokio::test]
    async fn unanswered_checks_time_out_and_the_report_comes() {
        let url = serve_http(Checks::Hang).await;
        let run = run_with_timeout(options(&url, 2, 300), TIMEOUT);
        let report = tokio::time::timeout(OUTER, run)
            .await
            .expect("the run returns")
            .expect("a report");
        assert!(report.timed_out >= 2, "{:?}", counts(&report));
        assert_eq!(report.other, report.timed_out, "{:?}", counts(&report));
        assert_eq!(report.allowed + report.denied, 0, "{:?}", counts(&report));
        assert!(
            matches!(report.verdict(), Err(LoadError::NoDecisions { .. })),
            "{:?}",
            counts(&report)
        );
    }

    /// Every check answered 500, or garbage: a report of `other` only, which the verdict
    /// (the exit code) fails.
    #[tokio::test]
    async fn errors_only_fail_the_verdict() {
        for checks in [Checks::Status(500), Checks::Garbage] {
            let url = serve_http(checks).await;
            let run = run_with_timeout(options(&url, 2, 200), TIMEOUT);
            let report = tokio::time::timeout(OUTER, run)
                .await
                .expect("the run returns")
                .expect("a report");
            assert!(report.other > 0, "{checks:?}: {:?}", counts(&report));
            assert_eq!(
                report.allowed + report.denied,
                0,
                "{checks:?}: {:?}",
                counts(&report)
            );
            let verdict = report.verdict().expect_err("no decisions");
            assert!(
                verdict
                    .to_string()
                    .starts_with("no decisions: 0 allowed, 0 denied, "),
                "{checks:?}: {verdict}"
            );
        }
    }

    /// A service killed halfway: the connections it refuses afterwards are counted as
    /// `other` and retried until the end, the checks answered before are kept, and the
    /// report comes (too many failures for the verdict).
    #[tokio::test]
    async fn a_service_killed_halfway_still_gives_a_report() {
        let url = serve_http(Checks::DieAfter(5)).await;
        let run = run_with_timeout(options(&url, 1, 300), TIMEOUT);
        let report = tokio::time::timeout(OUTER, run)
            .await
            .expect("the run returns")
            .expect("a report, not the refused connection");
        assert_eq!(report.allowed, 5, "{:?}", counts(&report));
        assert!(
            report.other > 1,
            "the cut call and a refused connection: {:?}",
            counts(&report)
        );
        assert!(
            matches!(report.verdict(), Err(LoadError::TooManyFailures { .. })),
            "{:?}",
            counts(&report)
        );
    }

    /// A service killed near the end of the run: whatever the share of failures (few, each
    /// refused connection being followed by a pause), the verdict fails: the run ended
    /// failing. (It passed when the failures were under 1 %.)
    #[tokio::test]
    async fn a_service_killed_near_the_end_fails_the_verdict() {
        let url = serve_http(Checks::DieAt(Duration::from_millis(1_000))).await;
        let run = run_with_timeout(options(&url, 1, 1_600), TIMEOUT);
        let report = tokio::time::timeout(OUTER, run)
            .await
            .expect("the run returns")
            .expect("a report");
        assert!(
            report.allowed > 0 && report.other > 0,
            "{:?}",
            counts(&report)
        );
        let verdict = report.verdict();
        let share_ok = report.other * 100 <= report.allowed + report.other;
        assert!(
            matches!(verdict, Err(LoadError::StoppedDeciding { .. }))
                || (!share_ok && matches!(verdict, Err(LoadError::TooManyFailures { .. }))),
            "{verdict:?} {:?}",
            counts(&report)
        );
    }

    /// The named limit is picked with its key parts, the first one without a name; an
    /// unknown name or an empty listing is an error naming what is missing.
    #[test]
    fn choose_picks_the_limit_and_its_key_parts() {
        let listing = serde_json::json!({"limits": [
            {"name": "global", "key": []},
            {"name": "per_user", "key": ["user", "route"]},
        ]});
        let (name, parts) = choose(&listing, Some("per_user")).expect("listed");
        assert_eq!(
            (name.as_str(), parts),
            ("per_user", vec!["user".to_owned(), "route".to_owned()])
        );
        let (name, parts) = choose(&listing, None).expect("first");
        assert_eq!((name.as_str(), parts.len()), ("global", 0));

        let err = choose(&listing, Some("nope")).expect_err("unknown");
        assert_eq!(err.to_string(), r#"the service has no limit named "nope""#);
        let err = choose(&serde_json::json!({"limits": []}), None).expect_err("empty");
        assert_eq!(err.to_string(), "the service has no limits");
    }
}
