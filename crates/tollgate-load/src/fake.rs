//! Tests only: services that misbehave the ways a real one can, to run the bench against.
//! [`serve_http`] lists one limit on `GET /v1/limits` and answers checks as its [`Checks`]
//! says (never, 500, garbage, or a few and then dies); [`silent`] accepts and never reads;
//! [`serve_grpc`] answers `ShouldRateLimit` `OK` and records what it was asked.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse,
};
use tollgate_envoy::tonic;

use crate::{BenchOptions, Report};

/// A report's counts (allowed, denied, other, timed out), for assertion messages: its
/// `Debug` prints the whole histogram.
pub(crate) fn counts(report: &Report) -> (u64, u64, u64, u64) {
    (
        report.allowed,
        report.denied,
        report.other,
        report.timed_out,
    )
}

/// Bench options for `url`: `concurrency` connections for `millis` ms over 4 keys.
pub(crate) fn options(url: &str, concurrency: usize, millis: u64) -> BenchOptions {
    BenchOptions {
        url: url.to_owned(),
        concurrency,
        duration: Duration::from_millis(millis),
        limit: None,
        keys: 4,
    }
}

/// How long a test waits for a run that should return (it returns in well under a second;
/// without the timeouts, never).
pub(crate) const OUTER: Duration = Duration::from_secs(30);

/// How the fake HTTP service answers `POST /v1/check`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Checks {
    /// Never: the request is read and the connection held.
    Hang,
    /// An empty answer with this status.
    Status(u16),
    /// Bytes that are not HTTP, then the connection closed.
    Garbage,
    /// 200 to this many checks in all; then the listener and every connection are closed (a
    /// service killed halfway: new connections are refused).
    DieAfter(usize),
    /// 200 to every check until this long after the service started; then the listener and
    /// every connection are closed.
    DieAt(Duration),
}

/// A listener on a free local port, and its `http://` URL.
pub(crate) async fn listener() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    (listener, url)
}

/// A service that accepts connections and never reads or answers anything; its URL.
pub(crate) async fn silent() -> String {
    let (listener, url) = listener().await;
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    url
}

/// The fake HTTP service, answering checks as `checks` says; its URL.
pub(crate) async fn serve_http(checks: Checks) -> String {
    let (listener, url) = listener().await;
    let died = Arc::new(Notify::new());
    let answered = Arc::new(Mutex::new(0_usize));
    let dies_at = match checks {
        Checks::DieAt(after) => Some(tokio::time::Instant::now() + after),
        _ => None,
    };
    tokio::spawn(async move {
        // Dropped with this task: the listener, and every connection's task.
        let mut connections = tokio::task::JoinSet::new();
        let death = async {
            match dies_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(death);
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let Ok((stream, _)) = accepted else { return };
                    connections.spawn(answer(stream, checks, answered.clone(), died.clone()));
                }
                () = died.notified() => return,
                () = &mut death => return,
            }
        }
    });
    url
}

/// One connection of [`serve_http`]: requests read one after another and answered.
async fn answer(stream: TcpStream, checks: Checks, answered: Arc<Mutex<usize>>, died: Arc<Notify>) {
    let mut stream = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0;
        loop {
            let mut header = String::new();
            if stream.read_line(&mut header).await.unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if stream.read_exact(&mut body).await.is_err() {
            return;
        }
        let reply: Vec<u8> = if line.starts_with("GET /v1/limits") {
            let listing = br#"{"limits":[{"name":"x","key":["user"]}]}"#;
            let mut reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                listing.len()
            )
            .into_bytes();
            reply.extend_from_slice(listing);
            reply
        } else {
            match checks {
                Checks::Hang => std::future::pending().await,
                Checks::Status(status) => {
                    format!("HTTP/1.1 {status} Oops\r\ncontent-length: 0\r\n\r\n").into_bytes()
                }
                Checks::Garbage => {
                    let _ = stream.write_all(b"\x00\xffNOT HTTP AT ALL\r\n\r\n").await;
                    return;
                }
                Checks::DieAfter(n) => {
                    let count = {
                        let mut answered = answered.lock().expect("count");
                        *answered += 1;
                        *answered
                    };
                    if count > n {
                        died.notify_one();
                        return;
                    }
                    b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}".to_vec()
                }
                Checks::DieAt(_) => b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}".to_vec(),
            }
        };
        if stream.write_all(&reply).await.is_err() {
            return;
        }
    }
}

/// What the fake gRPC service was asked, in order.
pub(crate) type Asked = Arc<Mutex<Vec<RateLimitRequest>>>;

/// The fake gRPC service: answers `OK` to the first `answered` calls (all, for `None`), then
/// never answers; its URL and what it was asked.
pub(crate) async fn serve_grpc(answered: Option<usize>) -> (String, Asked) {
    let (listener, url) = listener().await;
    let asked = Asked::default();
    let service = Recorder {
        asked: asked.clone(),
        answered,
    };
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RateLimitServiceServer::new(service))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    (url, asked)
}

struct Recorder {
    asked: Asked,
    answered: Option<usize>,
}

#[tonic::async_trait]
impl RateLimitService for Recorder {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let count = {
            let mut asked = self.asked.lock().expect("asked");
            asked.push(request.into_inner());
            asked.len()
        };
        if self.answered.is_some_and(|n| count > n) {
            std::future::pending::<()>().await;
        }
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: Code::Ok.into(),
            ..RateLimitResponse::default()
        }))
    }
}
