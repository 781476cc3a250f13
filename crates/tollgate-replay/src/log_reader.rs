//! Reads an access log line by line into [`Event`]s: the line's time and the values of the
//! mapped key parts. Streamed: memory does not grow with the log, and the event's buffers are
//! reused from line to line.
//!
//! A line that cannot be read (no time, a time that does not parse, a missing field, a broken
//! JSON object) is a [`Malformed`] with its line number; the replay counts it and goes on. Its
//! reason quotes the line's text only through [`Printable`]: escaped and cut, so that it is
//! short and safe to print whatever the line holds.
//!
//! Logs hold what clients sent, so a line is not trusted either: bytes that are not UTF-8
//! are read as U+FFFD (the line still counts, its other fields intact), and a line longer
//! than [`MAX_LINE`] is malformed and skipped without being held whole, so one corrupt or
//! hostile line can neither end the replay nor take memory without bound.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::io::{self, BufRead, Read as _};

use serde_json::Value;

use crate::key_mapping::{KeyMapping, PartSource};
use crate::log_format::{COMBINED_FIELDS, ENVOY_FIELDS, LogFormat};
use crate::log_time;
use crate::printable::Printable;
use crate::replay_error::ReplayError;

/// The longest line read (64 KiB, newline included); a longer one is a [`Malformed`].
/// Web servers cap a request line at a few KiB, so a real access log line is far below it.
pub const MAX_LINE: usize = 64 * 1024;

/// One line of the log, as the replay needs it.
#[derive(Debug, Default, Clone)]
pub struct Event {
    /// Its line number (1-based; a CSV header is line 1).
    pub line: u64,
    /// Its time, µs since the epoch.
    pub time_us: u64,
    /// The mapped key parts' values, in the mapping's order.
    pub values: Vec<String>,
}

/// A line that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed {
    /// Its line number.
    pub line: u64,
    /// What is wrong with it: at most a few hundred bytes, its quotes of the line escaped
    /// ([`Printable`]).
    pub reason: String,
}

/// Where a value is found in a line, resolved once for the format.
#[derive(Debug, Clone)]
enum Slot {
    Combined(usize),
    Json(String),
    Csv(usize),
    Literal(String),
}

/// A streaming reader of one access log.
#[derive(Debug)]
pub struct LogReader<R> {
    inner: Inner<R>,
    format: LogFormat,
    time: Slot,
    slots: Vec<Slot>,
    line: u64,
    bytes: u64,
    /// The overlong lines format detection skipped ([`Sniffed::skipped`]), reported at
    /// their lines.
    skipped: VecDeque<(u64, usize)>,
    skipped_bytes: u64,
    done: bool,
}

/// The log as read after format detection: the bytes detection read, given back, then the
/// rest.
type Rest<R> = io::Chain<io::Cursor<Vec<u8>>, R>;

#[derive(Debug)]
enum Inner<R> {
    Lines {
        reader: Rest<R>,
        buf: Vec<u8>,
    },
    Csv {
        reader: Box<csv::Reader<Rest<R>>>,
        record: csv::StringRecord,
    },
}

/// What format detection read of the log: consumed from the reader, and given back to it
/// ([`Sniffed::rest`]), so that detection loses nothing.
#[derive(Debug, Default)]
struct Sniffed {
    /// The bytes read, as they were, but for an overlong line before the first line that is
    /// not blank: an empty line in its place (skipped unread, not held).
    bytes: Vec<u8>,
    /// The whole lines that are not blank, without their line ends.
    lines: Vec<String>,
    /// The overlong lines skipped at the start (malformed): their line numbers and lengths.
    skipped: VecDeque<(u64, usize)>,
    /// Their bytes but the empty line in their place (for [`LogReader::bytes_read`]).
    skipped_bytes: u64,
}

impl Sniffed {
    /// The log from its first byte again: what was read, then the rest of `reader`.
    fn rest<R: BufRead>(&mut self, reader: R) -> Rest<R> {
        io::Cursor::new(std::mem::take(&mut self.bytes)).chain(reader)
    }
}

