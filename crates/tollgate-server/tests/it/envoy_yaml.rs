//! `[envoy] config_dir`: the reference service's YAML files served by the real binary over
//! gRPC (with no `[[limits]]` at all), reloaded on SIGHUP (a bad file keeps the old rules), and
//! checked by `tollgate check-config` (a table, or the file and path of the problem).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;

use bytes::Bytes;

use crate::binary::Process;
use crate::grpc::{call, code, connect, limit_name};
use crate::support::{eventually, request};

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

/// The example descriptor file (marketing 2/day per number, `trusted` whitelisted).
const MESSAGING: &str = include_str!("../../../../examples/envoy-ratelimit/config/messaging.yaml");

/// A config dir `ratelimit/config` next to `tollgate.toml`, which names it relatively.
fn layout(dir: &Path, grpc: Option<std::net::SocketAddr>, yaml: &str) -> std::path::PathBuf {
    let conf = dir.join("ratelimit").join("config");
    std::fs::create_dir_all(&conf).expect("mkdir");
    std::fs::write(conf.join("messaging.yaml"), yaml).expect("write yaml");
    let server = grpc.map_or(String::new(), |g| format!("[server]\ngrpc = \"{g}\"\n"));
    let path = dir.join("tollgate.toml");
    std::fs::write(
        &path,
        format!("{server}[envoy]\nconfig_dir = \"ratelimit/config\"\n"),
    )
    .expect("write toml");
    path
}

/// Port 0: the process binds a free port itself and names it in its listening line
/// (`Process::grpc`).
fn any_port() -> std::net::SocketAddr {
    std::net::SocketAddr::from(([127, 0, 0, 1], 0))
}

/// The binary serves a config whose limits all come from YAML: the nested entry's limit
/// applies, OVER_LIMIT after 2; a SIGHUP after editing the YAML applies the new quota; a SIGHUP
/// after breaking it keeps the old rules and logs the file and path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_serves_a_yaml_directory_and_reloads_it_on_sighup() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = layout(dir.path(), Some(any_port()), MESSAGING);
    let mut process = Process::serve(&path);
    let grpc = process.grpc.expect("gRPC address in the listening line");
    let mut client = connect(grpc).await;
    let marketing = [("message_type", "marketing"), ("to_number", "206")];
    for _ in 0..2 {
        let r = call(&mut client, "messaging", &marketing).await;
        assert_eq!(code(&r), Code::Ok, "{r:?}");
        let limit = r.statuses[0].current_limit.as_ref().expect("a limit");
        // The nested entry's 2 per day; no YAML `name`, so an empty one (as the reference).
        assert_eq!((limit.name.as_str(), limit.requests_per_unit), ("", 2));
    }
    let r = call(&mut client, "messaging", &marketing).await;
    assert_eq!(code(&r), Code::OverLimit, "{r:?}");
    let r = call(&mut client, "messaging", &[("trusted", "x")]).await;
    assert_eq!(
        (code(&r), limit_name(&r)),
        (Code::Ok, ""),
        "whitelisted: {r:?}"
    );

    let yaml_file = dir.path().join("ratelimit/config/messaging.yaml");
    std::fs::write(
        &yaml_file,
        MESSAGING.replace("requests_per_unit: 2", "requests_per_unit: 3"),
    )
    .expect("edit yaml");
    process.signal("HUP");
    // The reload logs before it swaps: wait for the new quota on another number's counter.
    let probe = [("message_type", "marketing"), ("to_number", "probe")];
    let swapped = eventually(Duration::from_secs(10), || {
        let mut client = client.clone();
        async move {
            let r = call(&mut client, "messaging", &probe).await;
            r.statuses[0]
                .current_limit
                .as_ref()
                .is_some_and(|l| l.requests_per_unit == 3)
        }
    })
    .await;
    assert!(swapped, "new quota never applied; log:\n{}", process.log());
    let r = call(&mut client, "messaging", &marketing).await;
    assert_eq!(code(&r), Code::Ok, "the new quota (3) counts on: {r:?}");

    std::fs::write(
        &yaml_file,
        MESSAGING.replace("unit: day", "unit: fortnight"),
    )
    .expect("break yaml");
    process.signal("HUP");
    assert!(
        process.logged("config reload refused").await,
        "log:\n{}",
        process.log()
    );
    let log = process.log();
    assert!(
        log.contains("messaging.yaml: descriptors[0].descriptors[0].rate_limit.unit"),
        "{log}"
    );
    let r = call(&mut client, "messaging", &marketing).await;
    assert_eq!(code(&r), Code::OverLimit, "old rules kept: {r:?}");
    process.terminate();
}

