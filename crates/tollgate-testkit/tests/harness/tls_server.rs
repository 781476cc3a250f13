//! A TLS server answers over TLS on its TLS port, keeps its plaintext port, asks for a client
//! certificate only when told to, and can present an expired certificate.

use std::time::{Duration, Instant};

use tollgate_testkit::{RedisServer, TlsFiles, TlsServer};

use crate::redis_cli;

fn ping_tls(server: &RedisServer, extra: &[&str]) -> (bool, String) {
    let port = server.tls_port().to_string();
    let mut args = vec!["--tls"];
    args.extend_from_slice(extra);
    args.extend(["-p", &port, "PING"]);
    redis_cli(&args)
}

#[test]
fn a_tls_server_answers_over_tls_and_plaintext() {
    let tls = TlsFiles::new();
    let server = RedisServer::start_tls(&tls, TlsServer::default());
    let ca = tls.ca().to_string_lossy().into_owned();
    let (_, out) = ping_tls(&server, &["--cacert", &ca]);
    assert!(out.contains("PONG"), "{out}\n{}", server.log());
    assert_eq!(server.cmd(&["PING"]), "+PONG\r\n");
    assert_eq!(
        server.tls_url(),
        format!("rediss://127.0.0.1:{}/", server.tls_port())
    );

    let other = tls.other_ca().to_string_lossy().into_owned();
    let (_, out) = ping_tls(&server, &["--cacert", &other]);
    assert!(
        !out.contains("PONG"),
        "trusted a server the CA did not sign: {out}"
    );
}

#[test]
fn auth_clients_asks_for_a_certificate_from_the_ca() {
    let tls = TlsFiles::new();
    let options = TlsServer {
        auth_clients: true,
        ..TlsServer::default()
    };
    let server = RedisServer::start_tls(&tls, options);
    let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
    let ca = path(tls.ca());

    let (_, out) = ping_tls(&server, &["--cacert", &ca]);
    assert!(
        !out.contains("PONG"),
        "answered without a client certificate: {out}"
    );

    let (cert, key) = (path(tls.client_cert()), path(tls.client_key()));
    let (_, out) = ping_tls(&server, &["--cacert", &ca, "--cert", &cert, "--key", &key]);
    assert!(out.contains("PONG"), "{out}\n{}", server.log());

    let (cert, key) = (path(tls.other_client_cert()), path(tls.other_client_key()));
    let (_, out) = ping_tls(&server, &["--cacert", &ca, "--cert", &cert, "--key", &key]);
    assert!(!out.contains("PONG"), "accepted another CA's client: {out}");
}

#[test]
fn an_expired_certificate_is_served_and_refused() {
    let tls = TlsFiles::new();
    let options = TlsServer {
        expired_cert: true,
        ..TlsServer::default()
    };
    let server = RedisServer::start_tls(&tls, options);
    let ca = tls.ca().to_string_lossy().into_owned();
    let (_, out) = ping_tls(&server, &["--cacert", &ca]);
    assert!(
        !out.contains("PONG") && out.contains("certificate verify failed"),
        "{out}\n{}",
        server.log()
    );
    // redis-cli only says the verification failed; the server logs the client's alert.
    let deadline = Instant::now() + Duration::from_secs(2);
    while !server.log().contains("certificate expired") {
        assert!(
            Instant::now() < deadline,
            "no expiry alert in the log:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