impl<R: BufRead> Inner<R> {
    /// How `reader` is read in `format`, given what detection read of it (`sniffed`), and the
    /// fields its lines have (`first`: the line whose keys are a JSON log's fields).
    fn open(
        reader: R,
        format: LogFormat,
        sniffed: &mut Sniffed,
        first: &str,
    ) -> Result<(Inner<R>, Vec<String>), ReplayError> {
        let mut lines = |reader| Inner::Lines {
            reader: sniffed.rest(reader),
            buf: Vec::new(),
        };
        Ok(match format {
            LogFormat::Combined => (
                lines(reader),
                COMBINED_FIELDS.iter().map(|f| (*f).to_owned()).collect(),
            ),
            LogFormat::Envoy => (
                lines(reader),
                ENVOY_FIELDS.iter().map(|f| (*f).to_owned()).collect(),
            ),
            LogFormat::JsonLines => {
                let keys = match serde_json::from_str::<Value>(first) {
                    Ok(Value::Object(map)) => map.keys().cloned().collect(),
                    _ => Vec::new(),
                };
                (lines(reader), keys)
            }
            LogFormat::Csv => {
                // The header is the first line that is not blank: bounded like every line
                // here, so that a huge first line is not held whole as a header.
                if let Some(&(_, bytes)) = sniffed.skipped.front() {
                    return Err(ReplayError::HeaderTooLong { bytes });
                }
                let mut csv = csv::ReaderBuilder::new()
                    .flexible(true)
                    .has_headers(true)
                    .from_reader(sniffed.rest(reader));
                let header: Vec<String> = csv
                    .headers()
                    .map_err(|e| ReplayError::Read(std::io::Error::other(e)))?
                    .iter()
                    .map(|h| h.trim().to_owned())
                    .collect();
                (
                    Inner::Csv {
                        reader: Box::new(csv),
                        record: csv::StringRecord::new(),
                    },
                    header,
                )
            }
        })
    }
}

/// Why a line longer than [`MAX_LINE`] is malformed.
fn overlong(bytes: usize) -> String {
    format!("longer than {MAX_LINE} bytes ({bytes}): skipped")
}

