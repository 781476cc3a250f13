//! [`Secret`]: a value that must never reach a log line (the admin token).
//!
//! It prints redacted through `Debug`; the real value is only reachable through an explicit
//! `expose` call, so a stray `{config:?}` in a log cannot leak it. Redis passwords get the
//! same treatment inside [`super::RedisUrl`].

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

#[cfg(test)]
mod tests {
    use super::*;

    /// The secret never appears in Debug output.
    #[test]
    fn secrets_are_redacted() {
        assert!(!format!("{:?}", Secret::new("s3cret")).contains("s3cret"));
        assert_eq!(Secret::new("s3cret").expose(), "s3cret");
    }
}
