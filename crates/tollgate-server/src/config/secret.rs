//! Values that must never reach a log line: the admin token and Redis passwords.
//!
//! Both types print redacted through `Debug` and `Display`; the real value is only reachable
//! through an explicit `expose` call, so a stray `{config:?}` in a log cannot leak it.

use std::fmt;

/// A secret string (the admin token). Prints as `"***"`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"***\"")
    }
}

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
    /// # Ok::<(), String>(())
    /// ```
    ///
    /// # Errors
    /// What is wrong, without repeating the URL (it may hold a password).
    pub fn parse(url: &str) -> Result<RedisUrl, String> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err("is not a URL: expected redis://[user:password@]host[:port][/db]".into());
        };
        let unix = match scheme {
            "redis" | "rediss" => false,
            "redis+unix" | "unix" => true,
            _ => {
                return Err(format!(
                    "has scheme {scheme:?}: expected redis, rediss, redis+unix or unix"
                ));
            }
        };
        let authority = rest.split(['/', '?']).next().unwrap_or_default();
        let (userinfo, host) = match authority.rsplit_once('@') {
            Some((user, host)) => (Some(user), host),
            None => (None, authority),
        };
        if unix {
            if !rest.contains('/') {
                return Err("needs a socket path, e.g. unix:///run/redis.sock".into());
            }
        } else if host.is_empty() || host.starts_with(':') {
            return Err("has no host".into());
        } else if let Some((_, port)) = host.rsplit_once(':').filter(|_| !host.ends_with(']'))
            && port.parse::<u16>().is_err()
        {
            return Err("has an invalid port".into());
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
        assert!(!format!("{:?}", Secret::new("s3cret")).contains("s3cret"));
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
        ] {
            assert!(RedisUrl::parse(url).is_err(), "{url}");
        }
        assert!(RedisUrl::parse("redis://[::1]:6379").is_ok());
    }
}
