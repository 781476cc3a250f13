//! The status page in a real browser: `tollgate serve` is spawned, traffic is driven over
//! HTTP, and headless Chromium (the Debian package `chromium`, installed by `scripts/test`)
//! loads `/`, runs its script for a few seconds of virtual time (several polls of
//! `/v1/status`), and dumps the DOM. The figures in the DOM must be the traffic's, must
//! change with more traffic, and the browser must log no console message at all (the page
//! logs nothing; a script error, a CSP violation or a failed request each print one).

use std::path::PathBuf;
use std::time::Duration;

use crate::binary::{Process, config_file};
use crate::support::{eventually, output_within, system_tool};

/// The page in Chromium: the DOM after `budget_ms` of virtual time, and the console lines.
pub(crate) fn load(url: &str, budget_ms: u32) -> (String, Vec<String>) {
    let chromium: PathBuf = system_tool(&["chromium", "chromium-browser"], "chromium");
    let profile = tempfile::tempdir().expect("profile dir");
    let output = output_within(
        std::process::Command::new(chromium)
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--enable-logging=stderr",
                "--v=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(format!("--virtual-time-budget={budget_ms}"))
            .args(["--dump-dom", url]),
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "chromium failed: {stderr}");
    let console = stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(str::to_owned)
        .collect();
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        console,
    )
}

