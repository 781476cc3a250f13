//! [`ConfigError`]: a configuration that cannot be used, naming the file and the field.
//!
//! The message is complete on its own (`tollgate.toml: limits[2].period: must be at least
//! 1ms`), because it is what `check-config` prints and what a refused reload logs; the typed
//! cause stays reachable through `source()` for programs that want more than the text.

use super::FieldError;

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{origin}: cannot read the file: {source}")]
    Read {
        /// The file.
        origin: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A field is missing, malformed or out of range.
    #[error(
        "{origin}: {}{source}{}",
        if field.is_empty() { String::new() } else { format!("{field}: ") },
        line.map(|l| format!(" (line {l})")).unwrap_or_default()
    )]
    Invalid {
        /// The file.
        origin: String,
        /// The field as written, e.g. `limits[2].period`, or the environment variable that
        /// replaced it (`TOLLGATE_HTTP`); empty for the file as a whole.
        field: String,
        /// The line in the file, when the TOML parser knows it.
        line: Option<usize>,
        /// What is wrong.
        #[source]
        source: FieldError,
    },
    /// The file defines no `[[limits]]` and no `[envoy] config_dir`: a service without limits
    /// answers every check `unknown limit`, so an empty (e.g. truncated) file is refused rather
    /// than served.
    #[error("{origin}: limits: no [[limits]] defined; a config file needs at least one limit")]
    NoLimits {
        /// The file.
        origin: String,
    },
}

impl ConfigError {
    /// `field` of the file `origin` is wrong, for `source`.
    pub(super) fn invalid(
        origin: &str,
        field: impl Into<String>,
        source: impl Into<FieldError>,
    ) -> ConfigError {
        ConfigError::Invalid {
            origin: origin.to_owned(),
            field: field.into(),
            line: None,
            source: source.into(),
        }
    }

    /// The field at fault (`limits[2].period`), if any.
    pub fn field(&self) -> Option<&str> {
        match self {
            ConfigError::Read { .. } => None,
            ConfigError::Invalid { field, .. } => Some(field),
            ConfigError::NoLimits { .. } => Some("limits"),
        }
    }
}
