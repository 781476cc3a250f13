//! TLS and mTLS on both listeners of the real `tollgate serve` (issue #31), with real clients:
//! curl, tonic with TLS channel credentials, and rustls; certificate rotation while
//! connections stay open; bad certificate files at start-up and at reload; a flood of stalled
//! handshakes. Certificates are made per test (`tollgate_testkit::TlsFiles`).

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_testkit::TlsFiles;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::binary::{Process, config_file, serve_refused};
use crate::grpc::{Client, call, code, user_rule};
use crate::hardening::{json_body, open_sockets, read_to_close};
use crate::support::{eventually, one_limit};

/// `[server]` with TLS from `tls` (and `extra` lines), a gRPC port, one limit and its rule.
fn config(tls: &TlsFiles, extra: &str) -> String {
    format!(
        "[server]\ngrpc = \"127.0.0.1:0\"\ntls_cert = {:?}\ntls_key = {:?}\n{extra}\n{}{}",
        tls.server_cert(),
        tls.server_key(),
        one_limit("per_user", "fixed_window", 1000, "1m", "\"user\"", "deny"),
        user_rule("per_user"),
    )
}

/// `--cert`-style arguments as `&str`s.
fn args(a: &[String; 4]) -> Vec<&str> {
    a.iter().map(String::as_str).collect()
}

/// curl's exit code and output for `https://127.0.0.1:<port><path>` trusting `ca`, with
/// `args` added.
fn curl(addr: SocketAddr, path: &str, ca: &Path, args: &[&str]) -> (i32, String) {
    let output = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(ca)
        .args(args)
        .arg(format!("https://localhost:{}{path}", addr.port()))
        .output()
        .expect("run curl");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code().unwrap_or(-1), text)
}

/// A tonic channel over TLS to `addr`, trusting `ca`, presenting `identity` (cert, key).
async fn grpc_tls(
    addr: SocketAddr,
    ca: &Path,
    identity: Option<(&Path, &Path)>,
) -> Result<Client, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(std::fs::read(ca).expect("ca")))
        .domain_name("localhost");
    if let Some((cert, key)) = identity {
        let cert = std::fs::read(cert).expect("cert");
        let key = std::fs::read(key).expect("key");
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    let channel: Channel = Endpoint::from_shared(format!("https://localhost:{}", addr.port()))?
        .tls_config(tls)?
        .connect()
        .await?;
    Ok(Client::new(channel))
}

/// A rustls client connection to `addr` trusting `ca`: the stream and the certificate the
/// server presented.
async fn rustls_connect(
    addr: SocketAddr,
    ca: &Path,
) -> (
    tokio_rustls::client::TlsStream<TcpStream>,
    CertificateDer<'static>,
) {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("ca") {
        roots.add(cert.expect("ca pem")).expect("add ca");
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let name = ServerName::try_from("localhost").expect("name");
    let stream = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("TLS handshake");
    let served = stream
        .get_ref()
        .1
        .peer_certificates()
        .expect("a certificate")[0]
        .clone();
    (stream, served)
}

/// The first certificate of the PEM file at `path`.
fn first_cert(path: &Path) -> CertificateDer<'static> {
    CertificateDer::pem_file_iter(path)
        .expect("read")
        .next()
        .expect("one")
        .expect("pem")
}

/// `GET /metrics` over TLS, with curl.
fn metrics(process: &Process, ca: &Path) -> String {
    curl(process.addr, "/metrics", ca, &[]).1
}

/// Replaces `dest` by `src`'s content atomically (a new file renamed over it, as
/// cert-manager and Kubernetes secrets do).
fn replace(src: &Path, dest: &Path) {
    let tmp = dest.with_extension("new");
    std::fs::copy(src, &tmp).expect("copy");
    std::fs::rename(&tmp, dest).expect("rename");
}

