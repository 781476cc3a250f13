//! Each log format read into events; malformed lines counted with their line numbers; a
//! field the log does not have refused before the first line.

use std::io::Cursor;

use tollgate_replay::log_reader::MAX_LINE;
use tollgate_replay::{Event, KeyMapping, LogFormat, LogReader, Malformed, ReplayError};

/// Every event and every malformed line of `log`.
fn read_all(
    log: impl AsRef<[u8]>,
    format: Option<LogFormat>,
    keys: &[&str],
    time_field: Option<&str>,
) -> (LogFormat, Vec<Event>, Vec<Malformed>) {
    let mapping = KeyMapping::parse(keys).expect("mapping");
    let mut reader = LogReader::new(
        Cursor::new(log.as_ref().to_vec()),
        format,
        &mapping,
        time_field,
    )
    .expect("reader");
    let (mut events, mut bad) = (Vec::new(), Vec::new());
    let mut event = Event::default();
    while let Some(r) = reader.next_event(&mut event) {
        match r {
            Ok(()) => events.push(event.clone()),
            Err(m) => bad.push(m),
        }
    }
    (reader.format(), events, bad)
}

/// 2026-10-10T13:55:36Z in µs.
const T: u64 = 1_791_640_536_000_000;

#[test]
fn combined_lines_give_their_fields_and_time() {
    let log = concat!(
        r#"10.0.0.1 - alice [10/Oct/2026:13:55:36 +0000] "GET /v1/orders?page=2 HTTP/1.1" 200 512 "https://x/" "Mozilla \"quoted\" 5.0""#,
        "\n",
        r#"10.0.0.2 - - [10/Oct/2026:15:55:37 +0200] "POST /v1/sms HTTP/2.0" 429 0"#,
        "\n\n",
        "garbage\n",
    );
    let (format, events, bad) = read_all(
        log,
        None,
        &[
            "user=$remote_user",
            "ip=$remote_addr",
            "route=$path",
            "m=$method",
            "agent=$http_user_agent",
            "tenant=acme",
        ],
        None,
    );
    assert_eq!(format, LogFormat::Combined);
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].time_us, T);
    assert_eq!(
        events[0].values,
        [
            "alice",
            "10.0.0.1",
            "/v1/orders",
            "GET",
            r#"Mozilla \"quoted\" 5.0"#,
            "acme"
        ]
    );
    assert_eq!(events[1].time_us, T + 1_000_000, "the zone is applied");
    assert_eq!(events[1].values[..4], ["-", "10.0.0.2", "/v1/sms", "POST"]);
    assert_eq!(events[1].values[4], "-", "common format: no user agent");
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0].line, 4, "blank lines count as lines: {bad:?}");
}

#[test]
fn json_lines_take_string_and_number_times() {
    let log = concat!(
        r#"{"time": "2026-10-10T13:55:36Z", "user": "a", "n": 7}"#,
        "\n",
        r#"{"time": 1791640537.5, "user": "b", "n": 8}"#,
        "\n",
        r#"{"time": 1791640538000, "user": "c", "n": 9}"#,
        "\n",
        r#"{"time": "2026-10-10T13:55:39Z", "n": 1}"#,
        "\n",
        r#"{"time": "soon", "user": "d"}"#,
        "\n",
        r#"{"time": "2026-10-10T13:55:39Z", "user": "#,
        "\n",
        "[1, 2]\n",
    );
    let (format, events, bad) = read_all(log, None, &["user=$user", "n=$n"], None);
    assert_eq!(format, LogFormat::JsonLines);
    let got: Vec<(u64, &str, &str)> = events
        .iter()
        .map(|e| (e.time_us, e.values[0].as_str(), e.values[1].as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (T, "a", "7"),
            (T + 1_500_000, "b", "8"),
            (T + 2_000_000, "c", "9")
        ]
    );
    let lines: Vec<u64> = bad.iter().map(|m| m.line).collect();
    assert_eq!(lines, [4, 5, 6, 7], "{bad:?}");
    assert!(bad[0].reason.contains("no field \"user\""), "{bad:?}");
    assert!(bad[1].reason.contains("time"), "{bad:?}");
    assert!(bad[2].reason.contains("invalid JSON"), "{bad:?}");
}

/// A JSON number time is read by its value, not by serde_json's text of it: that text has an
/// exponent for a large double (`1.796287116e18`, a nanosecond epoch as Python writes a
/// float), and the reader took it for 1 s and a fraction — 1970-01-01 00:00:01 — as it did an
/// integer past `u64` (held as a double too). In any notation, an epoch in seconds,
/// milliseconds or microseconds is read; one that is negative, a double past 2⁵³ (no longer
/// exact to the unit) or past year 9999 (a nanosecond epoch) is a malformed line.
#[test]
fn json_number_times_are_read_by_value_not_by_their_text() {
    let log = [
        r#"{"time": 1.7916405365e9, "user": "s"}"#,
        r#"{"time": 1.791640537E+12, "user": "ms"}"#,
        r#"{"time": 1791640538000000.0, "user": "us"}"#,
        r#"{"time": 1.796287116e+18, "user": "ns as a double"}"#,
        r#"{"time": 1796287116000000000, "user": "ns"}"#,
        r#"{"time": 1796287116612123456789, "user": "past u64"}"#,
        r#"{"time": 9007199254740993.5, "user": "inexact"}"#,
        r#"{"time": -1791640536, "user": "negative"}"#,
        r#"{"time": "1796287116612123456789", "user": "past u64, a string"}"#,
    ]
    .join("\n");
    let (_, events, bad) = read_all(log, None, &["user=$user"], None);
    let got: Vec<(u64, &str)> = events
        .iter()
        .map(|e| (e.time_us, e.values[0].as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (T + 500_000, "s"),
            (T + 1_000_000, "ms"),
            (T + 2_000_000, "us")
        ]
    );
    assert_eq!(lines_of(&bad), [4, 5, 6, 7, 8, 9], "{bad:?}");
    assert!(
        bad.iter()
            .all(|m| m.reason.contains("time") && m.reason.contains("does not parse")),
        "{bad:?}"
    );
}

