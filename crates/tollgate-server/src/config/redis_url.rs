//! [`RedisUrl`]: a Redis URL checked for shape when read, whose password never reaches a log
//! line, and [`RedisUrlError`], why one is refused (never quoting it: it may hold a password).
//!
//! `Debug` and `Display` print the URL with its password replaced by `***`; the URL itself is
//! only reachable through an explicit `expose` call, for the Redis client.

use std::fmt;

/// A Redis URL (`redis://`, `rediss://`, `redis+unix://`, `unix://`), checked for shape when
/// read. `Debug` and `Display` replace the password with `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrl {
    url: String,
    redacted: String,
}

impl RedisUrl {
    /// Checks the URL's scheme and host.
    ///
    /// ```
    /// use tollgate_server::config::RedisUrl;
    ///
    /// let url = RedisUrl::parse("redis://app:hunter2@cache:6379/0")?;
    /// assert_eq!(url.to_string(), "redis://app:***@cache:6379/0");
    /// assert_eq!(url.expose(), "redis://app:hunter2@cache:6379/0");
    /// assert!(RedisUrl::parse("http://cache").is_err());
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
}