impl<R: BufRead> LogReader<R> {
    /// A reader of `reader` in `format` (detected from the first lines when `None`: the
    /// first that is a JSON object, a combined or an Envoy line decides; CSV if none is),
    /// filling `mapping`'s parts; the time comes from `time_field` (JSON, CSV; default
    /// `time`) or `$time_local` (combined).
    ///
    /// # Errors
    /// [`ReplayError::UnknownField`] for a mapped field (or the time field) the log does not
    /// have — known before the first line is replayed: the combined format's fixed fields, the
    /// CSV header, the first JSON object's keys; [`ReplayError::EmptyLog`] for a log with no
    /// line that is not blank; [`ReplayError::HeaderTooLong`] for a CSV header longer than
    /// [`MAX_LINE`]; [`ReplayError::Read`] if reading fails.
    pub fn new(
        mut reader: R,
        format: Option<LogFormat>,
        mapping: &KeyMapping,
        time_field: Option<&str>,
    ) -> Result<LogReader<R>, ReplayError> {
        let mut sniffed = first_lines(&mut reader)?;
        if sniffed.lines.is_empty() && sniffed.skipped.is_empty() {
            return Err(ReplayError::EmptyLog);
        }
        let (format, first) = match format {
            // A JSON log's fields are the first object's keys, wherever it is among the first
            // lines (after a blank or a broken one).
            Some(LogFormat::JsonLines) => (
                LogFormat::JsonLines,
                sniffed
                    .lines
                    .iter()
                    .find(|l| is_json_object(l))
                    .cloned()
                    .unwrap_or_default(),
            ),
            Some(format) => (format, String::new()),
            None => detect(&sniffed.lines),
        };
        let time_name = time_field.unwrap_or(match format {
            LogFormat::Combined => "time_local",
            LogFormat::Envoy => "start_time",
            _ => "time",
        });
        let (inner, known) = Inner::open(reader, format, &mut sniffed, &first)?;
        let resolve = |name: &str| -> Result<Slot, ReplayError> {
            let index = known.iter().position(|k| k == name);
            match (format, index) {
                (LogFormat::Combined | LogFormat::Envoy, Some(i)) => Ok(Slot::Combined(i)),
                (LogFormat::Csv, Some(i)) => Ok(Slot::Csv(i)),
                (LogFormat::JsonLines, Some(_)) => Ok(Slot::Json(name.to_owned())),
                (_, None) => Err(ReplayError::UnknownField {
                    field: name.to_owned(),
                    format,
                    known: known.clone(),
                }),
            }
        };
        let time = resolve(time_name)?;
        let slots = mapping
            .parts()
            .iter()
            .map(|(_, source)| match source {
                PartSource::Field(name) => resolve(name),
                PartSource::Literal(text) => Ok(Slot::Literal(text.clone())),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(LogReader {
            inner,
            format,
            time,
            slots,
            line: u64::from(format == LogFormat::Csv),
            bytes: 0,
            skipped: sniffed.skipped,
            skipped_bytes: sniffed.skipped_bytes,
            done: false,
        })
    }

    /// The format being read.
    pub fn format(&self) -> LogFormat {
        self.format
    }

    /// Bytes read so far (lines and CSV records; for a progress bar).
    pub fn bytes_read(&self) -> u64 {
        self.skipped_bytes
            + match &self.inner {
                Inner::Lines { .. } => self.bytes,
                Inner::Csv { reader, .. } => reader.position().byte(),
            }
    }

    /// Reads the next line into `event`: `None` at the end, `Some(Err)` for a line that
    /// cannot be read (the next call goes on with the line after it).
    ///
    /// # Errors
    /// An I/O error reading the log ends it: it is returned as a [`Malformed`] of the line
    /// it stopped at, and the next call returns `None`.
    pub fn next_event(&mut self, event: &mut Event) -> Option<Result<(), Malformed>> {
        if self.done {
            return None;
        }
        event.values.resize(self.slots.len(), String::new());
        match &mut self.inner {
            Inner::Lines { reader, buf } => loop {
                self.line += 1;
                let (n, whole) = match read_line_capped(reader, buf) {
                    Ok((0, _)) => return None,
                    Ok(read) => read,
                    Err(e) => {
                        self.done = true;
                        return Some(Err(Malformed {
                            line: self.line,
                            reason: format!("read failed: {e}"),
                        }));
                    }
                };
                self.bytes += n as u64;
                event.line = self.line;
                if let Some(&(line, bytes)) = self.skipped.front()
                    && line == self.line
                {
                    // An empty line stands for it.
                    self.skipped.pop_front();
                    return Some(Err(Malformed {
                        line,
                        reason: overlong(bytes),
                    }));
                }
                if !whole {
                    return Some(Err(Malformed {
                        line: self.line,
                        reason: overlong(n),
                    }));
                }
                // `from_utf8` first: it is the fast check, and nearly every line passes it.
                let text: Cow<'_, str> = match std::str::from_utf8(buf) {
                    Ok(text) => Cow::Borrowed(text),
                    Err(_) => String::from_utf8_lossy(buf),
                };
                let text = text.trim_end_matches(['\n', '\r']);
                if text.trim().is_empty() {
                    continue;
                }
                let result = match self.format {
                    LogFormat::Combined => fill_combined(text, &self.time, &self.slots, event),
                    LogFormat::Envoy => fill_envoy(text, &self.time, &self.slots, event),
                    _ => fill_json(text, &self.time, &self.slots, event),
                };
                return Some(result.map_err(|reason| Malformed {
                    line: self.line,
                    reason,
                }));
            },
            Inner::Csv { reader, record } => match reader.read_record(record) {
                Ok(false) => None,
                Ok(true) => {
                    let line = record.position().map_or(self.line + 1, |p| p.line());
                    self.line = line;
                    event.line = line;
                    let result = fill_csv(record, &self.time, &self.slots, event);
                    Some(result.map_err(|reason| Malformed { line, reason }))
                }
                Err(e) => {
                    let line = e.position().map_or(self.line + 1, |p| p.line());
                    self.line = line;
                    Some(Err(Malformed {
                        line,
                        reason: Printable::message(&e.to_string()).to_string(),
                    }))
                }
            },
        }
    }
}

/// Reads one line (up to and with its newline) into `buf`, holding at most [`MAX_LINE`]
/// bytes of it: the bytes consumed, and whether the line fit (when not, `buf` is left empty
/// and the rest of the line is consumed unread). `(0, true)` at the end of the log.
fn read_line_capped<R: BufRead>(reader: &mut R, buf: &mut Vec<u8>) -> io::Result<(usize, bool)> {
    buf.clear();
    let (mut consumed, mut whole) = (0, true);
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok((consumed, whole));
        }
        let (take, ends) = match memchr::memchr(b'\n', available) {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        if whole && buf.len() + take <= MAX_LINE {
            buf.extend_from_slice(&available[..take]);
        } else {
            whole = false;
            buf.clear();
        }
        reader.consume(take);
        consumed += take;
        if ends {
            return Ok((consumed, whole));
        }
    }
}

