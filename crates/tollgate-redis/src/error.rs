//! Turns `redis::RedisError` into a classified [`StoreError`], in this one place, so the
//! limiter and the breaker decide by kind (transient or not), never by message. Also the two
//! errors of a coalesced call (`store/coalesce.rs`): one failure shared by every request of a batch
//! (each gets the same kind, and the cause's text), and one request's own failure inside a
//! batch, which the batch script reports as a string.

use std::fmt;

use redis::{ErrorKind, RedisError, ServerErrorKind};
use tollgate::{BoxError, StoreError};

/// The cause of a failure shared by every request of a batch: the original cause's text
/// (with its own causes), since a boxed cause cannot be cloned.
#[derive(Debug)]
struct SharedCause(String);

impl fmt::Display for SharedCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SharedCause {}

/// The same failure for another request of the batch that met `err`: same kind, same
/// duration or message, the cause as text.
pub(crate) fn shared(err: &StoreError) -> StoreError {
    let cause = || -> BoxError {
        let mut text = String::new();
        let mut next = std::error::Error::source(err);
        while let Some(e) = next {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&e.to_string());
            next = e.source();
        }
        Box::new(SharedCause(text))
    };
    match err {
        StoreError::Timeout(d) => StoreError::Timeout(*d),
        StoreError::Overloaded(d) => StoreError::Overloaded(*d),
        StoreError::Connection(_) => StoreError::Connection(cause()),
        StoreError::Cluster(_) => StoreError::Cluster(cause()),
        StoreError::Script(_) => StoreError::Script(cause()),
        StoreError::Protocol(m) => StoreError::Protocol(m.clone()),
        StoreError::Full { max_keys } => StoreError::Full {
            max_keys: *max_keys,
        },
        StoreError::CircuitOpen => StoreError::CircuitOpen,
        StoreError::OutOfMemory(_) => StoreError::OutOfMemory(cause()),
        StoreError::ReadOnly(_) => StoreError::ReadOnly(cause()),
        StoreError::NoScript(_) => StoreError::NoScript(cause()),
        StoreError::Busy(_) => StoreError::Busy(cause()),
        StoreError::Auth(_) => StoreError::Auth(cause()),
        StoreError::Tls(_) => StoreError::Tls(cause()),
        other => StoreError::Protocol(other.to_string()),
    }
}

/// The failure of one request of a batch, which the batch script caught and answered as
/// `message` (`lua/batch.lua`, `lua/batch_gcra.lua`): classified by the Redis error code it starts with, as
/// [`classify`] does for a whole call (a write refused for memory is `OOM`, on a replica
/// `READONLY`), a script error otherwise.
pub(crate) fn in_batch(message: String) -> StoreError {
    let code = message
        .strip_prefix("tollgate: ")
        .unwrap_or(&message)
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_owned();
    let cause: BoxError = Box::new(SharedCause(message));
    match code.as_str() {
        "OOM" => StoreError::OutOfMemory(cause),
        "READONLY" | "NOREPLICAS" => StoreError::ReadOnly(cause),
        "BUSY" => StoreError::Busy(cause),
        "NOAUTH" | "WRONGPASS" | "NOPERM" => StoreError::Auth(cause),
        "CLUSTERDOWN" | "MOVED" | "ASK" | "CROSSSLOT" | "TRYAGAIN" => StoreError::Cluster(cause),
        _ => StoreError::Script(cause),
    }
}

/// Whether `err` may be a refusal the client met setting a connection up (its credentials,
/// the database, the protocol), which the `redis` crate's connection manager keeps as its
/// connection (`store/single_node.rs`). Not `NOPERM`: that is a command the user may not run
/// on a connection that works (a script's `may_expire`, a permission taken away), and a new
/// connection a second for it changed nothing but the log.
pub(crate) fn refused_while_connecting(err: &RedisError) -> bool {
    !err.is_io_error()
        && (matches!(
            err.kind(),
            ErrorKind::AuthenticationFailed | ErrorKind::InvalidClientConfig
        ) || matches!(err.code(), Some("NOAUTH" | "WRONGPASS" | "NOPROTO"))
            || connection_setup(err).is_some())
}

/// A refusal met while the client set a new connection up, not by a call of ours: the kind
/// to report it as, `None` for any other error. The client reports the server's refusal of
/// the `SELECT` it sends for the URL's database (`redis://host/99` beyond `databases`: "ERR
/// DB index is out of range"), or of its `AUTH`, as a response error of its own
/// ("Redis server refused to switch database"), which would otherwise read as a script's
/// failure, `script`: a configuration the connection cannot be made with is a `connection`
/// failure (credentials: `auth`), as an invalid client configuration is. A `HELLO` refused
/// for its protocol version (`NOPROTO`) is one too.
fn connection_setup(err: &RedisError) -> Option<fn(BoxError) -> StoreError> {
    if err.code() == Some("NOPROTO") {
        return Some(StoreError::Connection);
    }
    if !matches!(
        err.kind(),
        ErrorKind::Server(ServerErrorKind::ResponseError)
    ) {
        return None;
    }
    // The client's own description leads its message (a reply's error leads with its code).
    let message = err.to_string();
    if message.starts_with("Redis server refused to switch database") {
        Some(StoreError::Connection)
    } else if message.starts_with("Redis server refused to authenticate") {
        Some(StoreError::Auth)
    } else {
        None
    }
}

