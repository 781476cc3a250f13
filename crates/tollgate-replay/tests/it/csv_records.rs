//! A CSV record is bounded like a line of the other formats: at most `MAX_LINE` bytes and
//! `MAX_RECORD_LINES` lines. One that is not closed within them (a stray `"`) is one
//! malformed line, its lines after the first are read again as records of their own, and
//! the log is never held whole. Before, the `csv` crate read a quoted field to the end of the
//! log: one stray quote turned the rest of a log into one field, held in memory (866 MB of
//! RSS for 306 MB after the quote), and the replay said "0 malformed".

use std::cell::Cell;
use std::io::{BufReader, Cursor, Read};
use std::rc::Rc;

use tollgate::{Algorithm, Limit, Quota};
use tollgate_replay::log_reader::{MAX_LINE, MAX_RECORD_LINES};
use tollgate_replay::{
    Event, KeyMapping, LogFormat, LogOptions, LogReader, Malformed, ReplayError, replay_log,
};

/// Every event (line, user) and every malformed line of the CSV `log`, keyed by `user`.
fn read_csv<R: std::io::BufRead>(log: R) -> (Vec<(u64, String)>, Vec<Malformed>) {
    let mapping = KeyMapping::parse(&["user=$user"]).expect("mapping");
    let mut reader = LogReader::new(log, None, &mapping, None).expect("reader");
    assert_eq!(reader.format(), LogFormat::Csv);
    let (mut events, mut bad) = (Vec::new(), Vec::new());
    let mut event = Event::default();
    while let Some(r) = reader.next_event(&mut event) {
        match r {
            Ok(()) => events.push((event.line, event.values[0].clone())),
            Err(m) => bad.push(m),
        }
    }
    (events, bad)
}

/// The users of `events`.
fn users(events: &[(u64, String)]) -> Vec<&str> {
    events.iter().map(|(_, u)| u.as_str()).collect()
}

/// The line numbers of `bad`.
fn lines(bad: &[Malformed]) -> Vec<u64> {
    bad.iter().map(|m| m.line).collect()
}

/// `time,user`, then ten rows a second apart, the third `…,"bob` (a stray quote).
fn ten_rows_with_a_stray_quote() -> String {
    let mut log = String::from("time,user\n");
    for i in 0..10 {
        let user = if i == 2 {
            "\"bob".to_owned()
        } else {
            format!("u{i}")
        };
        log.push_str(&format!("2026-11-30T09:00:0{i}Z,{user}\n"));
    }
    log
}

/// The defect as reported: before, 3 lines read, 0 malformed (the quote's field ran to the
/// end). Now the line of the quote is malformed, and the seven lines after it are read.
#[test]
fn a_stray_quote_is_one_malformed_line_and_the_lines_after_it_count() {
    let (events, bad) = read_csv(Cursor::new(ten_rows_with_a_stray_quote()));
    assert_eq!(
        users(&events),
        ["u0", "u1", "u3", "u4", "u5", "u6", "u7", "u8", "u9"],
        "{bad:?}"
    );
    assert_eq!(events[2].0, 5, "the lines keep their numbers");
    assert_eq!(lines(&bad), [4], "{bad:?}");
    assert!(bad[0].reason.contains("not closed"), "{bad:?}");
}

/// The same through the replay: 10 lines, 1 malformed, 9 requests decided.
#[tokio::test]
async fn a_stray_quote_is_counted_by_the_replay() {
    let limit = Limit::new(
        "per_user",
        Algorithm::Gcra,
        Quota::per_minute(10).expect("quota"),
    )
    .expect("limit")
    .keyed_by(["user"])
    .expect("keyed");
    let options = LogOptions {
        mapping: KeyMapping::parse(&["user=$user"]).expect("mapping"),
        ..LogOptions::default()
    };
    let report = replay_log(
        Cursor::new(ten_rows_with_a_stray_quote().into_bytes()),
        "t",
        vec![limit],
        &options,
        &mut |_| {},
    )
    .await
    .expect("replay");
    assert_eq!(report.malformed, 1, "{:?}", report.malformed_examples);
    assert_eq!(report.malformed_examples[0].line, 4);
    assert_eq!(report.limits[0].requests, 9);
    assert_eq!(report.limits[0].admitted, 9);
}

