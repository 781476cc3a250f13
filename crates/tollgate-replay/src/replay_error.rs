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
