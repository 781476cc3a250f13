//! Defects an audit of `tollgate replay` and `tollgate simulate` reproduced: shared state
//! between candidates, format detection on a long first line, false store failures, rates
//! and sizes not checked, a pipe read twice, ambiguous key texts, an overflowing clock and
//! the bots scenario on an unkeyed limit. Each test failed before its fix.

use std::io::{BufReader, Cursor};
use std::time::Duration;

use tollgate::{Algorithm, Limit, Quota};
use tollgate_replay::log_reader::MAX_LINE;
use tollgate_replay::{
    Event, KeyMapping, LogFormat, LogOptions, LogReader, Malformed, ReplayError, Scenario,
    SimOptions, replay_log, simulate,
};

fn keyed(name: &str, algorithm: Algorithm, quota: Quota, parts: &[&str]) -> Limit {
    Limit::new(name, algorithm, quota)
        .expect("limit")
        .keyed_by(parts.iter().copied())
        .expect("keyed")
}

fn options(keys: &[&str], format: Option<LogFormat>) -> LogOptions {
    LogOptions {
        format,
        mapping: KeyMapping::parse(keys).expect("mapping"),
        ..LogOptions::default()
    }
}

/// The error `result` holds (its value is not printed: a report can be megabytes).
fn error_of<T>(result: Result<T, ReplayError>, what: &str) -> ReplayError {
    match result {
        Ok(_) => panic!("expected an error: {what}"),
        Err(e) => e,
    }
}

/// Every event and malformed line of `log`, or the error that stopped the reader.
fn read(
    log: &[u8],
    format: Option<LogFormat>,
    keys: &[&str],
) -> Result<(LogFormat, Vec<Event>, Vec<Malformed>), ReplayError> {
    let mapping = KeyMapping::parse(keys).expect("mapping");
    // Buffered as `tollgate replay` reads a file: 64 KiB at a time.
    let log = BufReader::with_capacity(1 << 16, Cursor::new(log.to_vec()));
    let mut reader = LogReader::new(log, format, &mapping, None)?;
    let (mut events, mut bad) = (Vec::new(), Vec::new());
    let mut event = Event::default();
    while let Some(r) = reader.next_event(&mut event) {
        match r {
            Ok(()) => events.push(event.clone()),
            Err(m) => bad.push(m),
        }
    }
    Ok((reader.format(), events, bad))
}

fn combined(user: &str, second: u32) -> String {
    format!(
        "10.0.0.1 - {user} [10/Oct/2026:13:00:{second:02} +0000] \"GET /a HTTP/1.1\" 200 1 \"-\" \"-\"\n"
    )
}

// 1. --candidates 5,5: two limits of one name shared their counters.

#[test]
fn a_repeated_candidate_is_refused() {
    let limit = keyed(
        "fw",
        Algorithm::FixedWindow,
        Quota::per_minute(10).expect("q"),
        &["user"],
    );
    let err = error_of(
        tollgate_replay::suggest::candidate_limits(&limit, &[5, 5, 50]),
        "5 is given twice",
    );
    assert!(err.to_string().contains("5 twice"), "{err}");
}

/// Two limits of one name in one replay: refused, where before each saw the other's
/// requests (40 requests of one user, 5 a minute: 27 and 19 admitted instead of 40 each).
#[tokio::test]
async fn two_limits_of_one_name_never_share_counters() {
    let q = Quota::per_minute(1).expect("q");
    let limits = vec![
        keyed("fw-at-5", Algorithm::FixedWindow, q, &["user"]),
        keyed("fw-at-5", Algorithm::FixedWindow, q, &["user"]),
    ];
    let log = combined("a", 0) + &combined("a", 30);
    let err = error_of(
        replay_log(
            Cursor::new(log),
            "t",
            limits,
            &options(&["user=$remote_user"], None),
            &mut |_| {},
        )
        .await,
        "two limits named fw-at-5",
    );
    assert!(
        matches!(&err, ReplayError::DuplicateLimit(n) if n == "fw-at-5"),
        "{err}"
    );
}

