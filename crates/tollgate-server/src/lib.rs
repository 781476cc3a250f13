//! The `tollgate` service: rate-limit decisions over HTTP, on the memory store or Redis.
//!
//! `main.rs` only parses the command line and wires these modules together; everything it
//! runs is here, so integration tests drive the same code in-process:
//! [`server::run`]`(listener, config, shutdown)`.

pub mod api;
/// The load generator of `tollgate bench` ([`tollgate_load`], with the `load` feature).
#[cfg(feature = "load")]
pub use tollgate_load as bench;
pub mod cli;
pub mod config;
mod connection;
pub mod duration;
pub mod history;
pub mod http;
pub mod latency_window;
pub mod limits;
pub mod metrics;
pub mod observed;
mod page;
mod process_metrics;
pub mod rate_history;
mod reload;
pub mod reload_status;
pub mod response;
pub mod server;
pub mod status;
pub mod store;
mod store_probe;
mod tee_recorder;
pub mod what_if;
