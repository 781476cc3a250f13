//! What a hostile client can hold, against the real binary over raw TCP: a half-sent head,
//! a body that never comes, an idle keep-alive connection, more connections than the cap,
//! a malformed head, a slow client at SIGTERM; and what a drain must answer. Also what one
//! Envoy call may ask (`[envoy] max_descriptors`, `max_entries`): a flood of oversized calls
//! is refused at once and stalls nothing. Timeouts are configured short and waited for by
//! bounded polling, never slept out.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tollgate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry as DescriptorEntry;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::tonic;
use tollgate_envoy::tonic::transport::Endpoint;
use tollgate_server::config::{Config, Overrides};
use tollgate_server::server::Server;

use crate::binary::{Process, config_file};
use crate::grpc::{Client, call, code, user_rule};
use crate::support::{TestServer, eventually, one_limit};

const CHECK: &str = r#"{"limit": "h", "key": {"user": "1"}}"#;

/// A config with `server` lines under `[server]` and one roomy limit `h`.
fn config(server: &str) -> String {
    format!(
        "[server]\nhttp = \"127.0.0.1:0\"\n{server}\n{}",
        one_limit("h", "fixed_window", 1_000_000, "1h", r#""user""#, "allow")
    )
}

/// A raw `POST /v1/check` request.
fn check_request(extra_headers: &str) -> String {
    format!(
        "POST /v1/check HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{extra_headers}\r\n{CHECK}",
        CHECK.len()
    )
}

/// Everything `stream` yields until the peer closes it (EOF or reset), and when; `None` if it
/// is still open after `limit`.
pub(crate) async fn read_to_close(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
    limit: Duration,
) -> Option<(String, Instant)> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0) | Err(_)) => {
                return Some((String::from_utf8_lossy(&got).into(), Instant::now()));
            }
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Reads one whole response (head and `content-length` body) from a keep-alive connection.
async fn read_response(stream: &mut TcpStream, limit: Duration) -> Option<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(str::to_owned)
                })
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if body.len() >= length {
                return Some(text);
            }
        }
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => return None,
        }
    }
}

/// The JSON body of a raw response.
pub(crate) fn json_body(response: &str) -> serde_json::Value {
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(body).unwrap_or(serde_json::Value::Null)
}

/// Connects and sends one check on a fresh connection; its status line.
async fn quick_check(addr: SocketAddr) -> String {
    check_within(addr, Duration::from_secs(5)).await
}

/// Connects and sends one check on a fresh connection; its status line if answered within
/// `limit`, else an empty one.
async fn check_within(addr: SocketAddr, limit: Duration) -> String {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(check_request("").as_bytes())
        .await
        .expect("write");
    let response = read_response(&mut stream, limit).await;
    response
        .unwrap_or_default()
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// A partial request is answered 408 (JSON) and closed after its timeout: half a head after
/// `header_timeout`, a body announced as 100 bytes of which a few come after `body_timeout`;
/// meanwhile a check on another connection is answered at once.
#[tokio::test]
async fn a_partial_request_is_answered_408_after_its_timeout() {
    let (_dir, path) = config_file(&config(
        "header_timeout = \"300ms\"\nbody_timeout = \"300ms\"\nidle_timeout = \"1m\"",
    ));
    let process = Process::serve(&path);
    for (partial, error) in [
        (
            "POST /v1/check HTTP/1.1\r\nhost: t\r\nx-slow: ",
            "request headers not received in time",
        ),
        (
            "POST /v1/check HTTP/1.1\r\nhost: t\r\ncontent-length: 100\r\n\r\n{\"limit\"",
            "request body not received within 300ms",
        ),
    ] {
        let started = Instant::now();
        let mut slow = TcpStream::connect(process.addr).await.expect("connect");
        slow.write_all(partial.as_bytes()).await.expect("write");
        let status = quick_check(process.addr).await;
        assert_eq!(status, "HTTP/1.1 200 OK", "{}", process.log());
        assert!(
            started.elapsed() < Duration::from_millis(300),
            "the check waited on the slow client"
        );
        let (answer, closed) = read_to_close(&mut slow, Duration::from_secs(5))
            .await
            .unwrap_or_else(|| panic!("still open after 5 s; log:\n{}", process.log()));
        let after = closed - started;
        assert!(
            after >= Duration::from_millis(250),
            "closed after {after:?}"
        );
        assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
        assert_eq!(json_body(&answer)["error"], error, "{answer}");
    }
    // The half head is counted as a deadline's close; the late body is a 408 of the service
    // (counted in the HTTP series), not one.
    assert_eq!(timed_out(process.addr, "head").await.as_deref(), Some("1"));
    assert!(
        process.logged("connection closed by a deadline").await,
        "and logged: {}",
        process.log()
    );
}

/// A body announced larger than the API reads (16 KiB) is refused `413` as soon as its head
/// is read, and the connection closed: it is not held for the body's bytes until
/// `body_timeout` (a minute here), nor read.
#[tokio::test]
async fn a_body_announced_over_the_cap_is_refused_at_once() {
    let (_dir, path) = config_file(&config("body_timeout = \"1m\""));
    let process = Process::serve(&path);
    let mut client = TcpStream::connect(process.addr).await.expect("connect");
    let head = "POST /v1/check HTTP/1.1\r\nhost: t\r\ncontent-length: 1000000000\r\n\r\n";
    client
        .write_all(format!("{head}{{\"limit\"").as_bytes())
        .await
        .expect("write");
    let (answer, _) = read_to_close(&mut client, Duration::from_secs(5))
        .await
        .unwrap_or_else(|| panic!("still open after 5 s; log:\n{}", process.log()));
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
    assert_eq!(
        json_body(&answer)["error"],
        "request body exceeds 16384 bytes",
        "{answer}"
    );
}

/// A keep-alive connection without a next request is closed after `idle_timeout` (not after
/// the longer `header_timeout`), whether its last request had a body or not. After a `GET`,
/// hyper's last read comes back empty while the request is still in the service (when no
/// deadline runs) and it reads no more until the client writes: the connection was never
/// closed until the deadline was also set when the answer left.
#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed() {
    let (_dir, path) = config_file(&config("idle_timeout = \"300ms\"\nheader_timeout = \"1m\""));
    let process = Process::serve(&path);
    let requests = [
        ("a check", check_request(""), "HTTP/1.1 200 "),
        (
            "a GET",
            "GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n".to_owned(),
            "HTTP/1.1 200 ",
        ),
        (
            "a GET for a missing route",
            "GET /nowhere HTTP/1.1\r\nhost: t\r\n\r\n".to_owned(),
            "HTTP/1.1 404 ",
        ),
    ];
    for (what, request, status) in requests {
        let mut stream = TcpStream::connect(process.addr).await.expect("connect");
        stream.write_all(request.as_bytes()).await.expect("write");
        let first = read_response(&mut stream, Duration::from_secs(5))
            .await
            .expect("answered");
        assert!(first.starts_with(status), "{what}: {first}");
        let answered = Instant::now();
        let (rest, closed) = read_to_close(&mut stream, Duration::from_secs(5))
            .await
            .unwrap_or_else(|| {
                panic!(
                    "idle connection after {what} still open after 5 s; log:\n{}",
                    process.log()
                )
            });
        assert!(
            closed - answered >= Duration::from_millis(250),
            "{what}: {:?}",
            closed - answered
        );
        assert_eq!(rest, "", "{what}: nothing is sent to an idle connection");
    }
    assert_eq!(timed_out(process.addr, "idle").await.as_deref(), Some("3"));
}

