//! [`Found`]: what a descriptor matched, as the decision reads it.

use std::sync::Arc;

use super::rule::Rule;
use crate::Unit;

/// What a descriptor matched.
#[derive(Debug)]
pub(crate) enum Found<'a> {
    /// A limit decides it, keyed by these parts.
    Limited(&'a Rule, Vec<(&'a str, &'a str)>),
    /// An imported `unlimited` entry, with its `replaces`.
    Unlimited(&'a [Arc<str>]),
    /// An imported entry of 0 requests per unit.
    Blocked {
        /// Its unit.
        unit: Unit,
        /// Whether it is in shadow mode (its own or global).
        shadow: bool,
        /// Whether it is in shadow mode of its own (`shadow_mode: true`).
        own_shadow: bool,
        /// Whether it is a quota descriptor of its own (`quota_mode: true`).
        quota_mode: bool,
        /// Its `current_limit.name`: its YAML `rate_limit.name`, empty when none (what
        /// another entry's `replaces` names it by).
        name: &'a Arc<str>,
        /// Its `replaces`.
        replaces: &'a [Arc<str>],
    },
}
