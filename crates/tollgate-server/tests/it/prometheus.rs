//! The dashboard and the alerts are checked, not just shipped:
//! - `promtool check rules` accepts `deploy/prometheus/alerts.yml`, and `promtool test rules`
//!   passes its unit tests (`alerts_test.yml`: each alert fires in its situation, from
//!   synthetic series);
//! - live: a real Prometheus (Debian package `prometheus`, installed by `scripts/test`)
//!   scrapes two spawned `tollgate serve` (one on a spawned Redis, one on the memory store)
//!   every second and evaluates the alerts (their `for:` shortened to 2 s). The memory
//!   store at its key cap fires `TollgateKeyCapNearFull`; a refused reload fires
//!   `TollgateReloadFailing`; killing Redis fires `TollgateStoreDown`, which was not active
//!   before. Every metric the Grafana dashboard queries is in the scrapes.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use tollgate_testkit::RedisServer;

use crate::binary::{Process, config_file};
use crate::support::{eventually, output_within, request, system_tool};

fn deploy(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(file)
}

fn promtool(args: &[&str]) -> String {
    let promtool = system_tool(&["promtool"], "prometheus");
    let output = output_within(Command::new(promtool).args(args), Duration::from_secs(60));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "promtool {args:?}:\n{text}");
    text
}

/// The alert rules are valid.
#[test]
fn promtool_checks_the_alert_rules() {
    let rules = deploy("prometheus/alerts.yml");
    let text = promtool(&["check", "rules", rules.to_str().expect("utf-8 path")]);
    assert!(text.contains("SUCCESS: 11 rules found"), "{text}");
}

/// Each alert fires in the situation it names, from synthetic series (and not in the
/// neighbouring healthy one).
#[test]
fn promtool_unit_tests_pass() {
    let tests = deploy("prometheus/alerts_test.yml");
    let text = promtool(&["test", "rules", tests.to_str().expect("utf-8 path")]);
    assert!(text.contains("SUCCESS"), "{text}");
}

/// Every `tollgate_*` name in the dashboard's queries (panels and variables).
fn dashboard_metrics() -> BTreeSet<String> {
    let text = std::fs::read_to_string(deploy("grafana/tollgate.json")).expect("dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("dashboard is JSON");
    assert!(dashboard["schemaVersion"].as_u64().is_some(), "importable");
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{panel}");
            queries.push(target["expr"].as_str().expect("expr").to_owned());
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .expect("variables")
    {
        if let Some(q) = variable["query"]["query"].as_str() {
            queries.push(q.to_owned());
        }
    }
    let mut names = BTreeSet::new();
    for query in &queries {
        let mut rest = query.as_str();
        while let Some(at) = rest.find("tollgate_") {
            let name: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            rest = &rest[at + name.len()..];
            names.insert(name);
        }
    }
    assert!(names.len() >= 10, "{names:?}");
    names
}

/// Whether a Prometheus answers `/-/ready` on `addr`.
async fn request_ready(addr: SocketAddr) -> bool {
    tokio::net::TcpStream::connect(addr).await.is_ok()
        && request(addr, "GET", "/-/ready", Bytes::new(), &[])
            .await
            .status
            == 200
}

/// A Prometheus process, killed on drop.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Scrapes `targets` every second, evaluating `rules` every second. Its port is chosen
    /// free and let go, so another socket can take it first: then it starts again on another
    /// (up to five times), as the harness's Redis servers do.
    async fn start(targets: &[SocketAddr], rules: &str) -> Prometheus {
        let binary = system_tool(&["prometheus"], "prometheus");
        let mut log = String::new();
        for _ in 0..5 {
            match Prometheus::try_start(&binary, targets, rules).await {
                Ok(prometheus) => return prometheus,
                Err(taken) => log = taken,
            }
        }
        panic!("prometheus's port was taken before it bound it, 5 times; its log:\n{log}")
    }

    /// A Prometheus on a free port, ready; `Err` with its log when that port was taken.
    async fn try_start(
        binary: &Path,
        targets: &[SocketAddr],
        rules: &str,
    ) -> Result<Prometheus, String> {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("alerts.yml"), rules).expect("write rules");
        let targets: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files: [alerts.yml]\n\
             scrape_configs:\n  - job_name: tollgate\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        );
        std::fs::write(dir.path().join("prometheus.yml"), config).expect("write config");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
        let log_path = dir.path().join("prometheus.log");
        let log_file = std::fs::File::create(&log_path).expect("create the log");
        let child = Command::new(binary)
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("spawn prometheus");
        let mut prometheus = Prometheus {
            child,
            addr,
            _dir: dir,
        };
        let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            // Ready counts only while our process runs: on a port taken by another server,
            // that one may answer while ours has exited.
            let exited = prometheus.child.try_wait().expect("its status").is_some();
            if exited {
                let log = log();
                if log.contains("address already in use") {
                    return Err(log);
                }
                panic!("prometheus exited at start; its log:\n{log}");
            }
            if request_ready(addr).await {
                return Ok(prometheus);
            }
            assert!(
                std::time::Instant::now() < deadline,
                "prometheus not ready within 30 s; its log:\n{}",
                log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn get(&self, path: &str) -> serde_json::Value {
        let reply = request(self.addr, "GET", path, Bytes::new(), &[]).await;
        assert_eq!(reply.status, 200, "{path}: {reply:?}");
        reply.json
    }

    /// The state (`pending`, `firing`) of `alert` for `instance`, if active.
    async fn alert(&self, alert: &str, instance: SocketAddr) -> Option<String> {
        let alerts = self.get("/api/v1/alerts").await;
        alerts["data"]["alerts"]
            .as_array()?
            .iter()
            .find(|a| {
                a["labels"]["alertname"] == alert && a["labels"]["instance"] == instance.to_string()
            })
            .and_then(|a| a["state"].as_str().map(str::to_owned))
    }

    /// The last value of `metric` (a bare name) scraped from `instance`.
    async fn value(&self, metric: &str, instance: SocketAddr) -> Option<f64> {
        let result = self.get(&format!("/api/v1/query?query={metric}")).await;
        result["data"]["result"]
            .as_array()?
            .iter()
            .find(|r| r["metric"]["instance"] == instance.to_string())
            .and_then(|r| r["value"][1].as_str()?.parse().ok())
    }
}