/// curl and tonic over TLS: the HTTP API (HTTP/1.1 by ALPN), the status page, and
/// `ShouldRateLimit` on the gRPC port (HTTP/2 by ALPN); plaintext is refused.
#[tokio::test]
async fn curl_and_a_grpc_client_are_served_over_tls() {
    let tls = TlsFiles::new();
    let (_dir, path) = config_file(&config(&tls, ""));
    let process = Process::serve(&path);
    let (exit, text) = curl(
        process.addr,
        "/v1/check",
        tls.ca(),
        &[
            "-w",
            " %{http_version}",
            "-d",
            r#"{"limit":"per_user","key":{"user":"1"}}"#,
        ],
    );
    assert_eq!(exit, 0, "{text}");
    assert!(
        text.contains(r#""allowed":true"#) && text.ends_with(" 1.1"),
        "{text}"
    );
    let (exit, page) = curl(process.addr, "/", tls.ca(), &[]);
    assert!(exit == 0 && page.contains("<html"), "status page: {page}");

    let grpc = process.grpc.expect("grpc address");
    let mut client = grpc_tls(grpc, tls.ca(), None).await.expect("TLS channel");
    let response = call(&mut client, "edge", &[("user", "1")]).await;
    assert_eq!(code(&response), Code::Ok);
    let (exit, text) = curl(
        grpc,
        "/",
        tls.ca(),
        &["--http2", "-o", "/dev/null", "-w", "%{http_version}"],
    );
    assert!(
        exit == 0 && text == "2",
        "ALPN on the gRPC port: {exit} {text}"
    );

    let plain = crate::support::request(process.addr, "GET", "/healthz", Bytes::new(), &[]);
    let plain = tokio::time::timeout(Duration::from_secs(5), tokio::spawn(plain)).await;
    assert!(
        !matches!(plain, Ok(Ok(ref r)) if r.status == 200),
        "plaintext HTTP was served on a TLS port"
    );
}

/// With `tls_client_ca`, a client without a certificate and one whose certificate another
/// CA signed are refused in the handshake, on both listeners; one from the CA is served.
#[tokio::test]
async fn mtls_refuses_clients_without_a_certificate_from_the_ca() {
    let tls = TlsFiles::new();
    let extra = format!("tls_client_ca = {:?}", tls.ca());
    let (_dir, path) = config_file(&config(&tls, &extra));
    let process = Process::serve(&path);
    let mine = [
        "--cert",
        &tls.client_cert().display().to_string(),
        "--key",
        &tls.client_key().display().to_string(),
    ]
    .map(String::from);
    let other = [
        "--cert",
        &tls.other_client_cert().display().to_string(),
        "--key",
        &tls.other_client_key().display().to_string(),
    ]
    .map(String::from);

    let (exit, text) = curl(process.addr, "/healthz", tls.ca(), &args(&mine));
    assert!(exit == 0 && text.contains("ok"), "{exit}: {text}");
    let (exit, text) = curl(process.addr, "/healthz", tls.ca(), &[]);
    assert_ne!(exit, 0, "served without a client certificate: {text}");
    assert!(text.contains("alert"), "refused by a TLS alert: {text}");
    let (exit, text) = curl(process.addr, "/healthz", tls.ca(), &args(&other));
    assert_ne!(exit, 0, "served a certificate from another CA: {text}");
    assert!(text.contains("alert"), "refused by a TLS alert: {text}");

    let grpc = process.grpc.expect("grpc address");
    let mut client = grpc_tls(grpc, tls.ca(), Some((tls.client_cert(), tls.client_key())))
        .await
        .expect("mTLS channel");
    assert_eq!(
        code(&call(&mut client, "edge", &[("user", "1")]).await),
        Code::Ok
    );
    for identity in [
        None,
        Some((tls.other_client_cert(), tls.other_client_key())),
    ] {
        let refused = match grpc_tls(grpc, tls.ca(), identity).await {
            Err(_) => true,
            Ok(mut client) => client
                .should_rate_limit(tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest::default())
                .await
                .is_err(),
        };
        assert!(
            refused,
            "a gRPC client was served with identity {identity:?}"
        );
    }
    let scraped = metrics(&process, tls.ca());
    assert!(
        scraped.is_empty() || !scraped.contains("tollgate_tls_handshakes_total"),
        "metrics need a client certificate: {scraped}"
    );
    let (_, scraped) = curl(process.addr, "/metrics", tls.ca(), &args(&mine));
    for listener in ["http", "grpc"] {
        let line =
            format!("tollgate_tls_handshakes_total{{listener=\"{listener}\",result=\"error\"}}");
        assert!(scraped.contains(&line), "{line} not in:\n{scraped}");
    }
}

/// `tls_client_names`: on the gRPC listener, a certificate from the CA is served only when it
/// carries an allowed name (here its URI name); the HTTP API takes any from the CA.
#[tokio::test]
async fn grpc_clients_must_carry_an_allowed_name() {
    let tls = TlsFiles::new();
    let extra = format!(
        "tls_client_ca = {:?}\ntls_client_names = [\"spiffe://tollgate.test/envoy\"]",
        tls.ca()
    );
    let (_dir, path) = config_file(&config(&tls, &extra));
    let process = Process::serve(&path);
    let grpc = process.grpc.expect("grpc address");
    let named = Some((tls.named_client_cert(), tls.named_client_key()));
    let mut client = grpc_tls(grpc, tls.ca(), named).await.expect("named client");
    assert_eq!(
        code(&call(&mut client, "edge", &[("user", "1")]).await),
        Code::Ok
    );
    let unnamed = Some((tls.client_cert(), tls.client_key()));
    let refused = match grpc_tls(grpc, tls.ca(), unnamed).await {
        Err(_) => true,
        Ok(mut client) => client
            .should_rate_limit(tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest::default())
            .await
            .is_err(),
    };
    assert!(refused, "a client without an allowed name was served");
    let cert = tls.client_cert().display().to_string();
    let key = tls.client_key().display().to_string();
    let (exit, text) = curl(
        process.addr,
        "/healthz",
        tls.ca(),
        &["--cert", &cert, "--key", &key],
    );
    assert_eq!(exit, 0, "the HTTP API checks the CA only: {text}");
}

/// A rotated certificate is served to new connections once the files change, while a
/// connection opened before goes on being served (with the certificate it got); a broken
/// pair written next is refused, counted, and the rotated certificate stays.
#[tokio::test]
async fn a_rotated_certificate_reaches_new_connections_and_old_ones_finish() {
    let tls = TlsFiles::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::copy(tls.server_cert(), &cert).expect("copy");
    std::fs::copy(tls.server_key(), &key).expect("copy");
    let text = format!(
        "[server]\ntls_cert = \"tls.crt\"\ntls_key = \"tls.key\"\n{}",
        one_limit("per_user", "fixed_window", 1000, "1m", "\"user\"", "deny")
    );
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, text).expect("write");
    let process = Process::serve(&path);
    let first = first_cert(tls.server_cert());
    let second = first_cert(tls.second_server_cert());

    let (old, served) = rustls_connect(process.addr, tls.ca()).await;
    assert_eq!(served, first);
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(old))
        .await
        .expect("http handshake");
    tokio::spawn(connection);
    let get = || {
        hyper::Request::get("/healthz")
            .header("host", "localhost")
            .body(Full::new(Bytes::new()))
            .expect("request")
    };
    assert_eq!(
        sender.send_request(get()).await.expect("served").status(),
        200
    );

    replace(tls.second_server_key(), &key);
    replace(tls.second_server_cert(), &cert);
    let rotated = eventually(Duration::from_secs(10), || async {
        rustls_connect(process.addr, tls.ca()).await.1 == second
    })
    .await;
    assert!(
        rotated,
        "new connections never got the new certificate; log:\n{}",
        process.log()
    );
    let answer = sender
        .send_request(get())
        .await
        .expect("the old connection is still served");
    assert_eq!(answer.status(), 200);
    let _ = answer.into_body().collect().await;

    // A key that is not the certificate's: refused at once on SIGHUP, the rotated pair stays.
    replace(tls.client_key(), &key);
    process.signal("HUP");
    let refused = eventually(Duration::from_secs(10), || async {
        metrics(&process, tls.ca()).contains("tollgate_tls_reloads_total{result=\"error\"} 1")
    })
    .await;
    assert!(
        refused,
        "the bad pair was not counted; log:\n{}",
        process.log()
    );
    assert!(
        process
            .log()
            .contains("the key does not match the certificate"),
        "{}",
        process.log()
    );
    assert_eq!(rustls_connect(process.addr, tls.ca()).await.1, second);
    assert!(metrics(&process, tls.ca()).contains("tollgate_tls_last_reload_successful 0"));
}