// 2. Format detection: a first line over 64 KiB, a blank first line.

/// A first line longer than `MAX_LINE` (a cut or corrupt one) before a combined log: the log
/// is read as combined, that line malformed (before: "CSV", and the replay refused).
#[test]
fn a_long_first_line_does_not_make_a_combined_log_csv() {
    let mut log = vec![b'x'; MAX_LINE + 6 * 1024];
    log.push(b'\n');
    log.extend(combined("alice", 0).bytes());
    log.extend(combined("bob", 1).bytes());
    let (format, events, bad) = read(&log, None, &["user=$remote_user"]).expect("read as combined");
    assert_eq!(format, LogFormat::Combined);
    let users: Vec<&str> = events.iter().map(|e| e.values[0].as_str()).collect();
    assert_eq!(users, ["alice", "bob"]);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert_eq!(bad[0].line, 1);
    assert!(bad[0].reason.contains("longer than"), "{bad:?}");
}

/// A CSV header is bounded like a line: a first line longer than `MAX_LINE` with nothing
/// after it that is JSON or combined is refused (before: held whole as the header, 524 MB
/// for a 100 MB line, to fail on a missing field).
#[test]
fn an_overlong_first_line_is_no_csv_header() {
    let mut log = vec![b'y'; MAX_LINE + 1];
    log.extend_from_slice(b"\n2026-10-10T13:55:36Z,a\n");
    for format in [None, Some(LogFormat::Csv)] {
        let err = error_of(read(&log, format, &["user=$user"]), "no header");
        assert!(
            matches!(err, ReplayError::HeaderTooLong { bytes } if bytes == MAX_LINE + 2),
            "{err}"
        );
    }
}

/// What detection read is given back to the CSV reader as it was: a record longer than
/// `MAX_LINE` among the first lines is malformed (skipped unread, as a line of the other
/// formats is), a quoted newline stays in its field, and the records keep their line numbers.
#[test]
fn csv_lines_read_while_detecting_are_read_again() {
    let mut log = b"time,user\n2026-10-10T13:55:36Z,a\n".to_vec();
    log.extend(vec![b'z'; MAX_LINE + 1]);
    log.extend_from_slice(b"\n2026-10-10T13:55:37Z,\"b\nc\"\n2026-10-10T13:55:38Z,d\n");
    let (format, events, bad) = read(&log, None, &["user=$user"]).expect("csv");
    assert_eq!(format, LogFormat::Csv);
    let got: Vec<(u64, &str)> = events
        .iter()
        .map(|e| (e.line, e.values[0].as_str()))
        .collect();
    assert_eq!(got, [(2, "a"), (4, "b\nc"), (6, "d")]);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert_eq!(bad[0].line, 3);
    assert!(
        bad[0].reason.contains("longer than 65536 bytes (65538)"),
        "{bad:?}"
    );
}

/// `--format json` takes its fields from the first line that is an object (before: from the
/// first line, blank here, so "field time is not in the log").
#[test]
fn json_fields_come_from_the_first_object() {
    let log = b"\n{\"time\": \"2026-10-10T13:55:36Z\", \"user\": \"a\"}\n";
    for format in [None, Some(LogFormat::JsonLines)] {
        let (format, events, bad) = read(log, format, &["user=$user"]).expect("json");
        assert_eq!(format, LogFormat::JsonLines);
        assert_eq!(events.len(), 1, "{bad:?}");
        assert_eq!((events[0].line, events[0].values[0].as_str()), (2, "a"));
    }
}

// 5. An empty log; a pipe read twice.

/// Before: `field "time" is not in the log (csv format; its fields: )`.
#[test]
fn an_empty_log_is_said_to_be_empty() {
    for log in [&b""[..], b"\n\n  \n"] {
        for format in [None, Some(LogFormat::Csv), Some(LogFormat::JsonLines)] {
            let err = error_of(read(log, format, &["user=$user"]), "empty");
            assert!(err.to_string().contains("the log is empty"), "{err}");
        }
    }
}

