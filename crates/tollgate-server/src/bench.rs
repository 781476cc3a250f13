//! `tollgate bench`: a load generator for a running service, over its HTTP API
//! (`POST /v1/check`) or its Envoy rate limit service (gRPC `ShouldRateLimit`).
//!
//! Each of `--concurrency` tasks holds one connection (keep-alive HTTP/1.1, or its own
//! HTTP/2 channel for gRPC) and sends checks back to back (a closed loop, like `wrk`),
//! cycling through `--keys` distinct key values so the store sees a realistic spread. Latency
//! is recorded per request in an HDR histogram (1 µs to 60 s, 3 significant digits). A
//! progress bar is drawn only when stdout is a terminal, so redirected output stays clean.
//! Both modes share the driving loop, the tally and the printed report; only one call differs.

use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::net::TcpStream;
use tollgate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_envoy::tonic::transport::{Channel, Endpoint};

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Base URL, e.g. `http://127.0.0.1:8080` (HTTP) or `http://127.0.0.1:8081` (gRPC).
    pub url: String,
    /// Connections, each with one request in flight.
    pub concurrency: usize,
    /// How long to run.
    pub duration: Duration,
    /// HTTP only: which limit to check (default: the first the service lists).
    pub limit: Option<String>,
    /// Distinct key values to cycle through.
    pub keys: u64,
}

/// The gRPC call of [`run_grpc`]: one `RateLimitRequest` with one descriptor.
#[derive(Debug, Clone)]
pub struct GrpcTarget {
    /// The request's `domain`.
    pub domain: String,
    /// The descriptor's entries, in order. The value of the **last** entry is varied over
    /// `--keys` values (`<value>-0` … `<value>-<N-1>`); with `--keys 1` it is sent as given.
    pub descriptor: Vec<(String, String)>,
}

/// What one task saw.
struct Tally {
    latency: Histogram<u64>,
    allowed: u64,
    denied: u64,
    other: u64,
}

/// How one call was answered.
enum Outcome {
    /// Admitted (HTTP 200, gRPC `OK`).
    Allowed,
    /// Refused (HTTP 429, gRPC `OVER_LIMIT`).
    Denied,
    /// Anything else that still came back as an answer.
    Other,
}

impl Tally {
    fn new() -> anyhow::Result<Tally> {
        Ok(Tally {
            latency: new_histogram()?,
            allowed: 0,
            denied: 0,
            other: 0,
        })
    }

    /// Counts an answer and its latency since `sent`.
    fn answered(&mut self, sent: Instant, outcome: Outcome) {
        self.latency
            .saturating_record(sent.elapsed().as_micros().try_into().unwrap_or(u64::MAX));
        match outcome {
            Outcome::Allowed => self.allowed += 1,
            Outcome::Denied => self.denied += 1,
            Outcome::Other => self.other += 1,
        }
    }

    /// Counts a call that failed without an answer (no latency recorded).
    fn failed(&mut self) {
        self.other += 1;
    }
}

/// Totals of a run.
#[derive(Debug)]
pub struct Report {
    /// Checks admitted (HTTP 200, gRPC `OK`).
    pub allowed: u64,
    /// Checks refused (HTTP 429, gRPC `OVER_LIMIT`).
    pub denied: u64,
    /// Anything else (503, 4xx, gRPC errors and `UNKNOWN`, connection errors).
    pub other: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// Latency of every answered check.
    pub latency: Histogram<u64>,
}

impl Report {
    /// Decisions (admitted + refused) per second.
    pub fn decisions_per_sec(&self) -> f64 {
        #[allow(clippy::cast_precision_loss)]
        let decisions = (self.allowed + self.denied) as f64;
        decisions / self.elapsed.as_secs_f64()
    }

    /// A latency percentile, µs.
    pub fn percentile_us(&self, q: f64) -> u64 {
        self.latency.value_at_quantile(q)
    }

    /// Prints the two summary lines; `what` names the calls, e.g. `checks of "per_user"`.
    fn print(&self, what: &str, concurrency: usize) {
        println!(
            "{} {what} in {:.1}s over {concurrency} connections: {:.0} decisions/s ({} allowed, {} denied, {} other)",
            self.allowed + self.denied + self.other,
            self.elapsed.as_secs_f64(),
            self.decisions_per_sec(),
            self.allowed,
            self.denied,
            self.other,
        );
        println!(
            "latency µs: p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
            self.percentile_us(0.5),
            self.percentile_us(0.9),
            self.percentile_us(0.99),
            self.percentile_us(0.999),
            self.latency.max(),
        );
    }
}

