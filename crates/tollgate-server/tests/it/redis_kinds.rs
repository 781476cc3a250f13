//! The Redis that users run, through the real binary: `tollgate serve` over TLS with a client
//! certificate as a user that has exactly the documented least-privilege ACL; refused at
//! start, naming the command, as a user missing one; through Sentinel; and, started while
//! Redis is down, serving a lease-mode limit from Redis once it comes up.

use std::time::Duration;

use bytes::Bytes;
use tollgate_redis::least_privilege_acl;
use tollgate_testkit::{RedisServer, SentinelGroup, TlsFiles, TlsServer};

use crate::binary::{Process, config_file, serve_refused};
use crate::support::{eventually, request};

const LIMIT: &str = r#"
[[limits]]
name = "api"
algorithm = "gcra"
limit = 3
period = "1h"
key = ["user"]
on_store_error = "deny"
"#;

/// Creates `user` (password `pw-of-the-user`) with `rules` on `server`.
fn set_user(server: &RedisServer, user: &str, rules: &str) {
    let mut args = vec!["ACL", "SETUSER", user, "reset", "on", ">pw-of-the-user"];
    args.extend(rules.split_whitespace());
    assert!(server.cmd(&args).starts_with("+OK"), "ACL SETUSER");
}

/// `[store]` for `server` over TLS with the test CA and client certificate, as `user`, the
/// password in a file (with the newline an `echo` leaves).
fn tls_store(dir: &std::path::Path, tls: &TlsFiles, server: &RedisServer, user: &str) -> String {
    std::fs::write(dir.join("redis-password"), "pw-of-the-user\n").expect("write password");
    format!(
        r#"
[store]
redis = "{url}"
timeout = "2s"
tls_ca = "{ca}"
tls_cert = "{cert}"
tls_key = "{key}"
username = "{user}"
password_file = "redis-password"
"#,
        url = server.tls_url(),
        ca = tls.ca().display(),
        cert = tls.client_cert().display(),
        key = tls.client_key().display(),
    )
}

/// Checks `api` for user 1 four times: three admitted, the fourth refused.
async fn three_then_refused(process: &Process) {
    let check = r#"{"limit": "api", "key": {"user": "1"}}"#;
    for i in 0..3 {
        let reply = process.post("/v1/check", check).await;
        assert_eq!(reply.status, 200, "check {i}: {reply:?}\n{}", process.log());
    }
    let reply = process.post("/v1/check", check).await;
    assert_eq!(reply.status, 429, "{reply:?}");
}

/// mTLS and the documented ACL, exactly: the service starts (its permission check passes),
/// decides, and never prints the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_over_mutual_tls_as_the_least_privileged_user() {
    let tls = TlsFiles::new();
    let redis = RedisServer::start_tls(
        &tls,
        TlsServer {
            auth_clients: true,
            ..TlsServer::default()
        },
    );
    set_user(
        &redis,
        "tollgate",
        &least_privilege_acl("tollgate", false, false),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let text = format!("{}{LIMIT}", tls_store(dir.path(), &tls, &redis, "tollgate"));
    std::fs::write(dir.path().join("tollgate.toml"), text).expect("write config");
    let process = Process::serve(&dir.path().join("tollgate.toml"));
    three_then_refused(&process).await;
    let limits = request(process.addr, "GET", "/v1/limits", Bytes::new(), &[]).await;
    assert_eq!(limits.json["store"], "redis", "{limits:?}");
    assert!(
        !process.log().contains("pw-of-the-user"),
        "{}",
        process.log()
    );
    assert!(
        redis.command_stats("evalsha").calls >= 4,
        "decided by Redis, over TLS"
    );
}

/// A user that lacks one command of the ACL: `tollgate serve` exits at start, naming it.
#[test]
fn a_user_missing_a_command_is_refused_at_start() {
    let tls = TlsFiles::new();
    let redis = RedisServer::start_tls(&tls, TlsServer::default());
    let rules = least_privilege_acl("tollgate", false, false).replace(" +pexpire", "");
    set_user(&redis, "short", &rules);
    let dir = tempfile::tempdir().expect("tempdir");
    let text = format!("{}{LIMIT}", tls_store(dir.path(), &tls, &redis, "short"));
    std::fs::write(dir.path().join("tollgate.toml"), text).expect("write config");
    let (status, stderr) = serve_refused(&dir.path().join("tollgate.toml"));
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("PEXPIRE"), "the command is named: {stderr}");
    assert!(!stderr.contains("pw-of-the-user"), "{stderr}");
}

/// Through Sentinel: the service finds the master by name and decides there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_through_sentinel() {
    let group = SentinelGroup::start();
    let urls: Vec<String> = group
        .sentinel_urls()
        .iter()
        .map(|u| format!("{u:?}"))
        .collect();
    let (_dir, path) = config_file(&format!(
        "[store]\nsentinel = [{}]\nsentinel_master = \"{}\"\ntimeout = \"2s\"\n{LIMIT}",
        urls.join(", "),
        group.master_name()
    ));
    let process = Process::serve(&path);
    three_then_refused(&process).await;
    let limits = request(process.addr, "GET", "/v1/limits", Bytes::new(), &[]).await;
    assert_eq!(limits.json["store"], "redis_sentinel", "{limits:?}");
    assert_eq!(
        crate::support::checked_keys(group.master()).len(),
        1,
        "the key is on the master"
    );
}

/// Started while Redis is down, a lease-mode limit reaches Redis once it comes up (the
/// not-yet-connected store used to forward checks and resets but not lease takes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_connect_serves_lease_mode_limits() {
    let mut redis = RedisServer::start();
    let (_dir, path) = config_file(&format!(
        r#"
[store]
redis = "{}"
timeout = "500ms"

[[limits]]
name = "leased"
algorithm = "fixed_window"
limit = 100
period = "300d"
key = ["user"]
on_store_error = "deny"
mode = "lease"
lease = 5
"#,
        redis.url()
    ));
    redis.kill();
    let process = Process::serve(&path);
    let check = r#"{"limit": "leased", "key": {"user": "1"}}"#;
    let reply = process.post("/v1/check", check).await;
    assert_eq!(reply.status, 503, "Redis down, deny policy: {reply:?}");

    redis.restart();
    let connected = eventually(Duration::from_secs(20), || async {
        request(process.addr, "GET", "/readyz", Bytes::new(), &[])
            .await
            .status
            == 200
    })
    .await;
    assert!(connected, "never connected; log:\n{}", process.log());
    let reply = process.post("/v1/check", check).await;
    assert_eq!(
        reply.status,
        200,
        "the lease was taken from Redis: {reply:?}\n{}",
        process.log()
    );
    assert_eq!(
        crate::support::checked_keys(&redis).len(),
        1,
        "the lease's window key is in Redis"
    );
}