/// How many of the log's first lines that are not blank format detection looks at.
const DETECT_LINES: usize = 16;

/// How many bytes format detection holds at most (16 lines of the longest length).
const DETECT_BYTES: usize = DETECT_LINES * MAX_LINE;

/// Reads the first lines of the log for format detection: up to [`DETECT_LINES`] that are
/// not blank, [`DETECT_BYTES`] in all. A line longer than [`MAX_LINE`] before the first
/// that is not blank is skipped unread (a 100 MB first line is neither held nor allowed to
/// hide the lines after it: it is malformed, or no CSV header); one after it ends the
/// reading, with the part read held, so that the bytes given back are the log's own (a CSV
/// record has no cap).
fn first_lines<R: BufRead>(reader: &mut R) -> Result<Sniffed, ReplayError> {
    let mut sniffed = Sniffed::default();
    let mut line_no = 0_u64;
    let mut not_blank = 0;
    let mut buf = Vec::new();
    while not_blank < DETECT_LINES && sniffed.bytes.len() < DETECT_BYTES {
        let ended = read_line_upto(reader, &mut buf, MAX_LINE).map_err(ReplayError::Read)?;
        if buf.is_empty() {
            break;
        }
        line_no += 1;
        if !ended && sniffed.lines.is_empty() {
            let bytes = buf.len() + skip_line(reader).map_err(ReplayError::Read)?;
            sniffed.skipped.push_back((line_no, bytes));
            sniffed.skipped_bytes += bytes as u64 - 1;
            sniffed.bytes.push(b'\n');
            not_blank += 1;
            continue;
        }
        sniffed.bytes.extend_from_slice(&buf);
        if !ended {
            break;
        }
        let text = String::from_utf8_lossy(&buf);
        let text = text.trim_end_matches(['\n', '\r']);
        if !text.trim().is_empty() {
            sniffed.lines.push(text.to_owned());
            not_blank += 1;
        }
    }
    Ok(sniffed)
}

/// Reads one line into `buf` (cleared first), consuming at most `cap` bytes of it: whether
/// it ended (its newline or the log's end) within them.
fn read_line_upto<R: BufRead>(reader: &mut R, buf: &mut Vec<u8>, cap: usize) -> io::Result<bool> {
    buf.clear();
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(true);
        }
        let room = cap - buf.len();
        let (take, ends) = match memchr::memchr(b'\n', available) {
            Some(i) if i < room => (i + 1, true),
            _ => (available.len().min(room), false),
        };
        buf.extend_from_slice(&available[..take]);
        reader.consume(take);
        if ends {
            return Ok(true);
        }
        if buf.len() == cap {
            return Ok(false);
        }
    }
}

/// Consumes the rest of a line, newline included, unread: the bytes consumed.
fn skip_line<R: BufRead>(reader: &mut R) -> io::Result<usize> {
    let mut consumed = 0;
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(consumed);
        }
        let (take, ends) = match memchr::memchr(b'\n', available) {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        reader.consume(take);
        consumed += take;
        if ends {
            return Ok(consumed);
        }
    }
}

/// Whether `line` is a JSON object.
fn is_json_object(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with('{') && matches!(serde_json::from_str::<Value>(t), Ok(Value::Object(_)))
}