/// The [`StoreError`] for a failed Redis call.
pub(crate) fn classify(err: RedisError) -> StoreError {
    if let Some(tls) = crate::tls::tls_failure(&err) {
        return tls;
    }
    if err.is_timeout() {
        // An I/O timeout below ours (the client's own); reported as a connection failure
        // with its cause, since our timeout's duration is not what elapsed.
        return StoreError::Connection(Box::new(err));
    }
    if err.is_io_error() || err.is_connection_dropped() || err.is_connection_refusal() {
        return StoreError::Connection(Box::new(err));
    }
    if let Some(setup) = connection_setup(&err) {
        return setup(Box::new(err));
    }
    // Refusals an operator can act on, by the reply's error code (a script's `redis.call`
    // passes the command's code through: `OOM command not allowed ...`).
    match err.code() {
        Some("OOM") => return StoreError::OutOfMemory(Box::new(err)),
        // A primary that may not write for want of replicas (`min-replicas-to-write`): as a
        // replica, it refuses writes until the client reaches the new primary.
        Some("READONLY" | "NOREPLICAS") => return StoreError::ReadOnly(Box::new(err)),
        Some("NOSCRIPT") => return StoreError::NoScript(Box::new(err)),
        Some("BUSY") => return StoreError::Busy(Box::new(err)),
        Some("NOAUTH" | "WRONGPASS" | "NOPERM") => return StoreError::Auth(Box::new(err)),
        // A command a script may not run under the user's ACL: inside a script Redis 7
        // answers a plain `ERR` ("The user executing the script can't run this command"),
        // not `NOPERM`. A permission taken away is the operator's to fix, not a script bug.
        Some("ERR")
            if err
                .detail()
                .is_some_and(|d| d.contains("user executing the script can't run")) =>
        {
            return StoreError::Auth(Box::new(err));
        }
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

    /// A permission taken away, met inside a script (Redis 7 answers `ERR`, not `NOPERM`),
    /// is an auth failure, not a script error.
    #[test]
    fn a_script_without_permission_is_auth() {
        let denied = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "ERR",
            "The user executing the script can't run this command or subcommand script: \
             bd6f, on @user_script:1."
                .to_owned(),
        ));
        let e = classify(denied);
        assert!(matches!(e, StoreError::Auth(_)), "{e:?}");
    }

    /// A connection the client could not set up (the URL's database refused by `SELECT`:
    /// `redis://host/99`, "ERR DB index is out of range") is a connection failure, not a
    /// script's: the error exactly as the client builds it. Its `AUTH` refused likewise is an
    /// auth failure, a protocol version refused (`NOPROTO`) a connection failure; a script's
    /// own `ERR` stays a script failure.
    #[test]
    fn a_connection_refused_at_setup_is_not_a_script_failure() {
        let select = RedisError::from((
            ServerErrorKind::ResponseError.into(),
            "Redis server refused to switch database",
            "DB index is out of range".to_owned(),
        ));
        let e = classify(select);
        assert!(matches!(e, StoreError::Connection(_)), "{e:?}");
        assert_eq!(e.kind().as_str(), "connection");
        let cause = std::error::Error::source(&e).map(ToString::to_string);
        assert!(
            cause.is_some_and(|c| c.contains("DB index is out of range")),
            "the server's reason kept"
        );
        let select = RedisError::from((
            ServerErrorKind::ResponseError.into(),
            "Redis server refused to switch database",
        ));
        assert!(matches!(classify(select), StoreError::Connection(_)));
        let auth = RedisError::from((
            ServerErrorKind::ResponseError.into(),
            "Redis server refused to authenticate, returns Ok() != Value::Okay",
        ));
        assert!(matches!(classify(auth), StoreError::Auth(_)));
        let noproto = redis::make_extension_error(
            "NOPROTO".to_owned(),
            Some("unsupported protocol version".to_owned()),
        );
        assert!(matches!(classify(noproto), StoreError::Connection(_)));
        let script = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "ERR",
            "Error running script: switch database".to_owned(),
        ));
        assert!(matches!(classify(script), StoreError::Script(_)));
    }

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

    /// A batch's failure reaches each of its requests as the same kind, cause kept as text;
    /// a request's own failure inside a batch is classified by its Redis code.
    #[test]
    fn batch_errors_keep_their_kind() {
        let io = classify(RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "reset by peer",
        )));
        let copy = shared(&io);
        assert!(matches!(copy, StoreError::Connection(_)), "{copy:?}");
        let cause = std::error::Error::source(&copy).expect("a cause");
        assert!(cause.to_string().contains("reset by peer"), "{cause}");
        let t = shared(&StoreError::Timeout(std::time::Duration::from_millis(5)));
        assert!(matches!(t, StoreError::Timeout(d) if d.as_millis() == 5));
        for (message, kind) in [
            (
                "tollgate: OOM command not allowed when used memory > 'maxmemory'.",
                "oom",
            ),
            (
                "tollgate: READONLY You can't write against a read only replica.",
                "readonly",
            ),
            (
                "tollgate: NOREPLICAS Not enough good replicas to write.",
                "readonly",
            ),
            (
                "tollgate: WRONGTYPE Operation against a key holding the wrong kind",
                "script",
            ),
            ("tollgate: user_script:1: boom", "script"),
        ] {
            let e = in_batch(message.to_owned());
            assert_eq!(e.kind().as_str(), kind, "{message}");
        }
    }
}
