//! What deployments of the reference Envoy rate limit service (envoyproxy/ratelimit) rely on
//! at start and for health, on the real binary: a YAML directory with no counted limit serves
//! (only a domain with no descriptors, only whitelisted or unlimited entries, no file yet), as
//! the reference loads it; `GET /healthcheck` answers as the reference's; and `[envoy]
//! healthy_with_at_least_one_config_loaded` holds it at 500 until a domain is loaded.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;

use crate::binary::Process;
use crate::grpc::{call, code, connect};
use crate::support::{eventually, request};

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

/// The reference's own test file: a domain with no descriptors at all.
const DUPLICATE: &str =
    include_str!("../../../tollgate-envoy/tests/reference/duplicate_domain.yaml");

/// The reference's integration-test file: counted limits and a block list.
const RELOAD: &str = include_str!("../../../tollgate-envoy/tests/reference/reload.yaml");

/// A domain that only allows: a whitelisted key and an unlimited one.
const ALLOW_ONLY: &str = "\
domain: internal
descriptors:
  - key: trusted
  - key: ldap
    rate_limit:
      unlimited: true
";

/// (name, text) pairs: YAML files, or a descriptor's entries.
type Files<'a> = &'a [(&'a str, &'a str)];

/// `tollgate.toml` (gRPC on a free port, `[envoy] config_dir = "ratelimit"` and `extra`) and
/// the directory holding `files`, under `dir`.
fn layout(dir: &Path, files: &[(&str, &str)], extra: &str) -> PathBuf {
    // Port 0: the process binds a free port itself (`Process::grpc`).
    let grpc = "127.0.0.1:0";
    let yaml = dir.join("ratelimit");
    std::fs::create_dir_all(&yaml).expect("mkdir");
    for (name, text) in files {
        std::fs::write(yaml.join(name), text).expect("write yaml");
    }
    let path = dir.join("tollgate.toml");
    std::fs::write(
        &path,
        format!("[server]\ngrpc = \"{grpc}\"\n\n[envoy]\nconfig_dir = \"ratelimit\"\n{extra}\n"),
    )
    .expect("write toml");
    path
}

/// A config whose directory holds no counted limit starts (and `check-config` accepts it),
/// and answers as the reference: OK, no limit for a domain with no descriptors or a
/// whitelisted key, OK with the maximum remaining for an unlimited one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_without_counted_limits_serves() {
    let cases: [(Files<'_>, &str, Files<'_>); 3] = [
        (
            &[("duplicate_domain.yaml", DUPLICATE)],
            "test-domain",
            &[("key", "v")],
        ),
        (
            &[("internal.yaml", ALLOW_ONLY)],
            "internal",
            &[("trusted", "a")],
        ),
        (&[], "anything", &[("key", "v")]),
    ];
    for (files, domain, entries) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = layout(dir.path(), files, "");
        let checked = Command::new(BIN)
            .arg("check-config")
            .arg(&path)
            .output()
            .expect("run check-config");
        assert!(
            checked.status.success(),
            "{files:?}: {}",
            String::from_utf8_lossy(&checked.stderr)
        );
        let mut process = Process::serve(&path);
        let mut client = connect(process.grpc.expect("grpc address")).await;
        let r = call(&mut client, domain, entries).await;
        assert_eq!(code(&r), Code::Ok, "{files:?}: {r:?}");
        assert_eq!(r.statuses[0].current_limit, None, "{files:?}: {r:?}");
        if domain == "internal" {
            let r = call(&mut client, domain, &[("ldap", "b")]).await;
            assert_eq!(
                (code(&r), r.statuses[0].limit_remaining),
                (Code::Ok, u32::MAX),
                "{r:?}"
            );
        }
        // An HTTP answer first: the server installs its SIGTERM handler when its HTTP loop
        // starts, which may come after the gRPC service answers.
        let health = request(process.addr, "GET", "/healthz", Bytes::new(), &[]).await;
        assert_eq!(health.status, 200);
        process.terminate();
    }
}

/// `GET /healthcheck` is the reference's health check: `200 OK`. With `[envoy]
/// healthy_with_at_least_one_config_loaded = true` and no domain loaded it is 500 (while
/// `/healthz`, the process's liveness, stays 200), until a YAML file arrives in the watched
/// directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthcheck_answers_as_the_reference() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = layout(dir.path(), &[("reload.yaml", RELOAD)], "");
    let mut process = Process::serve(&path);
    let r = request(process.addr, "GET", "/healthcheck", Bytes::new(), &[]).await;
    assert_eq!((r.status, r.text.as_str()), (200, "OK"));
    process.terminate();

    let dir = tempfile::tempdir().expect("tempdir");
    let path = layout(
        dir.path(),
        &[],
        "healthy_with_at_least_one_config_loaded = true",
    );
    let mut process = Process::serve(&path);
    let addr = process.addr;
    let r = request(addr, "GET", "/healthcheck", Bytes::new(), &[]).await;
    assert_eq!(r.status, 500, "no domain loaded: {}", r.text);
    let r = request(addr, "GET", "/healthz", Bytes::new(), &[]).await;
    assert_eq!(r.status, 200);
    std::fs::write(
        dir.path().join("ratelimit").join("duplicate_domain.yaml"),
        DUPLICATE,
    )
    .expect("write yaml");
    let healthy = eventually(Duration::from_secs(10), || async move {
        request(addr, "GET", "/healthcheck", Bytes::new(), &[])
            .await
            .status
            == 200
    })
    .await;
    assert!(healthy, "never healthy; log:\n{}", process.log());
    process.terminate();
}