/// The format of the first of `lines` (the first lines that are not blank) that is a JSON
/// object, a combined-format or an Envoy line (a cut or overlong first line must not make a
/// combined log "CSV"), and that line (JSON: its keys are the fields); CSV, and its header
/// (the first line), when none is.
fn detect(lines: &[String]) -> (LogFormat, String) {
    let found = lines.iter().find(|l| {
        let t = l.trim_start();
        is_json_object(t) || split_combined(t).is_ok() || split_envoy(t).is_ok()
    });
    match found {
        Some(line) => (LogFormat::detect(line), line.clone()),
        None => (LogFormat::Csv, lines.first().cloned().unwrap_or_default()),
    }
}

/// The fields of a combined-format line, by [`COMBINED_FIELDS`]' indices.
///
/// # Errors
/// What is missing, for a line that is not in the format.
pub fn split_combined(line: &str) -> Result<[&str; 11], String> {
    let mut rest = line;
    let mut token = |what: &str| -> Result<&str, String> {
        let (t, r) = rest
            .split_once(' ')
            .ok_or_else(|| format!("no {what} (not the combined log format)"))?;
        rest = r;
        Ok(t)
    };
    let remote_addr = token("remote address")?;
    let _ident = token("identity")?;
    let remote_user = token("remote user")?;
    let after = rest
        .strip_prefix('[')
        .ok_or("no [time] (not the combined log format)")?;
    let (time_local, after) = after
        .split_once("] ")
        .ok_or("no end to [time] (not the combined log format)")?;
    let (request, after) = quoted(after).ok_or("no \"request\" (not the combined log format)")?;
    let after = after.trim_start();
    let (status, after) = after.split_once(' ').unwrap_or((after, ""));
    let after = after.trim_start();
    let (bytes, after) = after.split_once(' ').unwrap_or((after, ""));
    let (referer, after) = quoted(after.trim_start()).unwrap_or(("-", ""));
    let (agent, _) = quoted(after.trim_start()).unwrap_or(("-", ""));
    let mut parts = request.splitn(3, ' ');
    let method = parts.next().unwrap_or("");
    let target = parts.next().unwrap_or("");
    let protocol = parts.next().unwrap_or("");
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    Ok([
        remote_addr,
        remote_user,
        time_local,
        request,
        method,
        path,
        protocol,
        status,
        bytes,
        referer,
        agent,
    ])
}

/// `"…"` at the start of `text` (a backslash escapes the next byte): its content and what
/// follows it.
fn quoted(text: &str) -> Option<(&str, &str)> {
    let body = text.strip_prefix('"')?;
    let bytes = body.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return Some((&body[..i], &body[i + 1..])),
            _ => i += 1,
        }
    }
    None
}

/// The fields of an Envoy default-format line, by [`ENVOY_FIELDS`]' indices.
///
/// # Errors
/// What is missing, for a line that is not in the format.
pub fn split_envoy(line: &str) -> Result<[&str; 16], String> {
    let not = |what: &str| format!("no {what} (not Envoy's default access-log format)");
    let after = line.strip_prefix('[').ok_or_else(|| not("[start time]"))?;
    let (start_time, after) = after
        .split_once("] ")
        .ok_or_else(|| not("end to [start time]"))?;
    let (request, mut rest) = quoted(after).ok_or_else(|| not("\"request\""))?;
    let mut token = |what: &str| -> Result<&str, String> {
        let t = rest.trim_start();
        let (t, r) = t.split_once(' ').ok_or_else(|| not(what))?;
        rest = r;
        Ok(t)
    };
    let response_code = token("response code")?;
    let response_flags = token("response flags")?;
    let bytes_received = token("bytes received")?;
    let bytes_sent = token("bytes sent")?;
    let duration = token("duration")?;
    let upstream_service_time = token("upstream service time")?;
    let mut quoted_field = |what: &str| -> Result<&str, String> {
        let (q, r) = quoted(rest.trim_start()).ok_or_else(|| not(what))?;
        rest = r;
        Ok(q)
    };
    let x_forwarded_for = quoted_field("\"x-forwarded-for\"")?;
    let user_agent = quoted_field("\"user-agent\"")?;
    let request_id = quoted_field("\"x-request-id\"")?;
    let authority = quoted_field("\":authority\"")?;
    let upstream_host = quoted_field("\"upstream host\"")?;
    let mut parts = request.splitn(3, ' ');
    let method = parts.next().unwrap_or("");
    let target = parts.next().unwrap_or("");
    let protocol = parts.next().unwrap_or("");
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    let client = x_forwarded_for.split(',').next().unwrap_or("").trim();
    Ok([
        start_time,
        method,
        path,
        protocol,
        response_code,
        response_flags,
        bytes_received,
        bytes_sent,
        duration,
        upstream_service_time,
        x_forwarded_for,
        user_agent,
        request_id,
        authority,
        upstream_host,
        client,
    ])
}

