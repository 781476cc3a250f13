//! Hot reload in-process: a changed file swaps the limits, an invalid one is refused.

use std::time::Duration;

use tollgate_server::config::{Config, Overrides};
use tollgate_server::server::Server;

use bytes::Bytes;

use crate::binary::{Process, config_file};
use crate::support::{TestServer, eventually, one_limit, request, sample};

/// Editing the file adds a limit and changes another while counters survive; an invalid edit
/// is refused (old limits stay, `tollgate_reloads_total{result="error"}` counts it).
#[tokio::test]
async fn file_changes_swap_limits_and_bad_files_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    std::fs::write(
        &path,
        one_limit("reload_a", "sliding_log", 3, "1h", r#""user""#, "deny"),
    )
    .expect("write");
    let config = Config::load(&path, &Overrides::default()).expect("valid");
    let server = TestServer::start_with(Server::new(config).watch(
        &path,
        Overrides::default(),
        Duration::from_millis(20),
    ))
    .await;
    let body = r#"{"limit": "reload_a", "key": {"user": "1"}}"#;
    assert_eq!(server.post("/v1/check", body).await.status, 200);

    let new = format!(
        "{}{}",
        one_limit("reload_a", "sliding_log", 5, "1h", r#""user""#, "deny"),
        one_limit("reload_b", "gcra", 1, "1m", "", "allow")
    );
    std::fs::write(&path, new).expect("write");
    let reloaded = eventually(Duration::from_secs(10), || async {
        server.get("/v1/limits").await.json["limits"]
            .as_array()
            .is_some_and(|l| l.len() == 2)
    })
    .await;
    assert!(reloaded, "the new limit never appeared");
    assert_eq!(
        server.remaining("reload_a", r#"{"user": "1"}"#).await,
        4,
        "the counter survived the reload"
    );
    assert_eq!(
        server
            .post("/v1/check", r#"{"limit": "reload_b"}"#)
            .await
            .status,
        200
    );

    std::fs::write(&path, "[[limits]]\nname = \"broken\"\n").expect("write");
    let refused = eventually(Duration::from_secs(10), || async {
        server
            .get("/metrics")
            .await
            .text
            .contains(r#"tollgate_reloads_total{result="error"}"#)
    })
    .await;
    assert!(refused, "the invalid file was never looked at");
    let limits = server.get("/v1/limits").await;
    assert_eq!(
        limits.json["limits"].as_array().map(Vec::len),
        Some(2),
        "{limits:?}"
    );
    assert_eq!(server.remaining("reload_a", r#"{"user": "1"}"#).await, 4);
    server.stop().await;
}

/// A refused edit raises the alarm (`tollgate_config_last_reload_successful` 0, the error on
/// `/v1/status`); putting the running file back clears it, although no limit changes.
///
/// In a process of its own: the gauge is the process's, and in this test binary other tests'
/// reloads set it too (seen: it read 1 from another test's reload while this server still
/// showed its refusal).
#[tokio::test]
async fn putting_the_running_file_back_clears_a_refused_reload() {
    let good = format!(
        "[server]\nhttp = \"127.0.0.1:0\"\n{}",
        one_limit("revert", "gcra", 3, "1h", r#""user""#, "deny")
    );
    let (_dir, path) = config_file(&good);
    let process = Process::serve(&path);
    let get = |path: &'static str| async move {
        request(process.addr, "GET", path, Bytes::new(), &[]).await
    };
    let successful = |text: &str| sample(text, "tollgate_config_last_reload_successful");
    std::fs::write(&path, "[[limits]]\nname = \"broken\"\n").expect("write");
    let refused = eventually(Duration::from_secs(10), || async {
        successful(&get("/metrics").await.text).as_deref() == Some("0")
    })
    .await;
    assert!(
        refused,
        "the invalid file was never refused; log:\n{}",
        process.log()
    );
    let status = get("/v1/status").await;
    assert_eq!(status.json["reload"]["last"]["ok"], false, "{status:?}");
    assert!(
        status.text.contains("missing field"),
        "the error is not shown: {status:?}"
    );
    std::fs::write(&path, &good).expect("write");
    let cleared = eventually(Duration::from_secs(10), || async {
        successful(&get("/metrics").await.text).as_deref() == Some("1")
    })
    .await;
    assert!(
        cleared,
        "the running file put back left the alarm raised; log:\n{}",
        process.log()
    );
    let status = get("/v1/status").await;
    assert_eq!(status.json["reload"]["last"]["ok"], true, "{status:?}");
    assert!(
        !status.text.contains("missing field"),
        "the old error is still shown: {status:?}"
    );
}

/// The first look at the file after start-up finds the file the service started from: no
/// reload is counted or shown (a restart used to show one on the page and the dashboard).
#[tokio::test]
async fn starting_counts_no_reload() {
    let (_dir, path) = config_file(&one_limit("start", "gcra", 3, "1h", "", "deny"));
    let mut process = Process::serve(&path);
    let watched = process.logged("config file as at start").await;
    assert!(
        watched,
        "the first look never happened; log:\n{}",
        process.log()
    );
    let get = |path: &'static str| async move {
        request(process.addr, "GET", path, Bytes::new(), &[]).await
    };
    let text = get("/metrics").await.text;
    assert_eq!(
        sample(&text, r#"tollgate_reloads_total{result="ok"}"#).as_deref(),
        Some("0"),
        "{text}"
    );
    let status = get("/v1/status").await;
    assert_eq!(
        status.json["reload"]["last"],
        serde_json::Value::Null,
        "{status:?}"
    );
    assert!(
        !process.log().contains("config file read"),
        "{}",
        process.log()
    );
    process.terminate();
}

/// An edit to a setting a reload cannot apply (`store.timeout`, `server.max_connections`) is
/// not dropped in silence: the warning names each one, `/v1/status` lists them under
/// `reload.pending_restart` and `tollgate_config_restart_pending_settings` counts them (the
/// page said only "applied"), and the limits still reload. Putting the settings back clears
/// both.
#[tokio::test]
async fn a_reload_names_the_settings_that_wait_for_a_restart() {
    let limit = one_limit("restart", "gcra", 3, "1h", "", "deny");
    let (_dir, path) = config_file(&format!("[store]\ntimeout = \"50ms\"\n{limit}"));
    let mut process = Process::serve(&path);
    std::fs::write(
        &path,
        format!(
            "[server]\nmax_connections = 100\n[store]\ntimeout = \"80ms\"\n{}",
            limit.replace("limit = 3", "limit = 4")
        ),
    )
    .expect("write");
    let warned = process.logged("take effect on restart").await;
    assert!(warned, "no warning; log:\n{}", process.log());
    let log = process.log();
    let line = log
        .lines()
        .find(|l| l.contains("take effect on restart"))
        .unwrap_or_default();
    assert!(
        line.contains("WARN")
            && line.contains(r#""server.max_connections""#)
            && line.contains(r#""store.timeout""#)
            && !line.contains("store.prefix"),
        "{line}"
    );
    let reloaded = process.logged("config reloaded").await;
    assert!(
        reloaded,
        "the limit did not reload; log:\n{}",
        process.log()
    );
    let get = |path: &'static str| request(process.addr, "GET", path, Bytes::new(), &[]);
    let status = get("/v1/status").await;
    assert_eq!(
        status.json["reload"]["pending_restart"],
        serde_json::json!(["server.max_connections", "store.timeout"]),
        "{status:?}"
    );
    let scrape = get("/metrics").await.text;
    assert_eq!(
        sample(&scrape, "tollgate_config_restart_pending_settings").as_deref(),
        Some("2"),
        "{scrape}"
    );

    std::fs::write(
        &path,
        format!(
            "[store]\ntimeout = \"50ms\"\n{}",
            limit.replace("limit = 3", "limit = 5")
        ),
    )
    .expect("write");
    let cleared = eventually(Duration::from_secs(10), || async {
        get("/v1/status").await.json["reload"]["pending_restart"] == serde_json::json!([])
    })
    .await;
    assert!(cleared, "log:\n{}", process.log());
    let scrape = get("/metrics").await.text;
    assert_eq!(
        sample(&scrape, "tollgate_config_restart_pending_settings").as_deref(),
        Some("0"),
        "{scrape}"
    );
    process.terminate();
}

/// The file moved away (the service reports it cannot read it) and put back unchanged, as a
/// `rm` then `cp` deploy or an editor's save by rename does: the alarm clears. It used to
/// stay raised, the file being the one last handled.
#[tokio::test]
async fn a_file_moved_away_and_back_clears_the_alarm() {
    let (dir, path) = config_file(&one_limit("moved", "gcra", 3, "1h", "", "deny"));
    let process = Process::serve(&path);
    let successful = |text: &str| sample(text, "tollgate_config_last_reload_successful");
    let scrape = || async { request(process.addr, "GET", "/metrics", Bytes::new(), &[]).await };
    // After the first look, which handles the file the service started from.
    let watched = process.logged("config file as at start").await;
    assert!(
        watched,
        "the first look never happened; log:\n{}",
        process.log()
    );
    let aside = dir.path().join("aside.toml");
    std::fs::rename(&path, &aside).expect("move away");
    let failed = eventually(Duration::from_secs(10), || async {
        successful(&scrape().await.text).as_deref() == Some("0")
    })
    .await;
    assert!(
        failed,
        "the missing file was not reported; log:\n{}",
        process.log()
    );
    std::fs::rename(&aside, &path).expect("move back");
    let cleared = eventually(Duration::from_secs(10), || async {
        successful(&scrape().await.text).as_deref() == Some("1")
    })
    .await;
    assert!(
        cleared,
        "the file put back left the alarm raised; log:\n{}",
        process.log()
    );
}

/// A limit a reload removed stops exporting its values: its refusal ratio reads NaN at once,
/// and its key count falls to 0 once its keys expire. Both kept their last values for good,
/// and a removed limit's keys held `TollgateKeyCapNearFull` firing until a restart.
#[tokio::test]
async fn a_removed_limit_leaves_no_stale_gauges() {
    let kept = one_limit("kept", "gcra", 3, "1h", "", "deny");
    let (_dir, path) = config_file(&format!(
        "{kept}{}",
        one_limit("gone", "fixed_window", 1, "1s", r#""user""#, "deny")
    ));
    let mut process = Process::serve(&path);
    for user in ["a", "b", "a"] {
        let body = format!(r#"{{"limit": "gone", "key": {{"user": "{user}"}}}}"#);
        process.post("/v1/check", &body).await;
    }
    let scrape = || async {
        request(process.addr, "GET", "/metrics", Bytes::new(), &[])
            .await
            .text
    };
    let text = scrape().await;
    assert_eq!(
        sample(&text, r#"tollgate_keys{limit="gone"}"#).as_deref(),
        Some("2"),
        "{text}"
    );
    let ratio = sample(&text, r#"tollgate_deny_ratio{limit="gone"}"#);
    assert!(ratio.as_deref().is_some_and(|r| r != "NaN"), "{text}");
    std::fs::write(&path, &kept).expect("write");
    assert!(process.logged("config reloaded").await, "{}", process.log());
    let text = scrape().await;
    assert_eq!(
        sample(&text, r#"tollgate_deny_ratio{limit="gone"}"#).as_deref(),
        Some("NaN"),
        "{text}"
    );
    // The memory store sweeps expired keys every 10 s.
    let expired = eventually(Duration::from_secs(30), || async {
        sample(&scrape().await, r#"tollgate_keys{limit="gone"}"#).as_deref() == Some("0")
    })
    .await;
    assert!(
        expired,
        "the removed limit's keys stayed counted:\n{}",
        scrape().await
    );
    process.terminate();
}

/// Requests keep being answered while the limits are swapped again and again: every answer
/// is a decision (200 or 429), none is an error or a dropped connection.
#[tokio::test]
async fn reloads_drop_no_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.toml");
    let version = |limit: u64| one_limit("swap", "gcra", limit, "1h", r#""user""#, "deny");
    std::fs::write(&path, version(10)).expect("write");
    let config = Config::load(&path, &Overrides::default()).expect("valid");
    let server = TestServer::start_with(Server::new(config).watch(
        &path,
        Overrides::default(),
        Duration::from_millis(5),
    ))
    .await;
    let addr = server.addr;
    let load = tokio::spawn(async move {
        let mut statuses = Vec::new();
        for i in 0..300 {
            let body = format!(r#"{{"limit": "swap", "key": {{"user": "{}"}}}}"#, i % 7);
            let reply = crate::support::request(addr, "POST", "/v1/check", body.into(), &[]).await;
            statuses.push(reply.status);
        }
        statuses
    });
    for limit in [11, 12, 13, 14, 15, 16] {
        std::fs::write(&path, version(limit)).expect("write");
        let seen = eventually(Duration::from_secs(10), || async {
            server.get("/v1/limits").await.json["limits"][0]["limit"] == limit
        })
        .await;
        assert!(
            seen,
            "limit {limit} never loaded: {:?}",
            server.get("/v1/limits").await
        );
    }
    let statuses = load.await.expect("load task");
    assert_eq!(statuses.len(), 300);
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 429),
        "{statuses:?}"
    );
}