/// `--report` and `--suggest` read the log again: a pipe is refused before the replay
/// (before: the replay ran, and the second read of the empty pipe failed with a misleading
/// "field is not in the log").
#[test]
fn a_pipe_is_refused_when_the_log_is_read_again() {
    let dir = std::env::temp_dir().join(format!("tollgate-audit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let fifo = dir.join("log.fifo");
    let _ = std::fs::remove_file(&fifo);
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let err = error_of(
        tollgate_replay::check_rereadable(&fifo, "--report"),
        "a pipe",
    );
    let text = err.to_string();
    assert!(
        text.contains("not a regular file") && text.contains("--report"),
        "{text}"
    );
    let file = dir.join("log.txt");
    std::fs::write(&file, combined("a", 0)).expect("write");
    tollgate_replay::check_rereadable(&file, "--suggest").expect("a file");
    std::fs::remove_dir_all(&dir).expect("clean up");
}

// 6. Key texts: (a=`x,b=y`, b=`z`) and (a=`x`, b=`y,b=z`) were one key in the report.

#[tokio::test]
async fn keys_that_print_alike_are_counted_apart() {
    let limit = keyed(
        "pair",
        Algorithm::FixedWindow,
        Quota::per_minute(1).expect("q"),
        &["a", "b"],
    );
    let log = [
        r#"{"time": "2026-10-10T13:00:00Z", "a": "x,b=y", "b": "z"}"#,
        r#"{"time": "2026-10-10T13:00:01Z", "a": "x", "b": "y,b=z"}"#,
        r#"{"time": "2026-10-10T13:00:02Z", "a": "x,b=y", "b": "z"}"#,
        r#"{"time": "2026-10-10T13:00:03Z", "a": "x", "b": "y,b=z"}"#,
        r#"{"time": "2026-10-10T13:00:04Z", "a": "x", "b": "y,b=z"}"#,
    ]
    .join("\n");
    let options = options(&["a=$a", "b=$b"], None);
    let report = replay_log(
        Cursor::new(log.clone()),
        "t",
        vec![limit.clone()],
        &options,
        &mut |_| {},
    )
    .await
    .expect("replay");
    let top = report.limits[0].top_denied(10);
    assert_eq!(top.len(), 2, "{top:?}");
    assert_eq!(top[0].1, 2, "{top:?}");
    assert_eq!(top[1].1, 1, "{top:?}");
    // The timelines look the keys up by their text: each its own.
    let keys: Vec<String> = top.iter().map(|(k, _)| (*k).to_owned()).collect();
    let timelines = tollgate_replay::key_timelines(Cursor::new(log), &[limit], &options, &[keys])
        .expect("timelines");
    let refused: Vec<u32> = timelines[0]
        .iter()
        .map(|t| t.refused.iter().sum())
        .collect();
    assert_eq!(refused, [2, 1]);
}

// 7. Epoch times near u64::MAX overflowed the clock.

#[tokio::test]
async fn an_epoch_past_year_9999_is_a_malformed_line() {
    let log = [
        r#"{"time": 18446744073709551615, "user": "a"}"#,
        r#"{"time": 18446744073709551000, "user": "a"}"#,
        r#"{"time": 18446744073709551001, "user": "a"}"#,
        r#"{"time": 1791640536, "user": "a"}"#,
    ]
    .join("\n");
    let limit = keyed(
        "u",
        Algorithm::FixedWindow,
        Quota::per_minute(1).expect("q"),
        &["user"],
    );
    let report = replay_log(
        Cursor::new(log),
        "t",
        vec![limit],
        &options(&["user=$user"], None),
        &mut |_| {},
    )
    .await
    .expect("replay");
    assert_eq!(report.malformed, 3, "{:?}", report.malformed_examples);
    assert_eq!(report.limits[0].requests, 1);
}

// 3. simulate concurrent --redis on a keyed config: false store failures.

/// A limit keyed by `user` (not `client`), on Redis: exactly its capacity admitted, no store
/// failure (before: 0 admitted, 200 "store failures", each a call missing its key part); a
/// shadow one counted by its decisions, not by the calls it let through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_on_redis_fills_the_limits_own_key_parts() {
    let server = tollgate_testkit::RedisServer::start();
    let limits = vec![
        keyed(
            "sms",
            Algorithm::SlidingLog,
            Quota::new(100, Duration::from_secs(3_600)).expect("q"),
            &["user"],
        ),
        Limit::new(
            "global",
            Algorithm::SlidingLog,
            Quota::new(100, Duration::from_secs(3_600)).expect("q"),
        )
        .expect("limit"),
        // A shadow limit admits every call; its decisions are what is counted.
        keyed(
            "shadow",
            Algorithm::SlidingLog,
            Quota::new(100, Duration::from_secs(3_600)).expect("q"),
            &["user"],
        )
        .shadow(true),
    ];
    let mut options = SimOptions::limits(limits);
    options.redis = Some(server.url());
    let report = simulate(Scenario::Concurrent, &options)
        .await
        .expect("simulate");
    crate::redis::every_run_on_redis_exact(&report, 3);
}

// 4. --rate not checked; requests generated without bound.

/// (A period of 10 ms: before, each of these ran with a request every µs, and a minute's
/// periods would have been 240 million.)
#[tokio::test]
async fn a_rate_that_is_no_rate_is_refused() {
    for rate in [-1.0, 0.0, f64::NAN, f64::INFINITY] {
        let mut options =
            SimOptions::algorithms(&[Algorithm::FixedWindow], 100, Duration::from_millis(10))
                .expect("options");
        options.rate = Some(rate);
        let err = error_of(simulate(Scenario::Steady, &options).await, "no rate");
        assert!(err.to_string().contains("--rate"), "{rate}: {err}");
    }
}

/// More requests than a simulation holds: refused, naming the options (before: generated,
/// 3.8 GB for `--limit 60000000`; the sizes here are just past the cap).
#[tokio::test]
async fn a_simulation_past_its_size_is_refused() {
    let big = tollgate_replay::simulate::MAX_EVENTS / 2 + 1;
    for (scenario, limit, rate, says) in [
        (Scenario::Concurrent, big, None, "--limit"),
        (Scenario::BurstAtEdge, big, None, "--limit"),
        (Scenario::Steady, 100, Some(10_000.0), "--rate"),
    ] {
        let mut options =
            SimOptions::algorithms(&[Algorithm::FixedWindow], limit, Duration::from_secs(60))
                .expect("options");
        options.rate = rate;
        let err = error_of(simulate(scenario, &options).await, "too many requests");
        let text = err.to_string();
        assert!(
            matches!(err, ReplayError::TooManyEvents { .. }) && text.contains(says),
            "{scenario}: {text}"
        );
    }
}

// 8. simulate bots on an unkeyed limit, and the most admitted in one period.

/// An unkeyed limit is judged by what one quota for all can do (hold the total, refusing
/// bots and users alike), not by refused keys (before: "1 keys refused", ✗); a keyed one's
/// most admitted in one period is one key's (before: 7 000, "70× the limit", the sum over
/// keys).
#[tokio::test]
async fn bots_judges_unkeyed_limits_and_counts_per_key() {
    let q = Quota::per_minute(100).expect("q");
    let limits = vec![
        Limit::new("global", Algorithm::Gcra, q).expect("limit"),
        keyed("per_user", Algorithm::SlidingLog, q, &["user"]),
    ];
    let report = simulate(Scenario::Bots, &SimOptions::limits(limits))
        .await
        .expect("simulate");
    assert_eq!(report.expectations.len(), 2);
    for e in &report.expectations {
        assert!(e.met, "expected {}, measured {}", e.expected, e.measured);
    }
    let per_user = &report.limits[1];
    assert_eq!(per_user.max_in_any_period(), Some(100));
    assert!(report.limits[0].max_in_any_period().expect("tracked") <= 200);
}
