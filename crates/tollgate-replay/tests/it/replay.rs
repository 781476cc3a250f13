//! Replays with counts worked out by hand from the rules, and the replay's bounds: a
//! malformed line never stops it, time never goes back, memory follows the live keys.

use std::io::Cursor;
use std::time::Duration;

use tollgate::{Algorithm, Limit, Quota};
use tollgate_replay::{KeyMapping, LogOptions, ReplayError, Replayer, replay_log};

fn line(user: &str, hms: &str) -> String {
    format!(r#"10.0.0.1 - {user} [10/Oct/2026:{hms} +0000] "GET /a HTTP/1.1" 200 1 "-" "-""#)
}

fn options(keys: &[&str]) -> LogOptions {
    LogOptions {
        mapping: KeyMapping::parse(keys).expect("mapping"),
        ..LogOptions::default()
    }
}

/// Three per minute per user, fixed window: a's fourth call in the first minute is refused
/// (told to wait 57 s, the rest of the window), its call in the next minute passes; b's two
/// pass. Shadow GCRA 1 per 10 s (burst 1), per user: a's second, third and fourth calls are
/// would-be refusals (1 s apart), b's second too (its calls are 5 s apart); a at 13:01:00
/// passes.
#[tokio::test]
async fn counts_worked_out_by_hand() {
    let log: Vec<String> = vec![
        line("a", "13:00:00"),
        line("a", "13:00:01"),
        line("b", "13:00:01"),
        line("a", "13:00:02"),
        line("a", "13:00:03"),
        line("b", "13:00:06"),
        line("a", "13:01:00"),
    ];
    let fixed = Limit::new(
        "per_user",
        Algorithm::FixedWindow,
        Quota::per_minute(3).expect("q"),
    )
    .expect("limit")
    .keyed_by(["user"])
    .expect("keyed");
    let shadow = Limit::new(
        "strict",
        Algorithm::Gcra,
        Quota::new(1, Duration::from_secs(10)).expect("q"),
    )
    .expect("limit")
    .keyed_by(["user"])
    .expect("keyed")
    .shadow(true);
    let report = replay_log(
        Cursor::new(log.join("\n")),
        "t",
        vec![fixed, shadow],
        &options(&["user=$remote_user"]),
        &mut |_| {},
    )
    .await
    .expect("replay");
    assert_eq!((report.lines, report.malformed), (7, 0));
    let [per_user, strict] = &report.limits[..] else {
        panic!("two limits: {:?}", report.limits)
    };
    assert_eq!(
        (per_user.requests, per_user.admitted, per_user.denied()),
        (7, 6, 1)
    );
    assert_eq!(per_user.top_denied(5), [("user=a", 1)]);
    // 57 s: bucket "15 s – 1 min".
    assert_eq!(per_user.retry_after, [0, 0, 0, 0, 1, 0, 0]);
    assert!(strict.shadow);
    assert_eq!((strict.admitted, strict.denied()), (3, 4));
    assert_eq!(strict.top_denied(5), [("user=a", 3), ("user=b", 1)]);
    // Per second from 13:00:00: a's and b's calls where they fell.
    assert_eq!(per_user.per_second[0], [1, 1]);
    assert_eq!(per_user.per_second[1], [2, 2]);
    assert_eq!(per_user.per_second[3], [1, 0]);
    assert_eq!(per_user.per_second[60], [1, 1]);
    let summary = report.summary();
    assert!(
        summary.contains("per_user") && summary.contains("user=a (1)"),
        "{summary}"
    );
    assert!(summary.contains("shadow"), "{summary}");
}

/// Fifteen bad lines among good ones: all counted, the first ten shown with their line
/// numbers, and the good lines replayed.
#[tokio::test]
async fn malformed_lines_are_counted_and_the_first_ten_shown() {
    let mut log = Vec::new();
    for i in 0..30 {
        if i % 2 == 1 {
            log.push(format!("broken line {i}"));
        } else {
            log.push(line("a", "13:00:00"));
        }
    }
    let limit = Limit::new(
        "g",
        Algorithm::SlidingLog,
        Quota::per_minute(100).expect("q"),
    )
    .expect("limit");
    let report = replay_log(
        Cursor::new(log.join("\n")),
        "t",
        vec![limit],
        &options(&[]),
        &mut |_| {},
    )
    .await
    .expect("replay");
    assert_eq!(report.malformed, 15);
    assert_eq!(report.limits[0].requests, 15);
    let shown: Vec<u64> = report.malformed_examples.iter().map(|m| m.line).collect();
    assert_eq!(shown, [2, 4, 6, 8, 10, 12, 14, 16, 18, 20]);
}

/// A limit keyed by a part no `--key` fills is an error before anything is read.
#[tokio::test]
async fn an_unmapped_key_part_is_an_error() {
    let limit = Limit::new("l", Algorithm::Gcra, Quota::per_minute(1).expect("q"))
        .expect("limit")
        .keyed_by(["tenant"])
        .expect("keyed");
    let err = replay_log(
        Cursor::new(line("a", "13:00:00")),
        "t",
        vec![limit],
        &options(&["user=$remote_user"]),
        &mut |_| {},
    )
    .await
    .expect_err("unmapped");
    assert!(matches!(err, ReplayError::UnmappedPart { .. }), "{err:?}");
    assert!(err.to_string().contains("--key tenant="), "{err}");
}

/// A line earlier than one before it is decided at the latest time seen: the clock never
/// goes back (so a refusal cannot be undone by an older timestamp).
#[tokio::test]
async fn time_never_goes_back() {
    let log = [line("a", "13:00:05"), line("a", "13:00:00")].join("\n");
    let limit =
        Limit::new("one", Algorithm::Gcra, Quota::per_minute(1).expect("q")).expect("limit");
    let report = replay_log(
        Cursor::new(log),
        "t",
        vec![limit],
        &options(&[]),
        &mut |_| {},
    )
    .await
    .expect("replay");
    assert_eq!(report.out_of_order, 1);
    assert_eq!(report.limits[0].admitted, 1);
    let retry = report.limits[0].retry_after;
    // Refused at 13:00:05 (not 13:00:00): a wait of 60 s, bucket "1 – 5 min".
    assert_eq!(retry, [0, 0, 0, 0, 0, 1, 0]);
}

/// Ten minutes of 100 new clients a second (60 000 keys in all), each calling once: keys
/// whose quota is full again are swept every virtual minute, so the store holds about a
/// minute of them, not all.
#[test]
fn memory_follows_the_live_keys() {
    let limit = Limit::new("l", Algorithm::Gcra, Quota::per_second(10).expect("q"))
        .expect("limit")
        .keyed_by(["user"])
        .expect("keyed");
    let mut replayer = Replayer::new(
        vec![limit],
        &KeyMapping::parse(&["user=$u"]).expect("m"),
        false,
    )
    .expect("replayer");
    let t0 = 1_800_000_000_000_000_u64;
    for s in 0..600_u64 {
        for c in 0..100_u64 {
            let user = [format!("{s}-{c}")];
            replayer.step(t0 + s * 1_000_000 + c * 10_000, &user);
        }
    }
    let keys = replayer.keys();
    assert!(keys <= 6_100, "{keys} keys held of 60 000");
    assert!(keys >= 100, "the last second's keys are live: {keys}");
}

/// A log that jumps a century ahead (two lines agree on it, so it is a jump, not one
/// corrupt line: `odd_input.rs`) neither exhausts memory (the per-second series stops at a
/// week) nor goes uncounted.
#[tokio::test]
async fn a_time_far_ahead_is_counted_without_a_century_of_series() {
    let log = [
        line("a", "13:00:00"),
        line("a", "13:00:01"),
        r#"10.0.0.1 - a [10/Oct/2126:13:00:00 +0000] "GET /a HTTP/1.1" 200 1 "-" "-""#.to_owned(),
        r#"10.0.0.1 - a [10/Oct/2126:13:00:01 +0000] "GET /a HTTP/1.1" 200 1 "-" "-""#.to_owned(),
    ]
    .join("\n");
    let limit = Limit::new(
        "l",
        Algorithm::SlidingLog,
        Quota::per_minute(10).expect("q"),
    )
    .expect("limit");
    let report = replay_log(
        Cursor::new(log),
        "t",
        vec![limit],
        &options(&[]),
        &mut |_| {},
    )
    .await
    .expect("replay");
    let l = &report.limits[0];
    assert_eq!(report.malformed, 0, "{:?}", report.malformed_examples);
    assert_eq!((l.requests, l.admitted), (4, 4));
    assert!(l.per_second.len() <= tollgate_replay::limit_stats::MAX_SERIES_SECONDS);
    assert_eq!(
        l.per_second.iter().map(|p| p[0]).sum::<u32>(),
        2,
        "only the first two fit"
    );
}
