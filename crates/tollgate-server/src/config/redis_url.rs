//! [`RedisUrl`]: a Redis URL checked when read, whose password never reaches a log line, and
//! [`RedisUrlError`], why one is refused (never quoting it: it may hold a password).
//!
//! The check is the Redis client's own (`redis`'s `IntoConnectionInfo`, which the store calls
//! on the same string when it connects), after a few of ours with clearer messages: a URL the
//! client would refuse (`redis://host/abc`, a bad database number; `redis://u:pw@[::1`, which
//! does not parse) is a config error naming its field, not a Redis that looks down for ever
//! (the store retries a failed connection, and every check follows its failure policy).
//!
//! `Debug` and `Display` print the URL with its password replaced by `***`; the URL itself is
//! only reachable through an explicit `expose` call, for the Redis client.

use std::fmt;

use redis::IntoConnectionInfo as _;

/// A Redis URL (`redis://`, `rediss://`, `redis+unix://`, `unix://`) the Redis client accepts,
/// checked when read. `Debug` and `Display` replace the password with `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrl {
    url: String,
    redacted: String,
}

impl RedisUrl {
    /// Checks the URL's scheme, host and port, then that the Redis client accepts it as the
    /// store will give it (database number, syntax, query, fragment).
    ///
    /// ```
    /// use tollgate_server::config::RedisUrl;
    ///
    /// let url = RedisUrl::parse("redis://app:hunter2@cache:6379/0")?;
    /// assert_eq!(url.to_string(), "redis://app:***@cache:6379/0");
    /// assert_eq!(url.expose(), "redis://app:hunter2@cache:6379/0");
    /// assert!(RedisUrl::parse("http://cache").is_err());
    /// assert!(RedisUrl::parse("redis://cache:6379/abc").is_err());
    /// # Ok::<(), tollgate_server::config::RedisUrlError>(())
    /// ```
    ///
    /// # Errors
    /// [`RedisUrlError`]: what is wrong, without repeating the URL (it may hold a password).
    pub fn parse(url: &str) -> Result<RedisUrl, RedisUrlError> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(RedisUrlError::NotAUrl);
        };
        let unix = match scheme {
            "redis" | "rediss" => false,
            "redis+unix" | "unix" => true,
            _ => return Err(RedisUrlError::Scheme(scheme.to_owned())),
        };
        let authority = rest.split(['/', '?']).next().unwrap_or_default();
        let (userinfo, host) = match authority.rsplit_once('@') {
            Some((user, host)) => (Some(user), host),
            None => (None, authority),
        };
        if unix {
            if !rest.contains('/') {
                return Err(RedisUrlError::NoSocketPath);
            }
        } else if host.is_empty() || host.starts_with(':') {
            return Err(RedisUrlError::NoHost);
        } else if let Some((_, port)) = host.rsplit_once(':').filter(|_| !host.ends_with(']'))
            && port.parse::<u16>().is_err()
        {
            return Err(RedisUrlError::Port);
        }
        if url.contains("#insecure") {
            return Err(RedisUrlError::InsecureFragment);
        }
        // What the store does with it when it connects (tollgate-redis: `into_connection_info`
        // on this same string): what it refuses there, it would refuse on every retry.
        match url.into_connection_info() {
            Err(e) => return Err(RedisUrlError::Client(client_reason(&e))),
            // A number, but no database: `SELECT -1` fails at every connection attempt too.
            Ok(info) if info.redis_settings().db() < 0 => {
                return Err(RedisUrlError::Client("Invalid database number".to_owned()));
            }
            Ok(_) => {}
        }
        let mut redacted = url.to_owned();
        if let Some(user) = userinfo
            && let Some((name, _password)) = user.split_once(':')
        {
            let start = scheme.len() + 3;
            redacted.replace_range(start..start + user.len(), &format!("{name}:***"));
        } else if let Some(user) = userinfo
            && !user.is_empty()
        {
            // `redis://password@host`: a lone user-info part is a password to redis clients.
            let start = scheme.len() + 3;
            redacted.replace_range(start..start + user.len(), "***");
        }
        if let Some((base, query)) = redacted.clone().split_once('?') {
            let query: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) if k == "pass" || k == "password" => format!("{k}=***"),
                    _ => kv.to_owned(),
                })
                .collect();
            redacted = format!("{base}?{}", query.join("&"));
        }
        Ok(RedisUrl {
            url: url.to_owned(),
            redacted,
        })
    }

    /// The URL with its password, for the Redis client only.
    pub fn expose(&self) -> &str {
        &self.url
    }
}

