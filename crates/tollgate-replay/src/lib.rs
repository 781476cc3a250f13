//! `tollgate replay` and `tollgate simulate`: what a limit would do, before it is deployed.
//!
//! Choosing a limit is otherwise guesswork. A replay runs the limits of a config over an
//! access log on the log's own clock, with the real rules (the memory store `tollgate serve`
//! embeds), and reports per limit what it would have admitted and refused, whom, and with
//! which waits. A simulation does the same with synthetic traffic (a steady rate, bursts at a
//! window's edge, bots, retry storms, concurrent workers), every algorithm side by side, and
//! states the outcome each scenario should have. Both write a terminal summary and, on
//! request, an HTML page of SVG charts.
//!
//! The crate has no command line: `tollgate replay` and `tollgate simulate` (crates/tollgate-
//! server) are thin shells over [`replay_log()`] and [`simulate()`].

pub mod chart;
pub mod key_count;
pub mod key_mapping;
pub mod key_timeline;
pub mod limit_stats;
pub mod log_format;
pub mod log_reader;
pub mod log_time;
pub mod naive_fixed_window;
mod pacing_sim;
pub mod printable;
pub mod replay_error;
pub mod replay_log;
pub mod replayer;
pub mod report;
pub mod scenario;
pub mod sim_options;
pub mod simulate;
pub mod suggest;
pub mod suggestion;
pub mod timeline;
pub mod utc;
mod xorshift;

pub use key_mapping::{KeyMapping, PartSource};
pub use limit_stats::LimitStats;
pub use log_format::LogFormat;
pub use log_reader::{Event, LogReader, Malformed};
pub use printable::Printable;
pub use replay_error::ReplayError;
pub use replay_log::{LogOptions, Route, check_rereadable, replay_log, replay_log_routed};
pub use replayer::Replayer;
pub use report::{Expectation, Report};
pub use scenario::{SCENARIOS, Scenario};
pub use simulate::{ALGORITHMS, SimOptions, simulate};
pub use suggest::{SuggestOptions, Suggestion, suggest};
pub use timeline::{KeyTimeline, key_timelines};
