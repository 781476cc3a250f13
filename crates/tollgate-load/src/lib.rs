//! The load generator behind `tollgate bench`: drives a running service over its HTTP API
//! (`POST /v1/check`, [`run`]) or its Envoy rate limit service (gRPC `ShouldRateLimit`,
//! [`run_grpc`]) and reports decisions/s and latency ([`Report`]).
//!
//! A crate of its own so that the service does not carry a load tool's dependencies (hyper's
//! client, hdrhistogram, indicatif): `tollgate-server` uses it only behind its `load`
//! feature, on by default for the `tollgate` binary.
//!
//! Each of `concurrency` tasks holds one connection (keep-alive HTTP/1.1, or its own HTTP/2
//! channel for gRPC) and sends checks back to back (a closed loop, like `wrk`), cycling
//! through `keys` distinct key values so the store sees a realistic spread. Latency is
//! recorded per request in an HDR histogram (1 µs to 60 s, 3 significant digits). A progress
//! bar is drawn only when stdout is a terminal, so redirected output stays clean. Both modes
//! share the driving loop, the tally and the printed report; only one call differs.
//!
//! Every call and connect has a timeout ([`DEFAULT_TIMEOUT`], or the one given to
//! [`run_with_timeout`] / [`run_grpc_with_timeout`]): one without an answer by then counts as
//! `other`, and the run stops waiting shortly after its end whatever the service does, so the
//! report is always printed. A failed connection is counted the same way and retried until
//! the end. [`Report::verdict`] says whether the run measured anything (`tollgate bench`
//! exits non-zero when it did not).

mod clock;
mod drive;
mod error;
#[cfg(test)]
mod fake;
mod grpc;
mod http;
mod options;
mod report;
mod tally;
mod tls;

pub use error::LoadError;
pub use grpc::{run_grpc, run_grpc_with_timeout};
pub use http::{run, run_with_timeout};
pub use options::{BenchOptions, ClientTls, DEFAULT_TIMEOUT, GrpcTarget};
pub use report::{MAX_FAILED_PERCENT, QUIET_END, Report};