/// `alerts.yml` with every `for:` shortened to 2 s (the live test cannot wait minutes).
fn rules_for_the_live_test() -> String {
    let text = std::fs::read_to_string(deploy("prometheus/alerts.yml")).expect("alerts.yml");
    let rules: Vec<String> = text
        .lines()
        .map(|line| match line.trim_start().strip_prefix("for:") {
            Some(_) => format!("{}for: 2s", &line[..line.len() - line.trim_start().len()]),
            None => line.to_owned(),
        })
        .collect();
    let rules = rules.join("\n");
    assert_eq!(rules.matches("for: 2s").count(), 10, "{rules}");
    rules
}

async fn scrape(addr: SocketAddr) -> String {
    let reply = request(addr, "GET", "/metrics", Bytes::new(), &[]).await;
    assert_eq!(reply.status, 200);
    reply.text
}

/// Real Prometheus, real tollgate, real Redis: the reload and store-down alerts fire in
/// their situations, and every metric the dashboard queries exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alerts_fire_and_dashboard_metrics_exist_live() {
    let mut redis = RedisServer::start();
    let redis_config = format!(
        r#"
[store]
redis = "{}"
timeout = "200ms"

[[limits]]
name = "prom_sms"
algorithm = "fixed_window"
limit = 3
period = "1h"
key = ["user"]
on_store_error = "deny"

[[limits]]
name = "prom_leased"
algorithm = "fixed_window"
limit = 1000
period = "1h"
key = ["user"]
mode = "lease"
lease = 10
on_store_error = "deny"

[[limits]]
name = "prom_shadow"
algorithm = "fixed_window"
limit = 1
period = "1h"
key = ["user"]
shadow = true
on_store_error = "allow"
"#,
        redis.url()
    );
    let (_redis_dir, redis_path) = config_file(&redis_config);
    let on_redis = Process::serve(&redis_path);
    let (_memory_dir, memory_path) = config_file(
        r#"
[store]
max_keys = 100

[[limits]]
name = "prom_keys"
algorithm = "gcra"
limit = 5
period = "1h"
key = ["user"]
on_store_error = "deny"
"#,
    );
    let on_memory = Process::serve(&memory_path);

    // Traffic: refusals (cached by the deny cache) on Redis; more keys than the memory
    // store's cap.
    for _ in 0..8 {
        on_redis
            .post(
                "/v1/check",
                r#"{"limit": "prom_sms", "key": {"user": "abuser"}}"#,
            )
            .await;
    }
    for limit in ["prom_leased", "prom_shadow", "prom_shadow"] {
        let body = format!(r#"{{"limit": "{limit}", "key": {{"user": "1"}}}}"#);
        assert_eq!(
            on_redis.post("/v1/check", &body).await.status,
            200,
            "{limit}"
        );
    }
    for user in 0..300 {
        let body = format!(r#"{{"limit": "prom_keys", "key": {{"user": "u{user}"}}}}"#);
        on_memory.post("/v1/check", &body).await;
    }

    let prometheus =
        Prometheus::start(&[on_redis.addr, on_memory.addr], &rules_for_the_live_test()).await;
    let scraped = eventually(Duration::from_secs(30), || async {
        prometheus.value("tollgate_store_up", on_redis.addr).await == Some(1.0)
            && prometheus.value("tollgate_store_up", on_memory.addr).await == Some(1.0)
    })
    .await;
    assert!(scraped, "prometheus never scraped both instances");
    // Rules were evaluated on healthy scrapes (the evaluation after the one that saw
    // `tollgate_store_up`): no alert on the healthy Redis instance. The memory store holds
    // its cap of keys (100 of 100, and evicting): TollgateKeyCapNearFull.
    let key_cap = eventually(Duration::from_secs(60), || async {
        prometheus
            .alert("TollgateKeyCapNearFull", on_memory.addr)
            .await
            .as_deref()
            == Some("firing")
    })
    .await;
    let alerts = prometheus.get("/api/v1/alerts").await;
    assert!(key_cap, "TollgateKeyCapNearFull never fired: {alerts}");
    let on_healthy: Vec<&serde_json::Value> = alerts["data"]["alerts"]
        .as_array()
        .expect("alerts")
        .iter()
        .filter(|a| a["labels"]["instance"] == on_redis.addr.to_string())
        .collect();
    assert!(
        on_healthy.is_empty(),
        "no alert while healthy: {on_healthy:?}"
    );

    // A refused reload (period 0s): TollgateReloadFailing.
    std::fs::write(&redis_path, redis_config.replace("\"1h\"", "\"0s\"")).expect("write");
    let reload_alert = eventually(Duration::from_secs(60), || async {
        prometheus
            .alert("TollgateReloadFailing", on_redis.addr)
            .await
            .as_deref()
            == Some("firing")
    })
    .await;
    assert!(
        reload_alert,
        "TollgateReloadFailing never fired: {}\nlog:\n{}",
        prometheus.get("/api/v1/alerts").await,
        on_redis.log()
    );
    std::fs::write(&redis_path, &redis_config).expect("write");

    // Redis killed: the probe fails, checks fail by policy. TollgateStoreDown fires.
    assert_eq!(
        prometheus.alert("TollgateStoreDown", on_redis.addr).await,
        None
    );
    redis.kill();
    for user in 0..10 {
        let body = format!(r#"{{"limit": "prom_sms", "key": {{"user": "after-{user}"}}}}"#);
        let reply = on_redis.post("/v1/check", &body).await;
        assert_eq!(reply.status, 503, "deny policy: {reply:?}");
    }
    let store_down = eventually(Duration::from_secs(60), || async {
        prometheus
            .alert("TollgateStoreDown", on_redis.addr)
            .await
            .as_deref()
            == Some("firing")
    })
    .await;
    assert!(
        store_down,
        "TollgateStoreDown never fired: {}",
        prometheus.get("/api/v1/alerts").await
    );
    assert_eq!(
        prometheus.alert("TollgateStoreDown", on_memory.addr).await,
        None,
        "the memory store is fine"
    );

    // Every metric the dashboard queries is in the scrapes (Redis and memory instances).
    let exposition = format!(
        "{}{}",
        scrape(on_redis.addr).await,
        scrape(on_memory.addr).await
    );
    let present: BTreeSet<&str> = exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    let missing: Vec<String> = dashboard_metrics()
        .into_iter()
        .filter(|name| !present.contains(name.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "not in the scrape: {missing:?}\n{exposition}"
    );
}