/// A key that does not match the certificate, an expired certificate, a file that cannot be
/// read: `tollgate serve` refuses to start, naming the file and the cause.
#[test]
fn bad_certificate_files_stop_start_up_naming_the_file() {
    let tls = TlsFiles::new();
    let missing = tls.dir().join("missing.crt");
    let cases = [
        (
            tls.server_cert(),
            tls.client_key(),
            "the key does not match the certificate",
            tls.client_key(),
        ),
        (
            tls.expired_cert(),
            tls.expired_key(),
            "the certificate expired",
            tls.expired_cert(),
        ),
        (
            missing.as_path(),
            tls.server_key(),
            "cannot read the file",
            missing.as_path(),
        ),
        (
            tls.dir(),
            tls.server_key(),
            "cannot read the file",
            tls.dir(),
        ),
    ];
    for (cert, key, cause, named) in cases {
        let text = format!(
            "[server]\ntls_cert = {cert:?}\ntls_key = {key:?}\n{}",
            one_limit("a", "gcra", 10, "1s", "\"user\"", "deny")
        );
        let (_dir, path) = config_file(&text);
        let (status, stderr) = serve_refused(&path);
        assert!(!status.success(), "started with {cert:?} / {key:?}");
        assert!(
            stderr.contains(cause) && stderr.contains(&named.display().to_string()),
            "expected {cause:?} naming {named:?}: {stderr}"
        );
    }
}

