//! The prefix every key starts with, so that tollgate's keys never mix with an application's
//! own keys in a shared Redis, and two deployments can share one Redis apart.

use std::sync::Arc;

use crate::LimitError;

/// A validated key prefix (default `tollgate`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Namespace {
    prefix: Arc<str>,
}

impl Namespace {
    /// A namespace with `prefix`: 1–64 characters of `A-Z a-z 0-9 _ - . :`.
    ///
    /// # Errors
    /// [`LimitError`] naming `prefix`.
    pub fn new(prefix: impl Into<String>) -> Result<Namespace, LimitError> {
        let prefix = prefix.into();
        let reason = if prefix.is_empty() {
            "must not be empty"
        } else if prefix.len() > 64 {
            "must be at most 64 characters"
        } else if !prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
        {
            "may only contain A-Z, a-z, 0-9, '_', '-', '.' and ':'"
        } else {
            return Ok(Namespace {
                prefix: prefix.into(),
            });
        };
        Err(LimitError::InvalidName {
            field: "prefix",
            value: prefix.chars().take(80).collect(),
            reason,
        })
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
}

impl Default for Namespace {
    fn default() -> Self {
        Namespace {
            prefix: "tollgate".into(),
        }
    }
}