/// A `Read` counting the bytes taken from it.
struct Counted {
    inner: Cursor<Vec<u8>>,
    taken: Rc<Cell<usize>>,
}

impl Read for Counted {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.taken.set(self.taken.get() + n);
        Ok(n)
    }
}

/// Memory: the stray quote's line is reported when at most `MAX_RECORD_LINES` lines after it
/// have been read (one 64 KiB read of the file here), not when the 8 MB after it have been
/// taken in as its field (as the `csv` crate did); every line after it still counts.
#[test]
fn a_stray_quote_does_not_take_in_the_rest_of_the_log() {
    let mut log = String::from("time,user\n2026-11-30T09:00:00Z,\"bob\n");
    let mut rows = 0;
    while log.len() < 8 << 20 {
        log.push_str(&format!("2026-11-30T09:00:01Z,u{rows}\n"));
        rows += 1;
    }
    let size = log.len();
    let taken = Rc::new(Cell::new(0));
    let source = Counted {
        inner: Cursor::new(log.into_bytes()),
        taken: Rc::clone(&taken),
    };
    let mapping = KeyMapping::parse(&["user=$user"]).expect("mapping");
    let mut reader = LogReader::new(
        BufReader::with_capacity(1 << 16, source),
        None,
        &mapping,
        None,
    )
    .expect("reader");
    let mut event = Event::default();
    let first = reader.next_event(&mut event).expect("a line");
    let Err(malformed) = first else {
        panic!(
            "the stray quote's line {} read as a row, its user {} bytes",
            event.line,
            event.values[0].len()
        );
    };
    assert_eq!(malformed.line, 2);
    assert!(
        taken.get() <= 2 * MAX_LINE,
        "{} bytes of {size} taken in for one malformed line",
        taken.get()
    );
    let mut read = 0;
    while let Some(r) = reader.next_event(&mut event) {
        r.expect("every line after the quote");
        read += 1;
    }
    assert_eq!(read, rows);
    assert_eq!(taken.get(), size);
}

/// A quoted field may hold line breaks: a record of `MAX_RECORD_LINES` lines is read whole;
/// one of a line more is malformed, and its other lines — here each a row of its own — are
/// read again as records.
#[test]
fn a_record_spans_at_most_max_record_lines() {
    let mut log = String::from("time,user\n2026-10-10T13:55:36Z,\"a\n");
    for _ in 0..MAX_RECORD_LINES - 2 {
        log.push_str("2026-10-10T13:55:37Z,c\n");
    }
    log.push_str("z\"\n2026-10-10T13:55:38Z,\"b\n");
    for i in 0..MAX_RECORD_LINES - 1 {
        log.push_str(&format!("2026-10-10T13:55:39Z,d{i}\n"));
    }
    log.push_str("2026-10-10T13:55:40Z,e\n");
    let (events, bad) = read_csv(Cursor::new(log));
    let first = &events[0];
    assert_eq!(first.0, 2);
    assert_eq!(
        first.1.matches('\n').count(),
        MAX_RECORD_LINES - 1,
        "{first:?}"
    );
    assert!(
        first.1.starts_with("a\n") && first.1.ends_with("\nz"),
        "{first:?}"
    );
    let b = 2 + MAX_RECORD_LINES as u64;
    assert_eq!(lines(&bad), [b], "{bad:?}");
    assert!(
        bad[0]
            .reason
            .contains(&format!("not closed within {MAX_RECORD_LINES} lines")),
        "{bad:?}"
    );
    let after: Vec<(u64, String)> = (0..MAX_RECORD_LINES - 1)
        .map(|i| (b + 1 + i as u64, format!("d{i}")))
        .chain([(b + MAX_RECORD_LINES as u64, "e".to_owned())])
        .collect();
    assert_eq!(events[1..], after);
}

