//! Why an `[envoy]` section cannot be used with the limits at hand.
//!
//! Every error names the field, as a path into the config file (`envoy.rules[2].limit`), so
//! that a refused reload says exactly what to fix.

/// An invalid rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct RulesError {
    /// The offending field, e.g. `envoy.rules[0].descriptor[1].part`.
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

impl RulesError {
    pub(crate) fn new(field: impl Into<String>, reason: impl Into<String>) -> RulesError {
        RulesError {
            field: field.into(),
            reason: reason.into(),
        }
    }
}
