//! Quota mode and counted refusals, as a migration from envoyproxy/ratelimit relies on them,
//! on the real binary (`tollgate serve`) with a tonic client, on the memory store and on
//! Redis: the reference's own example directory (`examples/ratelimit/config/`, quota mode
//! included) loads unchanged and answers as the reference's service tests expect
//! (`src/service/ratelimit_test.go`: the `QuotaMode` cases), global quota mode
//! (`[envoy] quota_mode`, the reference's `QUOTA_MODE`), and `[envoy] refusals = "charged"`
//! counting as the reference's fixed windows count (check-only descriptors included), and
//! limit overrides counting on the descriptor's counter (`[envoy] override_counters`).
//!
//! The limits are the reference's: fixed windows of one minute on the real clock. A scenario
//! whose calls straddle a minute's edge (a counter reset midway) is run again, on a fresh
//! process and store, at most three times: a retry, not a wait.

use std::future::Future;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use tollgate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    RateLimitOverride,
};
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse,
};
use tollgate_envoy::envoy_types::pb::google::protobuf::UInt64Value;

use crate::binary::{Process, config_file, serve_refused};
use crate::grpc::{Client, code, connect, descriptor};

/// The reference's `examples/ratelimit/config/` (copied unchanged, see its README).
const EXAMPLES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tollgate-envoy/tests/reference/examples_ratelimit_config"
);

/// Where a scenario runs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum On {
    Memory,
    Redis,
}

/// A `tollgate serve` of the reference's example directory, with `extra` in `[envoy]`, on
/// `redis` when given.
fn serve(redis: Option<&str>, extra: &str) -> (tempfile::TempDir, Process) {
    // Port 0: the process binds a free port itself (`Process::grpc`).
    let grpc = "127.0.0.1:0";
    let store = redis.map_or(String::new(), |url| {
        format!("[store]\nredis = \"{url}\"\ntimeout = \"2s\"\n\n")
    });
    let (dir, path) = config_file(&format!(
        "[server]\ngrpc = \"{grpc}\"\n\n{store}[envoy]\nconfig_dir = \"ratelimit\"\n{extra}\n"
    ));
    copy_examples(&dir.path().join("ratelimit"));
    (dir, Process::serve(&path))
}

fn copy_examples(to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for name in ["config.yaml", "example.yaml"] {
        std::fs::copy(Path::new(EXAMPLES).join(name), to.join(name)).expect("copy");
    }
}

/// The current minute since the epoch, on this host's clock (the limits' windows).
pub(crate) fn minute() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch")
        .as_secs()
        / 60
}

/// Runs `scenario` on a fresh `tollgate serve` (and a fresh Redis) with `extra` in `[envoy]`
/// until one run stays within one minute (three runs at most). A run that straddled a
/// minute's edge is run again whether its assertions held or not (a counter reset midway
/// can fail them); the failure of a run within one minute is the test's.
async fn within_one_window<F, Fut>(on: On, extra: &str, scenario: F)
where
    F: Fn(Client) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    for _ in 0..3 {
        let redis = matches!(on, On::Redis).then(tollgate_testkit::RedisServer::start);
        let (_dir, process) = serve(redis.as_ref().map(|r| r.url()).as_deref(), extra);
        let client = connect(process.grpc.expect("grpc address")).await;
        let before = minute();
        let run = tokio::spawn(scenario(client)).await;
        if minute() == before {
            if let Err(failed) = run {
                std::panic::resume_unwind(failed.into_panic());
            }
            return;
        }
    }
    panic!("three runs each straddled a minute's edge");
}

async fn ask(
    client: &mut Client,
    domain: &str,
    descriptors: &[&[(&str, &str)]],
) -> RateLimitResponse {
    client
        .should_rate_limit(RateLimitRequest {
            domain: domain.to_owned(),
            descriptors: descriptors.iter().map(|d| descriptor(d)).collect(),
            hits_addend: 0,
        })
        .await
        .expect("ShouldRateLimit answers")
        .into_inner()
}

/// The overall code, then each status's (code, limit_remaining).
fn answers(r: &RateLimitResponse) -> (Code, Vec<(Code, u32)>) {
    (
        code(r),
        r.statuses
            .iter()
            .map(|s| {
                (
                    Code::try_from(s.code).expect("known code"),
                    s.limit_remaining,
                )
            })
            .collect(),
    )
}

const OK: Code = Code::Ok;
const OVER: Code = Code::OverLimit;

const S1: &[(&str, &str)] = &[("service", "service_1")];
const S2: &[(&str, &str)] = &[("service", "service_2")];
const ACCOUNT: &[(&str, &str)] = &[("category", "account")];