/// How long a test waits for a [`stalled_reader`]'s connection to stall and be dealt with: the
/// server's send buffer (up to `tcp_wmem`'s 4 MiB, about a thousand 3.6 KB `/metrics`
/// answers) must fill first, as fast as a debug build makes answers on the machine it shares:
/// from 0.7 s idle to 11 s and once 31 s on a loaded 2-core machine (10 s was the bound, and
/// failed half the runs there). A server that never deals with it still fails, later.
const STALL_FILLS_WITHIN: Duration = Duration::from_secs(120);

/// A client that sends requests, pipelined, for ever and reads no answer (its receive
/// buffer kept small): once the server's answers fill the socket, every write of the server
/// waits. The returned read half is never read; the writing task ends with the test.
async fn stalled_reader(
    addr: SocketAddr,
) -> (tokio::net::tcp::OwnedReadHalf, tokio::task::JoinHandle<()>) {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    let stream = socket.connect(addr).await.expect("connect");
    let (read, mut write) = stream.into_split();
    let writer = tokio::spawn(async move {
        let requests = "GET /metrics HTTP/1.1\r\nhost: t\r\n\r\n".repeat(64);
        while write.write_all(requests.as_bytes()).await.is_ok() {}
    });
    (read, writer)
}

/// Clients that send requests and never read the answers cannot hold the listener: with
/// `max_connections = 4` held by four of them, a new client is still served, in the place of
/// one of them (shed as stalled: it has taken none of an answer for 50 ms). Before, the four
/// held every slot for as long as they liked (nothing timed a write), and the new client was
/// not served at all. (The timeouts are longer than the wait, [`STALL_FILLS_WITHIN`]: no
/// timeout of the four can stand in for the shed.)
#[tokio::test]
async fn clients_that_read_no_answers_do_not_lock_new_clients_out() {
    let (_dir, path) = config_file(&config(
        "max_connections = 4\nidle_timeout = \"10m\"\nheader_timeout = \"10m\"\nbody_timeout = \"10m\"",
    ));
    let process = Process::serve(&path);
    let mut stalled = Vec::new();
    for _ in 0..4 {
        stalled.push(stalled_reader(process.addr).await);
    }
    let status = check_within(process.addr, STALL_FILLS_WITHIN).await;
    assert!(
        status.starts_with("HTTP/1.1 200 "),
        "a new client was not served within {STALL_FILLS_WITHIN:?} while four clients \
         reading nothing held the listener: {status:?}; log:\n{}",
        process.log()
    );
    let metrics =
        crate::support::request(process.addr, "GET", "/metrics", bytes::Bytes::new(), &[]).await;
    assert!(
        metrics
            .text
            .contains("tollgate_connections_shed_total{listener=\"http\"}"),
        "the shed is counted: {}",
        metrics.text
    );
    assert!(
        process.logged("connection shed").await,
        "and logged: {}",
        process.log()
    );
    for (_, writer) in stalled {
        writer.abort();
    }
}

/// A connection whose client reads no answers is closed once it has taken none of one for
/// `idle_timeout`, even with room under the cap: its file descriptor and the answers buffered
/// for it are freed. Before, nothing timed a write, and it stayed open.
#[tokio::test]
async fn a_client_that_reads_no_answers_is_closed_after_idle_timeout() {
    let (_dir, path) = config_file(&config(
        "idle_timeout = \"300ms\"\nheader_timeout = \"1m\"\nbody_timeout = \"1m\"",
    ));
    let process = Process::serve(&path);
    let baseline = open_sockets(process.pid());
    let (_read, writer) = stalled_reader(process.addr).await;
    let opened = eventually(Duration::from_secs(5), || async {
        open_sockets(process.pid()) > baseline
    })
    .await;
    assert!(opened, "the connection was not accepted");
    let closed = eventually(STALL_FILLS_WITHIN, || async {
        open_sockets(process.pid()) <= baseline
    })
    .await;
    assert!(
        closed,
        "a client reading no answers still holds its connection after {STALL_FILLS_WITHIN:?} \
         (idle_timeout 300 ms); log:\n{}",
        process.log()
    );
    assert_eq!(
        timed_out(process.addr, "answer").await.as_deref(),
        Some("1")
    );
    writer.abort();
}

/// The value of `tollgate_connections_timed_out_total` for the HTTP listener and `phase`, as
/// `addr`'s `/metrics` shows it (`None`: not counted yet).
async fn timed_out(addr: SocketAddr, phase: &str) -> Option<String> {
    let metrics = crate::support::request(addr, "GET", "/metrics", bytes::Bytes::new(), &[]).await;
    crate::support::sample(
        &metrics.text,
        &format!(r#"tollgate_connections_timed_out_total{{listener="http",phase="{phase}"}}"#),
    )
}

/// Open sockets of process `pid` (its listeners, its clients' connections and its store's).
/// Only sockets: the service also opens files for a moment (the config file and the
/// certificates, re-read every interval to see a change), and a count caught during such a
/// read would be one too high, the baseline of a comparison off by one.
pub(crate) fn open_sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |fds| {
        fds.filter_map(Result::ok)
            .filter(|fd| {
                std::fs::read_link(fd.path())
                    .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"))
            })
            .count()
    })
}

/// `GET path` on a fresh connection: the whole response, if answered within 5 s.
async fn get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .expect("write");
    read_to_close(&mut stream, Duration::from_secs(5))
        .await
        .map(|(text, _)| text)
        .unwrap_or_default()
}

