//! A busy but healthy Redis is not a failing one: 200 clients at once against a spawned
//! `tollgate serve` with a 50 ms store timeout get no store error and no 503. The wait they
//! see is queueing in this process (two cores shared by the clients, the service and Redis),
//! which the store timeout does not count (docs/service.md, "What the store timeout
//! measures").
//!
//! One allowance, for machines shared with other work: a check that this process could not
//! get to within the store timeout and one second while Redis kept answering fails as
//! `overloaded`, never as `timeout`, and those may be up to 0.5 % of the checks (measured:
//! none alone; 2–7 of 20,000 with a busy loop on one of the two cores, 22 with two). A
//! `timeout`, or any other kind, fails the run. A run on a machine whose other work stalls
//! everything for a moment can still meet one; so a run with errors is run once more (a fresh
//! Redis and service), and the test fails if both have them: the design this replaced, a
//! plain deadline, failed 97 % of the checks of every run.
//!
//! A test binary of its own: cargo runs test binaries one at a time, so the machine is as
//! the issue describes it (200 clients, the service and Redis on two cores), not also running
//! the dozens of other service tests in parallel.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tollgate_testkit::RedisServer;

const CLIENTS: usize = 200;
const CHECKS_PER_CLIENT: usize = 100;

/// `tollgate serve` on a config file, killed on drop; its stderr kept for failure messages.
struct Serve {
    child: Child,
    addr: SocketAddr,
    log: Arc<Mutex<String>>,
    _config: tempfile::NamedTempFile,
}

impl Serve {
    fn start(config: &str) -> Serve {
        let mut file = tempfile::NamedTempFile::new().expect("temp file");
        file.write_all(config.as_bytes()).expect("write config");
        let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["serve", "--config"])
            .arg(file.path())
            .env("TOLLGATE_HTTP", "127.0.0.1:0")
            .env_remove("TOLLGATE_GRPC")
            .env_remove("TOLLGATE_REDIS_URL")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tollgate");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&log);
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = line
                    .split(" addr=")
                    .nth(1)
                    .and_then(|v| v.split_whitespace().next())
                    .and_then(|v| v.parse::<SocketAddr>().ok())
                {
                    let _ = tx.send(addr);
                }
                if let Ok(mut l) = sink.lock() {
                    l.push_str(&line);
                    l.push('\n');
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| {
                let _ = child.kill();
                panic!("tollgate did not start within 10 s; log:\n{}", lock(&log))
            });
        Serve {
            child,
            addr,
            log,
            _config: file,
        }
    }

    fn log(&self) -> String {
        lock(&self.log)
    }
}

fn lock(log: &Mutex<String>) -> String {
    log.lock().map(|l| l.clone()).unwrap_or_default()
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One client: a keep-alive connection sending `CHECKS_PER_CLIENT` checks in turn; the
/// statuses it was answered.
async fn client(addr: SocketAddr, id: usize) -> Vec<u16> {
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (mut sender, connection) = http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    let mut statuses = Vec::with_capacity(CHECKS_PER_CLIENT);
    for i in 0..CHECKS_PER_CLIENT {
        let body = format!(
            r#"{{"limit": "busy", "key": {{"user": "{id}-{}"}}}}"#,
            i % 4
        );
        let request = hyper::Request::post("/v1/check")
            .header("host", "t")
            .body(Full::new(Bytes::from(body)))
            .expect("request");
        let response = sender.send_request(request).await.expect("response");
        statuses.push(response.status().as_u16());
        response.into_body().collect().await.expect("body");
    }
    statuses
}

/// `GET path` on a fresh connection: the body.
async fn get(addr: SocketAddr, path: &str) -> String {
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (mut sender, connection) = http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    let request = hyper::Request::get(path)
        .header("host", "t")
        .body(Full::new(Bytes::new()))
        .expect("request");
    let response = sender.send_request(request).await.expect("response");
    let body = response.into_body().collect().await.expect("body");
    String::from_utf8_lossy(&body.to_bytes()).into_owned()
}

/// The sum of the samples of `metric` (name and labels as written) in a Prometheus scrape.
fn total(scrape: &str, metric: &str) -> f64 {
    scrape
        .lines()
        .filter(|l| l.starts_with(metric) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// What one run saw: the statuses answered, the store errors by kind, the allowed decisions
/// counted, and the service's log.
struct Run {
    statuses: std::collections::BTreeMap<u16, usize>,
    errors: std::collections::BTreeMap<String, f64>,
    allowed: f64,
    log: String,
}

impl Run {
    fn errors(&self, kind: &str) -> f64 {
        self.errors.get(kind).copied().unwrap_or(0.0)
    }

    /// Why this run is not clean, if it is not: any error but `overloaded`, more than the
    /// allowance of those, or answers that do not add up.
    fn fault(&self) -> Option<String> {
        let total = (CLIENTS * CHECKS_PER_CLIENT) as f64;
        let overloaded = self.errors("overloaded");
        let other: f64 = self
            .errors
            .iter()
            .filter(|(k, _)| k.as_str() != "overloaded")
            .map(|(_, v)| v)
            .sum();
        let ok = self.statuses.get(&200).copied().unwrap_or(0) as f64;
        let unavailable = self.statuses.get(&503).copied().unwrap_or(0) as f64;
        let sound = other == 0.0
            && overloaded <= total * 0.005
            && ok + unavailable == total
            && unavailable == overloaded
            && self.allowed == ok;
        (!sound).then(|| {
            format!(
                "statuses {:?}; store errors by kind {:?}; allowed decisions {}; log:\n{}",
                self.statuses, self.errors, self.allowed, self.log
            )
        })
    }
}

async fn run_once() -> Run {
    let redis = RedisServer::start();
    let serve = Serve::start(&format!(
        r#"
[store]
redis = "{}"
timeout = "50ms"

[[limits]]
name = "busy"
algorithm = "gcra"
limit = 1000000
period = "1h"
key = ["user"]
on_store_error = "deny"
"#,
        redis.url()
    ));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| tokio::spawn(client(serve.addr, id)))
        .collect();
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for c in clients {
        for status in c.await.expect("client") {
            *statuses.entry(status).or_default() += 1;
        }
    }
    let scrape = get(serve.addr, "/metrics").await;
    let mut errors = std::collections::BTreeMap::new();
    for line in scrape
        .lines()
        .filter(|l| l.starts_with("tollgate_store_errors_total{"))
    {
        let kind = line
            .split("kind=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or("?")
            .to_owned();
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        if value > 0.0 {
            *errors.entry(kind).or_insert(0.0) += value;
        }
    }
    let allowed = total(
        &scrape,
        "tollgate_decisions_total{limit=\"busy\",outcome=\"allowed\"}",
    );
    Run {
        statuses,
        errors,
        allowed,
        log: serve.log(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_healthy_redis_produces_no_store_errors() {
    let first = run_once().await;
    let Some(first_fault) = first.fault() else {
        return;
    };
    eprintln!("first run not clean, running again: {first_fault}");
    let second = run_once().await;
    if let Some(second_fault) = second.fault() {
        panic!("two runs with store errors.\nfirst: {first_fault}\nsecond: {second_fault}");
    }
}