/// `domain: edge` with `user` at `per_minute` a minute, and `sms` at 5 unless `partial` (an
/// editor's first write of the file).
fn edge_yaml(per_minute: u32, partial: bool) -> String {
    let mut text = format!(
        "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {{unit: minute, requests_per_unit: {per_minute}}}\n"
    );
    if !partial {
        text.push_str("  - key: sms\n    rate_limit: {unit: minute, requests_per_unit: 5}\n");
    }
    text
}

/// A YAML file rewritten while a reload reads the directory (here: half-written 250 ms after
/// a SIGHUP's reads agreed, while a large file before it in name order is parsed; whole again
/// once that reload ended): the reload that read it half-way is not applied, and the finished
/// file, equal to what had settled before, is. (That reload was applied, and the finished file, equal to the snapshot
/// the reloader had marked as handled, never was: the `sms` limit stayed missing, its calls
/// all allowed, while the file said 5 a minute.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_yaml_file_caught_half_written_by_a_reload_is_not_applied() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = layout(dir.path(), Some(any_port()), MESSAGING);
    let conf = dir.path().join("ratelimit/config");
    // About a second to parse in a debug build: the reload reads `zz.yaml` that much later.
    let mut big = String::from(
        "domain: big\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    metadata:\n",
    );
    for i in 0..45_000 {
        big.push_str(&format!("      m{i}: v{i}\n"));
    }
    std::fs::write(conf.join("a_big.yaml"), big).expect("write");
    let zz = conf.join("zz.yaml");
    std::fs::write(&zz, edge_yaml(7, false)).expect("write");
    let mut process = Process::serve(&path);
    let mut client = connect(process.grpc.expect("gRPC address")).await;
    let rate =
        |r: &tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse| {
            r.statuses[0]
                .current_limit
                .as_ref()
                .map(|l| l.requests_per_unit)
        };
    let r = call(&mut client, "edge", &[("sms", "x")]).await;
    assert_eq!(rate(&r), Some(5), "{r:?}");

    std::fs::write(&zz, edge_yaml(9, false)).expect("write");
    process.signal("HUP");
    // The SIGHUP's two reads, 100 ms apart, agree: the reload parses, `a_big.yaml` first.
    assert!(
        process.logged("SIGHUP: reloading the config file").await,
        "{}",
        process.log()
    );
    tokio::time::sleep(Duration::from_millis(250)).await;
    std::fs::write(&zz, edge_yaml(9, true)).expect("write");
    // That reload ends one way or the other: applied as read (`sms` removed), or not.
    let ended = eventually(Duration::from_secs(10), || async {
        let log = process.log();
        log.contains("config reload removes limits") || log.contains("changed while it was read")
    })
    .await;
    assert!(ended, "{}", process.log());
    std::fs::write(&zz, edge_yaml(9, false)).expect("write");

    let settled = eventually(Duration::from_secs(10), || {
        let mut client = client.clone();
        async move {
            let user = call(&mut client, "edge", &[("user", "x")]).await;
            let sms = call(&mut client, "edge", &[("sms", "x")]).await;
            rate(&user) == Some(9) && rate(&sms) == Some(5)
        }
    })
    .await;
    assert!(
        settled,
        "the finished file was never applied; log:\n{}",
        process.log()
    );
    process.terminate();
}

