//! Why a request is refused, as values.
//!
//! Refusals leave the service as responses, not errors (axum wants services that cannot fail),
//! so these types serve the pluggable [`Responder`](crate::Responder) and anyone who inspects a
//! response: a refused response carries its [`Rejection`] in its extensions.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use tollgate::{CheckError, StoreErrorKind};

/// A request refused because a quota is used up (HTTP 429).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimited {
    /// The limit that refused (the one whose denial lasts longest).
    pub limit: Arc<str>,
    /// When the same request would pass, exact (the wire rounds it up to whole seconds).
    pub retry_after: Duration,
}

/// Why no key could be taken from a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The connection's peer address is not in the request's extensions: the server was not
    /// started with connect info (axum: `into_make_service_with_connect_info::<SocketAddr>()`).
    #[error("the peer address is unknown: serve with connect info")]
    NoPeerAddress,
    /// A trusted proxy sent a forwarding header entry that is not an IP address.
    #[error("{header} entry {entry:?} from a trusted proxy is not an IP address")]
    BadForwardedEntry {
        /// The header read.
        header: &'static str,
        /// The entry, cut to 64 characters.
        entry: String,
    },
    /// The request lacks a header the key is made of.
    #[error("missing header {0}")]
    MissingHeader(String),
    /// An earlier layer should have put this value in the request's extensions (an
    /// authentication layer, for a user id) and did not.
    #[error("no {0} in the request extensions: is the layer that sets it placed before this one?")]
    MissingExtension(&'static str),
    /// A key part's value is longer than any face of tollgate accepts
    /// ([`tollgate::MAX_KEY_VALUE`] bytes).
    #[error("key part {part:?} is longer than {max} bytes")]
    TooLong {
        /// The part's name.
        part: String,
        /// The longest value accepted.
        max: usize,
    },
}

impl KeyError {
    /// The default status: 400 when the request is at fault, 500 when the server's setup is.
    pub fn status(&self) -> StatusCode {
        match self {
            KeyError::BadForwardedEntry { .. }
            | KeyError::MissingHeader(_)
            | KeyError::TooLong { .. } => StatusCode::BAD_REQUEST,
            KeyError::NoPeerAddress | KeyError::MissingExtension(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }
}

/// Why the layer answered instead of the inner service.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Rejection {
    /// A quota is used up: 429.
    RateLimited(RateLimited),
    /// The store failed and a limit's policy is `deny`: 503 (the client is not at fault).
    StoreUnavailable {
        /// The store failure.
        error: Option<StoreErrorKind>,
        /// When to try again.
        retry_after: Duration,
    },
    /// No key could be taken from the request.
    NoKey(KeyError),
    /// The request can never pass as asked: its cost exceeds what a limit can ever admit (413).
    TooCostly {
        /// The limit.
        limit: String,
        /// The request's cost.
        cost: u64,
        /// The most that limit admits at once.
        capacity: u64,
    },
    /// The check could not be made (a misconfiguration, e.g. a limit keyed by a part the key
    /// extractor does not give): 500. The message is logged, not sent.
    Invalid(Arc<CheckError>),
    /// Deciding panicked (a bug in the key extractor, the cost function, the limiter or the
    /// store): 500. The panic's message is logged, not sent.
    Panicked,
}

impl Rejection {
    /// The default status for this rejection.
    pub fn status(&self) -> StatusCode {
        match self {
            Rejection::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
            Rejection::StoreUnavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Rejection::NoKey(e) => e.status(),
            Rejection::TooCostly { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Rejection::Invalid(_) | Rejection::Panicked => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// When to retry, if retrying can help.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Rejection::RateLimited(r) => Some(r.retry_after),
            Rejection::StoreUnavailable { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }

    /// A short sentence for the client. Server-side details (a misconfiguration, the store's
    /// error) are not in it.
    pub fn detail(&self) -> String {
        match self {
            Rejection::RateLimited(r) => format!(
                "rate limit {} exceeded; retry in {} s",
                r.limit,
                tollgate::wire::retry_after_secs(r.retry_after)
            ),
            Rejection::StoreUnavailable { .. } => {
                "rate limiting is unavailable; try again shortly".to_owned()
            }
            Rejection::NoKey(e) => match e.status() {
                StatusCode::BAD_REQUEST => format!("cannot tell who is calling: {e}"),
                _ => "cannot tell who is calling: the server is misconfigured".to_owned(),
            },
            Rejection::TooCostly {
                limit,
                cost,
                capacity,
            } => format!("request cost {cost} exceeds what limit {limit} ever admits ({capacity})"),
            Rejection::Invalid(_) => "rate limiting is misconfigured".to_owned(),
            Rejection::Panicked => "rate limiting failed (a server bug)".to_owned(),
        }
    }
}

/// A layer that can never work as configured.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A layer must check at least one limit.
    #[error("no limit given")]
    NoLimits,
    /// The limiter has no limit with this name.
    #[error("unknown limit {0:?}")]
    UnknownLimit(String),
    /// A limit is named twice.
    #[error("limit {0:?} is named twice")]
    DuplicateLimit(String),
    /// A limit is keyed by a part the key extractor never gives.
    #[error(
        "limit {limit:?} is keyed by {part:?}, which the key extractor does not give (it gives {given:?})"
    )]
    MissingKeyPart {
        /// The limit.
        limit: String,
        /// The part.
        part: String,
        /// What the extractor gives.
        given: Vec<String>,
    },
    /// A prefix length longer than the address.
    #[error("{setting}({len}): a prefix length exceeds the address's {max} bits")]
    InvalidPrefix {
        /// The setting given it: `ipv4_prefix` or `ipv6_prefix`.
        setting: &'static str,
        /// The length given.
        len: u8,
        /// The address length.
        max: u8,
    },
    /// Two extractors give a part of the same name.
    #[error("key part {0:?} is given by two extractors")]
    DuplicateKeyPart(String),
    /// [`crate::RateLimitLayer::delay_up_to`] on a layer of several limits: a request waits
    /// for the slot of one limit.
    #[error("delay_up_to needs a layer of exactly one limit; this one checks {0}")]
    DelayNeedsOneLimit(usize),
    /// [`crate::RateLimitLayer::delay_up_to`] on a limit whose algorithm hands out no slots.
    #[error(
        "limit {limit:?} cannot delay requests: {algorithm} hands out no slots (gcra and token_bucket do)"
    )]
    CannotDelay {
        /// The limit.
        limit: String,
        /// Its algorithm.
        algorithm: String,
    },
    /// The limiter refused to prepare a check for another reason, said in the message (not
    /// also as the error's `source`, which would say it twice in a report of the chain).
    #[error("the limiter refuses this layer's check: {0}")]
    Invalid(CheckError),
}