/// The gRPC service on a Unix socket (`grpc = "unix:…"`) with its mode, a real gRPC client
/// over it, and the socket removed on shutdown. (Multi-threaded: the client's connection
/// must close while the test thread waits for the process to exit.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_client_is_served_on_a_unix_socket() {
    use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};

    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("rls.sock");
    let text = format!(
        "[server]\ngrpc = \"unix:{}\"\nunix_mode = 0o600\n{}{}",
        socket.display(),
        one_limit("per_user", "fixed_window", 1, "1m", "\"user\"", "deny"),
        user_rule("per_user"),
    );
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, text).expect("write");
    let mut process = Process::serve(&path);
    let meta = std::fs::metadata(&socket).expect("the socket exists");
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);

    let at = socket.clone();
    let channel = Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let at = at.clone();
            async move {
                Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(at).await?))
            }
        }))
        .await
        .expect("connect over the unix socket");
    let mut client = Client::new(channel);
    assert_eq!(
        code(&call(&mut client, "edge", &[("user", "u")]).await),
        Code::Ok
    );
    assert_eq!(
        code(&call(&mut client, "edge", &[("user", "u")]).await),
        Code::OverLimit
    );
    drop(client);
    process.terminate();
    assert!(!socket.exists(), "the socket outlived the service");
}

/// Clients that open TLS connections and stall the handshake hold at most `max_connections`
/// slots, each for at most `header_timeout`: a real client is still served during the flood
/// (a stalled one is shed for it), and every stalled socket is closed by the server.
#[tokio::test]
async fn stalled_handshakes_cannot_exhaust_the_listener() {
    let tls = TlsFiles::new();
    let extra = "max_connections = 8\nheader_timeout = \"1s\"";
    let (_dir, path) = config_file(&config(&tls, extra));
    let process = Process::serve(&path);
    // Half a ClientHello: a record header announcing 512 bytes, then nothing.
    let mut stalled = Vec::new();
    for _ in 0..32 {
        let mut s = TcpStream::connect(process.addr).await.expect("connect");
        s.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
            .await
            .expect("write");
        stalled.push(s);
    }
    let (_, served) = tokio::time::timeout(
        Duration::from_secs(5),
        rustls_connect(process.addr, tls.ca()),
    )
    .await
    .expect("a real client completes its handshake during the flood");
    assert_eq!(served, first_cert(tls.server_cert()));
    // Each stalled socket is closed (end of stream or reset) once accepted: within the
    // header timeout, or sooner when shed; the last ones wait for a slot first.
    for (i, mut s) in stalled.into_iter().enumerate() {
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(20), s.read(&mut buf)).await;
        assert!(
            matches!(read, Ok(Ok(0) | Err(_))),
            "stalled socket {i} was not closed: {read:?}"
        );
    }
    let (_, scraped) = curl(process.addr, "/metrics", tls.ca(), &[]);
    assert!(
        scraped.contains("tollgate_tls_handshakes_total{listener=\"http\",result=\"error\"}"),
        "{scraped}"
    );
}