/// The directory is watched like the config file: an edited YAML file and a new domain file
/// apply without a signal (once settled, one to two poll intervals later), and a broken one
/// is refused whole, keeping the rules in force.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_in_the_yaml_directory_reloads_without_a_signal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = layout(dir.path(), Some(any_port()), MESSAGING);
    let process = Process::serve(&path);
    let grpc = process.grpc.expect("gRPC address in the listening line");
    let client = connect(grpc).await;
    let quota = |domain: &'static str, entries: &'static [(&'static str, &'static str)]| {
        let mut client = client.clone();
        async move {
            let r = call(&mut client, domain, entries).await;
            r.statuses[0]
                .current_limit
                .as_ref()
                .map(|l| l.requests_per_unit)
        }
    };
    const PROBE: &[(&str, &str)] = &[("message_type", "marketing"), ("to_number", "probe")];
    assert_eq!(quota("messaging", PROBE).await, Some(2));

    let conf = dir.path().join("ratelimit/config");
    std::fs::write(
        conf.join("messaging.yaml"),
        MESSAGING.replace("requests_per_unit: 2", "requests_per_unit: 7"),
    )
    .expect("edit yaml");
    let edited = eventually(Duration::from_secs(10), || async {
        quota("messaging", PROBE).await == Some(7)
    })
    .await;
    assert!(edited, "edit never applied; log:\n{}", process.log());

    std::fs::write(
        conf.join("rides.yaml"),
        "domain: rides\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n      requests_per_unit: 4\n",
    )
    .expect("add a domain");
    const RIDER: &[(&str, &str)] = &[("user", "u1")];
    let added = eventually(Duration::from_secs(10), || async {
        quota("rides", RIDER).await == Some(4)
    })
    .await;
    assert!(added, "new domain never applied; log:\n{}", process.log());

    std::fs::write(
        conf.join("rides.yaml"),
        "domain: rides\ndescriptors:\n  - key: [user]\n",
    )
    .expect("break it");
    assert!(
        process.logged("config reload refused").await,
        "log:\n{}",
        process.log()
    );
    assert!(process.log().contains("rides.yaml"), "{}", process.log());
    assert_eq!(quota("rides", RIDER).await, Some(4), "old rules kept");
    assert_eq!(quota("messaging", PROBE).await, Some(7), "old rules kept");
}

/// `check-config` prints the imported rules as a table, and refuses a bad file naming it and
/// the path in it.
#[test]
fn check_config_prints_the_table_and_refuses_a_bad_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = layout(dir.path(), None, MESSAGING);
    let out = Command::new(BIN)
        .arg("check-config")
        .arg(&path)
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains("2 limits"), "{stdout}");
    assert!(stdout.contains("DOMAIN"), "{stdout}");
    let row = stdout
        .lines()
        .find(|l| l.contains("messaging.message_type_marketing.to_number"))
        .unwrap_or_else(|| panic!("no row for the nested limit:\n{stdout}"));
    assert!(
        row.contains("2/day") && row.contains("descriptors[0].descriptors[0]"),
        "{row}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("trusted") && l.contains("whitelisted")),
        "{stdout}"
    );

    std::fs::write(
        dir.path().join("ratelimit/config/other.yaml"),
        "domain: other\ndescriptors:\n  - key: a\n    rate_limit: { unlimited: true, unit: second }\n",
    )
    .expect("write");
    let out = Command::new(BIN)
        .arg("check-config")
        .arg(&path)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        stderr.contains("tollgate.toml: envoy.config_dir:"),
        "{stderr}"
    );
    assert!(
        stderr.contains("other.yaml: descriptors[0].rate_limit.unit: should not specify rate limit unit when unlimited"),
        "{stderr}"
    );
}

