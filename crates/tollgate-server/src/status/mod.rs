//! What the service remembers of itself, for the status page (`GET /`, `/v1/status`,
//! `/v1/history`), `/readyz` and `/metrics`; and the page itself.
//!
//! Each part keeps one kind of figure, bounded in memory whatever the traffic, and knows
//! nothing of HTTP: [`crate::http`] turns them into JSON. Kept apart from the handlers so
//! that the recorder ([`crate::metrics`]) and the reloader can feed them without depending on
//! the API.
//!
//! - [`observed`]: decisions per limit and store latencies, copied from the metrics as they
//!   are recorded; [`latency_window`]: the last minute of those latencies, as percentiles;
//! - [`rate_history`]: decisions per second, from the counts' history;
//! - [`history`]: the last hour, sampled, and the store's outages;
//! - `store_probe`: the store's health probe, shared by `/readyz`, the scrape and the page;
//! - [`reload_status`]: whether the config file is watched and how the last reload went;
//! - [`panic_record`]: how many panics, and where the last one was;
//! - `page`: the page's HTML, script and style sheet, embedded in the binary.

pub mod history;
pub mod latency_window;
pub mod observed;
pub(crate) mod page;
pub mod panic_record;
pub mod rate_history;
pub mod reload_status;
pub(crate) mod store_probe;