/// Held acquires (a key's slots booked ahead, then waited for on every connection) take at
/// most half of `max_connections`: the next one asking to hold is answered 503 at once,
/// books nothing, and every other request is still served; the held ones are never shed.
/// (With every connection held, `/healthz` answered after 57.7 s: new clients waited in the
/// kernel's queue, since a connection busy in the service is never shed.)
#[tokio::test]
async fn held_acquires_take_at_most_half_the_connections() {
    let paced = format!(
        "{}burst = 1\n",
        one_limit("paced", "gcra", 1, "1m", r#""account""#, "deny")
    );
    let (_dir, path) = config_file(&format!(
        "{}{paced}",
        config(
            "max_connections = 4\nidle_timeout = \"1m\"\nheader_timeout = \"1m\"\nbody_timeout = \"1m\"\nmax_acquire_wait = \"5m\""
        )
    ));
    let process = Process::serve(&path);
    let body = |hold: bool| {
        format!(r#"{{"limit":"paced","key":{{"account":"a"}},"max_wait_ms":250000,"hold":{hold}}}"#)
    };
    let acquire = |hold: bool| {
        let body = body(hold);
        format!(
            "POST /v1/acquire HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    let held_now = |n: usize| {
        let line = format!("\ntollgate_held_acquires {n}\n");
        let addr = process.addr;
        async move { get(addr, "/metrics").await.contains(&line) }
    };
    // The key's first slot is now: taken, so that each held acquire waits a minute more.
    let taken = process.post("/v1/acquire", &body(false)).await;
    assert_eq!(taken.status, 200, "{taken:?}");
    let mut held = Vec::new();
    for n in 1..=2 {
        let mut stream = TcpStream::connect(process.addr).await.expect("connect");
        stream
            .write_all(acquire(true).as_bytes())
            .await
            .expect("write");
        held.push(stream);
        let holding = eventually(Duration::from_secs(5), || held_now(n)).await;
        assert!(holding, "{n} acquires never held; log:\n{}", process.log());
    }

    // A third asking to hold: refused at once, a connection of its own kept open after.
    let mut third = TcpStream::connect(process.addr).await.expect("connect");
    third
        .write_all(acquire(true).as_bytes())
        .await
        .expect("write");
    let refused = read_response(&mut third, Duration::from_secs(5))
        .await
        .unwrap_or_default();
    assert!(refused.starts_with("HTTP/1.1 503 "), "{refused:?}");
    assert!(
        refused
            .to_ascii_lowercase()
            .contains("\r\nretry-after: 1\r\n"),
        "{refused:?}"
    );
    assert_eq!(
        json_body(&refused)["error"],
        "too many held acquires: 2 connections (half of server.max_connections) already wait \
         for their slots; retry, or ask without \"hold\"",
    );
    // Everything else is served, on more connections than the cap leaves beside the held.
    for i in 0..4 {
        let status = quick_check(process.addr).await;
        assert!(status.starts_with("HTTP/1.1 200 "), "check {i}: {status:?}");
    }
    let metrics = get(process.addr, "/metrics").await;
    assert!(
        metrics.contains("\ntollgate_held_acquires_refused_total 1\n"),
        "{metrics}"
    );
    assert!(
        process.logged("held /v1/acquire refused").await,
        "{}",
        process.log()
    );
    // The held ones are still held: neither answered nor shed.
    for stream in &mut held {
        assert_eq!(
            read_to_close(stream, Duration::from_millis(200)).await,
            None,
            "a held acquire was answered or closed"
        );
    }
    // One gone, its place is another's.
    drop(held.pop());
    assert!(eventually(Duration::from_secs(5), || held_now(1)).await);
    let mut again = TcpStream::connect(process.addr).await.expect("connect");
    again
        .write_all(acquire(true).as_bytes())
        .await
        .expect("write");
    assert!(eventually(Duration::from_secs(5), || held_now(2)).await);
}

/// With `max_connections = 3` held by three requests whose bodies trickle (a byte every
/// 100 ms of 100 announced, within `body_timeout`), a new client is served in the place of
/// one of them once it has waited for its body for a second, not `body_timeout` (here 1 min)
/// later. Before, such clients held every slot for as long as `body_timeout` allowed, again
/// and again.
#[tokio::test]
async fn trickled_bodies_at_the_cap_are_shed_after_a_second() {
    let (_dir, path) = config_file(&config(
        "max_connections = 3\nidle_timeout = \"1m\"\nheader_timeout = \"1m\"\nbody_timeout = \"1m\"",
    ));
    let process = Process::serve(&path);
    // Before the tricklers connect: each waits for its body from after this, so a shed before
    // a second from here is one before its second. (Taken after they connected, a slow
    // start-up, which a loaded machine makes, counted against the server.)
    let started = Instant::now();
    let mut tricklers = Vec::new();
    for _ in 0..3 {
        let mut stream = TcpStream::connect(process.addr).await.expect("connect");
        stream
            .write_all(b"POST /v1/check HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{")
            .await
            .expect("write");
        tricklers.push(tokio::spawn(async move {
            for _ in 0..98 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if stream.write_all(b" ").await.is_err() {
                    return;
                }
            }
        }));
    }
    let status = check_within(process.addr, Duration::from_secs(8)).await;
    assert!(
        status.starts_with("HTTP/1.1 200 "),
        "a new client was not served while three trickled bodies held the listener: \
         {status:?}; log:\n{}",
        process.log()
    );
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "a body waited for less than a second was shed: {:?}",
        started.elapsed()
    );
    for trickler in tricklers {
        trickler.abort();
    }
}

/// A flood of silent sockets, re-opened as fast as they are closed, against a listener whose
/// cap they exceed: new clients are still served within 10 s (well under `header_timeout`,
/// 30 s; typically a few hundred ms, but 3 s, the bound before, was exceeded once on a loaded
/// 2-core machine running the other tests), each taking the slot of the
/// connection that waited longest without a request. (Before, they waited for
/// `header_timeout` to free a slot: 7–20 s under a 6 000-socket flood.) A new client waits
/// behind the sockets queued before it, each of which takes the place of one silent for
/// 50 ms: at a cap of 64, about 1,300 a second, so a few hundred milliseconds here. Bounded:
/// 400 sockets against a cap of 64, for at most 20 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_silent_sockets_does_not_lock_new_clients_out() {
    let (_dir, path) = config_file(&config(
        "max_connections = 64\nheader_timeout = \"30s\"\nidle_timeout = \"1m\"",
    ));
    let process = Process::serve(&path);
    let addr = process.addr;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood = {
        let stop = std::sync::Arc::clone(&stop);
        tokio::spawn(async move {
            let mut sockets: Vec<TcpStream> = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(20);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < deadline {
                // Keep 400 open, replacing those the server closed.
                sockets.retain(|s| {
                    let mut byte = [0u8; 1];
                    match s.try_read(&mut byte) {
                        Ok(n) => n > 0,
                        Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
                    }
                });
                while sockets.len() < 400 {
                    match TcpStream::connect(addr).await {
                        Ok(s) => sockets.push(s),
                        Err(_) => break,
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            sockets.len()
        })
    };
    // Let the flood fill the listener.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut slowest = Duration::ZERO;
    for i in 0..30 {
        let started = Instant::now();
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream
            .write_all(check_request("").as_bytes())
            .await
            .expect("write");
        let answer = read_response(&mut stream, Duration::from_secs(10)).await;
        assert!(
            answer
                .as_deref()
                .is_some_and(|a| a.starts_with("HTTP/1.1 200 ")),
            "client {i} not served within 10 s under the flood: {answer:?}; log:\n{}",
            process.log()
        );
        slowest = slowest.max(started.elapsed());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let held = flood.await.expect("flood");
    eprintln!("flood of {held} silent sockets, cap 64: slowest of 30 new clients {slowest:?}");
    let metrics = crate::support::request(addr, "GET", "/metrics", bytes::Bytes::new(), &[]).await;
    assert!(
        metrics
            .text
            .contains("tollgate_connections_shed_total{listener=\"http\"}"),
        "shed connections are counted"
    );
}

/// One socket of a flood, for ever: connect, send nothing, wait until the server closes it,
/// connect again. Each completed connect is counted in `connects`.
async fn silent_socket(addr: SocketAddr, connects: std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    loop {
        match tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr)).await {
            Ok(Ok(mut stream)) => {
                connects.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let mut byte = [0u8; 1];
                // Held until the server closes it (end of stream, or reset).
                let _ = stream.read(&mut byte).await;
            }
            _ => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// How one new client fared: connected after `connect`, the first bytes of a `200` after
/// `answered`, or why not.
#[derive(Debug)]
struct NewClient {
    connect: Duration,
    answered: Result<Duration, String>,
}

/// A new client: connect, send a check, read the answer's status line (3 s at most for the
/// connect, 3 s for the answer).
async fn new_client(addr: SocketAddr) -> NewClient {
    let started = Instant::now();
    let limit = Duration::from_secs(3);
    let mut stream = match tokio::time::timeout(limit, TcpStream::connect(addr)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            return NewClient {
                connect: started.elapsed(),
                answered: Err(format!("connect: {e}")),
            };
        }
        Err(_) => {
            return NewClient {
                connect: started.elapsed(),
                answered: Err("not connected within 3 s".into()),
            };
        }
    };
    let connect = started.elapsed();
    if let Err(e) = stream.write_all(check_request("").as_bytes()).await {
        return NewClient {
            connect,
            answered: Err(format!("write: {e}")),
        };
    }
    // The status line is enough: the first bytes of the answer.
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + limit;
    let answered = loop {
        if got.len() >= "HTTP/1.1 200 ".len() {
            break if got.starts_with(b"HTTP/1.1 200 ") {
                Ok(started.elapsed())
            } else {
                Err(format!("answered {:?}", String::from_utf8_lossy(&got)))
            };
        }
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) => break Err(format!("closed after {} bytes", got.len())),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Ok(Err(e)) => break Err(format!("read: {e}")),
            Err(_) => break Err("no answer within 3 s".into()),
        }
    };
    NewClient { connect, answered }
}

/// A flood of sockets re-opened as fast as the server sheds them, more than the cap and the
/// old 128-deep accept queue together hold (400 against `max_connections = 128`): every one
/// of 50 new clients is answered `200`, none is reset or closed, and none waits for a dropped
/// SYN to be sent again (a connect taking over 900 ms: Linux retries a SYN after 1 s). Bounded:
/// 3 s for each connect and each answer; about 10 s in a debug build.
///
/// Before (one run: 12 of 50 failed): new clients were reset a few milliseconds after they
/// connected, because the HTTP loop dropped the accept future, and with it the connection
/// accepted over the cap that was waiting for the slot shed for it, whenever another
/// connection ended first; and the accept queue (128) overflowed, so the kernel dropped SYNs
/// and a client connected only after 1 s. Each fix alone still fails here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_clients_are_served_during_a_flood_of_reopened_sockets() {
    const CAP: usize = 128;
    const FLOOD: usize = 400;
    const CLIENTS: usize = 50;
    let (_dir, path) = config_file(&config(&format!(
        "max_connections = {CAP}\nheader_timeout = \"30s\"\nidle_timeout = \"1m\""
    )));
    let process = Process::serve(&path);
    let addr = process.addr;
    let connects = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut flood = tokio::task::JoinSet::new();
    for _ in 0..FLOOD {
        flood.spawn(silent_socket(addr, std::sync::Arc::clone(&connects)));
    }
    // The listener full and its queue holding more.
    let full = eventually(Duration::from_secs(10), || async {
        connects.load(std::sync::atomic::Ordering::Relaxed) >= 3 * CAP
    })
    .await;
    assert!(
        full,
        "the flood did not connect 3 × {CAP} sockets within 10 s"
    );
    let mut clients = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS {
        clients.push(new_client(addr).await);
    }
    let flood_connects = connects.load(std::sync::atomic::Ordering::Relaxed);
    flood.abort_all();
    let failed: Vec<(usize, &NewClient)> = clients
        .iter()
        .enumerate()
        .filter(|(_, c)| c.answered.is_err() || c.connect > Duration::from_millis(900))
        .collect();
    let slowest = clients
        .iter()
        .filter_map(|c| c.answered.as_ref().ok())
        .max()
        .copied()
        .unwrap_or_default();
    eprintln!(
        "flood of {FLOOD} sockets ({flood_connects} connects), cap {CAP}: {} of {CLIENTS} new clients failed or connected after 900 ms; slowest answered {slowest:?}",
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "{} of {CLIENTS} new clients reset, unanswered or connected late: {failed:?}",
        failed.len()
    );
}

/// Errors hyper answers below the router (a head over the size limit: 431; a malformed
/// request line: 400) carry the API's JSON error body.
#[tokio::test]
async fn errors_below_the_router_answer_json() {
    let (_dir, path) = config_file(&config(""));
    let process = Process::serve(&path);
    let big = format!(
        "GET /healthz HTTP/1.1\r\nhost: t\r\nx-big: {}\r\n\r\n",
        "a".repeat(33 * 1024)
    );
    for (request, status, error) in [
        (big.as_str(), "431", "request header fields too large"),
        (
            "GET /healthz HTTP/1.1\r\nbad header\r\n\r\n",
            "400",
            "malformed request",
        ),
    ] {
        let mut stream = TcpStream::connect(process.addr).await.expect("connect");
        let _ = stream.write_all(request.as_bytes()).await;
        let (answer, _) = read_to_close(&mut stream, Duration::from_secs(5))
            .await
            .expect("closed");
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status} ")),
            "{answer}"
        );
        assert!(
            answer
                .to_ascii_lowercase()
                .contains("content-type: application/json"),
            "{answer}"
        );
        assert_eq!(json_body(&answer)["error"], error, "{answer}");
    }
    // Counted, as the router's answers are: they were counted nowhere, and logged only at
    // `debug` (a proxy whose cookies outgrew the head limit had every request refused).
    let scrape = crate::support::request(process.addr, "GET", "/metrics", bytes::Bytes::new(), &[])
        .await
        .text;
    for status in ["431", "400"] {
        assert_eq!(
            crate::support::sample(
                &scrape,
                &format!("tollgate_http_requests_total{{route=\"other\",status=\"{status}\"}}")
            )
            .as_deref(),
            Some("1"),
            "{status}: {scrape}"
        );
    }
    assert!(
        process.logged("request refused before routing").await,
        "{}",
        process.log()
    );
}