/// The reference's example directory loads unchanged (two domains; quota mode, `replaces`,
/// `metadata`, `detailed_metric`, `unlimited`, `shadow_mode`), and its quota descriptors
/// answer as the reference: `service_1` (1/min) and `service_2` (2/min) are quota
/// descriptors, so a request of both passes while one of them passes (the over one answered
/// `OVER_LIMIT`, and not charged), and is refused once both are over (the reference's
/// `integration-test/scripts/quota.sh`: the third request is refused). A regular descriptor
/// over its limit refuses the request whatever the quota descriptors say
/// (`TestServicePerDescriptorQuotaMode`); a regular descriptor that passes does not save a
/// request whose quota descriptors are all over (`TestServiceMixedPerDescriptorModes`), and is
/// then not charged.
async fn example_directory_answers_quota_mode_as_the_reference(on: On) {
    within_one_window(on, "", |mut client| async move {
        let c = &mut client;
        // Both pass: both charged.
        let r = ask(c, "rl", &[S1, S2]).await;
        assert_eq!(answers(&r), (OK, vec![(OK, 0), (OK, 1)]), "{on:?} first");
        // service_1 over, service_2 passes: OK (TestServiceQuotaModeOnlySomeOverTheLimit).
        let r = ask(c, "rl", &[S1, S2]).await;
        assert_eq!(answers(&r), (OK, vec![(OVER, 0), (OK, 0)]), "{on:?} second");
        // Both over: OVER_LIMIT (TestServiceQuotaModeOnlyAllOverTheLimit).
        let r = ask(c, "rl", &[S1, S2]).await;
        assert_eq!(
            answers(&r),
            (OVER, vec![(OVER, 0), (OVER, 0)]),
            "{on:?} third"
        );
        // A regular descriptor that passes with a quota group all over: OVER_LIMIT, and the
        // regular one is not charged (TestServiceMixedPerDescriptorModes).
        let r = ask(c, "rl", &[ACCOUNT, S1]).await;
        assert_eq!(
            answers(&r),
            (OVER, vec![(OK, 4), (OVER, 0)]),
            "{on:?} mixed"
        );
        let r = ask(c, "rl", &[ACCOUNT]).await;
        assert_eq!(answers(&r), (OK, vec![(OK, 3)]), "{on:?} account uncharged");
        // A regular descriptor over its limit refuses, whatever the quota descriptors say
        // (TestServicePerDescriptorQuotaMode): `foo` is 2/min.
        let two_per_minute: &[(&str, &str)] = &[("foo", "x")];
        for left in [1, 0] {
            let r = ask(c, "rl", &[two_per_minute]).await;
            assert_eq!(answers(&r), (OK, vec![(OK, left)]), "{on:?} foo");
        }
        let fresh: &[(&str, &str)] = &[("service", "service_2")];
        let r = ask(c, "rl", &[two_per_minute, fresh]).await;
        assert_eq!(answers(&r).0, OVER, "{on:?} regular over");
        // The other domain of the directory.
        let users: &[(&str, &str)] = &[("database", "users")];
        let r = ask(c, "mongo_cps", &[users]).await;
        assert_eq!(answers(&r), (OK, vec![(OK, 499)]), "{on:?} mongo_cps");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_directory_answers_quota_mode_as_the_reference_on_memory() {
    example_directory_answers_quota_mode_as_the_reference(On::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_directory_answers_quota_mode_as_the_reference_on_redis() {
    example_directory_answers_quota_mode_as_the_reference(On::Redis).await;
}

/// `[envoy] quota_mode = true` (the reference's `QUOTA_MODE`, `TestServiceGlobalQuotaMode`):
/// every descriptor is a quota descriptor, so a request is refused only when all of them are
/// over; a descriptor with no limit counts as one that passes, as the reference counts it.
async fn global_quota_mode(on: On) {
    within_one_window(on, "quota_mode = true", |mut client| async move {
        let c = &mut client;
        let two_per_minute: &[(&str, &str)] = &[("foo", "g")];
        let mut seen = Vec::new();
        for _ in 0..5 {
            seen.push(answers(&ask(c, "rl", &[two_per_minute, ACCOUNT]).await));
        }
        assert_eq!(
            seen,
            [
                (OK, vec![(OK, 1), (OK, 3)]),
                (OK, vec![(OK, 0), (OK, 2)]),
                (OK, vec![(OVER, 0), (OK, 1)]),
                (OK, vec![(OVER, 0), (OK, 0)]),
                (OVER, vec![(OVER, 0), (OVER, 0)]),
            ],
            "{on:?}"
        );
        // An unmatched descriptor passes: the request is OK though `foo` is over.
        let nothing: &[(&str, &str)] = &[("nothing", "here")];
        let r = ask(c, "rl", &[two_per_minute, nothing]).await;
        assert_eq!(
            answers(&r),
            (OK, vec![(OVER, 0), (OK, 0)]),
            "{on:?} unmatched"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_quota_mode_on_memory() {
    global_quota_mode(On::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_quota_mode_on_redis() {
    global_quota_mode(On::Redis).await;
}

/// A request of `foo` (2/min) and `category=account` (4/min), four times. By default a
/// refused request charges nothing, so `account` keeps the units of the refused calls;
/// `refusals = "charged"` counts as the reference (every descriptor's counter takes its hit,
/// over or not, and answers from the count after): `account` is charged by every call.
async fn refusals(on: On) {
    let two_per_minute: &[(&str, &str)] = &[("foo", "r")];
    within_one_window(on, "", |mut client| async move {
        let mut seen = Vec::new();
        for _ in 0..4 {
            seen.push(answers(
                &ask(&mut client, "rl", &[two_per_minute, ACCOUNT]).await,
            ));
        }
        assert_eq!(
            seen,
            [
                (OK, vec![(OK, 1), (OK, 3)]),
                (OK, vec![(OK, 0), (OK, 2)]),
                (OVER, vec![(OVER, 0), (OK, 2)]),
                (OVER, vec![(OVER, 0), (OK, 2)]),
            ],
            "{on:?} free"
        );
    })
    .await;
    within_one_window(on, "refusals = \"charged\"", |mut client| async move {
        let mut seen = Vec::new();
        for _ in 0..5 {
            seen.push(answers(
                &ask(&mut client, "rl", &[two_per_minute, ACCOUNT]).await,
            ));
        }
        assert_eq!(
            seen,
            [
                (OK, vec![(OK, 1), (OK, 3)]),
                (OK, vec![(OK, 0), (OK, 2)]),
                (OVER, vec![(OVER, 0), (OK, 1)]),
                (OVER, vec![(OVER, 0), (OK, 0)]),
                (OVER, vec![(OVER, 0), (OVER, 0)]),
            ],
            "{on:?} charged"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_charged_counts_as_the_reference_on_memory() {
    refusals(On::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_charged_counts_as_the_reference_on_redis() {
    refusals(On::Redis).await;
}

/// A descriptor's entries and its own `hits_addend` (`Some(0)`: check only).
type Costed<'a> = (&'a [(&'a str, &'a str)], Option<u64>);

/// `descriptors` asked with their own `hits_addend`.
async fn ask_costs(
    client: &mut Client,
    domain: &str,
    descriptors: &[Costed<'_>],
) -> RateLimitResponse {
    client
        .should_rate_limit(RateLimitRequest {
            domain: domain.to_owned(),
            descriptors: descriptors
                .iter()
                .map(|(d, hits)| RateLimitDescriptor {
                    hits_addend: hits.map(|value| UInt64Value { value }),
                    ..descriptor(d)
                })
                .collect(),
            hits_addend: 0,
        })
        .await
        .expect("ShouldRateLimit answers")
        .into_inner()
}

/// A check-only descriptor (`hits_addend` 0) of `foo` (2/min) after each charge: with
/// `refusals = "charged"` it answers as the reference (`OK`, 0 left, at the limit; over
/// only past it), and an over-limit check lets the call's `account` descriptor be charged;
/// by default it is over at the limit.
async fn check_only(on: On) {
    let checked: &[(&str, &str)] = &[("foo", "c")];
    let run = |charged: bool| async move {
        let extra = if charged {
            "refusals = \"charged\""
        } else {
            ""
        };
        within_one_window(on, extra, |mut client| async move {
            let mut seen = Vec::new();
            for _ in 0..3 {
                seen.push(answers(
                    &ask_costs(&mut client, "rl", &[(checked, None)]).await,
                ));
                seen.push(answers(
                    &ask_costs(&mut client, "rl", &[(checked, Some(0)), (ACCOUNT, None)]).await,
                ));
            }
            let want = if charged {
                [
                    (OK, vec![(OK, 1)]),
                    (OK, vec![(OK, 1), (OK, 3)]),
                    (OK, vec![(OK, 0)]),
                    (OK, vec![(OK, 0), (OK, 2)]),
                    (OVER, vec![(OVER, 0)]),
                    (OVER, vec![(OVER, 0), (OK, 1)]),
                ]
            } else {
                [
                    (OK, vec![(OK, 1)]),
                    (OK, vec![(OK, 1), (OK, 3)]),
                    (OK, vec![(OK, 0)]),
                    (OVER, vec![(OVER, 0), (OK, 3)]),
                    (OVER, vec![(OVER, 0)]),
                    (OVER, vec![(OVER, 0), (OK, 3)]),
                ]
            };
            assert_eq!(seen, want, "{on:?} charged={charged}");
        })
        .await;
    };
    run(true).await;
    run(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_only_answers_as_the_reference_with_charged_refusals_on_memory() {
    check_only(On::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_only_answers_as_the_reference_with_charged_refusals_on_redis() {
    check_only(On::Redis).await;
}

/// `descriptor` with the limit override `per_unit` per minute.
fn per_minute(entries: &[(&str, &str)], per_unit: u32) -> RateLimitDescriptor {
    RateLimitDescriptor {
        limit: Some(RateLimitOverride {
            requests_per_unit: per_unit,
            unit: Unit::Minute as i32,
        }),
        ..descriptor(entries)
    }
}

/// `foo` (2/min in the YAML) asked with limit overrides of several rates per minute and
/// without (`None`). By default (`override_counters = "shared"`, the reference's) all count
/// on one counter, and a refusal under one rate never answers for another — on Redis the
/// deny cache is on, and remembers the YAML limit's refusals; `per_rate` gives each rate a
/// counter of its own.
async fn override_counters(on: On) {
    let overridden: &[(&str, &str)] = &[("foo", "o")];
    let rates = [
        Some(1),
        Some(1),
        None,
        None,
        None,
        Some(5),
        Some(3),
        Some(4),
    ];
    let run = |extra: &'static str, want: [(Code, u32); 8]| async move {
        within_one_window(on, extra, |mut client| async move {
            let mut seen = Vec::new();
            for rate in rates {
                let d = match rate {
                    Some(n) => per_minute(overridden, n),
                    None => descriptor(overridden),
                };
                let r = client
                    .should_rate_limit(RateLimitRequest {
                        domain: "rl".to_owned(),
                        descriptors: vec![d],
                        hits_addend: 0,
                    })
                    .await
                    .expect("ShouldRateLimit answers")
                    .into_inner();
                seen.push(answers(&r).1[0]);
            }
            assert_eq!(seen, want, "{on:?} {extra:?}");
        })
        .await;
    };
    run(
        "",
        [
            (OK, 0),
            (OVER, 0),
            (OK, 0),
            (OVER, 0),
            (OVER, 0),
            (OK, 2),
            (OVER, 0),
            (OK, 0),
        ],
    )
    .await;
    run(
        "override_counters = \"per_rate\"",
        [
            (OK, 0),
            (OVER, 0),
            (OK, 1),
            (OK, 0),
            (OVER, 0),
            (OK, 4),
            (OK, 2),
            (OK, 3),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn override_counters_are_shared_as_the_reference_on_memory() {
    override_counters(On::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn override_counters_are_shared_as_the_reference_on_redis() {
    override_counters(On::Redis).await;
}

/// `refusals = "charged"` needs fixed windows: another algorithm for the imported limits, or
/// a `[[envoy.rules]]` rule over another algorithm's limit, refuses the file, naming the field.
#[test]
fn refusals_charged_refuses_other_algorithms() {
    let cases = [
        ("algorithm = \"gcra\"\n", "", "envoy.algorithm"),
        (
            "",
            "[[limits]]\nname = \"per_user\"\nalgorithm = \"sliding_window\"\nlimit = 2\nperiod = \"1m\"\nkey = [\"user\"]\non_store_error = \"allow\"\n\n\
             [[envoy.rules]]\ndomain = \"edge\"\nlimit = \"per_user\"\ndescriptor = [{ key = \"user\", part = \"user\" }]\n",
            "envoy.rules[0].limit",
        ),
    ];
    for (envoy, more, field) in cases {
        let (dir, path) = config_file(&format!(
            "[server]\ngrpc = \"127.0.0.1:0\"\n\n[envoy]\nconfig_dir = \"ratelimit\"\nrefusals = \"charged\"\n{envoy}\n{more}"
        ));
        copy_examples(&dir.path().join("ratelimit"));
        let (status, stderr) = serve_refused(&path);
        assert!(!status.success(), "{stderr}");
        assert!(
            stderr.contains(field) && stderr.contains("cannot count refusals"),
            "{field}: {stderr}"
        );
    }
}
