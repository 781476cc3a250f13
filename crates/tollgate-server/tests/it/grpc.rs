//! The Envoy rate limit service mounted by `tollgate serve`: a tonic client in-process (one
//! counter shared with the HTTP API, rules swapped by reload, graceful shutdown), the
//! `[envoy]` section's config errors, and the real binary against the Python `grpcio` client.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tollgate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse,
};
use tollgate_envoy::tonic::transport::Channel;
use tollgate_server::config::{Config, Overrides};
use tollgate_server::server::{self, Server};
use tollgate_testkit::python;

use crate::binary::Process;
use crate::support::{TestServer, eventually, one_limit};

pub(crate) type Client = RateLimitServiceClient<Channel>;

/// Connects to the service, retrying for 10 s at most (a server may still be binding).
pub(crate) async fn connect(addr: SocketAddr) -> Client {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match Client::connect(format!("http://{addr}")).await {
            Ok(client) => return client,
            Err(e) => {
                assert!(Instant::now() < deadline, "cannot connect to {addr}: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// A descriptor of `entries` (key, value), nothing else set.
pub(crate) fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).to_owned(),
                value: (*v).to_owned(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

/// One call with one descriptor.
pub(crate) async fn call(
    client: &mut Client,
    domain: &str,
    entries: &[(&str, &str)],
) -> RateLimitResponse {
    let request = RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: vec![descriptor(entries)],
        hits_addend: 0,
    };
    client
        .should_rate_limit(request)
        .await
        .expect("ShouldRateLimit answers")
        .into_inner()
}

/// The limit that decided the first descriptor (empty when no rule matched).
pub(crate) fn limit_name(response: &RateLimitResponse) -> &str {
    response.statuses[0]
        .current_limit
        .as_ref()
        .map_or("", |l| l.name.as_str())
}

pub(crate) fn code(response: &RateLimitResponse) -> Code {
    Code::try_from(response.overall_code).expect("a known code")
}

/// A rule of domain `edge` sending `("user", <id>)` to `limit`.
pub(crate) fn user_rule(limit: &str) -> String {
    format!(
        "\n[[envoy.rules]]\ndomain = \"edge\"\nlimit = \"{limit}\"\ndescriptor = [{{ key = \"user\", part = \"user\" }}]\n"
    )
}

/// An in-process server with the gRPC service on its own `127.0.0.1:0` listener.
async fn start(server: Server) -> (TestServer, Client) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind grpc");
    let addr = listener.local_addr().expect("grpc addr");
    let server = TestServer::start_with(server.grpc_listener(listener)).await;
    let client = connect(addr).await;
    (server, client)
}

/// `server::run` binds `server.grpc` itself and serves the Envoy service there: admitted,
/// then OVER_LIMIT; shutting down stops the gRPC listener too.
#[tokio::test]
async fn run_serves_grpc_until_shutdown() {
    let (grpc, stop, task) = run_on_a_free_grpc_port().await;
    let mut client = connect(grpc).await;

    let first = call(&mut client, "edge", &[("user", "ada")]).await;
    assert_eq!(code(&first), Code::Ok, "{first:?}");
    assert_eq!(limit_name(&first), "per_user");
    assert_eq!(first.statuses[0].limit_remaining, 0, "{first:?}");
    let second = call(&mut client, "edge", &[("user", "ada")]).await;
    assert_eq!(code(&second), Code::OverLimit, "{second:?}");
    assert_eq!(second.statuses[0].code, Code::OverLimit as i32);
    let other = call(&mut client, "other", &[("user", "ada")]).await;
    assert_eq!(code(&other), Code::Ok, "another domain: no rule");
    assert_eq!(limit_name(&other), "");

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("both servers stop within 10 s")
        .expect("server task")
        .expect("clean shutdown");
    assert!(
        TcpStream::connect(grpc).await.is_err(),
        "the gRPC listener is closed after shutdown"
    );
}

/// What `server::run` returns.
type Run = tokio::task::JoinHandle<Result<(), server::ServeError>>;

/// `server::run` on a config whose `server.grpc` is a free port, running and listening there:
/// the address, the sender that stops it, its task. The port is chosen free and let go (the
/// server binds it from the config), so another socket can take it first: then it runs again
/// on another, up to five times.
async fn run_on_a_free_grpc_port() -> (SocketAddr, oneshot::Sender<()>, Run) {
    for _ in 0..5 {
        let grpc = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        let text = format!(
            "[server]\ngrpc = \"{grpc}\"\n{}{}",
            one_limit("per_user", "sliding_log", 1, "1h", r#""user""#, "deny"),
            user_rule("per_user")
        );
        let config = Config::parse(&text, "test.toml", &Overrides::default()).expect("valid");
        assert_eq!(config.server.grpc, Some(grpc.into()));
        let http = TcpListener::bind("127.0.0.1:0").await.expect("bind http");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server::run(http, config, async {
            let _ = stopped.await;
        }));
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if task.is_finished() {
                match task.await.expect("server task") {
                    Err(server::ServeError::GrpcBind { source, .. })
                        if source.kind() == std::io::ErrorKind::AddrInUse =>
                    {
                        break;
                    }
                    other => panic!("the server stopped at start: {other:?}"),
                }
            }
            if TcpStream::connect(grpc).await.is_ok() && !task.is_finished() {
                return (grpc, stop, task);
            }
            assert!(Instant::now() < deadline, "nothing listens on {grpc}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    panic!("the gRPC port was taken before the server bound it, 5 times")
}

/// HTTP `/v1/check` and gRPC `ShouldRateLimit` charge the same counter.
#[tokio::test]
async fn http_and_grpc_share_one_counter() {
    let text = format!(
        "{}{}",
        one_limit("shared", "fixed_window", 3, "1m", r#""user""#, "deny"),
        user_rule("shared")
    );
    let config = Config::parse(&text, "test.toml", &Overrides::default()).expect("valid");
    let (server, mut client) = start(Server::new(config)).await;
    let body = r#"{"limit": "shared", "key": {"user": "7"}}"#;

    let http = server.post("/v1/check", body).await;
    assert_eq!(http.status, 200, "{http:?}");
    assert_eq!(http.json["remaining"], 2);
    let grpc = call(&mut client, "edge", &[("user", "7")]).await;
    assert_eq!(code(&grpc), Code::Ok);
    assert_eq!(grpc.statuses[0].limit_remaining, 1, "{grpc:?}");
    let http = server.post("/v1/check", body).await;
    assert_eq!(http.status, 200, "{http:?}");
    assert_eq!(http.json["remaining"], 0);
    let grpc = call(&mut client, "edge", &[("user", "7")]).await;
    assert_eq!(code(&grpc), Code::OverLimit, "{grpc:?}");
    assert_eq!(server.post("/v1/check", body).await.status, 429);

    // A new window for both.
    server.clock.advance(Duration::from_secs(60));
    let grpc = call(&mut client, "edge", &[("user", "7")]).await;
    assert_eq!(code(&grpc), Code::Ok, "{grpc:?}");
    assert_eq!(server.remaining("shared", r#"{"user": "7"}"#).await, 2);
    server.stop().await;
}

/// Calls multiplexed on one HTTP/2 connection while both workers are busy: each gets its own
/// answer, and a limit of 50 admits exactly 50 of 400. The connection's writes wait a turn of
/// the scheduler there (`tollgate_envoy::DeferredWrite`) to leave together; a wait that never
/// ended, or answers crossed between streams, would show here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_multiplexed_on_one_busy_connection_are_each_answered_exactly() {
    let text = format!(
        "{}{}",
        one_limit("burst", "fixed_window", 50, "1m", r#""user""#, "deny"),
        user_rule("burst")
    );
    let config = Config::parse(&text, "test.toml", &Overrides::default()).expect("valid");
    let (server, client) = start(Server::new(config)).await;
    let calls: Vec<_> = (0..400)
        .map(|i| {
            let mut client = client.clone();
            // Two users: every answer must carry its own user's count.
            let user = if i % 2 == 0 { "even" } else { "odd" };
            tokio::spawn(async move { (user, call(&mut client, "edge", &[("user", user)]).await) })
        })
        .collect();
    let mut admitted = std::collections::HashMap::new();
    for joined in calls {
        let (user, response) = tokio::time::timeout(Duration::from_secs(30), joined)
            .await
            .expect("every call is answered")
            .expect("the call's task");
        if code(&response) == Code::Ok {
            *admitted.entry(user).or_insert(0) += 1;
        }
        assert_eq!(limit_name(&response), "burst", "{response:?}");
    }
    assert_eq!(admitted.get("even"), Some(&50), "{admitted:?}");
    assert_eq!(admitted.get("odd"), Some(&50), "{admitted:?}");
    server.stop().await;
}

/// A rule pointing at a shadow limit never refuses over gRPC either.
#[tokio::test]
async fn shadow_limits_never_refuse_over_grpc() {
    let text = format!(
        "{}shadow = true\n{}",
        one_limit("trial", "fixed_window", 1, "1m", r#""user""#, "allow"),
        user_rule("trial")
    );
    let config = Config::parse(&text, "test.toml", &Overrides::default()).expect("valid");
    let (server, mut client) = start(Server::new(config)).await;
    for _ in 0..3 {
        let r = call(&mut client, "edge", &[("user", "s")]).await;
        assert_eq!(code(&r), Code::Ok, "{r:?}");
        assert_eq!(limit_name(&r), "trial");
    }
    assert_eq!(server.remaining("trial", r#"{"user": "s"}"#).await, 0);
    server.stop().await;
}

/// Two descriptors asking different `hits_addend`s are one atomic check on Redis: under 64
/// concurrent requests the tight limit admits exactly what fits and the wide one is charged
/// only for the admitted requests, never for a refused one (a peek-then-check across costs
/// would charge the wide limit for requests the tight one then refuses).
#[tokio::test]
async fn different_hits_addends_are_charged_atomically_on_redis() {
    let redis = tollgate_testkit::RedisServer::start();
    let text = format!(
        "[store]\nredis = \"{}\"\nprefix = \"addend\"\ntimeout = \"5s\"\n{}{}{}{}",
        redis.url(),
        one_limit("tight", "sliding_log", 10, "1h", r#""user""#, "deny"),
        one_limit("wide", "sliding_log", 1000, "1h", r#""user""#, "deny"),
        user_rule("tight"),
        "\n[[envoy.rules]]\ndomain = \"edge\"\nlimit = \"wide\"\n\
         descriptor = [{ key = \"account\", part = \"user\" }]\n",
    );
    let config = Config::parse(&text, "test.toml", &Overrides::default()).expect("valid");
    let (server, client) = start(Server::new(config)).await;
    let addend =
        |value: u64| Some(tollgate_envoy::envoy_types::pb::google::protobuf::UInt64Value { value });
    let descriptor = |key: &str, cost: u64| RateLimitDescriptor {
        entries: vec![Entry {
            key: key.to_owned(),
            value: "u1".to_owned(),
        }],
        hits_addend: addend(cost),
        ..RateLimitDescriptor::default()
    };
    // The wide limit first: it would be charged first by a check per cost.
    let request = RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![descriptor("account", 2), descriptor("user", 3)],
        hits_addend: 0,
    };
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(64));
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (mut client, request, barrier) = (client.clone(), request.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let r = client
                .should_rate_limit(request)
                .await
                .expect("ShouldRateLimit answers")
                .into_inner();
            code(&r)
        }));
    }
    let mut admitted = 0;
    for t in tasks {
        if t.await.expect("task") == Code::Ok {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 3, "3 × 3 units fit in 10, a fourth does not");
    assert_eq!(server.remaining("tight", r#"{"user": "u1"}"#).await, 1);
    assert_eq!(
        server.remaining("wide", r#"{"user": "u1"}"#).await,
        1000 - 2 * 3,
        "the wide limit is charged for the admitted requests only"
    );
    // Refused once more, one request at a time: the wide limit is not charged.
    let mut client = client;
    let r = client
        .should_rate_limit(request)
        .await
        .expect("answers")
        .into_inner();
    assert_eq!(code(&r), Code::OverLimit, "{r:?}");
    assert_eq!(r.statuses[0].code, Code::Ok as i32, "the wide limit admits");
    assert_eq!(r.statuses[0].limit_remaining, 994, "{r:?}");
    assert_eq!(server.remaining("wide", r#"{"user": "u1"}"#).await, 994);
    server.stop().await;
}

/// The value of `tollgate_reloads_total{result="error"}` (0 before the first error).
async fn reload_errors(server: &TestServer) -> f64 {
    let metrics = server.get("/metrics").await.text;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(r#"tollgate_reloads_total{result="error"} "#))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Editing the file swaps a rule to another limit; an edit whose `[envoy]` section is invalid
/// is refused whole (neither its new limit nor its rules are used).
#[tokio::test]
async fn reload_changes_a_rule_and_refuses_an_invalid_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    let limits = format!(
        "{}{}",
        one_limit("strict", "fixed_window", 1, "1m", r#""user""#, "deny"),
        one_limit("loose", "fixed_window", 100, "1m", r#""user""#, "deny")
    );
    std::fs::write(&path, format!("{limits}{}", user_rule("strict"))).expect("write");
    let config = Config::load(&path, &Overrides::default()).expect("valid");
    let (server, mut client) =
        start(Server::new(config).watch(&path, Overrides::default(), Duration::from_millis(20)))
            .await;
    let r = call(&mut client, "edge", &[("user", "1")]).await;
    assert_eq!(limit_name(&r), "strict");
    let r = call(&mut client, "edge", &[("user", "1")]).await;
    assert_eq!(code(&r), Code::OverLimit, "{r:?}");

    std::fs::write(&path, format!("{limits}{}", user_rule("loose"))).expect("write");
    let swapped = eventually(Duration::from_secs(10), || {
        let mut client = client.clone();
        async move { limit_name(&call(&mut client, "edge", &[("user", "probe")]).await) == "loose" }
    })
    .await;
    assert!(swapped, "the rule never moved to \"loose\"");
    let r = call(&mut client, "edge", &[("user", "1")]).await;
    assert_eq!(code(&r), Code::Ok, "user 1 now goes to \"loose\": {r:?}");

    let errors = reload_errors(&server).await;
    let invalid = format!(
        "{limits}{}{}",
        one_limit("extra", "gcra", 1, "1s", "", "allow"),
        user_rule("nope")
    );
    std::fs::write(&path, invalid).expect("write");
    let refused = eventually(Duration::from_secs(10), || async {
        reload_errors(&server).await > errors
    })
    .await;
    assert!(refused, "the invalid file was never refused");
    let listed = server.get("/v1/limits").await;
    assert_eq!(
        listed.json["limits"].as_array().map(Vec::len),
        Some(2),
        "the new limit of the refused file is not used: {listed:?}"
    );
    let r = call(&mut client, "edge", &[("user", "1")]).await;
    assert_eq!(limit_name(&r), "loose", "the old rules stay: {r:?}");
    server.stop().await;
}

fn config_error(text: &str) -> String {
    Config::parse(text, "cfg.toml", &Overrides::default())
        .expect_err(text)
        .to_string()
}

/// `[envoy]` errors name the file and the field, like every other config error.
#[test]
fn envoy_errors_name_the_file_and_field() {
    let limits = one_limit("per_ip", "gcra", 10, "1s", r#""ip""#, "local");
    let ip_rule = "\n[[envoy.rules]]\ndomain = \"edge\"\nlimit = \"per_ip\"\ndescriptor = [{ key = \"remote_address\", part = \"ip\" }]\n";

    let nope = ip_rule.replace("\"per_ip\"", "\"nope\"");
    assert_eq!(
        config_error(&format!("{limits}{ip_rule}{nope}")),
        r#"cfg.toml: envoy.rules[1].limit: unknown limit "nope""#
    );
    assert_eq!(
        config_error(&format!(
            "{limits}{}",
            ip_rule.replace("part = \"ip\"", "part = \"user\"")
        )),
        r#"cfg.toml: envoy.rules[0].descriptor[0].part: limit "per_ip" is not keyed by "user""#
    );
    let unknown = config_error(&format!("{limits}{}", ip_rule.replace("domain", "domian")));
    assert!(
        unknown.starts_with("cfg.toml: envoy.rules[0].domian: unknown field `domian`"),
        "{unknown}"
    );
    let unknown = config_error(&format!("{limits}[envoy]\nheaders = true\n"));
    assert!(
        unknown.starts_with("cfg.toml: envoy.headers: unknown field `headers`"),
        "{unknown}"
    );

    let config = Config::parse(
        &format!("{limits}[envoy]\nresponse_headers = true\n{ip_rule}"),
        "cfg.toml",
        &Overrides::default(),
    )
    .expect("valid");
    assert!(config.envoy.response_headers);
    assert_eq!(config.envoy.rules.len(), 1);
}

/// `tollgate check-config` refuses an invalid `[envoy]` section.
#[test]
fn check_config_validates_the_envoy_section() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        format!(
            "{}{}",
            one_limit("cc", "gcra", 1, "1s", r#""user""#, "deny"),
            user_rule("missing")
        ),
    )
    .expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("check-config")
        .arg(&bad)
        .output()
        .expect("run");
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(r#"bad.toml: envoy.rules[0].limit: unknown limit "missing""#),
        "{stderr}"
    );
}

/// The limits and rules the Python client's default checks expect (`per_user`: 2 per hour,
/// domain `py`), on a sliding log so no window boundary falls between its calls.
fn python_config(extra_rule: &str) -> String {
    format!(
        "[server]\nhttp = \"127.0.0.1:0\"\ngrpc = \"127.0.0.1:0\"\n{}{}\n[envoy]\nresponse_headers = true\n\n[[envoy.rules]]\ndomain = \"py\"\nlimit = \"per_user\"\ndescriptor = [{{ key = \"user\", part = \"user\" }}]\n{extra_rule}",
        one_limit("per_user", "sliding_log", 2, "1h", r#""user""#, "deny"),
        one_limit("per_tenant", "gcra", 100, "1m", r#""tenant""#, "allow"),
    )
}

/// Runs the Python client with `args` against `addr`; its stdout.
async fn python_client(addr: SocketAddr, args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let mut cmd = python::rls_client(addr, "server");
        python::run(cmd.args(&args), "python client")
    })
    .await
    .expect("python client task")
}

/// The real binary, with `[server] grpc` and `[envoy]` rules in its file, answers the
/// independent Python client; the HTTP API sees the counters it charged; a rule added to the
/// file answers after the reload; an invalid edit is refused; SIGTERM stops it cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_serves_the_python_client_and_reloads_rules() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, python_config("")).expect("write");
    let mut process = Process::serve(&path);
    let grpc = process
        .grpc
        .expect("the listening line names the gRPC address");

    let stdout = python_client(grpc, &["--unit", "HOUR"]).await;
    assert!(stdout.contains("all checks passed"), "{stdout}");
    assert!(stdout.contains("OVER_LIMIT"), "{stdout}");
    let peek = process
        .post(
            "/v1/peek",
            r#"{"limit": "per_user", "key": {"user": "alice"}}"#,
        )
        .await;
    assert_eq!(
        peek.status, 429,
        "alice's calls over gRPC count over HTTP: {peek:?}"
    );

    let mut client = connect(grpc).await;
    let before = call(&mut client, "py", &[("tenant", "t1")]).await;
    assert_eq!(
        limit_name(&before),
        "",
        "no rule for tenants yet: {before:?}"
    );
    let tenant_rule = "\n[[envoy.rules]]\ndomain = \"py\"\nlimit = \"per_tenant\"\ndescriptor = [{ key = \"tenant\", part = \"tenant\" }]\n";
    std::fs::write(&path, python_config(tenant_rule)).expect("write");
    let stdout = python_client(
        grpc,
        &[
            "--wait-rule",
            "py",
            "tenant",
            "per_tenant",
            "--wait-secs",
            "10",
        ],
    )
    .await;
    assert!(stdout.contains("rule per_tenant answers"), "{stdout}");

    std::fs::write(
        &path,
        python_config(&tenant_rule.replace("per_tenant", "nope")),
    )
    .expect("write");
    let refused = eventually(Duration::from_secs(10), || async {
        process.log().contains("config reload refused")
    })
    .await;
    assert!(
        refused,
        "the invalid edit was not refused; log:\n{}",
        process.log()
    );
    assert!(
        process
            .log()
            .contains(r#"envoy.rules[1].limit: unknown limit "nope""#),
        "{}",
        process.log()
    );
    let after = call(&mut client, "py", &[("tenant", "t2")]).await;
    assert_eq!(
        limit_name(&after),
        "per_tenant",
        "the old rules stay: {after:?}"
    );

    drop(client);
    process.signal("TERM");
    let status = process.wait();
    assert!(status.success(), "exit {status:?}; log:\n{}", process.log());
    assert!(
        TcpStream::connect(grpc).await.is_err(),
        "the gRPC port is closed after exit"
    );
}

/// `tollgate bench --grpc` drives `ShouldRateLimit`: with 4 keys of 5 calls each (the fake
/// clock never leaves the window), both `OK` and `OVER_LIMIT` come back and are counted, with
/// a connection per task and with the tasks sharing two connections as concurrent streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_bench_counts_ok_and_over_limit() {
    let text = format!(
        "{}{}",
        one_limit("bench_g", "fixed_window", 5, "1h", r#""user""#, "deny"),
        user_rule("bench_g")
    );
    let config = Config::parse(&text, "test.toml", &Overrides::default()).expect("valid");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind grpc");
    let grpc = listener.local_addr().expect("grpc addr");
    let server = TestServer::start_with(Server::new(config).grpc_listener(listener)).await;
    drop(connect(grpc).await);

    // Each run its own keys (`u-0` … `u-3`, then `s-0` … `s-3`), so each starts unspent.
    for (channels, user) in [(0, "u"), (2, "s")] {
        let report = tollgate_server::bench::run_grpc(
            tollgate_server::bench::BenchOptions {
                url: format!("http://{grpc}"),
                concurrency: 4,
                duration: Duration::from_millis(500),
                limit: None,
                keys: 4,
            },
            tollgate_server::bench::GrpcTarget {
                domain: "edge".into(),
                descriptor: vec![("user".into(), user.into())],
                channels,
                tls: None,
            },
        )
        .await
        .expect("bench runs");
        assert_eq!(report.other, 0, "channels {channels}: {report:?}");
        assert!(report.allowed > 0, "channels {channels}: {report:?}");
        assert!(
            report.allowed <= 20,
            "channels {channels}, 4 keys of 5 each: {report:?}"
        );
        assert!(report.denied > 0, "channels {channels}: {report:?}");
        assert_eq!(report.latency.len(), report.allowed + report.denied);
        // The bench's keys are used up (a peek at one is refused).
        let peek = server
            .post(
                "/v1/peek",
                &format!(r#"{{"limit": "bench_g", "key": {{"user": "{user}-2"}}}}"#),
            )
            .await;
        assert_eq!(peek.status, 429, "channels {channels}: {peek:?}");
        assert_eq!(peek.json["remaining"], 0, "channels {channels}: {peek:?}");
    }
    server.stop().await;
}
