//! An in-process server on `127.0.0.1:0` with a fake clock, and a minimal HTTP client.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper::header::HeaderMap;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tollgate::{FakeClock, Timestamp};
use tollgate_server::config::{Config, Overrides};
use tollgate_server::server::Server;

/// 2030-01-01T00:00:00Z: a whole minute, so fixed windows start with the test.
pub(crate) const START: Timestamp = Timestamp::from_millis(1_893_456_000_000);

/// A running in-process server; shut down (gracefully) on drop.
pub(crate) struct TestServer {
    pub(crate) addr: SocketAddr,
    pub(crate) clock: FakeClock,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl TestServer {
    /// Serves `toml` on the memory store (unless it names Redis) with a fake clock at [`START`].
    pub(crate) async fn start(toml: &str) -> TestServer {
        let config =
            Config::parse(toml, "test.toml", &Overrides::default()).expect("valid test config");
        TestServer::start_with(Server::new(config)).await
    }

    /// Serves `server` with a fake clock at [`START`].
    pub(crate) async fn start_with(server: Server) -> TestServer {
        let clock = FakeClock::new(START);
        TestServer::spawn(server.clock(clock.clone()), clock).await
    }

    async fn spawn(server: Server, clock: FakeClock) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            server.run(listener, shutdown).await.expect("server runs");
        });
        TestServer {
            addr,
            clock,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub(crate) async fn post(&self, path: &str, body: &str) -> Reply {
        request(self.addr, "POST", path, Bytes::from(body.to_owned()), &[]).await
    }

    pub(crate) async fn post_with(
        &self,
        path: &str,
        body: &str,
        headers: &[(&str, &str)],
    ) -> Reply {
        request(
            self.addr,
            "POST",
            path,
            Bytes::from(body.to_owned()),
            headers,
        )
        .await
    }

    pub(crate) async fn get(&self, path: &str) -> Reply {
        request(self.addr, "GET", path, Bytes::new(), &[]).await
    }

    /// The remaining count a peek reports for `limit` and `key` (a JSON object).
    pub(crate) async fn remaining(&self, limit: &str, key: &str) -> u64 {
        let reply = self
            .post("/v1/peek", &format!(r#"{{"limit":"{limit}","key":{key}}}"#))
            .await;
        assert_eq!(reply.status, 200, "{reply:?}");
        reply.json["remaining"].as_u64().expect("remaining")
    }

    /// Stops the server and waits until it has shut down.
    pub(crate) async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("server stops within 10 s")
                .expect("server task");
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// An HTTP answer.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) text: String,
    /// The body as JSON (`Null` when it is not JSON).
    pub(crate) json: serde_json::Value,
}

impl Reply {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The `error` message of a 4xx/5xx body.
    pub(crate) fn error(&self) -> &str {
        self.json["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error message: {self:?}"))
    }
}

/// Sends one request on a fresh connection.
pub(crate) async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Bytes,
    headers: &[(&str, &str)],
) -> Reply {
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (mut sender, connection) = http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    let mut builder = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string());
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let response = sender
        .send_request(builder.body(Full::new(body)).expect("request"))
        .await
        .expect("response");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let json = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
    Reply {
        status,
        headers,
        text,
        json,
    }
}

/// Polls `condition` every 20 ms until it holds or `timeout` passes.
pub(crate) async fn eventually<F, Fut>(timeout: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if condition().await {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A config with one limit.
pub(crate) fn one_limit(
    name: &str,
    algorithm: &str,
    limit: u64,
    period: &str,
    key: &str,
    policy: &str,
) -> String {
    format!(
        r#"
[[limits]]
name = "{name}"
algorithm = "{algorithm}"
limit = {limit}
period = "{period}"
key = [{key}]
on_store_error = "{policy}"
"#
    )
}

/// The path of the first of `names` found on `PATH`; panics, saying how to install it
/// (`scripts/test` installs it), when none is: a test never skips silently.
pub(crate) fn system_tool(names: &[&str], package: &str) -> std::path::PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for name in names {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "{} not found on PATH: install the Debian package `{package}` \
         (`apt-get install {package}`; ./scripts/test installs it when missing)",
        names.join(" or ")
    );
}

/// Runs `command`, killing it after `limit`; its output.
pub(crate) fn output_within(
    command: &mut std::process::Command,
    limit: Duration,
) -> std::process::Output {
    use std::process::Stdio;
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {command:?}: {e}"));
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(output) => output.expect("output"),
        Err(_) => {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("{command:?} did not finish within {limit:?}");
        }
    }
}

/// The keys on `redis` that checks wrote: every key but the health probe's (`/readyz` and the
/// scrape write one, `<prefix>:readyz:{probe=readyz}:fw`).
pub(crate) fn checked_keys(redis: &tollgate_testkit::RedisServer) -> Vec<String> {
    redis
        .array(&["KEYS", "*"])
        .into_iter()
        .filter(|k| !k.contains(":readyz:"))
        .collect()
}

/// The value of the first sample in a Prometheus scrape whose line starts with `series` (a
/// name, or a name and its labels), as written (`0`, `0.75`, `NaN`).
pub(crate) fn sample(scrape: &str, series: &str) -> Option<String> {
    scrape
        .lines()
        .find(|l| {
            l.strip_prefix(series)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .and_then(|l| l.rsplit(' ').next())
        .map(str::to_owned)
}