/// Errors hyper answers below the router (a malformed header: 400) carry the API's JSON error
/// body over TLS as in plaintext (`hardening::errors_below_the_router_answer_json`): the socket
/// sees only records there, so they are rewritten above TLS.
#[tokio::test]
async fn errors_below_the_router_answer_json_over_tls() {
    let tls = TlsFiles::new();
    let (_dir, path) = config_file(&config(&tls, ""));
    let process = Process::serve(&path);
    let (mut stream, _) = rustls_connect(process.addr, tls.ca()).await;
    let _ = stream
        .write_all(b"GET /healthz HTTP/1.1\r\nbad header\r\n\r\n")
        .await;
    let _ = stream.flush().await;
    let (answer, _) = read_to_close(&mut stream, Duration::from_secs(5))
        .await
        .expect("closed");
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{answer}"
    );
    assert_eq!(json_body(&answer)["error"], "malformed request", "{answer}");
}

/// Over TLS too, a keep-alive connection whose last request had no body is closed after
/// `idle_timeout` (the deadline is set when the answer is flushed through TLS).
#[tokio::test]
async fn an_idle_tls_connection_is_closed_after_a_get() {
    let tls = TlsFiles::new();
    let (_dir, path) = config_file(&config(
        &tls,
        "idle_timeout = \"300ms\"\nheader_timeout = \"1m\"",
    ));
    let process = Process::serve(&path);
    let (mut stream, _) = rustls_connect(process.addr, tls.ca()).await;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .expect("write");
    stream.flush().await.expect("flush");
    let sent = std::time::Instant::now();
    let (answer, closed) = read_to_close(&mut stream, Duration::from_secs(5))
        .await
        .unwrap_or_else(|| {
            panic!(
                "an idle TLS connection still open after 5 s; log:\n{}",
                process.log()
            )
        });
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    assert!(
        closed - sent >= Duration::from_millis(250),
        "closed before idle_timeout: {:?}",
        closed - sent
    );
}

/// Over TLS, a client that sends requests and reads no answers is closed once it has taken
/// none of one for `idle_timeout` (the stall is seen below TLS, on its records' writes).
#[tokio::test]
async fn a_tls_client_that_reads_no_answers_is_closed() {
    let tls = TlsFiles::new();
    let (_dir, path) = config_file(&config(
        &tls,
        "idle_timeout = \"300ms\"\nheader_timeout = \"1m\"\nbody_timeout = \"1m\"",
    ));
    let process = Process::serve(&path);
    let sockets = || open_sockets(process.pid());
    let baseline = sockets();
    let (stream, _) = rustls_connect(process.addr, tls.ca()).await;
    let (_unread, mut write) = tokio::io::split(stream);
    let writer = tokio::spawn(async move {
        let requests = "GET /metrics HTTP/1.1\r\nhost: localhost\r\n\r\n".repeat(64);
        while write.write_all(requests.as_bytes()).await.is_ok() {}
    });
    let opened = eventually(Duration::from_secs(5), || async { sockets() > baseline }).await;
    assert!(opened, "the connection was not accepted");
    // Bounded as `hardening.rs`'s stalled readers are (`STALL_FILLS_WITHIN`): the server's
    // send buffer fills first, as fast as it makes answers, which took over 10 s (the bound
    // was 10 s) on a loaded 2-core machine, and once 31 s in plain HTTP.
    let closed = eventually(Duration::from_secs(120), || async { sockets() <= baseline }).await;
    assert!(
        closed,
        "a TLS client reading no answers still holds its connection after 120 s; log:\n{}",
        process.log()
    );
    writer.abort();
}

