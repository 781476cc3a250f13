//! `tollgate bench`: a load generator for a running service's `POST /v1/check`.
//!
//! Each of `--concurrency` tasks holds one keep-alive HTTP/1.1 connection and sends checks
//! back to back (a closed loop, like `wrk`), cycling through `--keys` distinct key values so
//! the store sees a realistic spread. Latency is recorded per request in an HDR histogram
//! (1 µs to 60 s, 3 significant digits). A progress bar is drawn only when stdout is a
//! terminal, so redirected output stays clean.

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

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Base URL, e.g. `http://127.0.0.1:8080`.
    pub url: String,
    /// Connections, each with one request in flight.
    pub concurrency: usize,
    /// How long to run.
    pub duration: Duration,
    /// Which limit to check (default: the first the service lists).
    pub limit: Option<String>,
    /// Distinct key values to cycle through.
    pub keys: u64,
}

/// What one task saw.
struct Tally {
    latency: Histogram<u64>,
    allowed: u64,
    denied: u64,
    other: u64,
}

/// Totals of a run.
#[derive(Debug)]
pub struct Report {
    /// Checks answered 200.
    pub allowed: u64,
    /// Checks answered 429.
    pub denied: u64,
    /// Anything else (503, 4xx, connection errors).
    pub other: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// Latency of every answered check.
    pub latency: Histogram<u64>,
}

impl Report {
    /// Decisions (200 + 429) per second.
    pub fn decisions_per_sec(&self) -> f64 {
        #[allow(clippy::cast_precision_loss)]
        let decisions = (self.allowed + self.denied) as f64;
        decisions / self.elapsed.as_secs_f64()
    }

    /// A latency percentile, µs.
    pub fn percentile_us(&self, q: f64) -> u64 {
        self.latency.value_at_quantile(q)
    }
}

/// Runs the benchmark and prints a summary.
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

    let deadline = Instant::now() + options.duration;
    let bar = std::io::stdout()
        .is_terminal()
        .then(|| progress(options.duration));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(options.concurrency);
    for worker in 0..options.concurrency {
        let (addr, host, limit, parts) = (addr.clone(), host.clone(), limit.clone(), parts.clone());
        let keys = options.keys.max(1);
        tasks.push(tokio::spawn(async move {
            drive(&addr, &host, &limit, &parts, keys, worker as u64, deadline).await
        }));
    }
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
    println!(
        "{} checks of {limit:?} in {:.1}s over {} connections: {:.0} decisions/s ({} allowed, {} denied, {} other)",
        report.allowed + report.denied + report.other,
        report.elapsed.as_secs_f64(),
        options.concurrency,
        report.decisions_per_sec(),
        report.allowed,
        report.denied,
        report.other,
    );
    println!(
        "latency µs: p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
        report.percentile_us(0.5),
        report.percentile_us(0.9),
        report.percentile_us(0.99),
        report.percentile_us(0.999),
        report.latency.max(),
    );
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

/// One connection sending checks until `deadline`.
async fn drive(
    addr: &str,
    host: &str,
    limit: &str,
    parts: &[String],
    keys: u64,
    worker: u64,
    deadline: Instant,
) -> anyhow::Result<Tally> {
    let mut sender = connect(addr).await?;
    let mut tally = Tally {
        latency: new_histogram()?,
        allowed: 0,
        denied: 0,
        other: 0,
    };
    let mut n = worker.wrapping_mul(7_919);
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
            Ok(status) => {
                tally
                    .latency
                    .saturating_record(sent.elapsed().as_micros().try_into().unwrap_or(u64::MAX));
                match status {
                    200 => tally.allowed += 1,
                    429 => tally.denied += 1,
                    _ => tally.other += 1,
                }
            }
            Err(_) => {
                tally.other += 1;
                sender = connect(addr).await?;
            }
        }
    }
    Ok(tally)
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
