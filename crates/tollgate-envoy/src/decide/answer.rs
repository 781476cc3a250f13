//! [`Answer`]: what a `ShouldRateLimit` call answers, before it is put in protobuf.

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::google::protobuf::Struct;
use tollgate::LimitDecision;

use super::items::Item;
use crate::Unit;
use crate::matching::Rule;
use crate::metrics::Counted;

/// The answer to a request before it is put in protobuf.
#[derive(Debug)]
pub(crate) struct Answer<'a> {
    /// Whether every enforced descriptor admits.
    pub(crate) allowed: bool,
    /// One per descriptor, in order; `None` where no rule matched.
    pub(crate) outcomes: Vec<Option<LimitDecision>>,
    /// What the rule that decided each descriptor shows and how it counts (`None` where no
    /// rule matched).
    pub(crate) shown: Vec<Option<Shown>>,
    /// Descriptors answered without a limiter decision (imported `unlimited` or 0 per unit),
    /// in slot order.
    pub(crate) fixed: Vec<(usize, Fixed)>,
    /// One per descriptor: whether it is a quota descriptor (its own `quota_mode` or global),
    /// whose refusal does not choose the limit headers' descriptor on its own.
    pub(crate) quota: Vec<bool>,
    /// One per descriptor: how it counts in the reference's statistics, as the match that
    /// decided it found (`None`: matched nothing, or not counted).
    pub(crate) counted: Vec<Option<Counted<'a>>>,
    /// One per descriptor: the YAML `metadata` of the entry that decided it, as the match
    /// found it; empty unless `[envoy] response_dynamic_metadata` is on.
    pub(crate) metadata: Vec<Option<&'a Struct>>,
    /// One per descriptor: with counted refusals, the count after a refused descriptor's
    /// hits (the reference's `limitAfterIncrease`), which its decision, clamped at 0
    /// remaining, cannot show; its hits are then split into near and over limit as the
    /// reference counts them. `None` when not needed (allowed, or a single hit past the
    /// limit, which is over whatever the count) or not read.
    pub(crate) after: Vec<Option<u64>>,
}

/// What a decided descriptor's status shows of its rule, and how its statistics count.
#[derive(Debug, Clone)]
pub(crate) struct Shown {
    /// `current_limit.name` (`[envoy] current_limit_name`).
    pub(crate) name: Arc<str>,
    /// The YAML unit of an imported limit, shown as is in `current_limit` (a 30-day `month`
    /// has no exact equivalent in [`crate::rate_unit`]).
    pub(crate) unit: Option<Unit>,
    /// Whether the rule is in shadow mode of its own (`shadow_mode: true`, a shadow rule or
    /// limit), not only by `[envoy] shadow`: only those count `shadow_mode` statistics.
    pub(crate) own_shadow: bool,
    /// The period of a fixed-window limit, whose `duration_until_reset` is the end of its
    /// window whatever the count, as the reference answers (`None`: another algorithm).
    pub(crate) window: Option<Duration>,
}

/// An answer that needs no counter.
#[derive(Debug, Clone)]
pub(crate) enum Fixed {
    /// OK, with `limit_remaining` at its maximum.
    Unlimited,
    /// Over limit (OK when shadow), 0 per `unit`.
    Blocked {
        /// The unit.
        unit: Unit,
        /// Shadow mode (its own or global).
        shadow: bool,
        /// Shadow mode of its own (`shadow_mode: true`).
        own_shadow: bool,
        /// Whether it is over its limit of 0: always, but for a check-only descriptor
        /// (`hits_addend` 0) with counted refusals, whose count of 0 is not past 0 (the
        /// reference's `limitAfterIncrease > limit`): `OK` with nothing left.
        over: bool,
        /// `current_limit.name`: the YAML `rate_limit.name`, empty when none.
        name: Arc<str>,
        /// Until the end of the unit-aligned window, as the reference answers.
        reset: Duration,
    },
}

impl<'a> Answer<'a> {
    /// An answer for `descriptors` descriptors, allowed until decided otherwise, with what
    /// the match found: the fixed answers, the quota descriptors, their statistics and
    /// metadata.
    pub(super) fn new(
        descriptors: usize,
        fixed: Vec<(usize, Fixed)>,
        quota: Vec<bool>,
        counted: Vec<Option<Counted<'a>>>,
        metadata: Vec<Option<&'a Struct>>,
    ) -> Self {
        Answer {
            allowed: true,
            outcomes: vec![None; descriptors],
            shown: vec![None; descriptors],
            fixed,
            quota,
            counted,
            metadata,
            after: vec![None; descriptors],
        }
    }

    /// Records `d`, the decision of `item`, for each of its descriptors, shown as the rule
    /// that matched it. (An item decided at an effective limit, `rates.rs`, shows each
    /// descriptor's own rate.)
    pub(super) fn fill(&mut self, item: &Item<'_>, d: &LimitDecision) {
        for (&slot, &(rule, _)) in item.slots.iter().zip(&item.each) {
            let mut d = d.clone();
            if item.limit.is_some() {
                d.quota = rule.quota;
                d.decision.limit = rule.capacity;
            }
            self.set(slot, rule, d);
        }
    }

    /// Records `d` for descriptor `slot`, decided by `rule`.
    pub(super) fn set(&mut self, slot: usize, rule: &Rule, d: LimitDecision) {
        self.outcomes[slot] = Some(d);
        self.shown[slot] = Some(Shown {
            name: rule.shown.clone(),
            unit: rule.unit,
            own_shadow: rule.own_shadow,
            window: rule.fixed_window.then(|| rule.quota.period()),
        });
    }

    /// Marks `slot` refused, whatever the peek at its capacity said: it can never pass.
    pub(super) fn never(&mut self, slot: usize) {
        if let Some(d) = &mut self.outcomes[slot] {
            d.decision = d.decision.never();
        }
    }
}
