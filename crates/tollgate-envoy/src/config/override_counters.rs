//! [`OverrideCounters`]: which counter a descriptor's `limit` override counts on
//! (`[envoy] override_counters`).
//!
//! The reference keys its counters by domain, descriptor entries and window start, never by
//! the limit: a descriptor counts on one counter whatever rate decides it, so an override and
//! the YAML limit of the same unit share it, and so do two override rates. That is the
//! default here. tollgate used to key an override's counter by its rate too (a caller whose
//! rate changes starts on a fresh counter), which stays available as `per_rate`.
//!
//! Sharing is a matter of counts, so it applies to fixed windows (the reference's counting,
//! and `[envoy] algorithm`'s default) only: the other algorithms keep state in the rate's
//! own units (GCRA's theoretical arrival time, a token bucket's tokens), which means nothing
//! under another rate, so with them an override keeps a counter per rate whatever this says.

use serde::Deserialize;

/// Which counter a descriptor's `limit` override counts on (`[envoy] override_counters`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OverrideCounters {
    /// The reference's: the counter of the descriptor's entries in its domain for the
    /// override's unit, whatever the rate. When the descriptor also matches an imported
    /// (YAML) limit of the same unit whose key is the descriptor's own values, that limit's
    /// counter; else one of the override's unit keyed by the domain and entries. Fixed
    /// windows only (see the module docs); the deny cache never answers for such an
    /// override, since a refusal remembered under one rate is no answer under another.
    #[default]
    Shared,
    /// tollgate's former keying: a counter per rate, domain and entries, shared with
    /// nothing else.
    PerRate,
}
