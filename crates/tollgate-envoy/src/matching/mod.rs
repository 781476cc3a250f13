//! Descriptors to rules: the compiled [`Snapshot`] a call decides with, and how a descriptor
//! finds the rule that decides it — once, carrying from that match how it counts in the
//! reference's statistics ([`crate::metrics::Counted`]).
//!
//! - `rule`: one compiled rule and how a descriptor matches it;
//! - `tree`: a domain's imported YAML tree of rules, matched the reference's way;
//! - `overrides`: rules made for a request's own `limit`;
//! - `found`: what a descriptor matched;
//! - `compile`: `[[envoy.rules]]` and the trees, validated against the limiter;
//! - `snapshot`: [`Snapshot`], which holds them all and matches descriptors.

mod compile;
mod found;
mod hit;
mod overrides;
mod rule;
mod snapshot;
mod tree;

pub(crate) use found::Found;
pub(crate) use overrides::Override;
pub use overrides::{MAX_CACHED, OVERRIDE_PREFIX, limit_name};
pub(crate) use rule::Rule;
pub use snapshot::{KeyParts, Snapshot};
