//! `tollgate replay`: a log, streamed, through a [`Replayer`], into a [`Report`].

use std::io::BufRead;

use tollgate::Limit;

use crate::key_mapping::KeyMapping;
use crate::log_format::LogFormat;
use crate::log_reader::{Event, LogReader};
use crate::replay_error::ReplayError;
use crate::replayer::Replayer;
use crate::report::{MALFORMED_SHOWN, Report};

/// How to read a log.
#[derive(Debug, Clone, Default)]
pub struct LogOptions {
    /// Its format; `None`: detected from the first line.
    pub format: Option<LogFormat>,
    /// The field holding each line's time (JSON, CSV; default `time`).
    pub time_field: Option<String>,
    /// Which field fills which key part.
    pub mapping: KeyMapping,
}

/// Replays the log `reader` against `limits`; `progress` is called now and then with the
/// bytes read so far.
///
/// # Errors
/// What stops a replay before its first line: an unknown field, a limit keyed by a part no
/// mapping fills, no limit ([`ReplayError`]). Malformed lines do not: they are in the report.
pub fn replay_log<R: BufRead>(
    reader: R,
    title: &str,
    limits: Vec<Limit>,
    options: &LogOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<Report, ReplayError> {
    let mut replayer = Replayer::new(limits, &options.mapping, false)?;
    let mut log = LogReader::new(
        reader,
        options.format,
        &options.mapping,
        options.time_field.as_deref(),
    )?;
    let mut report = Report {
        title: format!("{title} ({} format)", log.format()),
        ..Report::default()
    };
    let mut event = Event::default();
    while let Some(read) = log.next_event(&mut event) {
        report.lines += 1;
        match read {
            Ok(()) => {
                replayer.step(event.time_us, &event.values);
            }
            Err(malformed) => {
                report.malformed += 1;
                if report.malformed_examples.len() < MALFORMED_SHOWN {
                    report.malformed_examples.push(malformed);
                }
            }
        }
        if report.lines.is_multiple_of(65_536) {
            progress(log.bytes_read());
        }
    }
    progress(log.bytes_read());
    report.span_us = replayer.start_us().map(|s| (s, replayer.now_us()));
    report.out_of_order = replayer.out_of_order();
    report.limits = replayer.into_stats();
    Ok(report)
}