fn fill_envoy(line: &str, time: &Slot, slots: &[Slot], event: &mut Event) -> Result<(), String> {
    let fields = split_envoy(line)?;
    fill_fixed(&fields, log_time::parse_any, time, slots, event)
}

fn fill_combined(line: &str, time: &Slot, slots: &[Slot], event: &mut Event) -> Result<(), String> {
    let fields = split_combined(line)?;
    fill_fixed(&fields, log_time::parse_clf, time, slots, event)
}

/// Fills `event` from the fields of a fixed-field format, its time read by `parse_time`.
fn fill_fixed(
    fields: &[&str],
    parse_time: fn(&str) -> Option<u64>,
    time: &Slot,
    slots: &[Slot],
    event: &mut Event,
) -> Result<(), String> {
    let Slot::Combined(t) = time else {
        return Err("no time field".into());
    };
    event.time_us = parse_time(fields[*t])
        .ok_or_else(|| format!("time \"{}\" does not parse", Printable::new(fields[*t])))?;
    for (slot, value) in slots.iter().zip(event.values.iter_mut()) {
        value.clear();
        match slot {
            Slot::Combined(i) => value.push_str(fields[*i]),
            Slot::Literal(text) => value.push_str(text),
            _ => return Err("field of another format".into()),
        }
    }
    Ok(())
}

fn fill_json(line: &str, time: &Slot, slots: &[Slot], event: &mut Event) -> Result<(), String> {
    let object = match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(map)) => map,
        Ok(_) => return Err("not a JSON object".into()),
        Err(e) => return Err(format!("invalid JSON: {e}")),
    };
    let field = |slot: &Slot| -> Result<Option<&Value>, String> {
        match slot {
            Slot::Json(name) => match object.get(name) {
                None | Some(Value::Null) => Err(format!("no field {name:?}")),
                Some(v) => Ok(Some(v)),
            },
            Slot::Literal(_) => Ok(None),
            _ => Err("field of another format".into()),
        }
    };
    event.time_us = match field(time)? {
        Some(Value::Number(n)) => log_time::parse_epoch(&n.to_string()),
        Some(Value::String(s)) => log_time::parse_any(s),
        _ => None,
    }
    .ok_or_else(|| "the time does not parse".to_owned())?;
    for (slot, value) in slots.iter().zip(event.values.iter_mut()) {
        value.clear();
        match (field(slot)?, slot) {
            (Some(Value::String(s)), _) => value.push_str(s),
            (Some(other), _) => value.push_str(&other.to_string()),
            (None, Slot::Literal(text)) => value.push_str(text),
            (None, _) => {}
        }
    }
    Ok(())
}

fn fill_csv(
    record: &csv::StringRecord,
    time: &Slot,
    slots: &[Slot],
    event: &mut Event,
) -> Result<(), String> {
    let column = |i: usize| {
        record
            .get(i)
            .ok_or_else(|| format!("{} columns, no column {}", record.len(), i + 1))
    };
    let Slot::Csv(t) = time else {
        return Err("no time column".into());
    };
    let text = column(*t)?;
    event.time_us = log_time::parse_any(text)
        .ok_or_else(|| format!("time \"{}\" does not parse", Printable::new(text)))?;
    for (slot, value) in slots.iter().zip(event.values.iter_mut()) {
        value.clear();
        match slot {
            Slot::Csv(i) => value.push_str(column(*i)?),
            Slot::Literal(text) => value.push_str(text),
            _ => return Err("field of another format".into()),
        }
    }
    Ok(())
}