/// SIGTERM (and SIGINT) the moment the listening line is out: the handlers are installed
/// before it, so the process stops gracefully (status 0), never by the signal's default
/// action. Ten rounds each, since a missing handler is a race against start-up.
#[tokio::test]
async fn a_signal_right_after_listening_stops_gracefully() {
    for signal in ["TERM", "INT"] {
        for round in 0..10 {
            let (_dir, path) = config_file(&config(""));
            let mut process = Process::serve(&path);
            process.signal(signal);
            let status = process.wait();
            assert!(
                status.success(),
                "SIG{signal}, round {round}: {status:?}; log:\n{}",
                process.log()
            );
        }
    }
}

/// SIGTERM while one client holds half a head and another half a body: the process exits
/// within `shutdown_timeout` (1 s) plus a margin, with status 0.
#[tokio::test]
async fn sigterm_is_not_stalled_by_slow_clients() {
    let (_dir, path) = config_file(&config(
        "shutdown_timeout = \"1s\"\nheader_timeout = \"1m\"\nbody_timeout = \"1m\"",
    ));
    let mut process = Process::serve(&path);
    let mut head = TcpStream::connect(process.addr).await.expect("connect");
    head.write_all(b"POST /v1/check HTTP/1.1\r\nhost: t\r\n")
        .await
        .expect("write");
    let mut body = TcpStream::connect(process.addr).await.expect("connect");
    body.write_all(b"POST /v1/check HTTP/1.1\r\nhost: t\r\ncontent-length: 100\r\n\r\n{")
        .await
        .expect("write");
    // Both connections accepted (their reads have begun) before the signal.
    assert!(
        eventually(Duration::from_secs(5), || async {
            quick_check(process.addr).await.contains("200")
        })
        .await
    );
    let signalled = Instant::now();
    process.signal("TERM");
    let status = process.wait();
    let took = signalled.elapsed();
    assert!(status.success(), "{status:?}; log:\n{}", process.log());
    assert!(
        took < Duration::from_secs(3),
        "exited after {took:?}; log:\n{}",
        process.log()
    );
    assert!(
        took >= Duration::from_millis(900),
        "exited after {took:?}: the drain was skipped"
    );
}

