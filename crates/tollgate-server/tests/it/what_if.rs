//! `tollgate replay` and `tollgate simulate` as a user runs them: the built binary on the
//! shipped example log and config, and the reports they write opened in headless Chromium
//! (the page loads with no console message, and every chart is a non-empty SVG).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::status_page::load;
use crate::support::output_within;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

/// The repository's root (for `examples/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `tollgate <args>`: (exit success, stdout, stderr).
fn tollgate(args: &[&str]) -> (bool, String, String) {
    let out = output_within(
        std::process::Command::new(BIN)
            .current_dir(root())
            .args(args),
        Duration::from_secs(60),
    );
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The report at `dir/index.html` in Chromium: no console message, `charts` SVGs, each
/// with drawn marks (a line or bars).
fn assert_page(dir: &Path, charts: usize) -> String {
    let url = format!("file://{}", dir.join("index.html").display());
    let (dom, console) = load(&url, 1_000);
    assert!(console.is_empty(), "console: {console:?}");
    let svgs: Vec<&str> = dom.split("<svg").skip(1).collect();
    assert_eq!(svgs.len(), charts, "{dom}");
    for svg in svgs {
        let svg = &svg[..svg.find("</svg>").expect("closed")];
        assert!(
            svg.contains("<polyline") || svg.matches("<rect").count() > 1,
            "an empty chart: {svg}"
        );
    }
    dom
}

/// The shipped log (828 lines, two of them malformed) against the shipped config: the
/// scraper (130 calls a minute for three minutes) is the one key refused by the per-user
/// limits — `sms` (100 a minute, fixed window) refuses 30 of its calls a minute — and the
/// global limit refuses nothing.
#[test]
fn replay_of_the_example_log() {
    let dir = tempfile::tempdir().expect("dir");
    let report = dir.path().join("report");
    let (ok, out, err) = tollgate(&[
        "replay",
        "examples/access.log",
        "--config",
        "examples/tollgate.toml",
        "--key",
        "user=$remote_user",
        "--report",
        report.to_str().expect("utf-8"),
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("828 lines"), "{out}");
    assert!(out.contains("2 malformed lines"), "{out}");
    assert!(
        out.contains("line 101:") && out.contains("line 301:"),
        "{out}"
    );
    let row = |name: &str| summary_row(&out, name);
    let sms = row("sms");
    assert_eq!(
        &sms[sms.len() - 4..sms.len() - 1],
        ["826", "736", "90"],
        "{out}"
    );
    let global = row("api_global");
    assert_eq!(global[global.len() - 2], "0", "{out}");
    assert!(
        out.contains("most refused (1 keys in all): user=scraper (90)"),
        "{out}"
    );
    assert!(
        out.contains("1 keys refused of 14 seen: 1 abusers"),
        "{out}"
    );
    // Every limit side by side, then each: its series; the three that refuse also their
    // most refused keys, those keys over time, and their waits.
    let dom = assert_page(&report, 1 + 4 + 3 * 3);
    assert!(dom.contains("user=scraper"));
    assert!(dom.contains("1 keys refused of 14 seen"), "{dom}");
    assert!(dom.contains("the 1 most refused keys over time"), "{dom}");
    // Clock time on the x axis, the limit drawn (per-user limits: on the keys' timelines).
    assert!(
        dom.contains("09:01:00") && dom.contains("limit 100 per 1m: 1.7 per second"),
        "{dom}"
    );
}

/// `--suggest` and `--candidates` on the shipped log: the suggestion per window length and
/// algorithm (the log is three minutes: 1 s, 10 s and 1 min), the candidates side by side,
/// and the page drawn whole.
#[test]
fn replay_suggests_limits_and_compares_candidates() {
    let dir = tempfile::tempdir().expect("dir");
    let report = dir.path().join("report");
    let (ok, out, err) = tollgate(&[
        "replay",
        "examples/access.log",
        "--config",
        "examples/tollgate.toml",
        "--key",
        "user=$remote_user",
        "--limit",
        "sms",
        "--suggest",
        "--refuse-share",
        "10%",
        "--candidates",
        "50,200",
        "--report",
        report.to_str().expect("utf-8"),
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("to refuse at most 10 % of keys (1 of 14 keys; 14 distinct)"),
        "{out}"
    );
    assert!(out.contains("per 1m: busiest 1m of each key"), "{out}");
    // Per minute the scraper (130) is the one key over the rest: refused, and no one else.
    let gcra = out
        .lines()
        .skip_while(|l| !l.contains("per 1m: busiest"))
        .find(|l| l.trim_start().starts_with("gcra"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        gcra.contains("refuses 1 keys (1 abusers, 0 collateral)") && gcra.contains("user=scraper"),
        "{gcra}"
    );
    let row = summary_row(&out, "sms-at-50");
    assert_eq!(row[row.len() - 2], "240", "{out}");
    // Side by side (3 limits); the suggestion per window (3); the candidates over time and
    // whom each refused (2); each limit's series (3), and for the two that refuse their keys,
    // timelines and waits (2 × 3).
    let dom = assert_page(&report, 1 + 3 + 2 + 3 + 2 * 3);
    assert!(
        dom.contains("Suggested limits, keyed as sms (user)"),
        "{dom}"
    );
    assert!(dom.contains("← suggested"), "{dom}");
    assert!(dom.contains("Candidates for sms: side by side"), "{dom}");
    refused(
        &[
            "replay",
            "examples/access.log",
            "--config",
            "examples/tollgate.toml",
            "--key",
            "user=$remote_user",
            "--suggest",
            "--refuse-share",
            "150%",
        ],
        "a share is above 0 and below 1",
    );
}

/// Bad input: an unknown field and an unmapped key part are refused before reading, with
/// the name of what is wrong; a log that does not exist is named.
#[test]
fn replay_refuses_what_it_cannot_use() {
    let base = [
        "replay",
        "examples/access.log",
        "--config",
        "examples/tollgate.toml",
    ];
    refused(
        &[&base[..], &["--key", "user=$remote_usr"]].concat(),
        "field \"remote_usr\" is not in the log",
    );
    refused(&base, "keyed by \"user\"");
    refused(
        &[
            "replay",
            "examples/nothing.log",
            "--config",
            "examples/tollgate.toml",
            "--key",
            "user=$remote_user",
        ],
        "examples/nothing.log",
    );
}

/// Runs `tollgate <args>`, which must fail saying `says`.
fn refused(args: &[&str], says: &str) {
    let (ok, out, err) = tollgate(args);
    assert!(!ok, "{args:?} succeeded: {out}");
    assert!(err.contains(says), "{args:?}: {err}");
}

/// The row of `limit` in a replay's summary, split on whitespace.
fn summary_row(out: &str, limit: &str) -> Vec<String> {
    out.lines()
        .find(|l| l.starts_with(&format!("{limit} ")))
        .unwrap_or_else(|| panic!("no row {limit}: {out}"))
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// An Envoy directory as the config (the shipped `examples/envoy-ratelimit/config`): each
/// request's descriptor (the --key parts in order) is decided by the one limit it matches,
/// as the service's gRPC API would: marketing messages by the nested 2-a-day limit per
/// number, a descriptor of the number alone by the 100-a-day one, a message type with no
/// entry by none (counted).
#[test]
fn replay_through_an_envoy_directory() {
    let dir = tempfile::tempdir().expect("dir");
    let log = dir.path().join("messages.jsonl");
    let t0 = 1_796_000_000_u64;
    let mut lines = Vec::new();
    for i in 0..5 {
        lines.push((t0 + i * 60, "marketing", "+1000"));
    }
    for i in 0..4 {
        lines.push((t0 + i * 60 + 1, "marketing", "+2000"));
    }
    for i in 0..3 {
        lines.push((t0 + i * 60 + 2, "receipt", "+1000"));
    }
    lines.sort_unstable();
    let text: String = lines
        .iter()
        .map(|(t, kind, to)| format!("{{\"time\":{t},\"type\":\"{kind}\",\"to\":\"{to}\"}}\n"))
        .collect();
    std::fs::write(&log, text).expect("write the log");
    let log = log.to_str().expect("utf-8");
    let config = "examples/envoy-ratelimit/config";
    let marketing = "messaging.message_type_marketing.to_number";
    let report = dir.path().join("report");
    let (ok, out, err) = tollgate(&[
        "replay",
        log,
        "--config",
        config,
        "--key",
        "message_type=$type",
        "--key",
        "to_number=$to",
        "--report",
        report.to_str().expect("utf-8"),
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("domain messaging"), "{out}");
    let row = summary_row(&out, marketing);
    assert_eq!(row[row.len() - 4..row.len() - 1], ["9", "4", "5"], "{out}");
    let row = summary_row(&out, "messaging.to_number");
    assert_eq!(row[row.len() - 4..row.len() - 1], ["0", "0", "0"], "{out}");
    assert!(out.contains("3 requests matched no limit"), "{out}");
    let page = std::fs::read_to_string(report.join("index.html")).expect("the report");
    assert!(page.contains(marketing), "the page names the limit");

    // The number alone: the 100-a-day limit decides every request.
    let (ok, out, err) = tollgate(&["replay", log, "--config", config, "--key", "to_number=$to"]);
    assert!(ok, "{err}");
    let row = summary_row(&out, "messaging.to_number");
    assert_eq!(
        row[row.len() - 4..row.len() - 1],
        ["12", "12", "0"],
        "{out}"
    );
    assert!(out.contains("0 requests matched no limit"), "{out}");

    // Refused by name: a domain the directory does not have; --domain or --redis where they
    // do not apply.
    let base = ["replay", log, "--config", config, "--key", "to_number=$to"];
    refused(
        &[&base[..], &["--domain", "nope"]].concat(),
        "no domain \"nope\" (its domains: messaging)",
    );
    refused(
        &[&base[..], &["--redis", "redis://127.0.0.1:1"]].concat(),
        "not an Envoy directory",
    );
    refused(
        &[
            "replay",
            "examples/access.log",
            "--config",
            "examples/tollgate.toml",
            "--key",
            "user=$remote_user",
            "--domain",
            "messaging",
        ],
        "--domain is for an Envoy directory",
    );
}

/// `simulate burst-at-edge`: every algorithm side by side, each outcome as stated, and the
/// page.
#[test]
fn simulate_burst_at_edge() {
    let dir = tempfile::tempdir().expect("dir");
    let report = dir.path().join("report");
    let (ok, out, err) = tollgate(&[
        "simulate",
        "burst-at-edge",
        "--report",
        report.to_str().expect("utf-8"),
    ]);
    assert!(ok, "{err}");
    let largest = |name: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")) && l.contains("× the limit"))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|| panic!("no {name}: {out}"))
    };
    assert_eq!(
        largest("fixed_window"),
        "fixed_window 200 (2.00× the limit of 100)"
    );
    assert_eq!(
        largest("sliding_log"),
        "sliding_log 100 (1.00× the limit of 100)"
    );
    assert_eq!(out.matches("✓ expected").count(), 5, "{out}");
    assert!(!out.contains("✗"), "{out}");
    // Side by side, then five series, and keys and waits for the four that refuse.
    let dom = assert_page(&report, 1 + 5 + 2 * 4);
    // The window's edge is marked.
    assert!(dom.contains("window edge 08:02:00"), "{dom}");
}
