//! [`FieldError`]: what is wrong with one field, keeping the typed cause.
//!
//! Its message is the reason alone (`must be at least 1ms`); [`super::ConfigError`] adds the
//! file and the field. Causes from other crates keep their type: the core's
//! [`LimitError`] (whose own message starts with the bare field name, so the reason is
//! rendered from its fields), the Envoy rules' [`RulesError`], TOML's parse error.

use tollgate::{LimitError, UnknownAlgorithm};
use tollgate_envoy::{ImportError, RulesError};

use super::{AddressError, RedisUrlError};
use crate::duration::DurationError;

/// Why one field is invalid.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FieldError {
    /// TOML syntax, a missing or unknown field, a value of the wrong type (boxed: it is large
    /// and rare).
    #[error("{}", .0.message().trim_end())]
    Toml(#[source] Box<toml::de::Error>),
    /// A malformed duration.
    #[error(transparent)]
    Duration(#[from] DurationError),
    /// A malformed listen address.
    #[error(transparent)]
    Address(#[from] AddressError),
    /// A malformed Redis URL.
    #[error(transparent)]
    RedisUrl(#[from] RedisUrlError),
    /// An algorithm name that is not one of the five.
    #[error(transparent)]
    Algorithm(#[from] UnknownAlgorithm),
    /// The core refused a quota, limit or name.
    #[error("{}", limit_reason(.0))]
    Limit(#[source] LimitError),
    /// An `[envoy]` rule that does not fit the limits.
    #[error("{}", .0.reason)]
    Envoy(#[source] RulesError),
    /// A file of `envoy.config_dir` (the reference service's YAML) is invalid; its message
    /// names the file and the path in it.
    #[error(transparent)]
    Import(Box<ImportError>),
    /// `server.grpc` is where `server.http` listens already: the second bind would fail.
    #[error("{0} is where server.http listens: give gRPC its own port or socket")]
    SameListener(String),
    /// `server.admin_token` is too short to be a secret.
    #[error("must be at least 8 characters")]
    TokenTooShort,
    /// `server.admin_token` holds a character a bearer token cannot carry: it could never
    /// match (HTTP trims a header's spaces, and a header value is ASCII).
    #[error(
        "may hold only visible ASCII characters, no spaces (a token read from a file with its \
         final newline?): a client could never send it"
    )]
    TokenNotSendable,
    /// More than one of `store.redis`, `store.cluster` and `store.sentinel`.
    #[error("give one of redis, cluster or sentinel (not both, not several)")]
    RedisAndCluster,
    /// A field that needs another (`tls_cert` without `tls_key`, `sentinel` without
    /// `sentinel_master`).
    #[error("needs {0} too")]
    Needs(&'static str),
    /// Two fields that exclude each other (`password` and `password_file`).
    #[error("give either this or {0}, not both")]
    Excludes(&'static str),
    /// A TLS option for a store reached without TLS.
    #[error("applies to TLS only: use rediss:// URLs (or sentinels that name TLS nodes)")]
    NotTls,
    /// A file that cannot be read.
    #[error("cannot read {path}: {source}")]
    File {
        /// The path as resolved.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A file that holds no PEM block of the kind expected.
    #[error("{path} holds no PEM {what}")]
    NotPem {
        /// The path as resolved.
        path: String,
        /// `certificate` or `private key`.
        what: &'static str,
    },
    /// `server.tls_*` with no TCP listener to serve TLS on: a `unix:` listener is plaintext,
    /// so the certificate and the client checks would apply to nothing.
    #[error(
        "TLS is configured but no listener is TCP ({0}): a unix: socket is served in \
         plaintext, so the certificate and the client certificate checks would apply to \
         nothing; remove the tls_* fields (a socket's access is its file mode, \
         server.unix_mode) or listen on TCP"
    )]
    TlsWithoutTcp(String),
    /// `server.tls_client_names` with the gRPC listener on a `unix:` socket (plaintext): the
    /// names would never be checked.
    #[error(
        "server.grpc is a unix: socket ({0}), served in plaintext: the names would never be \
         checked; remove tls_client_names or serve gRPC on TCP"
    )]
    NamesWithoutTlsGrpc(String),
    /// `server.tls_client_names` without `server.grpc`: the names are checked on gRPC only,
    /// the HTTP API takes any certificate from the CA.
    #[error(
        "the names are checked on the gRPC listener only, and there is no server.grpc: the \
         HTTP API takes any certificate from the CA; remove tls_client_names or add server.grpc"
    )]
    NamesWithoutGrpc,
    /// `server.tls_client_names = []` with a client CA: an allow-list that checks nothing.
    #[error(
        "an empty list names no client, so it would check nothing: list the allowed clients' \
         names, or remove the field to accept any certificate from tls_client_ca"
    )]
    NoClientNames,
    /// A `server.tls_client_names` entry with `*`: names are compared exactly.
    #[error(
        "{0:?}: names are compared exactly, so a `*` would never match: list each client's \
         name (a SPIFFE ID, a DNS name, a common name)"
    )]
    WildcardName(String),
    /// A `server.tls_client_names` entry with whitespace at an end or a control character:
    /// no certificate name a client could present matches it.
    #[error(
        "{0:?}: a name with whitespace at an end or a control character matches no \
         certificate's name: write the name alone"
    )]
    UnmatchableName(String),
    /// `server.unix_mode` beyond the permission bits (`660` written for `0o660`).
    #[error("{0:#o} is not a file mode: write permission bits in octal, e.g. 0o660")]
    NotAMode(u32),
    /// An empty value where one is required.
    #[error("must not be empty")]
    Empty,
    /// `store.cluster = []`.
    #[error("must list at least one node")]
    NoClusterNodes,
    /// `store.timeout` outside 1ms..30s.
    #[error("must be between 1ms and 30s")]
    TimeoutOutOfRange,
    /// A `[server]` timeout outside its range.
    #[error("must be between {} and {}", crate::duration::format(*.min), crate::duration::format(*.max))]
    DurationOutOfRange {
        /// The shortest accepted.
        min: std::time::Duration,
        /// The longest accepted.
        max: std::time::Duration,
    },
    /// A count that must not be zero.
    #[error("must be at least 1")]
    Zero,
    /// A count above its maximum.
    #[error("must be at most {0}")]
    TooLarge(usize),
    /// A field of another algorithm (`burst` on a fixed window).
    #[error("only applies to {0}")]
    NotForAlgorithm(&'static str),
    /// A limit `mode` that is neither `exact` nor `lease`.
    #[error("{0:?} is not a mode: use \"exact\" (the default) or \"lease\"")]
    UnknownMode(String),
    /// A lease setting on a limit not in lease mode.
    #[error("only applies to mode = \"lease\"")]
    NotForMode,
    /// A limit name under `envoy.override.`: the Envoy limit overrides' counters are theirs.
    #[error(
        "{0:?} is reserved: names starting with \"envoy.override.\" are the Envoy limit overrides'"
    )]
    ReservedName(String),
    /// Two limits with one name.
    #[error("{name:?} is already the name of limits[{first}]")]
    DuplicateName {
        /// The name.
        name: String,
        /// The index of the limit that has it first.
        first: usize,
    },
}

/// The reason of a core [`LimitError`] without its leading field name (the config error
/// names the field itself, as written: `limits[1].period`).
fn limit_reason(e: &LimitError) -> String {
    match e {
        LimitError::Zero { .. } => "must be at least 1".to_owned(),
        LimitError::TooSmall { min, .. } => format!("must be at least {min}"),
        LimitError::TooLarge { max, .. } => format!("must be at most {max}"),
        LimitError::InvalidName { value, reason, .. } => format!("{value:?} is invalid: {reason}"),
        // A variant added to the core later: its own message, field name included.
        other => other.to_string(),
    }
}