/// SIGTERM while 200 clients have written their check: every one is answered 200 and the
/// process exits 0. Three rounds, since losing requests is a race.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_answers_every_request_written_before_it() {
    for round in 0..3 {
        let (_dir, path) = config_file(&config(""));
        let mut process = Process::serve(&path);
        let addr = process.addr;
        let (written_tx, mut written_rx) = tokio::sync::mpsc::channel::<()>(256);
        let mut clients = Vec::new();
        for _ in 0..200 {
            let written = written_tx.clone();
            clients.push(tokio::spawn(async move {
                let mut stream = TcpStream::connect(addr).await.expect("connect");
                stream
                    .write_all(check_request("").as_bytes())
                    .await
                    .expect("write");
                let _ = written.send(()).await;
                read_response(&mut stream, Duration::from_secs(10)).await
            }));
        }
        for _ in 0..200 {
            written_rx.recv().await.expect("written");
        }
        process.signal("TERM");
        let mut answered = 0;
        for client in clients {
            if client
                .await
                .expect("client")
                .is_some_and(|r| r.starts_with("HTTP/1.1 200 "))
            {
                answered += 1;
            }
        }
        let status = process.wait();
        assert_eq!(
            answered,
            200,
            "round {round}: {answered} of 200 answered; log:\n{}",
            process.log()
        );
        assert!(status.success(), "{status:?}; log:\n{}", process.log());
    }
}

