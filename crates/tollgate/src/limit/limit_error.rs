//! Why a quota or a limit could not be built.
//!
//! Every variant names the field at fault, so a config loader can point at the exact line
//! ("limits[2].period must be at least 1ms") without parsing messages.

/// A quota or limit definition that cannot be constructed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LimitError {
    /// The field must not be zero.
    #[error("{field} must be at least 1")]
    Zero {
        /// The offending field (`limit`, `burst`, `buckets`, ...).
        field: &'static str,
    },
    /// The field is below its smallest allowed value.
    #[error("{field} must be at least {min}")]
    TooSmall {
        /// The offending field.
        field: &'static str,
        /// The smallest allowed value, human readable.
        min: String,
    },
    /// The field is above its largest allowed value (the arithmetic would overflow or lose
    /// precision in Redis's Lua, whose numbers are doubles).
    #[error("{field} must be at most {max}")]
    TooLarge {
        /// The offending field.
        field: &'static str,
        /// The largest allowed value, human readable.
        max: String,
    },
    /// A name (limit name, key part name, key prefix) that is empty or has forbidden characters.
    #[error("{field} {value:?} is invalid: {reason}")]
    InvalidName {
        /// The offending field.
        field: &'static str,
        /// The rejected value.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl LimitError {
    /// The name of the field at fault.
    pub fn field(&self) -> &'static str {
        match self {
            LimitError::Zero { field }
            | LimitError::TooSmall { field, .. }
            | LimitError::TooLarge { field, .. }
            | LimitError::InvalidName { field, .. } => field,
        }
    }
}