/// A Redis URL that cannot be used. The message never repeats the URL (it may hold a
/// password).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedisUrlError {
    /// No `scheme://`.
    #[error("is not a URL: expected redis://[user:password@]host[:port][/db]")]
    NotAUrl,
    /// A scheme other than the four.
    #[error("has scheme {0:?}: expected redis, rediss, redis+unix or unix")]
    Scheme(String),
    /// A unix socket URL without a path.
    #[error("needs a socket path, e.g. unix:///run/redis.sock")]
    NoSocketPath,
    /// A TCP URL without a host.
    #[error("has no host")]
    NoHost,
    /// A port that is not a number from 0 to 65535.
    #[error("has an invalid port")]
    Port,
    /// `#insecure`, which would turn certificate checks off without a word.
    #[error(
        "ends in #insecure: set store.tls_insecure = true instead, which is checked and warned about"
    )]
    InsecureFragment,
    /// The Redis client refuses it (the reason is the client's, e.g. `Invalid database
    /// number`, `Redis URL did not parse`; never the URL).
    #[error("is not a URL the Redis client accepts: {0}")]
    Client(String),
}

/// The client's reason for refusing a URL: its description alone (`Invalid database number`,
/// a fixed text), without the kind and the detail `Display` appends, so nothing of the URL
/// (which may hold a password) is repeated.
fn client_reason(e: &redis::RedisError) -> String {
    // `RedisError`'s `Display` is `{description} - {kind:?}[: {detail}]`.
    let text = e.to_string();
    match text.split(" - ").next().map(str::trim) {
        Some(reason) if !reason.is_empty() => reason.to_owned(),
        _ => "it does not parse".to_owned(),
    }
}

impl fmt::Display for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted)
    }
}

impl fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.redacted, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Passwords in user info or in the query never appear in Debug or Display.
    #[test]
    fn passwords_are_redacted() {
        for url in [
            "redis://:s3cret@h:6379",
            "redis://u:s3cret@h",
            "rediss://s3cret@h/1",
            "redis+unix:///tmp/r.sock?db=1&pass=s3cret",
        ] {
            let parsed = RedisUrl::parse(url).expect(url);
            assert!(!parsed.to_string().contains("s3cret"), "{parsed}");
            assert!(!format!("{parsed:?}").contains("s3cret"), "{parsed:?}");
            assert_eq!(parsed.expose(), url);
        }
    }

    /// Wrong schemes, missing hosts and bad ports are refused.
    #[test]
    fn malformed_urls_are_refused() {
        for url in [
            "localhost:6379",
            "http://h",
            "redis://",
            "redis://h:port",
            "unix://",
            "rediss://h:6380/#insecure",
        ] {
            assert!(RedisUrl::parse(url).is_err(), "{url}");
        }
        assert!(RedisUrl::parse("redis://[::1]:6379").is_ok());
    }

    /// URLs of the right shape that the Redis client refuses (the store would retry them for
    /// ever, as if Redis were down) are refused here, with the client's reason and without
    /// the password.
    #[test]
    fn urls_the_client_refuses_are_refused() {
        for (url, reason) in [
            ("redis://127.0.0.1:6379/abc", "Invalid database number"),
            (
                "redis://u:s3cret@127.0.0.1:6379/abc",
                "Invalid database number",
            ),
            ("redis://127.0.0.1:6379/-1", "Invalid database number"),
            ("redis+unix:///tmp/r.sock?db=x", "Invalid database number"),
            ("redis://u:s3cret@[::1", "Redis URL did not parse"),
            ("redis://u:sec ret@h ost:6379", "Redis URL did not parse"),
            (
                "redis://0.0.0.0:6379",
                "Cannot connect to a wildcard address",
            ),
            ("redis://h:6379/?protocol=resp9", "Invalid protocol version"),
            ("rediss://h:6380/#verify", "only #insecure is supported"),
            ("unix://host/tmp/r.sock", "Missing path"),
        ] {
            let err = RedisUrl::parse(url).expect_err(url);
            assert!(matches!(err, RedisUrlError::Client(_)), "{url}: {err:?}");
            let message = err.to_string();
            assert!(message.contains(reason), "{url}: {message}");
            assert!(!message.contains("s3cret"), "{url}: {message}");
            assert!(!message.contains("sec ret"), "{url}: {message}");
            assert!(!message.contains(url), "{url}: {message}");
        }
    }

    /// What the client accepts still parses: databases, IPv6, TLS, sockets, RESP3, a user
    /// name alone, percent-encoded passwords.
    #[test]
    fn urls_the_client_accepts_still_parse() {
        for url in [
            "redis://h",
            "redis://h:6379/0",
            "redis://h:6379/15/",
            "redis://[::1]:6379/2",
            "rediss://u:p%40ss@h:6380/1",
            "redis://h/?protocol=resp3",
            "redis+unix:///tmp/r.sock?db=1&pass=x",
            "unix:///tmp/r.sock",
        ] {
            assert!(RedisUrl::parse(url).is_ok(), "{url}");
        }
    }
}