/// The line numbers of `bad`.
fn lines_of(bad: &[Malformed]) -> Vec<u64> {
    bad.iter().map(|m| m.line).collect()
}

#[test]
fn csv_reads_by_header_with_quotes() {
    let log = "ts,user,path\n\
               2026-10-10T13:55:36Z,a,\"/x,y\"\n\
               2026-10-10T13:55:37Z,b\n\
               not a time,c,/z\n\
               2026-10-10T13:55:38Z,d,/w\n";
    let (format, events, bad) = read_all(log, None, &["user=$user", "route=$path"], Some("ts"));
    assert_eq!(format, LogFormat::Csv);
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].values, ["a", "/x,y"]);
    assert_eq!(events[1].time_us, T + 2_000_000);
    let lines: Vec<u64> = bad.iter().map(|m| m.line).collect();
    assert_eq!(lines, [3, 4], "{bad:?}");
}

#[test]
fn an_unknown_field_is_refused_before_reading() {
    for (log, format) in [
        (
            r#"1.2.3.4 - u [10/Oct/2026:13:55:36 +0000] "GET / HTTP/1.1" 200 1 "-" "-""#,
            None,
        ),
        (r#"{"time": 1, "user": "u"}"#, None),
        ("time,user\n1,u\n", Some(LogFormat::Csv)),
    ] {
        let mapping = KeyMapping::parse(&["user=$usr"]).expect("mapping");
        let err = LogReader::new(Cursor::new(log.to_owned()), format, &mapping, None)
            .expect_err("unknown field");
        match &err {
            ReplayError::UnknownField { field, .. } => assert_eq!(field, "usr"),
            other => panic!("{other:?}"),
        }
        assert!(err.to_string().contains("its fields:"), "{err}");
    }
}

/// Bytes that are not UTF-8 (a client's raw path, say) do not end the log: the line is read,
/// its bad bytes as U+FFFD, its other fields intact, and the lines after it too. A line
/// longer than `MAX_LINE` is malformed, named by its number, and the next line is read.
#[test]
fn a_hostile_line_is_read_or_skipped_without_ending_the_log() {
    let line = |ip: &str, path: &[u8]| -> Vec<u8> {
        let mut l = format!("{ip} - - [10/Oct/2026:13:55:36 +0000] \"GET ").into_bytes();
        l.extend_from_slice(path);
        l.extend_from_slice(b" HTTP/1.1\" 200 5\n");
        l
    };
    let mut log = line("10.0.0.1", b"/a");
    log.extend(line("10.0.0.2", b"/caf\xe9/\xff\xfe"));
    let huge = vec![b'x'; MAX_LINE + 10];
    log.extend(line("10.0.0.3", &huge));
    log.extend(line("10.0.0.4", b"/d"));
    // A line just within the cap is read whole.
    let room = MAX_LINE - line("10.0.0.5", b"/").len();
    let mut long_path = b"/".to_vec();
    long_path.extend(vec![b'y'; room]);
    log.extend(line("10.0.0.5", &long_path));
    let (_, events, bad) = read_all(&log, None, &["ip=$remote_addr", "route=$path"], None);
    let ips: Vec<&str> = events.iter().map(|e| e.values[0].as_str()).collect();
    assert_eq!(ips, ["10.0.0.1", "10.0.0.2", "10.0.0.4", "10.0.0.5"]);
    assert_eq!(events[1].values[1], "/caf\u{fffd}/\u{fffd}\u{fffd}");
    assert_eq!(events[1].time_us, T);
    assert_eq!(
        events[3].values[1].len(),
        room + 1,
        "the longest line allowed, whole"
    );
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert_eq!(bad[0].line, 3);
    assert!(bad[0].reason.contains("longer than"), "{bad:?}");
}

/// A CSV record that is not UTF-8 is a malformed line; the records after it are read.
#[test]
fn a_csv_record_that_is_not_utf8_is_malformed_alone() {
    let mut log = b"ts,user\n2026-10-10T13:55:36Z,a\n2026-10-10T13:55:37Z,b\xff\n".to_vec();
    log.extend_from_slice(b"2026-10-10T13:55:38Z,c\n");
    let (_, events, bad) = read_all(&log, None, &["user=$user"], Some("ts"));
    let users: Vec<&str> = events.iter().map(|e| e.values[0].as_str()).collect();
    assert_eq!(users, ["a", "c"]);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert_eq!(bad[0].line, 3, "{bad:?}");
}
