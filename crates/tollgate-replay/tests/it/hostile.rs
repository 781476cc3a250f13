//! What `tollgate replay` prints of a hostile log: a log holds what clients sent, and the
//! summary goes to a terminal. No raw control character reaches it (an escape sequence could
//! clear the screen or retitle the window, a CR or a newline could forge a line of the
//! report), and no message grows with the log (a line of megabytes without a newline gives a
//! message of a few hundred bytes that says it was cut).

use std::io::Cursor;

use tollgate::{Algorithm, Limit, Quota};
use tollgate_replay::{KeyMapping, LogFormat, LogOptions, ReplayError, Report, replay_log};

/// The longest line a summary may have (a malformed line's message, a list of keys).
const MAX_PRINTED_LINE: usize = 2_048;

/// A line of several megabytes, without a newline.
const HUGE: usize = 5 * 1024 * 1024;

/// One per minute per user: the second call of a user is refused, so its key is printed.
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

async fn replay(log: Vec<u8>, format: Option<LogFormat>) -> Report {
    let options = LogOptions {
        format,
        mapping: KeyMapping::parse(&["user=$user"]).expect("mapping"),
        ..LogOptions::default()
    };
    replay_log(
        Cursor::new(log),
        "replay of hostile.log",
        vec![per_user()],
        &options,
        &mut |_| {},
    )
    .await
    .expect("replay")
}

/// `text` is safe for a terminal: no control character but the newlines between its own
/// lines, no forged line, no line longer than [`MAX_PRINTED_LINE`].
fn assert_printable(text: &str) {
    let bad: Vec<char> = text
        .chars()
        .filter(|&c| {
            (c.is_control() && c != '\n')
                || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}')
        })
        .collect();
    assert!(bad.is_empty(), "raw control characters {bad:?} in:\n{text}");
    for line in text.lines() {
        assert!(
            !line.trim_start().starts_with("FORGED"),
            "a forged line: {line:?}"
        );
        assert!(
            line.len() <= MAX_PRINTED_LINE,
            "a line of {} bytes: {}…",
            line.len(),
            &line[..200]
        );
    }
}

/// JSON lines whose values carry an escape sequence, a CR, a newline and the Unicode line
/// separator, each refused (so printed as a most refused key), and a malformed line: the
/// summary shows them escaped, on their own lines.
#[tokio::test]
async fn control_characters_of_a_log_are_escaped() {
    let users = [
        r"\u001b[2J\u001b]0;pwned\u0007",
        r"a\rFORGED everything admitted",
        r"b\nFORGED everything admitted",
        r"c\u2028FORGED\u0085FORGED\u202e",
    ];
    let mut log = String::new();
    for user in users {
        for s in 0..2 {
            log.push_str(&format!(
                "{{\"time\": \"2026-10-10T13:55:3{s}Z\", \"user\": \"{user}\"}}\n"
            ));
        }
    }
    log.push_str("{\"time\": \"2026-10-10T13:55:39Z\", \"user\": \"\u{1b}[31m\n");
    let report = replay(log.into_bytes(), None).await;
    assert_eq!(report.limits[0].denied(), 4, "{report:?}");
    let summary = report.summary();
    assert_printable(&summary);
    assert!(
        summary.contains(r"user=\u{1b}[2J\u{1b}]0;pwned\u{7}"),
        "{summary}"
    );
    assert!(summary.contains(r"user=a\rFORGED"), "{summary}");
    assert!(summary.contains(r"user=b\nFORGED"), "{summary}");
    assert!(
        summary.contains(r"user=c\u{2028}FORGED\u{85}FORGED\u{202e}"),
        "{summary}"
    );
}

/// A CSV log ending with a record of 5 MB without a newline, and a time column holding an
/// escape sequence: each is one malformed line whose message is short and escaped; the huge
/// one is skipped unread and says how long it was.
#[tokio::test]
async fn a_huge_csv_record_gives_a_short_message() {
    let mut log = b"time,user\n2026-10-10T13:55:36Z,a\n\x1b[2Jnot a time,b\n".to_vec();
    log.extend(std::iter::repeat_n(b'x', HUGE));
    let report = replay(log, None).await;
    assert_eq!(report.malformed, 2, "{:?}", report.malformed_examples);
    let summary = report.summary();
    assert_printable(&summary);
    assert!(summary.contains(r"\u{1b}[2Jnot a time"), "{summary}");
    let huge = &report.malformed_examples[1];
    assert!(huge.reason.len() < 1_024, "{} bytes", huge.reason.len());
    assert!(
        huge.reason
            .contains(&format!("longer than 65536 bytes ({HUGE})")),
        "{}",
        huge.reason
    );
}

/// A combined log whose time field is 60 KB (within the longest line read) and whose last
/// line is 5 MB without a newline: both malformed, with short messages.
#[tokio::test]
async fn a_huge_combined_line_gives_a_short_message() {
    let mut log = format!(
        "10.0.0.1 - a [10/Oct/2026:13:55:36 +0000] \"GET / HTTP/1.1\" 200 1 \"-\" \"-\"\n\
         10.0.0.1 - a [{}\u{1b}] \"GET / HTTP/1.1\" 200 1 \"-\" \"-\"\n\
         10.0.0.1 - a [",
        "9".repeat(60 * 1024)
    )
    .into_bytes();
    log.extend(std::iter::repeat_n(b'x', HUGE));
    let options = LogOptions {
        mapping: KeyMapping::parse(&["user=$remote_user"]).expect("mapping"),
        ..LogOptions::default()
    };
    let report = replay_log(
        Cursor::new(log),
        "t",
        vec![per_user()],
        &options,
        &mut |_| {},
    )
    .await
    .expect("replay");
    assert_eq!(report.malformed, 2, "{:?}", report.malformed_examples);
    assert_printable(&report.summary());
    let long_time = &report.malformed_examples[0];
    assert!(
        long_time.reason.len() < 1_024,
        "{} bytes",
        long_time.reason.len()
    );
    assert!(long_time.reason.contains("cut"), "{}", long_time.reason);
}

/// A field the log does not have is an error naming the log's fields: the first JSON
/// object's keys, which are the log's too (an escape sequence, a key of 40 KB).
#[tokio::test]
async fn an_error_naming_the_logs_fields_is_bounded_and_escaped() {
    let log = format!(
        "{{\"time\": 1, \"\\u001b]0;pwned\\u0007\": 1, \"{}\": 2}}\n",
        "k".repeat(40 * 1024)
    );
    let options = LogOptions {
        mapping: KeyMapping::parse(&["user=$user"]).expect("mapping"),
        ..LogOptions::default()
    };
    let err = replay_log(
        Cursor::new(log.into_bytes()),
        "t",
        vec![per_user()],
        &options,
        &mut |_| {},
    )
    .await
    .expect_err("no field user");
    assert!(matches!(err, ReplayError::UnknownField { .. }), "{err:?}");
    let message = err.to_string();
    assert_printable(&message);
    assert!(message.len() < 2_048, "{} bytes", message.len());
    assert!(message.contains(r"\u{1b}]0;pwned\u{7}"), "{message}");
    assert!(message.contains("cut"), "{message}");
}
