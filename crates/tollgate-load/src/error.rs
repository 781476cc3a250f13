//! [`LoadError`]: why a load run could not start or finish.
//!
//! Failures of single calls during the run are not errors: they are counted as `other` in
//! the [`crate::Report`]. What is left is a service that cannot be reached or asked before
//! the clock starts, a bad target, failures of the tool itself, and a run whose report says
//! it measured nothing worth reading ([`crate::Report::verdict`]).

use std::time::Duration;

use tollgate_envoy::tonic;

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// `--url` is not a URI.
    #[error(transparent)]
    Uri(#[from] hyper::http::uri::InvalidUri),
    /// `--url` has no host.
    #[error("--url needs a host: {url}")]
    NoHost {
        /// The URL.
        url: String,
    },
    /// An `https://` URL without `--grpc`: the HTTP mode speaks plaintext only, and would
    /// otherwise send it to a TLS port unencrypted.
    #[error(
        "--url {url}: the HTTP bench speaks plaintext HTTP only (https:// is supported with --grpc)"
    )]
    HttpsWithoutGrpc {
        /// The URL.
        url: String,
    },
    /// `--url` has a scheme other than `http://` or `https://`.
    #[error("--url {url}: expected an http:// or https:// URL")]
    Scheme {
        /// The URL.
        url: String,
    },
    /// `--url` has a path or a query: the bench calls the service's own paths
    /// (`/v1/limits`, `/v1/check`), from its root.
    #[error("--url {url}: expected the service's base URL without a path (got {path:?})")]
    Path {
        /// The URL.
        url: String,
        /// The path and query.
        path: String,
    },
    /// `--timeout 0`: every call would time out.
    #[error("--timeout must be more than 0")]
    ZeroTimeout,
    /// A call made before the clock starts (connecting, `GET /v1/limits`, the gRPC probe) got
    /// no answer within the timeout: a service that accepts and never answers.
    #[error("no answer from {url} within {after:?} ({what})")]
    NoAnswer {
        /// The service's URL.
        url: String,
        /// What was asked.
        what: &'static str,
        /// The timeout.
        after: Duration,
    },
    /// `GET /v1/limits` failed or did not list the limit asked for.
    #[error("cannot list the limits of {url}")]
    ListLimits {
        /// The service's URL.
        url: String,
        /// Why.
        #[source]
        source: Box<LoadError>,
    },
    /// The service lists no limit by that name.
    #[error("the service has no limit named {0:?}")]
    UnknownLimit(String),
    /// The service lists no limit at all.
    #[error("the service has no limits")]
    NoLimits,
    /// A TLS file of [`crate::ClientTls`] cannot be used.
    #[error("{what} {}: {reason}", path.display())]
    TlsFile {
        /// `--cacert`, `--cert` or `--key`.
        what: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        reason: String,
    },
    /// An `https://` URL without `--cacert`.
    #[error("an https:// URL needs --cacert (the CA that signed the service's certificate)")]
    NoCa,
    /// A gRPC run without a descriptor entry.
    #[error("a gRPC bench needs at least one descriptor entry (--descriptor key=value)")]
    NoDescriptor,
    /// `--url` is not a gRPC endpoint.
    #[error("bad --url {url}")]
    Endpoint {
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: tonic::transport::Error,
    },
    /// The gRPC service cannot be reached.
    #[error("cannot connect to {url}")]
    Connect {
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: tonic::transport::Error,
    },
    /// The first `ShouldRateLimit` call, made before the clock starts, failed.
    #[error("ShouldRateLimit fails on {url}")]
    Probe {
        /// The URL.
        url: String,
        /// The status (boxed: it is large).
        #[source]
        source: Box<tonic::Status>,
    },
    /// A connection could not be opened.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The report could not be written to standard output (closed by its reader, say).
    #[error("cannot write the report")]
    Output(#[source] std::io::Error),
    /// An HTTP exchange failed.
    #[error(transparent)]
    Http(#[from] hyper::Error),
    /// An HTTP request could not be built.
    #[error(transparent)]
    Request(#[from] hyper::http::Error),
    /// `GET /v1/limits` did not answer JSON.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// A gRPC channel could not be opened.
    #[error(transparent)]
    Grpc(#[from] tonic::transport::Error),
    /// The latency histogram could not be created.
    #[error(transparent)]
    Histogram(#[from] hdrhistogram::CreationError),
    /// Two latency histograms could not be merged.
    #[error(transparent)]
    Merge(#[from] hdrhistogram::AdditionError),
    /// A load task panicked or was cancelled.
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
    /// The run ended without a single decision: every call failed (`other`), or none was made.
    #[error("no decisions: 0 allowed, 0 denied, {calls} other ({timed_out} of them timed out)")]
    NoDecisions {
        /// Calls made.
        calls: u64,
        /// Of them, calls that got no answer within the timeout.
        timed_out: u64,
    },
    /// More than [`crate::MAX_FAILED_PERCENT`] % of the calls failed (`other`): the numbers
    /// measure the failures as much as the service.
    #[error(
        "{other} of {calls} calls failed ({timed_out} of them timed out): more than {max} %",
        max = crate::MAX_FAILED_PERCENT
    )]
    TooManyFailures {
        /// Calls made.
        calls: u64,
        /// Of them, calls that failed.
        other: u64,
        /// Of those, calls that got no answer within the timeout.
        timed_out: u64,
    },
    /// The run ended failing: its last decision came well before its end, and calls failed
    /// after it (a service that died or went unavailable near the end).
    #[error(
        "the service stopped deciding {:.1} s into the {:.1} s run: calls failed after that",
        at.as_secs_f64(),
        duration.as_secs_f64()
    )]
    StoppedDeciding {
        /// When, from the start, the last decision came.
        at: std::time::Duration,
        /// The run's length.
        duration: std::time::Duration,
    },
}
