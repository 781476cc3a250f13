//! Odd input that used to give wrong answers (issue #32): impossible dates, one corrupt
//! timestamp in the future, minutes that were not clock minutes.

use std::io::Cursor;

use tollgate::{Algorithm, Limit, Quota};
use tollgate_replay::{KeyMapping, LogFormat, LogOptions, Report, replay_log};

/// One per minute per user.
fn per_user() -> Limit {
    Limit::new(
        "per_user",
        Algorithm::FixedWindow,
        Quota::per_minute(1).expect("quota"),
    )
    .expect("limit")
    .keyed_by(["user"])
    .expect("keyed")
}

/// A CSV log of `(time, user)` rows.
fn csv(rows: &[(&str, &str)]) -> Vec<u8> {
    let mut log = String::from("time,user\n");
    for (time, user) in rows {
        log.push_str(&format!("{time},{user}\n"));
    }
    log.into_bytes()
}

/// `log` (CSV) replayed against [`per_user`], keyed by its `user` column.
async fn replay(log: Vec<u8>) -> Report {
    replay_as(log, Some(LogFormat::Csv), "user=$user").await
}

/// `log` in `format` (`None`: detected) replayed against [`per_user`], `user` filled by
/// `mapping`.
async fn replay_as(log: Vec<u8>, format: Option<LogFormat>, mapping: &str) -> Report {
    let options = LogOptions {
        format,
        mapping: KeyMapping::parse(&[mapping]).expect("mapping"),
        ..LogOptions::default()
    };
    replay_log(
        Cursor::new(log),
        "t",
        vec![per_user()],
        &options,
        &mut |_| {},
    )
    .await
    .expect("replay")
}

/// Before: 31 Nov was read as 1 Dec, so the two requests of user `a` fell in one minute and
/// the second was refused.
#[tokio::test]
async fn an_impossible_date_is_a_malformed_line() {
    let report = replay(csv(&[
        ("2026-12-01T10:00:00Z", "a"),
        ("2026-11-31T10:00:30Z", "a"),
        ("2026-12-01T10:05:00Z", "b"),
    ]))
    .await;
    assert_eq!(report.malformed, 1, "{:?}", report.malformed_examples);
    assert_eq!(report.malformed_examples[0].line, 3);
    let l = &report.limits[0];
    assert_eq!((l.requests, l.admitted), (2, 2));
}

/// One line dated ten years ahead, in the middle of a day of traffic: skipped as malformed,
/// and the lines after it decided at their own time (before, at 2036's: user `a`'s ordinary
/// requests a minute apart were refused, being out of order behind it).
#[tokio::test]
async fn one_corrupt_future_timestamp_does_not_move_the_clock() {
    let report = replay(csv(&[
        ("2026-10-10T10:00:00Z", "a"),
        ("2036-10-10T10:00:00Z", "x"),
        ("2026-10-10T10:01:00Z", "a"),
        ("2026-10-10T10:02:00Z", "a"),
        ("2026-10-10T10:03:00Z", "a"),
    ]))
    .await;
    assert_eq!(report.malformed, 1, "{:?}", report.malformed_examples);
    assert_eq!(report.malformed_examples[0].line, 3);
    assert!(
        report.malformed_examples[0].reason.contains("2036-10-10"),
        "{:?}",
        report.malformed_examples[0]
    );
    assert_eq!(report.out_of_order, 0);
    let l = &report.limits[0];
    assert_eq!(
        (l.requests, l.admitted),
        (4, 4),
        "every minute admits a's one request"
    );
    let (_, end) = report.span_us.expect("span");
    assert!(
        end < 1_800_000_000_000_000,
        "the clock stayed in 2026: {end}"
    );
}

/// A corrupt first line (before, it set the clock for the whole log) and a corrupt last one
/// (nothing after it confirms a jump).
#[tokio::test]
async fn a_corrupt_first_or_last_line_is_malformed_too() {
    let report = replay(csv(&[
        ("2036-10-10T10:00:00Z", "x"),
        ("2026-10-10T10:00:00Z", "a"),
        ("2026-10-10T10:01:00Z", "a"),
        ("2031-01-01T00:00:00Z", "y"),
    ]))
    .await;
    assert_eq!(report.malformed, 2, "{:?}", report.malformed_examples);
    let lines: Vec<u64> = report.malformed_examples.iter().map(|m| m.line).collect();
    assert_eq!(lines, vec![2, 5]);
    assert_eq!(report.limits[0].admitted, 2);
}

