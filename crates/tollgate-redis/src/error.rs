//! Turns `redis::RedisError` into a classified [`StoreError`], in this one place, so the
//! limiter and the breaker decide by kind (transient or not), never by message.

use redis::{ErrorKind, RedisError, ServerErrorKind};
use tollgate::StoreError;

/// The [`StoreError`] for a failed Redis call.
pub(crate) fn classify(err: RedisError) -> StoreError {
    if err.is_timeout() {
        // An I/O timeout below ours (the client's own); reported as a connection failure
        // with its cause, since our timeout's duration is not what elapsed.
        return StoreError::Connection(Box::new(err));
    }
    if err.is_io_error() || err.is_connection_dropped() || err.is_connection_refusal() {
        return StoreError::Connection(Box::new(err));
    }
    // Refusals an operator can act on, by the reply's error code (a script's `redis.call`
    // passes the command's code through: `OOM command not allowed ...`).
    match err.code() {
        Some("OOM") => return StoreError::OutOfMemory(Box::new(err)),
        Some("READONLY") => return StoreError::ReadOnly(Box::new(err)),
        Some("NOSCRIPT") => return StoreError::NoScript(Box::new(err)),
        Some("BUSY") => return StoreError::Busy(Box::new(err)),
        Some("NOAUTH" | "WRONGPASS" | "NOPERM") => return StoreError::Auth(Box::new(err)),
        _ => {}
    }
    if err.is_cluster_error() {
        return StoreError::Cluster(Box::new(err));
    }
    match err.kind() {
        ErrorKind::ClusterConnectionNotFound => StoreError::Cluster(Box::new(err)),
        ErrorKind::Server(ServerErrorKind::CrossSlot | ServerErrorKind::MasterDown) => {
            StoreError::Cluster(Box::new(err))
        }
        // Loading a dump after a restart: the server is not ready yet, as if unreachable.
        ErrorKind::Server(ServerErrorKind::BusyLoading) => StoreError::Connection(Box::new(err)),
        ErrorKind::Server(_) | ErrorKind::Extension => StoreError::Script(Box::new(err)),
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType | ErrorKind::RESP3NotSupported => {
            StoreError::Protocol(err.to_string())
        }
        ErrorKind::AuthenticationFailed => StoreError::Auth(Box::new(err)),
        ErrorKind::InvalidClientConfig => StoreError::Connection(Box::new(err)),
        _ => StoreError::Connection(Box::new(err)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each kind of Redis failure lands in the kind the failure policies expect.
    #[test]
    fn kinds_are_classified() {
        let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(matches!(classify(io), StoreError::Connection(_)));
        let script = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "ERR",
            "boom".to_owned(),
        ));
        let e = classify(script);
        assert!(matches!(e, StoreError::Script(_)), "{e:?}");
        assert!(!e.is_transient());
        let down = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ClusterDown),
            "CLUSTERDOWN",
        ));
        let e = classify(down);
        assert!(matches!(e, StoreError::Cluster(_)), "{e:?}");
        assert!(e.is_transient());
        let parse = RedisError::from((ErrorKind::Parse, "bad"));
        assert!(matches!(classify(parse), StoreError::Protocol(_)));
        let readonly = RedisError::from((ErrorKind::Server(ServerErrorKind::ReadOnly), "READONLY"));
        let e = classify(readonly);
        assert!(matches!(e, StoreError::ReadOnly(_)), "{e:?}");
        assert!(e.is_transient());
        let noscript = RedisError::from((ErrorKind::Server(ServerErrorKind::NoScript), "x"));
        assert!(matches!(classify(noscript), StoreError::NoScript(_)));
        let auth = RedisError::from((ErrorKind::AuthenticationFailed, "WRONGPASS"));
        assert!(matches!(classify(auth), StoreError::Auth(_)));
    }
}