/// Runs the HTTP benchmark (`POST /v1/check`) and prints a summary.
///
/// # Errors
/// When the service cannot be reached or lists no limit.
pub async fn run(options: BenchOptions) -> anyhow::Result<Report> {
    let uri: hyper::Uri = options.url.parse()?;
    let authority = uri
        .authority()
        .ok_or_else(|| anyhow::anyhow!("--url needs a host: {}", options.url))?;
    let addr = format!(
        "{}:{}",
        authority.host(),
        authority.port_u16().unwrap_or(80)
    );
    let (limit, parts) = pick_limit(&addr, options.limit.as_deref())
        .await
        .with_context(|| format!("cannot list the limits of {}", options.url))?;
    let host = authority.to_string();
    let keys = options.keys.max(1);
    let what = format!("checks of {limit:?}");
    load(&options, &what, move |worker, deadline| {
        let (addr, host, limit, parts) = (addr.clone(), host.clone(), limit.clone(), parts.clone());
        async move { drive_http(&addr, &host, &limit, &parts, keys, worker, deadline).await }
    })
    .await
}

/// Runs the gRPC benchmark (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`)
/// and prints a summary. [`BenchOptions::limit`] is not used: the service's `[envoy]` rules
/// pick the limit from `target`'s domain and descriptor.
///
/// # Errors
/// When `target` has no descriptor entry or the service cannot be reached.
pub async fn run_grpc(options: BenchOptions, target: GrpcTarget) -> anyhow::Result<Report> {
    anyhow::ensure!(
        !target.descriptor.is_empty(),
        "a gRPC bench needs at least one descriptor entry (--descriptor key=value)"
    );
    let endpoint = Endpoint::from_shared(options.url.clone())
        .with_context(|| format!("bad --url {}", options.url))?
        .tcp_nodelay(true);
    // One call before the clock starts: an unreachable service fails here, by name.
    let mut probe = RateLimitServiceClient::new(
        endpoint
            .connect()
            .await
            .with_context(|| format!("cannot connect to {}", options.url))?,
    );
    probe
        .should_rate_limit(grpc_request(&target, 1, 0))
        .await
        .with_context(|| format!("ShouldRateLimit fails on {}", options.url))?;
    drop(probe);
    let keys = options.keys.max(1);
    let what = format!("ShouldRateLimit calls of domain {:?}", target.domain);
    load(&options, &what, move |worker, deadline| {
        let (endpoint, target) = (endpoint.clone(), target.clone());
        async move { drive_grpc(endpoint, &target, keys, worker, deadline).await }
    })
    .await
}

/// The shared part of both modes: starts `options.concurrency` tasks of `worker` (given its
/// index and the deadline), draws the progress bar, adds up the tallies and prints the report.
async fn load<W, F>(options: &BenchOptions, what: &str, worker: W) -> anyhow::Result<Report>
where
    W: Fn(u64, Instant) -> F,
    F: Future<Output = anyhow::Result<Tally>> + Send + 'static,
{
    let deadline = Instant::now() + options.duration;
    let bar = std::io::stdout()
        .is_terminal()
        .then(|| progress(options.duration));
    let started = Instant::now();
    let tasks: Vec<_> = (0..options.concurrency as u64)
        .map(|n| tokio::spawn(worker(n, deadline)))
        .collect();
    if let Some(bar) = &bar {
        while Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
            bar.set_position(started.elapsed().as_millis().try_into().unwrap_or(u64::MAX));
        }
    }
    let mut report = Report {
        allowed: 0,
        denied: 0,
        other: 0,
        elapsed: Duration::ZERO,
        latency: new_histogram()?,
    };
    for task in tasks {
        let tally = task.await??;
        report.allowed += tally.allowed;
        report.denied += tally.denied;
        report.other += tally.other;
        report.latency.add(&tally.latency)?;
    }
    report.elapsed = started.elapsed();
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    report.print(what, options.concurrency);
    Ok(report)
}

fn new_histogram() -> anyhow::Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 60_000_000, 3)?)
}

fn progress(duration: Duration) -> ProgressBar {
    let bar = ProgressBar::new(duration.as_millis().try_into().unwrap_or(u64::MAX));
    if let Ok(style) = ProgressStyle::with_template("{bar:40} {elapsed}/{duration}") {
        bar.set_style(style);
    }
    bar
}