/// `[server]` with TLS from `tls.crt` and `tls.key` in `dir`, copied from `tls`'s server pair,
/// and one limit: the files a reload test rotates.
fn rotating_config(tls: &TlsFiles, dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::copy(tls.server_cert(), &cert).expect("copy");
    std::fs::copy(tls.server_key(), &key).expect("copy");
    let text = format!(
        "[server]\ntls_cert = \"tls.crt\"\ntls_key = \"tls.key\"\n{}",
        one_limit("per_user", "fixed_window", 1000, "1m", "\"user\"", "deny")
    );
    std::fs::write(dir.join("tollgate.toml"), text).expect("write");
    (cert, key)
}

/// A pair whose validity begins a few seconds ahead is refused when it is rotated in (it
/// would fail every handshake), then loaded, unchanged, once it is valid. (The audit's: the
/// refused bytes counted as handled and were never looked at again; the old certificate
/// stayed and `tollgate_tls_last_reload_successful` at 0 until a SIGHUP.)
#[tokio::test]
async fn a_certificate_refused_as_not_yet_valid_is_loaded_once_valid() {
    let tls = TlsFiles::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, key) = rotating_config(&tls, dir.path());
    let process = Process::serve(&dir.path().join("tollgate.toml"));
    let first = first_cert(tls.server_cert());

    let begins = std::time::SystemTime::now() + Duration::from_secs(4);
    let (next_cert, next_key) = tls.server_pair_valid_from("next", begins);
    let next = first_cert(&next_cert);
    replace(&next_key, &key);
    replace(&next_cert, &cert);
    assert!(
        process.logged("the certificate is not valid before").await,
        "{}",
        process.log()
    );
    if std::time::SystemTime::now() < begins {
        assert_eq!(rustls_connect(process.addr, tls.ca()).await.1, first);
    }

    let loaded = eventually(Duration::from_secs(10), || async {
        rustls_connect(process.addr, tls.ca()).await.1 == next
    })
    .await;
    assert!(
        loaded,
        "the certificate was not loaded once valid; log:\n{}",
        process.log()
    );
    let scrape = metrics(&process, tls.ca());
    assert!(
        scrape.contains("tollgate_tls_last_reload_successful 1")
            && scrape.contains("tollgate_tls_reloads_total{result=\"ok\"} 1"),
        "{scrape}"
    );
}

/// A FIFO made at `path` (with `mkfifo`).
fn mkfifo(path: &Path) {
    let made = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(made.success());
}

/// A TLS path naming a device or a FIFO: `check-config` and `serve` refuse it at once, naming
/// the field, the file and what it is. (Before, `/dev/zero` was read until memory ran out and
/// a FIFO hung both.)
#[test]
fn a_device_or_a_fifo_is_refused_at_once_naming_the_field() {
    let tls = TlsFiles::new();
    let fifo = tls.dir().join("fifo.pem");
    mkfifo(&fifo);
    let zero = Path::new("/dev/zero");
    let cases = [
        (
            zero,
            tls.server_key(),
            tls.ca(),
            "server.tls_cert /dev/zero",
            "a character device",
        ),
        (
            fifo.as_path(),
            tls.server_key(),
            tls.ca(),
            "server.tls_cert",
            "a FIFO",
        ),
        (
            tls.server_cert(),
            fifo.as_path(),
            tls.ca(),
            "server.tls_key",
            "a FIFO",
        ),
        (
            tls.server_cert(),
            zero,
            tls.ca(),
            "server.tls_key /dev/zero",
            "a character device",
        ),
        (
            tls.server_cert(),
            tls.server_key(),
            fifo.as_path(),
            "server.tls_client_ca",
            "a FIFO",
        ),
    ];
    for (cert, key, ca, field, what) in cases {
        let text = format!(
            "[server]\ntls_cert = {cert:?}\ntls_key = {key:?}\ntls_client_ca = {ca:?}\n{}",
            one_limit("a", "gcra", 10, "1s", "\"user\"", "deny")
        );
        let (_dir, path) = config_file(&text);
        let started = std::time::Instant::now();
        let out = crate::support::output_within(
            Command::new(env!("CARGO_BIN_EXE_tollgate"))
                .arg("check-config")
                .arg(&path)
                .env_remove("TOLLGATE_HTTP")
                .env_remove("TOLLGATE_GRPC"),
            Duration::from_secs(10),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "check-config accepted {field}");
        assert!(
            stderr.contains(field)
                && stderr.contains("not a regular file")
                && stderr.contains(what),
            "check-config, {field}: {stderr}"
        );
        let (status, stderr) = serve_refused(&path);
        assert!(!status.success());
        assert!(
            stderr.contains(field) && stderr.contains(what),
            "serve, {field}: {stderr}"
        );
        assert!(started.elapsed() < Duration::from_secs(5), "{field}: slow");
    }
}

