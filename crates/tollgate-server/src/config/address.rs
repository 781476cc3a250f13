//! Listen addresses (`server.http`, `server.grpc`) as written in the config, with an error
//! that shows the accepted form.

use std::net::{AddrParseError, SocketAddr};

/// A listen address that is not `host:port`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a listen address: write host:port, e.g. \"127.0.0.1:8080\"")]
pub struct AddressError {
    /// What was written.
    pub text: String,
    /// The parser's reason.
    #[source]
    pub source: AddrParseError,
}

/// Parses `host:port`.
pub(super) fn parse(text: &str) -> Result<SocketAddr, AddressError> {
    text.parse().map_err(|source| AddressError {
        text: text.to_owned(),
        source,
    })
}