/// The text of the cell `field` in the row of `limit`.
fn cell(dom: &str, limit: &str, field: &str) -> String {
    let row_start = dom
        .find(&format!(r#"<tr data-limit="{limit}">"#))
        .unwrap_or_else(|| panic!("no row for {limit}: {dom}"));
    let row = &dom[row_start..];
    let row = &row[..row.find("</tr>").expect("row end")];
    let marker = format!(r#"data-field="{field}">"#);
    let start = row
        .find(&marker)
        .unwrap_or_else(|| panic!("no {field} in {row}"))
        + marker.len();
    row[start..]
        .split("</td>")
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// The text of the element with `id`.
fn by_id(dom: &str, id: &str) -> String {
    let marker = format!(r#"id="{id}""#);
    let start = dom
        .find(&marker)
        .unwrap_or_else(|| panic!("no #{id}: {dom}"));
    let rest = &dom[start..];
    let text = &rest[rest.find('>').expect("tag end") + 1..];
    text[..text.find('<').expect("text end")].to_owned()
}

/// The console check can fail: a page that logs an error is seen. The page is a file, as the
/// pages checked are served: Chromium 148 neither logs the console nor dumps the DOM of a
/// `data:` page that logs an error.
#[test]
fn the_console_check_sees_errors() {
    let dir = tempfile::tempdir().expect("temp dir");
    let page = dir.path().join("probe.html");
    std::fs::write(
        &page,
        "<script>console.error('probe-error'); missing();</script>",
    )
    .expect("probe page");
    let (_, console) = load(&format!("file://{}", page.display()), 500);
    assert!(
        console.iter().any(|l| l.contains("probe-error")),
        "console.error not seen: {console:?}"
    );
    assert!(
        console
            .iter()
            .any(|l| l.contains("Uncaught ReferenceError")),
        "an uncaught error not seen: {console:?}"
    );
}

/// The page shows the limits and the counts of the traffic, follows more traffic, and
/// logs nothing in the console.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_the_traffic_in_a_browser() {
    let (_dir, path) = config_file(
        r#"
[[limits]]
name = "page_sms"
algorithm = "fixed_window"
limit = 5
period = "1h"
key = ["user"]
on_store_error = "deny"

[[limits]]
name = "page_api"
algorithm = "gcra"
limit = 100
period = "1s"
key = ["user"]
on_store_error = "allow"

[[limits]]
name = "page_all"
algorithm = "fixed_window"
limit = 1
period = "1h"
on_store_error = "allow"
"#,
    );
    let process = Process::serve(&path);
    let status = || async {
        crate::support::request(process.addr, "GET", "/v1/status", bytes::Bytes::new(), &[])
            .await
            .json
    };
    status().await; // the baseline of the rates
    let check = r#"{"limit": "page_sms", "key": {"user": "abuser"}}"#;
    for _ in 0..12 {
        process.post("/v1/check", check).await;
    }
    for _ in 0..3 {
        process
            .post("/v1/check", r#"{"limit": "page_all", "key": {}}"#)
            .await;
    }
    let rated = eventually(Duration::from_secs(10), || async {
        !status().await["limits"][0]["rate"].is_null()
    })
    .await;
    assert!(
        rated,
        "the service has rates once its baseline is a second old"
    );
    let url = format!("http://{}/", process.addr);
    let page = url.clone();
    let (dom, console) = tokio::task::spawn_blocking(move || load(&page, 4000))
        .await
        .expect("chromium");
    assert!(console.is_empty(), "console messages: {console:?}");
    assert!(dom.contains(r#"data-state="ok""#), "{dom}");
    let polls: u32 = dom
        .split(r#"data-polls=""#)
        .nth(1)
        .and_then(|r| r.split('"').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(polls >= 2, "the page polls: {polls} polls; {dom}");
    assert_eq!(cell(&dom, "page_sms", "algorithm"), "fixed_window");
    assert_eq!(cell(&dom, "page_sms", "quota"), "5 / 1h");
    assert_eq!(cell(&dom, "page_sms", "total"), "12", "{dom}");
    assert_eq!(cell(&dom, "page_sms", "denied"), "7", "{dom}");
    assert_eq!(cell(&dom, "page_sms", "deny_ratio"), "58.3 %", "{dom}");
    assert!(
        cell(&dom, "page_sms", "top").contains("user=abuser ×7"),
        "{dom}"
    );
    assert_ne!(
        cell(&dom, "page_sms", "rate"),
        "–",
        "a rate after two polls"
    );
    assert_eq!(cell(&dom, "page_api", "total"), "0");
    assert!(
        cell(&dom, "page_all", "top").contains("<li>(no key: every request) ×2</li>"),
        "an unkeyed limit's one key: {dom}"
    );
    assert!(by_id(&dom, "store-health").starts_with("up"), "{dom}");
    assert_eq!(by_id(&dom, "store-kind"), "memory");
    assert!(by_id(&dom, "reload-watching").starts_with("yes"), "{dom}");
    assert_eq!(by_id(&dom, "panics"), "none since start", "{dom}");

    for _ in 0..8 {
        process.post("/v1/check", check).await;
    }
    process
        .post(
            "/v1/check",
            r#"{"limit": "page_api", "key": {"user": "a"}}"#,
        )
        .await;
    let (dom, console) = tokio::task::spawn_blocking(move || load(&url, 3000))
        .await
        .expect("chromium");
    assert!(console.is_empty(), "console messages: {console:?}");
    assert_eq!(cell(&dom, "page_sms", "total"), "20", "{dom}");
    assert_eq!(cell(&dom, "page_sms", "denied"), "15", "{dom}");
    assert!(
        cell(&dom, "page_sms", "top").contains("user=abuser ×15"),
        "{dom}"
    );
    assert_eq!(cell(&dom, "page_api", "total"), "1", "{dom}");
}

/// The page's last hour: the traffic drawn as lines, the store's health as a strip, and a
/// Redis outage told as it happened ("last outage … – …, recovered … ago"), with
/// `server.history_interval = "1s"` so that a few seconds make several points.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_draws_the_last_hour_and_the_outage() {
    let mut redis = tollgate_testkit::RedisServer::start();
    let (_dir, path) = config_file(&format!(
        r#"
[server]
history_interval = "1s"

[store]
redis = "{}"
timeout = "200ms"

[[limits]]
name = "hist_sms"
algorithm = "fixed_window"
limit = 5
period = "1h"
key = ["user"]
on_store_error = "deny"
"#,
        redis.url()
    ));
    let process = Process::serve(&path);
    let history = || async {
        crate::support::request(process.addr, "GET", "/v1/history", bytes::Bytes::new(), &[])
            .await
            .json
    };
    let check = r#"{"limit": "hist_sms", "key": {"user": "a"}}"#;
    for _ in 0..9 {
        process.post("/v1/check", check).await;
    }
    // Down for a few samples, then back.
    redis.kill();
    let down = eventually(Duration::from_secs(10), || async {
        history().await["outage"]["to_ms"].is_null() && !history().await["outage"].is_null()
    })
    .await;
    assert!(down, "no outage recorded: {}", history().await);
    // Another key: "a" is refused from the deny cache without a store call.
    let other = r#"{"limit": "hist_sms", "key": {"user": "b"}}"#;
    for _ in 0..3 {
        assert_eq!(process.post("/v1/check", other).await.status, 503);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    redis.restart();
    let recovered = eventually(Duration::from_secs(20), || async {
        history().await["outage"]["to_ms"].is_u64()
    })
    .await;
    assert!(recovered, "the outage never ended: {}", history().await);
    let h = history().await;
    // Killed: its connection is refused, or the first probe waits out its timeout.
    let error = h["outage"]["error"].as_str().unwrap_or_default().to_owned();
    assert!(error == "connection" || error == "timeout", "{h}");
    let points = h["points"].as_array().expect("points");
    let sum = |field: &str| {
        points
            .iter()
            .map(|p| p[field].as_u64().unwrap_or(0))
            .sum::<u64>()
    };
    assert_eq!(sum("decisions"), 12, "{h}");
    assert_eq!(
        sum("refused"),
        7,
        "4 over the limit, 3 by the deny policy: {h}"
    );
    assert_eq!(sum("store_errors"), 3, "{h}");
    assert!(points.iter().any(|p| p["up"] == false), "{h}");
    assert_eq!(
        h["limits"]["hist_sms"]["decisions"]
            .as_array()
            .map(Vec::len),
        Some(points.len()),
        "the limit's series is aligned with the points: {h}"
    );

    let url = format!("http://{}/", process.addr);
    let (dom, console) = tokio::task::spawn_blocking(move || load(&url, 4000))
        .await
        .expect("chromium");
    assert!(console.is_empty(), "console messages: {console:?}");
    let drawn: u32 = dom
        .split(r#"id="history" data-points=""#)
        .nth(1)
        .and_then(|r| r.split('"').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(drawn >= 3, "history points drawn: {drawn}; {dom}");
    assert!(
        dom.contains(r#"class="line errors""#),
        "the store errors line is drawn: {dom}"
    );
    assert!(dom.contains(r#"class="down""#), "the down strip: {dom}");
    let outage = by_id(&dom, "store-outage");
    assert!(
        outage.starts_with("last outage ")
            && outage.contains(&error)
            && outage.contains("recovered"),
        "{outage}"
    );
    assert!(
        dom.contains(r#"aria-label="hist_sms decisions"#),
        "the limit's line: {dom}"
    );
}

/// A service that has panicked: the page says how many times, and the last one's time, place
/// and thread, in red. A running service cannot be made to panic from outside, so the page
/// (its own files, as the service serves them) is loaded from a server beside it that answers
/// `/v1/status` and `/v1/history` with the service's own answers, `panics` changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_a_panic_in_red() {
    use axum::http::header::CONTENT_TYPE;
    use axum::routing::get;

    let (_dir, path) = config_file(
        r#"
[[limits]]
name = "panic_page"
algorithm = "gcra"
limit = 10
period = "1s"
key = ["user"]
on_store_error = "allow"
"#,
    );
    let process = Process::serve(&path);
    let fetch = |path: &'static str| async move {
        crate::support::request(process.addr, "GET", path, bytes::Bytes::new(), &[]).await
    };
    let mut status = fetch("/v1/status").await.json;
    assert_eq!(
        status["panics"],
        serde_json::json!({"count": 0, "last": null}),
        "tollgate serve counts panics: {status}"
    );
    status["panics"] = serde_json::json!({
        "count": 3,
        "last": {
            "at_ms": 1_796_653_944_000_u64,
            "thread": "tokio-runtime-worker",
            "location": "crates/tollgate/src/x.rs:12:5"
        }
    });
    let history = fetch("/v1/history").await.text;
    let (html, js, css) = (
        fetch("/").await.text,
        fetch("/status.js").await.text,
        fetch("/status.css").await.text,
    );
    let typed =
        |kind: &'static str, body: String| move || async move { ([(CONTENT_TYPE, kind)], body) };
    let app = axum::Router::new()
        .route("/", get(typed("text/html", html)))
        .route("/status.js", get(typed("text/javascript", js)))
        .route("/status.css", get(typed("text/css", css)))
        .route(
            "/v1/status",
            get(typed("application/json", status.to_string())),
        )
        .route("/v1/history", get(typed("application/json", history)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/", listener.local_addr().expect("addr"));
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let (dom, _) = tokio::task::spawn_blocking(move || load(&url, 3000))
        .await
        .expect("chromium");
    server.abort();
    assert_eq!(
        by_id(&dom, "panics"),
        "3 since start (each a bug: the log says why); last 2026-12-07 14:32:24 UTC at \
         crates/tollgate/src/x.rs:12:5, thread tokio-runtime-worker",
        "{dom}"
    );
    assert!(
        dom.contains(r#"<dd id="panics" class="bad">"#),
        "in red: {dom}"
    );
}

/// Limits named like the properties every JavaScript object has (`constructor`, `toString`):
/// the page looked their history up as a plain property, found the inherited function, and
/// stopped with "cannot reach the service" until they had a series of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_named_like_object_properties_show() {
    let (_dir, path) = config_file(
        r#"
[[limits]]
name = "constructor"
algorithm = "gcra"
limit = 10
period = "1m"
on_store_error = "allow"

[[limits]]
name = "toString"
algorithm = "gcra"
limit = 10
period = "1m"
on_store_error = "allow"
"#,
    );
    let process = Process::serve(&path);
    process
        .post("/v1/check", r#"{"limit": "constructor", "key": {}}"#)
        .await;
    let url = format!("http://{}/", process.addr);
    let (dom, console) = tokio::task::spawn_blocking(move || load(&url, 2000))
        .await
        .expect("chromium");
    assert!(console.is_empty(), "console messages: {console:?}");
    assert!(dom.contains(r#"data-state="ok""#), "{dom}");
    assert_eq!(cell(&dom, "constructor", "total"), "1", "{dom}");
    assert_eq!(cell(&dom, "toString", "total"), "0", "{dom}");
}

/// The most refused keys are listed by the refusals each certainly had, and one whose count
/// may be half or more overstatement is marked `uncertain`: after a flood of keys refused
/// once each, the key refused 20 times comes first, unmarked, and the one-off keys listed
/// after it (each with a count inherited from the flood) are marked, so that none is taken
/// for an abuser to block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_marks_uncertain_top_keys() {
    let (_dir, path) = config_file(
        r#"
[[limits]]
name = "page_flood"
algorithm = "fixed_window"
limit = 1
period = "1h"
key = ["user"]
on_store_error = "allow"
"#,
    );
    let process = Process::serve(&path);
    let check = |user: String| format!(r#"{{"limit": "page_flood", "key": {{"user": "{user}"}}}}"#);
    for _ in 0..21 {
        process.post("/v1/check", &check("heavy".into())).await;
    }
    // Each refused once (its first check admitted): more keys than a sketch's counters in
    // every shard, so the one-off keys listed carry errors.
    for i in 0..400 {
        for _ in 0..2 {
            process.post("/v1/check", &check(format!("bot-{i}"))).await;
        }
    }
    let url = format!("http://{}/", process.addr);
    let (dom, console) = tokio::task::spawn_blocking(move || load(&url, 2000))
        .await
        .expect("chromium");
    assert!(console.is_empty(), "console messages: {console:?}");
    let top = cell(&dom, "page_flood", "top");
    let items: Vec<&str> = top.split("<li").skip(1).collect();
    assert_eq!(items.len(), 5, "{top}");
    assert!(
        items[0].starts_with(">user=heavy ×") && !items[0].contains("uncertain"),
        "the key refused 20 times first, unmarked: {top}"
    );
    for item in &items[1..] {
        assert!(
            item.starts_with(r#" class="uncertain""#) && item.contains("user=bot-"),
            "a one-off key marked uncertain: {top}"
        );
        assert!(item.contains(" uncertain</li>"), "visibly: {top}");
    }
}
