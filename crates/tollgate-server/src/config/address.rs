//! Listen addresses (`server.http`, `server.grpc`) as written in the config, with an error
//! that shows the accepted forms.

use std::net::AddrParseError;
use std::path::PathBuf;

use super::ListenAddress;

/// A listen address that is neither `host:port` nor `unix:/path`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{text:?} is not a listen address: write IP:port, e.g. \"127.0.0.1:8080\" or \"[::]:8080\" (an IP, not a host name), or unix:/path"
)]
pub struct AddressError {
    /// What was written.
    pub text: String,
    /// The parser's reason (`None` for an empty `unix:` path).
    #[source]
    pub source: Option<AddrParseError>,
}

/// Parses `host:port` or `unix:/path/to.sock`.
pub(super) fn parse(text: &str) -> Result<ListenAddress, AddressError> {
    if let Some(path) = text.strip_prefix("unix:") {
        if path.is_empty() {
            return Err(AddressError {
                text: text.to_owned(),
                source: None,
            });
        }
        return Ok(ListenAddress::Unix(PathBuf::from(path)));
    }
    text.parse()
        .map(ListenAddress::Tcp)
        .map_err(|source| AddressError {
            text: text.to_owned(),
            source: Some(source),
        })
}
