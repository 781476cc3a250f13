//! What stops a replay or a simulation before it produces a report.
//!
//! An error is printed to a terminal and may quote the log (the first JSON object's keys):
//! such text is shown through [`Printable`], escaped and cut.

use crate::log_format::LogFormat;
use crate::printable::Printable;

/// Why a replay or a simulation could not run. Lines of a log that cannot be read do not stop
/// a replay: they are counted in the report.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The log could not be read.
    #[error("reading the log: {0}")]
    Read(#[source] std::io::Error),
    /// The log has no line that is not blank: nothing to replay (and no header or first
    /// object to take its fields from).
    #[error("the log is empty: no line to replay")]
    EmptyLog,
    /// A CSV log's header (its first line) is longer than [`crate::log_reader::MAX_LINE`]:
    /// no header is that long, and it would be held whole.
    #[error(
        "the first line is {bytes} bytes, longer than {} (not a CSV header; give --format if the log is in another format)",
        crate::log_reader::MAX_LINE
    )]
    HeaderTooLong {
        /// Its length.
        bytes: usize,
    },
    /// A CSV log's header (its first record) cannot be read: a quote left open, bytes that are
    /// not UTF-8. Without it there are no fields to key by.
    #[error("the CSV header (line {line}) cannot be read: {reason}")]
    BadHeader {
        /// Its line.
        line: u64,
        /// Why.
        reason: String,
    },
    /// The log must be read more than once (`--report`, `--suggest`) but is not a regular
    /// file (a pipe, a terminal): a second read would find it empty.
    #[error(
        "{} is not a regular file (a pipe?), and {needs} reads the log more than once: write the log to a file first",
        Printable::new(path)
    )]
    NotRereadable {
        /// The log's path, as given ([`Printable`]).
        path: String,
        /// The options that need a second read.
        needs: String,
    },
    /// `--key` (or the time field) names a field the log does not have.
    #[error(
        "field \"{}\" is not in the log ({format} format; its fields: {})",
        Printable::new(field),
        Printable::message(&known.join(", "))
    )]
    UnknownField {
        /// The field asked for.
        field: String,
        /// The log's format.
        format: LogFormat,
        /// The fields it has.
        known: Vec<String>,
    },
    /// A limit is keyed by a part no `--key` fills.
    #[error(
        "limit {limit:?} is keyed by {part:?}, which no --key maps (add --key {part}=$<field>)"
    )]
    UnmappedPart {
        /// The limit.
        limit: String,
        /// Its key part.
        part: String,
    },
    /// A `--key` specification is malformed.
    #[error("{}", Printable::message(.0))]
    Mapping(String),
    /// Nothing to replay: no limit given (or none left after `--limit`).
    #[error("no limit to replay")]
    NoLimits,
    /// Two limits of one replay have the same name: their keys, built from the name, would
    /// share counters, and each would see the other's requests.
    #[error("limit {0:?} is replayed twice: two limits of one replay need two names")]
    DuplicateLimit(String),
    /// `--candidates` gives one value twice.
    #[error("--candidates gives {0} twice")]
    DuplicateCandidate(u64),
    /// A simulation option out of range.
    #[error("{option} {value}: {reason}")]
    BadOption {
        /// The option (`--rate`).
        option: &'static str,
        /// Its value, as given.
        value: String,
        /// What it must be.
        reason: String,
    },
    /// A simulation would generate more requests than it holds
    /// ([`crate::simulate::MAX_EVENTS`]).
    #[error(
        "simulate {scenario} would generate {events} requests, more than the {} a simulation holds: lower {options}",
        crate::simulate::MAX_EVENTS
    )]
    TooManyEvents {
        /// The scenario.
        scenario: crate::scenario::Scenario,
        /// How many it would generate.
        events: u128,
        /// The options that set it (`--rate or --periods`).
        options: &'static str,
    },
    /// A limit named by `--limit` is not in the config.
    #[error("limit {0:?} is not in the config")]
    UnknownLimit(String),
    /// A limit of a simulation could not be built.
    #[error(transparent)]
    Limit(#[from] tollgate::LimitError),
    /// A simulation's call was refused as invalid (a bug of the simulation, said plainly).
    #[error("a simulated call was invalid: {0}")]
    Check(#[from] tollgate::CheckError),
    /// Writing the report failed.
    #[error("writing the report to {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A Redis scenario failed against Redis.
    #[error("redis: {}", Printable::message(.0))]
    Redis(String),
}
