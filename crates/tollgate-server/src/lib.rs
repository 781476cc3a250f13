//! The `tollgate` service: rate-limit decisions over HTTP, on the memory store or Redis.
//!
//! `main.rs` only parses the command line and wires these modules together; everything it
//! runs is here, so integration tests drive the same code in-process:
//! [`server::run`]`(listener, config, shutdown)`.
//!
//! The modules, from the bottom up (each uses only those above it in this list, never one
//! below: `scripts/module-cycles` checks there is no circle):
//!
//! - `file`: a file the service reads (the config, certificates, password files): a regular
//!   file of 2 MiB at most, never a device or a FIFO;
//! - [`duration`], [`config`]: the TOML file (and its environment overrides) as typed values;
//! - [`store`], [`limits`]: the store chosen by config, and the limit set over it that a
//!   reload swaps whole;
//! - [`status`]: what the service remembers of itself for the status page (history, rates,
//!   latencies, the store's probe, the last reload) and the page's assets;
//! - [`metrics`]: the Prometheus recorder and the service's own series;
//! - [`tls`]: the listeners' certificates, checked, built into rustls configurations and
//!   swapped when they change;
//! - [`http`]: the HTTP API: JSON bodies, status codes, the shared state, the handlers;
//! - `connection`: what a client may hold (timeouts, the connection cap, the drain), under
//!   both listeners;
//! - [`server`]: running it all: start-up, the background tasks, reloads, shutdown;
//! - [`cli`]: the command line, `tollgate replay` and `tollgate simulate`.

/// The load generator of `tollgate bench` ([`tollgate_load`], with the `load` feature).
#[cfg(feature = "load")]
pub use tollgate_load as bench;
pub mod cli;
pub mod config;
mod connection;
pub mod duration;
pub(crate) mod file;
pub mod http;
pub mod limits;
pub mod metrics;
pub mod server;
pub mod status;
pub mod store;
pub mod tls;