/// The key index a worker starts from, so workers do not walk the keys in lock step.
fn first_key(worker: u64) -> u64 {
    worker.wrapping_mul(7_919)
}

/// One HTTP connection sending checks until `deadline`.
async fn drive_http(
    addr: &str,
    host: &str,
    limit: &str,
    parts: &[String],
    keys: u64,
    worker: u64,
    deadline: Instant,
) -> anyhow::Result<Tally> {
    let mut sender = connect(addr).await?;
    let mut tally = Tally::new()?;
    let mut n = first_key(worker);
    while Instant::now() < deadline {
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
        let answer = match sender.send_request(request).await {
            Ok(response) => read(response).await,
            Err(e) => Err(e.into()),
        };
        match answer {
            Ok(200) => tally.answered(sent, Outcome::Allowed),
            Ok(429) => tally.answered(sent, Outcome::Denied),
            Ok(_) => tally.answered(sent, Outcome::Other),
            Err(_) => {
                tally.failed();
                sender = connect(addr).await?;
            }
        }
    }
    Ok(tally)
}

/// One gRPC channel (its own HTTP/2 connection) sending `ShouldRateLimit` until `deadline`.
async fn drive_grpc(
    endpoint: Endpoint,
    target: &GrpcTarget,
    keys: u64,
    worker: u64,
    deadline: Instant,
) -> anyhow::Result<Tally> {
    let channel: Channel = endpoint.connect().await?;
    let mut client = RateLimitServiceClient::new(channel);
    let mut tally = Tally::new()?;
    let mut n = first_key(worker);
    while Instant::now() < deadline {
        n = n.wrapping_add(1);
        let request = grpc_request(target, keys, n % keys);
        let sent = Instant::now();
        match client.should_rate_limit(request).await {
            Ok(response) => {
                let outcome = match Code::try_from(response.get_ref().overall_code) {
                    Ok(Code::Ok) => Outcome::Allowed,
                    Ok(Code::OverLimit) => Outcome::Denied,
                    _ => Outcome::Other,
                };
                tally.answered(sent, outcome);
            }
            // A status sent by the service (e.g. UNAVAILABLE from a deny policy) has no cause;
            // one made by the client from a transport failure carries it. The channel
            // reconnects by itself.
            Err(status) if std::error::Error::source(&status).is_none() => {
                tally.answered(sent, Outcome::Other);
            }
            Err(_) => tally.failed(),
        }
    }
    Ok(tally)
}

/// The request for key index `i` of `keys`: the last entry's value gets `-<i>` unless `keys`
/// is 1.
fn grpc_request(target: &GrpcTarget, keys: u64, i: u64) -> RateLimitRequest {
    let last = target.descriptor.len().saturating_sub(1);
    let entries = target
        .descriptor
        .iter()
        .enumerate()
        .map(|(at, (key, value))| Entry {
            key: key.clone(),
            value: if at == last && keys > 1 {
                format!("{value}-{i}")
            } else {
                value.clone()
            },
        })
        .collect();
    RateLimitRequest {
        domain: target.domain.clone(),
        descriptors: vec![RateLimitDescriptor {
            entries,
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

async fn read(response: hyper::Response<Incoming>) -> anyhow::Result<u16> {
    let status = response.status().as_u16();
    response.into_body().collect().await?;
    Ok(status)
}

async fn connect(addr: &str) -> anyhow::Result<http1::SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

/// The limit to drive and its key part names, from `GET /v1/limits`.
async fn pick_limit(addr: &str, wanted: Option<&str>) -> anyhow::Result<(String, Vec<String>)> {
    let mut sender = connect(addr).await?;
    let request = Request::get("/v1/limits")
        .header("host", addr)
        .body(Full::new(Bytes::new()))?;
    let response = sender.send_request(request).await?;
    let body = response.into_body().collect().await?.to_bytes();
    let listing: serde_json::Value = serde_json::from_slice(&body)?;
    let limits = listing["limits"].as_array().cloned().unwrap_or_default();
    let found = limits
        .iter()
        .find(|l| wanted.is_none_or(|w| l["name"] == w))
        .ok_or_else(|| match wanted {
            Some(w) => anyhow::anyhow!("the service has no limit named {w:?}"),
            None => anyhow::anyhow!("the service has no limits"),
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