/// `[envoy]` options reach the generated limits; a generated name already used by
/// `[[limits]]`, an unknown algorithm and an unknown `override_counters` are refused with
/// the field named.
#[test]
fn envoy_options_and_name_clashes() {
    use tollgate::{Algorithm, OnStoreError};
    use tollgate_server::config::{Config, Overrides};

    let dir = tempfile::tempdir().expect("tempdir");
    let origin = layout(dir.path(), None, MESSAGING);
    let origin = origin.to_str().expect("utf-8 path");
    let base = "[envoy]\nconfig_dir = \"ratelimit/config\"\n";
    let text = format!("{base}algorithm = \"gcra\"\non_store_error = \"deny\"\n");
    let config = Config::parse(&text, origin, &Overrides::default()).expect("valid");
    assert_eq!(config.limits.len(), 2);
    for l in &config.limits {
        assert_eq!(
            (l.limit.algorithm(), l.limit.policy()),
            (Algorithm::Gcra, OnStoreError::Deny)
        );
    }
    let clash = format!(
        "{base}\n[[limits]]\nname = \"messaging.to_number\"\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1s\"\non_store_error = \"deny\"\n"
    );
    let e = Config::parse(&clash, origin, &Overrides::default()).expect_err("clash");
    assert!(
        e.to_string()
            .contains("envoy.config_dir: \"messaging.to_number\" is already the name of limits[0]"),
        "{e}"
    );
    let e = Config::parse(
        &format!("{base}algorithm = \"leaky\"\n"),
        origin,
        &Overrides::default(),
    )
    .expect_err("unknown algorithm");
    assert!(e.to_string().contains("envoy.algorithm"), "{e}");
    // `override_counters`: the reference's sharing by default, `per_rate` on request, and
    // another value refused with the field named.
    let config = Config::parse(base, origin, &Overrides::default()).expect("valid");
    assert_eq!(
        config.envoy.override_counters,
        tollgate_envoy::OverrideCounters::Shared
    );
    let text = format!("{base}override_counters = \"per_rate\"\n");
    let config = Config::parse(&text, origin, &Overrides::default()).expect("valid");
    assert_eq!(
        config.envoy.override_counters,
        tollgate_envoy::OverrideCounters::PerRate
    );
    let e = Config::parse(
        &format!("{base}override_counters = \"sometimes\"\n"),
        origin,
        &Overrides::default(),
    )
    .expect_err("unknown keying");
    let e = e.to_string();
    assert!(
        e.contains("envoy.override_counters") && e.contains("sometimes"),
        "{e}"
    );
}

/// A careless 30 MB file dropped into the directory: the reload refuses it unread (its size
/// named), the service keeps answering meanwhile, and SIGTERM still ends it promptly. (Before
/// the size cap, parsing such a file took a core for minutes and held the shutdown.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_file_in_the_directory_is_refused_and_shutdown_keeps_its_deadline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = layout(dir.path(), None, MESSAGING);
    let mut process = Process::serve(&path);
    let mut big = String::from("domain: dump\ndescriptors:\n");
    let mut i = 0;
    while big.len() < 30 * 1024 * 1024 {
        big.push_str(&format!(
            "  - key: k{i}\n    value: v\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n"
        ));
        i += 1;
    }
    std::fs::write(dir.path().join("ratelimit/config/dump.yaml"), big).expect("write");
    let refused = eventually(Duration::from_secs(10), || async {
        process.log().contains("larger than the 2048 KiB")
    })
    .await;
    assert!(
        refused,
        "the reload was not refused in time; log:\n{}",
        process.log()
    );
    assert!(process.log().contains("dump.yaml"), "{}", process.log());
    let started = std::time::Instant::now();
    let health = request(process.addr, "GET", "/healthz", Bytes::new(), &[]).await;
    assert_eq!(health.status, 200);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    process.terminate();
}