/// A reset is logged at info with the limit, a digest of the key and the client's address;
/// never the token or the key in clear.
#[tokio::test]
async fn a_reset_is_logged_without_secrets() {
    let token = "s3cret-admin-token";
    let (_dir, path) = config_file(&config(&format!("admin_token = \"{token}\"")));
    let process = Process::serve(&path);
    let mut stream = TcpStream::connect(process.addr).await.expect("connect");
    let client = stream.local_addr().expect("local addr");
    let body = r#"{"limit": "h", "key": {"user": "secret-user-4242"}}"#;
    let request = format!(
        "POST /v1/reset HTTP/1.1\r\nhost: t\r\nauthorization: Bearer {token}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let answer = read_response(&mut stream, Duration::from_secs(5))
        .await
        .expect("answered");
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    assert!(process.logged(" reset").await, "{}", process.log());
    let log = process.log();
    let line = log
        .lines()
        .find(|l| l.contains(" reset"))
        .unwrap_or_default();
    let digest: String = Sha256::digest(b"user=secret-user-4242\n")
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect();
    assert!(line.contains("INFO"), "{line}");
    assert!(line.contains(r#"limits=["h"]"#), "{line}");
    assert!(line.contains(&format!("key={digest}")), "{line}");
    assert!(line.contains(&format!("client={client}")), "{line}");
    assert!(
        !log.contains(token) && !log.contains("secret-user-4242"),
        "{log}"
    );
}

/// An in-process server with `server_lines` under `[server]`, a limit `per_user` and its Envoy
/// rule, serving gRPC on its own `127.0.0.1:0` listener (the address returned).
async fn grpc_server(server_lines: &str) -> (TestServer, SocketAddr) {
    let text = format!(
        "[server]\n{server_lines}\n{}{}",
        one_limit("per_user", "fixed_window", 1000, "1h", r#""user""#, "deny"),
        user_rule("per_user")
    );
    let config = Config::parse(&text, "test.toml", &Overrides::default()).expect("valid");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let grpc = listener.local_addr().expect("addr");
    let server = TestServer::start_with(Server::new(config).grpc_listener(listener)).await;
    (server, grpc)
}

/// The gRPC listener: a connection that sends nothing is closed after `header_timeout`, and
/// with `max_connections = 1` a second client is not served while the first has spoken within
/// the last second (see `a_silent_grpc_connection_makes_room_at_the_cap` for after), and is
/// once the first has gone.
#[tokio::test]
async fn grpc_connections_are_capped_and_timed() {
    let (_server, grpc) = grpc_server("max_connections = 1\nheader_timeout = \"300ms\"").await;

    let mut silent = TcpStream::connect(grpc).await.expect("connect");
    let opened = Instant::now();
    let closed = read_to_close(&mut silent, Duration::from_secs(5)).await;
    let (_, at) = closed.expect("a silent gRPC connection is closed");
    assert!(
        at - opened >= Duration::from_millis(250),
        "{:?}",
        at - opened
    );

    let lazy = |addr: SocketAddr| {
        Client::new(
            Endpoint::from_shared(format!("http://{addr}"))
                .expect("url")
                .connect_lazy(),
        )
    };
    let mut first = lazy(grpc);
    let answer = call(&mut first, "edge", &[("user", "a")]).await;
    assert_eq!(code(&answer), Code::Ok);
    let mut second = lazy(grpc);
    let early = tokio::time::timeout(
        Duration::from_millis(500),
        call(&mut second, "edge", &[("user", "b")]),
    )
    .await;
    assert!(early.is_err(), "served beyond the cap: {early:?}");
    drop(first);
    let later = tokio::time::timeout(
        Duration::from_secs(5),
        call(&mut second, "edge", &[("user", "b")]),
    )
    .await;
    assert_eq!(later.map(|r| code(&r)).ok(), Some(Code::Ok));
}

/// With `max_connections = 1` held by a gRPC client that made its call and keeps its
/// connection open (here it would answer the server's pings for ever), a new client is
/// served in its place once it has been silent for a second, not after `idle_timeout`. Before,
/// an HTTP/2 connection that had spoken was never shed.
#[tokio::test]
async fn a_silent_grpc_connection_makes_room_at_the_cap() {
    let (_server, grpc) =
        grpc_server("max_connections = 1\nidle_timeout = \"10m\"\nheader_timeout = \"1m\"").await;
    let endpoint = || {
        Endpoint::from_shared(format!("http://{grpc}"))
            .expect("url")
            .connect_lazy()
    };
    let mut first = Client::new(endpoint());
    assert_eq!(
        code(&call(&mut first, "edge", &[("user", "a")]).await),
        Code::Ok
    );
    let silent_since = Instant::now();
    let mut second = Client::new(endpoint());
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        call(&mut second, "edge", &[("user", "b")]),
    )
    .await
    .expect("a new client was not served while a silent gRPC connection held the listener");
    assert_eq!(code(&answer), Code::Ok);
    assert!(
        silent_since.elapsed() >= Duration::from_millis(900),
        "shed before it had been silent for a second: {:?}",
        silent_since.elapsed()
    );
    drop(first);
}

/// A gRPC call whose request never ends (headers sent, no message) does not stall shutdown:
/// the server stops within `shutdown_timeout` plus a margin and the connection is closed.
#[tokio::test]
async fn grpc_drain_is_bounded_by_shutdown_timeout() {
    let (server, grpc) =
        grpc_server("shutdown_timeout = \"500ms\"\nheader_timeout = \"1m\"\nbody_timeout = \"1m\"")
            .await;

    let tcp = TcpStream::connect(grpc).await.expect("connect");
    let (client, connection) = h2::client::handshake(tcp).await.expect("h2 handshake");
    let connection = tokio::spawn(connection);
    let mut client = client.ready().await.expect("ready");
    let request = || {
        hyper::Request::post(format!(
            "http://{grpc}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("request")
    };
    let (_never_ends, _stream) = client.send_request(request(), false).expect("sent");
    // A whole call after it on the same connection: once it is answered, the server has read
    // the first one's headers (frames arrive in order) and its call is in flight.
    let mut client = client.ready().await.expect("ready");
    let (answer, mut body) = client.send_request(request(), false).expect("sent");
    body.send_data(bytes::Bytes::from_static(&[0, 0, 0, 0, 0]), true)
        .expect("empty message");
    let answer = tokio::time::timeout(Duration::from_secs(5), answer).await;
    assert!(
        matches!(answer, Ok(Ok(_))),
        "the second call is answered: {answer:?}"
    );

    let started = Instant::now();
    server.stop().await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(3), "stopped after {took:?}");
    assert!(
        took >= Duration::from_millis(400),
        "stopped after {took:?}: no drain"
    );
    let closed = tokio::time::timeout(Duration::from_secs(5), connection).await;
    assert!(closed.is_ok(), "the slow gRPC connection is still open");
}

/// An in-process server with `[envoy]` lines `envoy_lines`, a limit `per_user` (1000 an hour)
/// and its Envoy rule (`user` → part `user`), serving gRPC on its own listener; with the
/// runtime's threads, a call that held one would show in the other requests.
async fn envoy_server(envoy_lines: &str) -> (TestServer, Client) {
    let text = format!(
        "[server]\n{}\n[envoy]\n{envoy_lines}\n{}",
        one_limit("per_user", "fixed_window", 1000, "1h", r#""user""#, "deny"),
        user_rule("per_user")
    );
    let config = Config::parse(&text, "test.toml", &Overrides::default()).expect("valid");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let grpc = listener.local_addr().expect("addr");
    let server = TestServer::start_with(Server::new(config).grpc_listener(listener)).await;
    let client = crate::grpc::connect(grpc).await;
    (server, client)
}

/// A `ShouldRateLimit` request of domain `edge` with one descriptor per user of `users`,
/// each of `entries` entries (`user`, then `extra-1` …).
fn users_request(users: impl IntoIterator<Item = String>, entries: usize) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: users
            .into_iter()
            .map(|user| RateLimitDescriptor {
                entries: std::iter::once(("user".to_owned(), user))
                    .chain((1..entries).map(|i| (format!("extra-{i}"), "x".to_owned())))
                    .map(|(key, value)| DescriptorEntry { key, value })
                    .collect(),
                ..RateLimitDescriptor::default()
            })
            .collect(),
        hits_addend: 0,
    }
}

/// A `ShouldRateLimit` message over 1 MiB is refused before it is decoded (`OUT_OF_RANGE`,
/// naming the limit); one under it is decoded, and then refused by the descriptor cap.
/// Decoded, gRPC's default 4 MiB of small descriptors took over 100 MB of memory.
#[tokio::test]
async fn a_grpc_message_over_a_mebibyte_is_refused_undecoded() {
    use prost::Message as _;
    let (_server, client) = envoy_server("").await;
    let large = users_request((0..70_000).map(|i| format!("user-{i}")), 1);
    let small = users_request((0..30_000).map(|i| format!("user-{i}")), 1);
    assert!(
        large.encoded_len() > tollgate_envoy::MAX_MESSAGE_BYTES,
        "{}",
        large.encoded_len()
    );
    assert!(
        small.encoded_len() < tollgate_envoy::MAX_MESSAGE_BYTES,
        "{}",
        small.encoded_len()
    );

    let refused = client
        .clone()
        .should_rate_limit(large)
        .await
        .expect_err("a message over 1 MiB is refused");
    assert_eq!(refused.code(), tonic::Code::OutOfRange, "{refused:?}");
    assert!(
        refused
            .message()
            .contains(&tollgate_envoy::MAX_MESSAGE_BYTES.to_string()),
        "{refused:?}"
    );
    let decoded = client
        .clone()
        .should_rate_limit(small)
        .await
        .expect_err("30,000 descriptors are past the cap");
    assert_eq!(decoded.code(), tonic::Code::InvalidArgument, "{decoded:?}");
    assert!(
        decoded.message().contains("30000 descriptors"),
        "{decoded:?}"
    );
}

/// Unfinished gRPC messages count against one budget for the whole server
/// (`MESSAGE_BUDGET_BYTES`, 64 MiB): 100 calls on one connection that each send 1 MB of an
/// announced 1,000,000-byte message and never the rest are not all held until their deadline
/// (11 s); those past the budget are refused `RESOURCE_EXHAUSTED` as their bytes arrive. Once
/// the client goes, its bytes are given back and a normal call is served. Before, all 100 MB
/// were held, and every call ended at its deadline.
#[tokio::test]
async fn unfinished_grpc_messages_are_bounded_by_one_budget() {
    const CALLS: usize = 100;
    const ANNOUNCED: usize = 1_000_000;
    let (server, grpc) = grpc_server("").await;
    let tcp = TcpStream::connect(grpc).await.expect("connect");
    let (mut sender, connection) = h2::client::handshake(tcp).await.expect("h2 handshake");
    let driver = tokio::spawn(connection);
    let mut chunk = vec![0u8; ANNOUNCED];
    chunk[..5].copy_from_slice(&[0, 0, 0x0f, 0x42, 0x40]); // uncompressed, 1,000,000 bytes
    let chunk = bytes::Bytes::from(chunk);
    let mut answers = Vec::new();
    let mut open = Vec::new();
    for _ in 0..CALLS {
        let request = tonic::codegen::http::Request::post(format!(
            "http://{grpc}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("request");
        sender = sender.ready().await.expect("ready");
        let (answer, mut stream) = sender.send_request(request, false).expect("send");
        // The message but its last 5 bytes: never whole.
        stream
            .send_data(chunk.slice(..ANNOUNCED - 5), false)
            .expect("data");
        answers.push(answer);
        open.push(stream);
    }
    // Those past the budget are refused (`RESOURCE_EXHAUSTED`) as their bytes arrive; the
    // rest end at their deadline (11 s) as `DEADLINE_EXCEEDED`. Bounded: 30 s in all.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut refused = 0;
    for answer in answers {
        let Ok(Ok(response)) = tokio::time::timeout_at(deadline, answer).await else {
            continue;
        };
        if response.headers().get("grpc-status").map(|v| v.as_bytes()) == Some(b"8") {
            refused += 1;
        }
    }
    let budget = tollgate_envoy::MESSAGE_BUDGET_BYTES;
    assert!(
        refused >= CALLS - budget / (ANNOUNCED - 5),
        "{refused} of {CALLS} unfinished 1 MB calls refused; the budget holds {budget} bytes"
    );
    // Counted (the registry is the test process's: only this test refuses by budget).
    let counted = crate::support::sample(
        &server.get("/metrics").await.text,
        "tollgate_grpc_budget_refusals_total",
    )
    .and_then(|v| v.parse::<usize>().ok());
    assert!(
        counted.is_some_and(|n| n >= refused),
        "{counted:?} refusals counted, {refused} seen"
    );
    drop(open);
    drop(sender);
    driver.abort();

    let mut client = Client::new(
        Endpoint::from_shared(format!("http://{grpc}"))
            .expect("url")
            .connect_lazy(),
    );
    let served = eventually(Duration::from_secs(5), || {
        let mut client = client.clone();
        async move { code(&call(&mut client, "edge", &[("user", "a")]).await) == Code::Ok }
    })
    .await;
    assert!(served, "the budget was not given back when the client went");
    assert_eq!(
        code(&call(&mut client, "edge", &[("user", "b")]).await),
        Code::Ok
    );
}

/// A gRPC request on `sender` for `path` (a unary call), with its body not yet sent.
fn grpc_request(grpc: SocketAddr, path: &str) -> tonic::codegen::http::Request<()> {
    tonic::codegen::http::Request::post(format!("http://{grpc}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("request")
}

const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// The `grpc-status` of a whole call of `message` to `path` on a connection of its own
/// (trailers-only answers carry it in the headers), within 5 s.
async fn raw_call_status(grpc: SocketAddr, path: &str, message: &[u8]) -> Option<String> {
    let call = async {
        let tcp = TcpStream::connect(grpc).await.ok()?;
        let (sender, connection) = h2::client::handshake(tcp).await.ok()?;
        let driver = tokio::spawn(connection);
        let mut sender = sender.ready().await.ok()?;
        let (answer, mut body) = sender.send_request(grpc_request(grpc, path), false).ok()?;
        let mut framed = vec![0, 0, 0, 0, 0];
        framed[1..5].copy_from_slice(&u32::try_from(message.len()).ok()?.to_be_bytes());
        framed.extend_from_slice(message);
        body.send_data(bytes::Bytes::from(framed), true).ok()?;
        let answer = answer.await.ok()?;
        let status = |headers: &tonic::codegen::http::HeaderMap| {
            headers
                .get("grpc-status")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let found = match status(answer.headers()) {
            Some(status) => Some(status),
            None => {
                let mut body = answer.into_body();
                while let Some(data) = body.data().await {
                    let data = data.ok()?;
                    let _ = body.flow_control().release_capacity(data.len());
                }
                status(&body.trailers().await.ok()??)
            }
        };
        driver.abort();
        found
    };
    tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .ok()
        .flatten()
}

/// One connection cannot lock other clients out of the gRPC service by holding unfinished
/// messages. The hostile client opens calls that each send all but a few bytes of a message
/// just under 1 MiB, enough of them to fill the whole 64 MiB budget to 8 bytes of its end, and
/// never finishes them. Meanwhile every call of another client (a `ShouldRateLimit`, a
/// `grpc.health.v1.Health/Check`) is served: whole messages are never refused, and one
/// connection holds `CONNECTION_SHARE_BYTES` (4 MiB) at most, its own newer calls refused
/// past it. Before, the budget was first come, first served: the hostile client held it all,
/// and the other client's calls and health checks were refused `RESOURCE_EXHAUSTED`.
#[tokio::test]
async fn one_connection_cannot_lock_others_out_with_unfinished_messages() {
    const PER_CALL: usize = (1 << 20) - 64; // bytes sent by each hostile call, prefix included
    const LEAVE: usize = 8;
    let (_server, grpc) = grpc_server("").await;
    let budget = tollgate_envoy::MESSAGE_BUDGET_BYTES;

    let tcp = TcpStream::connect(grpc).await.expect("connect");
    let (mut sender, connection) = h2::client::handshake(tcp).await.expect("h2 handshake");
    let driver = tokio::spawn(connection);
    // Each call announces a message of 1 MiB - 8 bytes and sends at most PER_CALL of it.
    let mut prefix = vec![0u8; PER_CALL];
    prefix[1..5].copy_from_slice(&u32::try_from((1 << 20) - 8).expect("fits").to_be_bytes());
    let prefix = bytes::Bytes::from(prefix);
    let (mut hostile, mut open, mut sent) = (Vec::new(), Vec::new(), 0);
    while budget - LEAVE - sent >= 6 {
        let n = PER_CALL.min(budget - LEAVE - sent);
        sender = sender.ready().await.expect("ready");
        let (answer, mut stream) = sender
            .send_request(grpc_request(grpc, SHOULD_RATE_LIMIT), false)
            .expect("send");
        stream.send_data(prefix.slice(..n), false).expect("data");
        sent += n;
        hostile.push(answer);
        open.push(stream);
    }

    // The other client's calls, for 6 s (the hostile bytes arrive meanwhile): all served.
    let mut client = Client::new(
        Endpoint::from_shared(format!("http://{grpc}"))
            .expect("url")
            .connect_lazy(),
    );
    let mut failures = Vec::new();
    let until = Instant::now() + Duration::from_secs(6);
    let mut i = 0;
    while Instant::now() < until {
        i += 1;
        let request = users_request([format!("probe-{i}")], 1);
        if let Err(status) = client.should_rate_limit(request).await {
            failures.push(format!("ShouldRateLimit: {status:?}"));
        }
        let health = raw_call_status(grpc, "/grpc.health.v1.Health/Check", &[]).await;
        if health.as_deref() != Some("0") {
            failures.push(format!("Health/Check: grpc-status {health:?}"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        failures.is_empty(),
        "{} of {i} rounds failed while one connection held unfinished messages: {:?}",
        failures.len(),
        &failures[..failures.len().min(4)]
    );

    // The hostile connection held its share, and its calls past it were refused.
    let share = tollgate_envoy::CONNECTION_SHARE_BYTES;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut refused = 0;
    for answer in hostile {
        if let Ok(Ok(response)) = tokio::time::timeout_at(deadline, answer).await
            && response.headers().get("grpc-status").map(|v| v.as_bytes()) == Some(b"8")
        {
            refused += 1;
        }
    }
    assert!(
        refused >= open.len() - share / (PER_CALL - 5),
        "{refused} of {} hostile calls refused; one connection holds {share} bytes",
        open.len()
    );
    drop(open);
    driver.abort();
}

/// A client that takes no answers (HTTP/2 `SETTINGS_INITIAL_WINDOW_SIZE` 0, never a
/// `WINDOW_UPDATE`, though it answers pings) holds at most `DEFAULT_MAX_CONCURRENT_STREAMS`
/// (100) calls: each answer held keeps its stream open, so the 101st call waits; and its
/// connection is closed once an answer has been held `body_timeout` (here 5 s), which frees
/// what they held. Before, one connection held 1024 answers (about 10 KB each) for ever: 100
/// such clients took a server from 23 MB to 1.06 GB.
#[tokio::test]
async fn a_client_that_takes_no_answers_holds_few_and_is_closed() {
    const TRIED: usize = 150;
    let (server, grpc) = grpc_server("body_timeout = \"5s\"").await;
    let tcp = TcpStream::connect(grpc).await.expect("connect");
    let (sender, connection) = h2::client::Builder::new()
        .initial_window_size(0)
        .handshake::<_, bytes::Bytes>(tcp)
        .await
        .expect("h2 handshake");
    // The driver answers the server's pings, and ends when the server closes the connection.
    let mut driver = tokio::spawn(connection);
    use prost::Message as _;
    let message = users_request(["held".to_owned()], 1).encode_to_vec();
    let mut framed = vec![0u8; 5];
    framed[1..5].copy_from_slice(&u32::try_from(message.len()).expect("fits").to_be_bytes());
    framed.extend(message);
    let framed = bytes::Bytes::from(framed);

    let mut sender = sender;
    let mut answers = Vec::new();
    for _ in 0..TRIED {
        // Past the server's stream limit, h2 queues the calls on the client's side.
        sender = sender.ready().await.expect("ready");
        let (answer, mut body) = sender
            .send_request(grpc_request(grpc, SHOULD_RATE_LIMIT), false)
            .expect("send");
        body.send_data(framed.clone(), true).expect("data");
        answers.push(answer);
    }
    // The calls the server took are answered: their answers' headers (which need no window)
    // arrive, their messages never do. Bounded wait: 2 s after the last call was sent.
    // (Kept: a client that drops an answer resets its stream.)
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    let mut taken = Vec::new();
    for answer in answers {
        if let Ok(Ok(answer)) = tokio::time::timeout_at(deadline, answer).await {
            taken.push(answer);
        }
    }
    let taken = taken.len();
    let limit = tollgate_envoy::DEFAULT_MAX_CONCURRENT_STREAMS as usize;
    assert!(
        (1..=limit).contains(&taken),
        "{taken} of {TRIED} calls taken on one connection whose client takes no answers"
    );

    // Closed once an answer has been held 5 s: bounded wait of 20 s.
    let closed = tokio::time::timeout(Duration::from_secs(20), &mut driver).await;
    assert!(
        closed.is_ok(),
        "a connection whose client takes no answers is still open after 20 s"
    );
    let counted = crate::support::sample(
        &server.get("/metrics").await.text,
        r#"tollgate_connections_timed_out_total{listener="grpc",phase="answer_window"}"#,
    )
    .and_then(|v| v.parse::<usize>().ok());
    assert!(counted.is_some_and(|n| n >= 1), "{counted:?} counted");

    // Others are served meanwhile and after.
    let mut client = Client::new(
        Endpoint::from_shared(format!("http://{grpc}"))
            .expect("url")
            .connect_lazy(),
    );
    assert_eq!(
        code(&call(&mut client, "edge", &[("user", "after")]).await),
        Code::Ok
    );
}

/// `[envoy] max_descriptors` and `max_entries`: one descriptor or one entry past the cap is
/// `INVALID_ARGUMENT` naming the cap, the count and the setting, and charges nothing; a call
/// at the caps is decided. `POST /json` shares the caps (400 with the same message).
#[tokio::test]
async fn envoy_calls_past_the_descriptor_caps_are_refused() {
    let (server, mut client) = envoy_server("max_descriptors = 4\nmax_entries = 2").await;
    let users = |n: usize| (0..n).map(|i| format!("u{i}"));

    let over = client
        .should_rate_limit(users_request(users(5), 1))
        .await
        .expect_err("5 descriptors over a cap of 4");
    assert_eq!(over.code(), tonic::Code::InvalidArgument, "{over:?}");
    assert!(
        over.message().contains("5 descriptors")
            && over.message().contains("at most 4")
            && over.message().contains("envoy.max_descriptors"),
        "{over:?}"
    );
    let long = client
        .should_rate_limit(users_request(users(1), 3))
        .await
        .expect_err("3 entries over a cap of 2");
    assert_eq!(long.code(), tonic::Code::InvalidArgument, "{long:?}");
    assert!(
        long.message().contains("descriptors[0]")
            && long.message().contains("3 entries")
            && long.message().contains("at most 2")
            && long.message().contains("envoy.max_entries"),
        "{long:?}"
    );
    for i in 0..5 {
        let key = format!(r#"{{"user":"u{i}"}}"#);
        assert_eq!(
            server.remaining("per_user", &key).await,
            1000,
            "u{i} charged"
        );
    }

    let json = |n: usize| {
        let descriptors: Vec<String> = (0..n)
            .map(|i| format!(r#"{{"entries":[{{"key":"user","value":"j{i}"}}]}}"#))
            .collect();
        format!(
            r#"{{"domain":"edge","descriptors":[{}]}}"#,
            descriptors.join(",")
        )
    };
    let refused = server.post("/json", &json(5)).await;
    assert_eq!(refused.status, 400, "{refused:?}");
    assert!(
        refused.error().contains("envoy.max_descriptors"),
        "{refused:?}"
    );
    assert_eq!(server.remaining("per_user", r#"{"user":"j0"}"#).await, 1000);

    let at_cap = client
        .should_rate_limit(users_request(users(4), 2))
        .await
        .expect("4 descriptors of 2 entries, at the caps")
        .into_inner();
    // The rule's descriptor has one entry: two-entry descriptors match nothing, and are OK.
    assert_eq!(code(&at_cap), Code::Ok);
    let decided = client
        .should_rate_limit(users_request(users(4), 1))
        .await
        .expect("4 descriptors, at the cap")
        .into_inner();
    assert_eq!(code(&decided), Code::Ok);
    assert_eq!(decided.statuses.len(), 4);
    for i in 0..4 {
        let key = format!(r#"{{"user":"u{i}"}}"#);
        assert_eq!(server.remaining("per_user", &key).await, 999, "u{i}");
    }
}

/// A flood of oversized calls (20,000 distinct descriptors each, far past the default cap)
/// is refused at once: `/healthz` answers promptly all along, and every call is answered
/// `INVALID_ARGUMENT` naming the default cap. Before the cap, one such call held a runtime
/// thread for seconds (the duplicate-key merge compared each descriptor with every earlier
/// one), and a few of them stalled every request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_oversized_envoy_calls_does_not_stall_the_service() {
    let (server, client) = envoy_server("").await;
    let request = users_request((0..20_000).map(|i| format!("user-{i}")), 1);
    let flood: Vec<_> = (0..4)
        .map(|_| {
            let mut client = client.clone();
            let request = request.clone();
            tokio::spawn(async move {
                let mut answers = Vec::new();
                for _ in 0..3 {
                    let answer = tokio::time::timeout(
                        Duration::from_secs(20),
                        client.should_rate_limit(request.clone()),
                    )
                    .await;
                    answers.push(answer.map(|r| r.map(|_| ())));
                }
                answers
            })
        })
        .collect();

    let addr = server.addr;
    let started = Instant::now();
    let mut probes = 0;
    while !flood.iter().all(tokio::task::JoinHandle::is_finished) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the flood of 12 calls is not over"
        );
        let probe = tokio::time::timeout(
            Duration::from_secs(2),
            crate::support::request(addr, "GET", "/healthz", bytes::Bytes::new(), &[]),
        )
        .await;
        let probe = probe.unwrap_or_else(|_| {
            panic!(
                "/healthz not answered within 2 s, {:?} into the flood",
                started.elapsed()
            )
        });
        assert_eq!(probe.status, 200, "{probe:?}");
        probes += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(probes > 0);
    for task in flood {
        for answer in task.await.expect("flood task") {
            let status = answer
                .expect("answered within 20 s")
                .expect_err("20,000 descriptors are refused");
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
            assert!(
                status.message().contains("20000 descriptors")
                    && status.message().contains(&format!(
                        "at most {}",
                        tollgate_envoy::DEFAULT_MAX_DESCRIPTORS
                    )),
                "{status:?}"
            );
        }
    }
    assert_eq!(
        server.remaining("per_user", r#"{"user":"user-0"}"#).await,
        1000
    );
}