/// A record of `MAX_LINE` bytes over two lines is read; a byte more and it is malformed, its
/// second line read again (malformed too: no time), and the row after it read.
#[test]
fn a_record_is_at_most_max_line_bytes() {
    let open = "2026-10-10T13:55:36Z,\"";
    for (extra, whole) in [(0, true), (1, false)] {
        let x = MAX_LINE - (open.len() + 1) - 2 + extra;
        let log = format!(
            "time,user\n{open}\n{}\"\n2026-10-10T13:55:37Z,f\n",
            "x".repeat(x)
        );
        let (events, bad) = read_csv(Cursor::new(log));
        if whole {
            assert_eq!(bad, [], "{extra}");
            assert_eq!(events[0].1.len(), 1 + x, "{extra}");
            assert_eq!(events[1], (4, "f".to_owned()));
        } else {
            assert_eq!(lines(&bad), [2, 3], "{bad:?}");
            assert!(
                bad[0]
                    .reason
                    .contains(&format!("not closed within {MAX_LINE} bytes")),
                "{bad:?}"
            );
            assert_eq!(events, [(4, "f".to_owned())]);
        }
    }
}

/// A line longer than `MAX_LINE` inside an open quote: the record is malformed, the long
/// line is malformed on its own (skipped unread, as in the other formats), and the rows after
/// it are read.
#[test]
fn an_overlong_line_in_an_open_quote_is_its_own_malformed_line() {
    let log = format!(
        "time,user\n2026-10-10T13:55:36Z,a\n2026-10-10T13:55:37Z,\"g\n{}\n2026-10-10T13:55:38Z,h\n",
        "x".repeat(MAX_LINE + 10)
    );
    let (events, bad) = read_csv(Cursor::new(log));
    assert_eq!(events, [(2, "a".to_owned()), (5, "h".to_owned())]);
    assert_eq!(lines(&bad), [3, 4], "{bad:?}");
    assert!(bad[1].reason.contains("longer than"), "{bad:?}");
}

/// Text after a closing quote is kept, as the `csv` crate kept it (`"i"j` is `ij`). So a
/// stray quote that a later line's quote closes, within the bounds, makes one record of the
/// lines between, as before; a quote still open past the bounds is what is malformed.
#[test]
fn text_after_a_closing_quote_is_kept_as_the_csv_crate_kept_it() {
    let log = "time,user\n\
               2026-10-10T13:55:36Z,\"i\"j\n\
               2026-10-10T13:55:37Z,\"bob\n\
               2026-10-10T13:55:38Z,\"carol\"\n\
               2026-10-10T13:55:39Z,\"da,\"\"ve\"\"\"\n";
    let (events, bad) = read_csv(Cursor::new(log));
    assert_eq!(bad, [], "{bad:?}");
    assert_eq!(
        events,
        [
            (2, "ij".to_owned()),
            (3, "bob\n2026-10-10T13:55:38Z,carol\"".to_owned()),
            (5, "da,\"ve\"".to_owned())
        ]
    );
}

/// A header whose quote is not closed is refused, naming its line (before: the header ran
/// to the end of the log, held whole, and the replay failed on a missing field).
#[test]
fn a_header_with_a_stray_quote_is_refused() {
    let log = "\ntime,\"user\n2026-10-10T13:55:36Z,a\n";
    let mapping = KeyMapping::parse(&["user=$user"]).expect("mapping");
    let err = LogReader::new(Cursor::new(log), Some(LogFormat::Csv), &mapping, None)
        .expect_err("no header");
    assert!(
        matches!(&err, ReplayError::BadHeader { line: 2, reason } if reason.contains("not closed")),
        "{err}"
    );
}