/// A real gap (a quiet night of 8 hours) is a jump the next line confirms: nothing is
/// skipped.
#[tokio::test]
async fn a_quiet_night_is_not_a_corrupt_clock() {
    let report = replay(csv(&[
        ("2026-10-10T22:00:00Z", "a"),
        ("2026-10-10T22:00:10Z", "a"),
        ("2026-10-11T06:00:00Z", "a"),
        ("2026-10-11T06:00:05Z", "b"),
        ("2026-10-11T06:00:10Z", "a"),
    ]))
    .await;
    assert_eq!(report.malformed, 0, "{:?}", report.malformed_examples);
    let l = &report.limits[0];
    assert_eq!((l.requests, l.admitted), (5, 3));
    assert!(
        report.summary().contains("more than an hour"),
        "{}",
        report.summary()
    );
}

/// The summary's minutes are clock minutes: a log starting at 10:00:50 with refusals at
/// 10:00:55 and 10:01:05 has them in two minutes (before: one "minute" from 10:00:50).
#[tokio::test]
async fn the_worst_minute_is_a_clock_minute() {
    let report = replay(csv(&[
        ("2026-10-10T10:00:50Z", "a"),
        ("2026-10-10T10:00:55Z", "a"),
        ("2026-10-10T10:01:05Z", "b"),
        ("2026-10-10T10:01:06Z", "b"),
        ("2026-10-10T10:01:07Z", "b"),
    ]))
    .await;
    let summary = report.summary();
    assert!(
        summary.contains("first minute with refusals: 2026-10-10 10:00:00")
            && summary.contains("(1 refused)"),
        "{summary}"
    );
    assert!(
        summary.contains("worst minute: 2026-10-10 10:01:00") && summary.contains("(2 refused)"),
        "{summary}"
    );
}

/// A combined log whose first line is blank, or cut short: still read as combined (before,
/// the first line alone decided, and a cut one made the log "CSV", which then failed on its
/// header).
#[tokio::test]
async fn format_is_detected_from_the_first_lines_that_parse() {
    let line =
        |t: &str| format!(r#"10.0.0.1 - a [10/Oct/2026:{t} +0000] "GET / HTTP/1.1" 200 1 "-" "-""#);
    for first in ["", "10.0.0.1 - a [10/Oct/2026:13:0"] {
        let log = format!("{first}\n{}\n{}\n", line("13:00:00"), line("13:00:01"));
        let report = replay_as(log.into_bytes(), None, "user=$remote_user").await;
        assert!(
            report.title.contains("combined"),
            "{first:?}: {}",
            report.title
        );
        assert_eq!(report.limits[0].requests, 2, "{first:?}");
        assert_eq!(report.limits[0].admitted, 1, "{first:?}");
    }
}

/// Envoy's default access-log format, detected, keyed by the client of `X-Forwarded-For`: a
/// gateway's own log replays as any other (lines as Envoy writes them: `-` for a missing
/// value, a list of addresses in `X-Forwarded-For`).
#[tokio::test]
async fn envoys_default_access_log_is_a_format() {
    let line = |t: &str, xff: &str| {
        format!(
            r#"[2026-10-10T13:55:{t}.310Z] "POST /api/v1/locations?x=1 HTTP/2" 204 - 154 0 226 100 "{xff}" "nsq2http" "cc21d9b0-cf5c-432b-8c7e-98aeb7988cd2" "locations" "tcp://10.0.2.1:80""#
        )
    };
    let log = [
        line("00", "10.0.35.28"),
        line("01", "10.0.35.28, 192.168.0.1"),
        line("02", "10.0.35.29"),
        "[2026-10-10T13:55:03.310Z] \"GET / HTTP/1.1\" 200".to_owned(),
    ]
    .join("\n");
    let report = replay_as(log.into_bytes(), None, "user=$client").await;
    assert!(report.title.contains("envoy"), "{}", report.title);
    assert_eq!(
        report.malformed, 1,
        "the cut line: {:?}",
        report.malformed_examples
    );
    let l = &report.limits[0];
    assert_eq!(
        (l.requests, l.admitted),
        (3, 2),
        "10.0.35.28 twice in a minute"
    );
    assert_eq!(l.top_denied(1), vec![("user=10.0.35.28", 1)]);
}
