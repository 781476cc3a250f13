//! Started while Redis is down, the service serves anyway: `/healthz` 200, `/readyz` 503
//! with the reason, every limit by its failure policy; once Redis is up it connects in the
//! background and `/readyz` turns 200. A wrong password still refuses to start.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tollgate_testkit::RedisServer;

use crate::binary::Process;
use crate::support::{eventually, request};

fn config(url: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().expect("temp file");
    write!(
        file,
        r#"
[store]
redis = "{url}"
timeout = "500ms"

[[limits]]
name = "down_closed"
algorithm = "gcra"
limit = 5
period = "1h"
key = ["user"]
on_store_error = "deny"

[[limits]]
name = "down_open"
algorithm = "gcra"
limit = 5
period = "1h"
key = ["user"]
on_store_error = "allow"
"#
    )
    .expect("write config");
    file
}

/// Redis unreachable at start: the process serves by policy and connects when Redis comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_and_serves_by_policy_while_redis_is_down() {
    let mut redis = RedisServer::start();
    let file = config(&redis.url());
    redis.kill();
    let process = Process::serve(file.path());
    let get = |path: &'static str| request(process.addr, "GET", path, Bytes::new(), &[]);

    assert_eq!(get("/healthz").await.status, 200);
    let ready = get("/readyz").await;
    assert_eq!(ready.status, 503, "{ready:?}");
    assert_eq!(
        ready.error(),
        "store unavailable (connection)",
        "the reason is given, its details only in the log: {ready:?}"
    );
    assert!(
        process.log().contains("redis is unreachable at start"),
        "{}",
        process.log()
    );
    let closed = r#"{"limit": "down_closed", "key": {"user": "1"}}"#;
    let open = r#"{"limit": "down_open", "key": {"user": "1"}}"#;
    let reply = process.post("/v1/check", closed).await;
    assert_eq!(reply.status, 503, "deny policy: {reply:?}");
    assert_eq!(reply.json["decisions"][0]["store_error"], "connection");
    let reply = process.post("/v1/check", open).await;
    assert_eq!(reply.status, 200, "allow policy: {reply:?}");

    redis.restart();
    let connected = eventually(Duration::from_secs(20), || async {
        get("/readyz").await.status == 200
    })
    .await;
    assert!(connected, "never connected; log:\n{}", process.log());
    let reply = process.post("/v1/check", closed).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.json["remaining"], 4, "decided by Redis: {reply:?}");
    assert_eq!(
        redis.cmd(&["DBSIZE"]).trim(),
        ":1",
        "the check wrote its key to Redis"
    );
    assert!(
        process.log().contains("connected to redis"),
        "{}",
        process.log()
    );
}

/// A wrong password is not an outage: the process refuses to start and says why.
#[test]
fn wrong_password_refuses_to_start() {
    let redis = RedisServer::start();
    assert_eq!(
        redis.cmd(&["CONFIG", "SET", "requirepass", "right-one"]),
        "+OK\r\n"
    );
    let url = format!("redis://:wrong-one@127.0.0.1:{}/", redis.port());
    let file = config(&url);
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["serve", "--config"])
        .arg(file.path())
        .env("TOLLGATE_HTTP", "127.0.0.1:0")
        .env_remove("TOLLGATE_REDIS_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tollgate");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("tollgate kept running with a wrong password");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = child.wait_with_output().expect("output");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.to_lowercase().contains("wrongpass") || stderr.contains("credentials"),
        "the reason is given: {stderr}"
    );
    assert!(
        !stderr.contains("wrong-one"),
        "the password is not logged: {stderr}"
    );
}
