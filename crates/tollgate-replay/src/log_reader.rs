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
//! hostile line can neither end the replay nor take memory without bound. A CSV record is
//! bounded the same way ([`MAX_LINE`] bytes, [`MAX_RECORD_LINES`] lines): a stray `"` is one
//! malformed line, not the rest of the log held as one field.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::io::{self, BufRead, Read as _};

use csv_core::ReadRecordResult;
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
    Lines { reader: Rest<R>, buf: Vec<u8> },
    Csv(Box<CsvRecords<R>>),
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
                let mut csv = CsvRecords::new(sniffed.rest(reader));
                match csv.next_record().map_err(ReplayError::Read)? {
                    Some(Ok(_)) => {}
                    Some(Err(Malformed { line, reason })) => {
                        return Err(ReplayError::BadHeader { line, reason });
                    }
                    None => return Err(ReplayError::EmptyLog),
                }
                let header = (0..csv.record.len())
                    .map(|i| csv.record.get(i).unwrap_or_default().trim().to_owned())
                    .collect();
                (Inner::Csv(Box::new(csv)), header)
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
                Inner::Csv(csv) => csv.bytes,
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
            Inner::Csv(csv) => match csv.next_record() {
                Ok(None) => None,
                Ok(Some(Ok(line))) => {
                    event.line = line;
                    let result = fill_csv(&csv.record, &self.time, &self.slots, event);
                    Some(result.map_err(|reason| Malformed { line, reason }))
                }
                Ok(Some(Err(malformed))) => {
                    event.line = malformed.line;
                    Some(Err(malformed))
                }
                Err(e) => {
                    self.done = true;
                    Some(Err(Malformed {
                        line: csv.line + 1,
                        reason: format!("read failed: {e}"),
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

/// The most lines one CSV record may span (a quoted field may hold line breaks). A record is
/// also bounded by [`MAX_LINE`] bytes in all. Bounded by lines too so that the lines of a
/// record that is never closed, read again one by one ([`CsvRecords`]), cost a bounded
/// number of reads each: a log of lines that each open a quote is read in linear time.
pub const MAX_RECORD_LINES: usize = 16;

/// One CSV record's fields, unquoted, as [`csv_core::Reader::read_record`] writes them: their
/// bytes one after the other, and where each ends. Reused from record to record; its buffers
/// grow when csv-core finds them full, and never past twice a record's bytes (its fields are
/// never longer than it, and a record is at most [`MAX_LINE`] bytes).
#[derive(Debug, Default)]
struct CsvRecord {
    /// The fields' bytes (`bytes[..used]`), then room.
    bytes: Vec<u8>,
    used: usize,
    /// Where each field ends in `bytes` (`ends[..fields]`), then room.
    ends: Vec<usize>,
    fields: usize,
}

impl CsvRecord {
    fn len(&self) -> usize {
        self.fields
    }

    /// Its field `i`, if it has one and it is UTF-8 (every field is checked when the record
    /// is read: [`CsvRecords::checked`]).
    fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends[..self.fields].get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        std::str::from_utf8(&self.bytes[start..end]).ok()
    }

    fn clear(&mut self) {
        self.used = 0;
        self.fields = 0;
    }

    /// Feeds `input` (not empty: csv-core takes an empty input for the end of the log) to
    /// `parser`, the fields it reads going into this record: whether the record ended in
    /// `input`, and how many bytes of `input` were read.
    fn read(&mut self, parser: &mut csv_core::Reader, input: &[u8]) -> (bool, usize) {
        let mut read = 0;
        loop {
            let (result, nin, nout, nend) = parser.read_record(
                &input[read..],
                &mut self.bytes[self.used..],
                &mut self.ends[self.fields..],
            );
            read += nin;
            self.used += nout;
            self.fields += nend;
            match result {
                ReadRecordResult::Record => return (true, read),
                ReadRecordResult::OutputFull => grow(&mut self.bytes),
                ReadRecordResult::OutputEndsFull => grow(&mut self.ends),
                // `End` answers an empty input only.
                ReadRecordResult::InputEmpty | ReadRecordResult::End => return (false, read),
            }
        }
    }
}

/// Doubles a [`CsvRecord`] buffer csv-core found full.
fn grow<T: Copy + Default>(buf: &mut Vec<T>) {
    buf.resize((buf.len() * 2).max(64), T::default());
}

/// The records of a CSV log, each bounded: a record longer than [`MAX_LINE`] or spanning
/// more than [`MAX_RECORD_LINES`] lines, or whose quote is still open at the end of the log,
/// is malformed, and reading goes on at the line after its first. (The `csv` crate has no
/// bound: one stray `"` made the rest of the log one field, held whole, and the replay
/// reported it as one line.) The fields are csv-core's, read as the `csv` crate read them;
/// the bounds are ours: csv-core is given a record line by line, and a line more only while a
/// quoted field is open at the end of the last.
#[derive(Debug)]
struct CsvRecords<R> {
    reader: Rest<R>,
    /// The lines after the first of a record found malformed, to be read again as records
    /// of their own (at most one record's: [`MAX_RECORD_LINES`] lines, 2 × [`MAX_LINE`]
    /// bytes).
    again: io::Cursor<Vec<u8>>,
    /// Lines of `again` that stand for a line longer than [`MAX_LINE`] (an empty line in its
    /// place): their numbers and lengths.
    overlong: VecDeque<(u64, usize)>,
    /// The number of the last line read.
    line: u64,
    /// Bytes read from the log (not again).
    bytes: u64,
    /// The CSV parser, with the `csv` crate's settings (which read these logs before): `,`
    /// between fields, `"` around them (`""` in a quoted field is a quote), a record ended
    /// by CR, LF or CRLF.
    parser: csv_core::Reader,
    /// The lines of the record being read after its first.
    buf: Vec<u8>,
    /// One line.
    line_buf: Vec<u8>,
    /// Where the bytes of `line_buf` not read yet start: a lone CR ends a record too, and the
    /// rest of its line is the next record.
    rest: usize,
    /// The last record read.
    record: CsvRecord,
}

/// A line [`CsvRecords::read_line`] read into its `line_buf`.
#[derive(Debug, Clone, Copy)]
struct LineRead {
    number: u64,
    /// Its length, when longer than [`MAX_LINE`] (`line_buf` is then empty).
    overlong: Option<usize>,
    /// Whether it stands in `again` for an overlong line already.
    stand_in: bool,
}

impl<R: BufRead> CsvRecords<R> {
    fn new(reader: Rest<R>) -> Self {
        CsvRecords {
            reader,
            again: io::Cursor::new(Vec::new()),
            overlong: VecDeque::new(),
            line: 0,
            bytes: 0,
            parser: csv_core::Reader::new(),
            buf: Vec::new(),
            line_buf: Vec::new(),
            rest: 0,
            record: CsvRecord::default(),
        }
    }

    /// The next line, from `again` first, into `line_buf`: `None` at the end of the log.
    fn read_line(&mut self) -> io::Result<Option<LineRead>> {
        let again = self.again.position() < self.again.get_ref().len() as u64;
        let (n, whole) = if again {
            read_line_capped(&mut self.again, &mut self.line_buf)?
        } else {
            let read = read_line_capped(&mut self.reader, &mut self.line_buf)?;
            self.bytes += read.0 as u64;
            read
        };
        self.rest = 0;
        if n == 0 {
            return Ok(None);
        }
        self.line += 1;
        let stand_in = self.overlong.front().filter(|&&(l, _)| l == self.line);
        Ok(Some(LineRead {
            number: self.line,
            overlong: stand_in.map(|&(_, bytes)| bytes).or((!whole).then_some(n)),
            stand_in: stand_in.is_some(),
        }))
    }

    /// Reads the next record into `record`: its first line's number; `Some(Err)` for a
    /// record that cannot be read; `None` at the end of the log.
    fn next_record(&mut self) -> io::Result<Option<Result<u64, Malformed>>> {
        let first = loop {
            if !self.line_buf[self.rest..].trim_ascii().is_empty() {
                break self.line;
            }
            let Some(line) = self.read_line()? else {
                return Ok(None);
            };
            if let Some(bytes) = line.overlong {
                if line.stand_in {
                    self.overlong.pop_front();
                }
                return Ok(Some(Err(Malformed {
                    line: line.number,
                    reason: overlong(bytes),
                })));
            }
        };
        self.buf.clear();
        self.record.clear();
        let mut size = self.line_buf.len() - self.rest;
        let mut lines = 1;
        let reason = loop {
            let (ended, read) = self
                .record
                .read(&mut self.parser, &self.line_buf[self.rest..]);
            self.rest += read;
            if ended {
                return Ok(Some(self.checked(first)));
            }
            // A line end outside quotes ends a record: with none, this is the log's last
            // line, and a line end tells whether a quoted field is still open.
            if !self.line_buf.ends_with(b"\n") {
                if self.record.read(&mut self.parser, b"\n").0 {
                    return Ok(Some(self.checked(first)));
                }
                break "a quoted field is not closed before the end of the log".to_owned();
            }
            if lines == MAX_RECORD_LINES {
                break format!("a quoted field is not closed within {MAX_RECORD_LINES} lines");
            }
            match self.read_line()? {
                None => {
                    break "a quoted field is not closed before the end of the log".to_owned();
                }
                Some(line) if line.overlong.is_some() => {
                    // Read again as an empty line standing for it.
                    if !line.stand_in {
                        self.overlong
                            .push_back((line.number, line.overlong.unwrap_or_default()));
                    }
                    self.buf.push(b'\n');
                    break format!("a quoted field is not closed within {MAX_LINE} bytes");
                }
                Some(_) => {
                    self.buf.extend_from_slice(&self.line_buf);
                    lines += 1;
                    size += self.line_buf.len();
                    if size > MAX_LINE {
                        break format!("a quoted field is not closed within {MAX_LINE} bytes");
                    }
                }
            }
        };
        // Malformed: csv-core starts afresh, and the record's lines after its first are read
        // again, before what `again` still holds (they came from it, or after it).
        self.parser.reset();
        self.rest = self.line_buf.len();
        if !self.buf.is_empty() {
            let mut again = std::mem::take(&mut self.buf);
            let rest = usize::try_from(self.again.position()).unwrap_or(usize::MAX);
            again.extend_from_slice(self.again.get_ref().get(rest..).unwrap_or_default());
            self.again = io::Cursor::new(again);
            self.line = first;
        }
        Ok(Some(Err(Malformed {
            line: first,
            reason,
        })))
    }

    /// The record just read, whose first line is `first`, unless a field is not UTF-8 (as
    /// the `csv` crate's `StringRecord` refused it). It was read whole: its lines are not read
    /// again.
    fn checked(&self, first: u64) -> Result<u64, Malformed> {
        if (0..self.record.len()).all(|i| self.record.get(i).is_some()) {
            Ok(first)
        } else {
            Err(Malformed {
                line: first,
                reason: "not UTF-8 (a CSV record must be)".to_owned(),
            })
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
/// reading, with the part read held, so that the bytes given back are the log's own (the
/// reader then finds that line overlong itself).
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
        Some(Value::Number(n)) => json_epoch(n),
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

/// Whole numbers from here on are not all doubles: a JSON number held as an `f64` at or past
/// 2⁵³ is no longer exact to the unit.
const F64_EXACT: f64 = 9_007_199_254_740_992.0;

/// A JSON number's time, by its value whatever its notation (`1.7962871165e9` is
/// `1796287116.5`), told seconds, milliseconds or microseconds by its size as an epoch
/// string is ([`log_time::epoch_us`]).
///
/// Not through the number's text: serde_json writes a large double with an exponent
/// (`1.796287116e18`), which [`log_time::parse_epoch`] would read as 1 s and a fraction —
/// 1970. So an integer is read as one, and any other number (a fraction, an exponent, an
/// integer past `u64`, all held as doubles) only when it is not negative and below 2⁵³,
/// where a double still holds every whole number: past it, the time would be a rounded
/// one, and it is malformed instead (a nanosecond epoch among them: in microseconds it is
/// past year 9999 anyway).
fn json_epoch(n: &serde_json::Number) -> Option<u64> {
    if let Some(whole) = n.as_u64() {
        return log_time::epoch_us(whole, 0);
    }
    let value = n.as_f64()?;
    if !(0.0..F64_EXACT).contains(&value) {
        return None;
    }
    // `f64`'s `Display` is the shortest decimal that reads back as the same double, and
    // never has an exponent: `1796287116.5`, not `1.7962871165e9`.
    log_time::parse_epoch(&value.to_string())
}

fn fill_csv(
    record: &CsvRecord,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The `csv` crate's records of `log`, as this reader read CSV before.
    fn csv_crate(log: &str) -> Vec<Vec<String>> {
        csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .from_reader(log.as_bytes())
            .records()
            .map(|r| r.expect("csv").iter().map(str::to_owned).collect())
            .collect()
    }

    /// What [`CsvRecords`] reads of `log`: each record's first line and fields, or the line
    /// of a malformed one.
    fn records(log: &str) -> Vec<Result<(u64, Vec<String>), u64>> {
        let mut csv = CsvRecords::new(io::Cursor::new(Vec::new()).chain(log.as_bytes()));
        let mut read = Vec::new();
        while let Some(record) = csv.next_record().expect("read") {
            read.push(match record {
                Ok(line) => Ok((
                    line,
                    (0..csv.record.len())
                        .map(|i| csv.record.get(i).unwrap_or_default().to_owned())
                        .collect(),
                )),
                Err(malformed) => Err(malformed.line),
            });
        }
        read
    }

    /// Well-formed records are read line by line as the `csv` crate read them whole: quotes,
    /// doubled quotes, commas and line breaks in quotes, text after a closing quote, empty
    /// fields and lines, a quote inside an unquoted field, CRLF, a lone CR, a BOM, no line
    /// end at the end, a field longer than csv-core's first buffer.
    #[test]
    fn records_are_read_as_the_csv_crate_read_them() {
        let long = format!(
            "{},\"{}\n{}\"\n",
            "y".repeat(1_000),
            "z,".repeat(3_000),
            "\"\"".repeat(500)
        );
        for log in [
            "a,b,c\n",
            "a,b,c",
            "a,,\n,\n",
            "\"a,b\",c\n\"\",x\r\n",
            "\"say \"\"hi\"\"\",\"\"\"\"\n",
            "Mozilla \"5.0\",b\n \"a\" ,b\n",
            "x,\"ab\"cd\ny\n",
            "\"two\nlines\",b\n\"two\r\nlines\"\r\nc,d",
            "a,\"b\"",
            "a,b\rc,d\r\n\ne\n\n",
            "\u{feff}time,user\n1,a\n",
            "caf\u{e9},\"\u{1f600}\"\n",
            &long,
        ] {
            let fields: Vec<Vec<String>> = records(log)
                .into_iter()
                .map(|r| r.map(|(_, fields)| fields).expect("a record"))
                .collect();
            assert_eq!(fields, csv_crate(log), "{log:?}");
        }
    }

    /// A record is numbered by its first line; one a lone CR ended is followed by the rest
    /// of its line, on the same line.
    #[test]
    fn records_keep_their_first_line() {
        let lines: Vec<u64> = records("a\n\"b\nc\"\rd\n\ne\n")
            .into_iter()
            .map(|r| r.expect("a record").0)
            .collect();
        assert_eq!(lines, [1, 2, 3, 5]);
    }

    /// Where this reader is stricter: a quote left open to the end of the log is malformed,
    /// and its lines after the first are read again (the `csv` crate made them one field).
    #[test]
    fn a_quote_open_at_the_end_is_malformed() {
        let log = "t,\"bob\nt2,carol\n";
        assert_eq!(csv_crate(log), [["t", "bob\nt2,carol\n"]]);
        assert_eq!(
            records(log),
            [Err(1), Ok((2, vec!["t2".to_owned(), "carol".to_owned()]))]
        );
        assert_eq!(records("t,\"bob"), [Err(1)]);
    }
}