/// A certificate file replaced by a FIFO, then by a link to `/dev/zero`: each reload is
/// refused and counted at once, naming the file, and the current certificate stays served.
/// (Before, the reloader blocked on the FIFO for good: no reload was ever counted again.)
#[tokio::test]
async fn a_certificate_replaced_by_a_fifo_or_a_device_is_refused_on_reload() {
    let tls = TlsFiles::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, _key) = rotating_config(&tls, dir.path());
    let process = Process::serve(&dir.path().join("tollgate.toml"));
    let first = first_cert(tls.server_cert());

    let fifo = dir.path().join("tls.fifo");
    mkfifo(&fifo);
    std::fs::rename(&fifo, &cert).expect("rename");
    let refused = eventually(Duration::from_secs(10), || async {
        metrics(&process, tls.ca()).contains("tollgate_tls_reloads_total{result=\"error\"} 1")
    })
    .await;
    assert!(refused, "the FIFO was not refused; log:\n{}", process.log());
    assert!(
        process.log().contains("not a regular file: a FIFO"),
        "{}",
        process.log()
    );
    assert_eq!(rustls_connect(process.addr, tls.ca()).await.1, first);

    let link = dir.path().join("tls.link");
    std::os::unix::fs::symlink("/dev/zero", &link).expect("symlink");
    std::fs::rename(&link, &cert).expect("rename");
    let refused = eventually(Duration::from_secs(10), || async {
        metrics(&process, tls.ca()).contains("tollgate_tls_reloads_total{result=\"error\"} 2")
    })
    .await;
    assert!(
        refused,
        "/dev/zero was not refused; log:\n{}",
        process.log()
    );
    assert!(
        process
            .log()
            .contains("not a regular file: a character device"),
        "{}",
        process.log()
    );
    assert_eq!(rustls_connect(process.addr, tls.ca()).await.1, first);
    assert!(metrics(&process, tls.ca()).contains("tollgate_tls_last_reload_successful 0"));
}

/// The "listening" line says which listener serves TLS: a `unix:` one never does. (Before,
/// it said `tls=true` whatever the listeners were.)
#[tokio::test]
async fn the_listening_line_says_which_listener_has_tls() {
    let tls = TlsFiles::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let text = format!(
        "[server]\ngrpc = \"unix:{}\"\ntls_cert = {:?}\ntls_key = {:?}\n{}",
        dir.path().join("rls.sock").display(),
        tls.server_cert(),
        tls.server_key(),
        one_limit("a", "gcra", 10, "1s", "\"user\"", "deny")
    );
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, text).expect("write");
    let process = Process::serve(&path);
    // The log is read from the process's stderr as it comes: wait for the line (bounded).
    assert!(process.logged("listening").await, "{}", process.log());
    let log = process.log();
    let line = log
        .lines()
        .find(|l| l.contains("listening"))
        .expect("the listening line");
    assert!(
        line.contains("http_tls=true") && line.contains("grpc_tls=false"),
        "{line}"
    );
}
