//! [`Harness`]: a limiter over the store under test with the test's clock, and the limits the
//! tests share.

use std::time::Duration;

use tollgate::{
    Algorithm, CheckError, Clock, FakeClock, Limit, Limiter, OnStoreError, Op, Quota, Store,
    Timestamp, Verdict,
};

use crate::Fixture;

/// A limiter over the store under test, with the test's clock.
pub(super) struct Harness<S> {
    pub(super) limiter: Limiter<S>,
    clock: FakeClock,
    _guard: Box<dyn std::any::Any + Send + Sync>,
}

impl<S: Store> Harness<S> {
    pub(super) fn new(clock: FakeClock, fixture: Fixture<S>, limits: Vec<Limit>) -> Harness<S> {
        let limiter = Limiter::builder(fixture.store)
            .namespace(fixture.namespace)
            .clock(clock.clone())
            .limits(limits)
            .build()
            .expect("distinct limit names");
        Harness {
            limiter,
            clock,
            _guard: fixture.guard,
        }
    }

    pub(super) async fn check(&self, limit: &str, user: &str, cost: u64) -> Verdict {
        self.limiter
            .check_n(limit, &[("user", user)], cost)
            .await
            .unwrap_or_else(|e| panic!("check {limit}/{user} cost {cost}: {e}"))
    }

    pub(super) async fn peek(&self, limit: &str, user: &str, cost: u64) -> Verdict {
        let request = self
            .limiter
            .prepare(&[limit], &[("user", user)], cost)
            .unwrap_or_else(|e| panic!("peek {limit}/{user}: {e}"));
        self.limiter.decide(&request, Op::Peek).await
    }

    /// A check of several (limit, key) pairs, all or nothing.
    pub(super) async fn check_keyed(
        &self,
        items: &[(&str, &[(&str, &str)])],
        cost: u64,
    ) -> Result<Verdict, CheckError> {
        let request = self.limiter.prepare_keyed(items, cost)?;
        Ok(self.limiter.decide(&request, Op::Check).await)
    }

    /// A check of several (limit, key parts, cost) triples, each at its own cost, all or
    /// nothing.
    pub(super) async fn check_costed(
        &self,
        items: &[tollgate::CostedLimit<'_, &str>],
    ) -> Result<Verdict, CheckError> {
        let request = self.limiter.prepare_keyed_costs(items)?;
        Ok(self.limiter.decide(&request, Op::Check).await)
    }

    pub(super) fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    pub(super) fn now(&self) -> Timestamp {
        self.clock.now()
    }
}

/// Checks that a verdict came from the store, not from a failure policy.
pub(super) fn from_store(v: &Verdict, context: &str) {
    assert!(
        v.store_error().is_none(),
        "{context}: the store failed ({:?}); conformance needs a working store",
        v.store_error()
    );
}

/// A per-user limit named after its algorithm, `limit` per `period`.
pub(super) fn limit_for(prefix: &str, algorithm: Algorithm, limit: u64, period: Duration) -> Limit {
    Limit::new(
        format!("{prefix}-{}", algorithm.key_tag()),
        algorithm,
        Quota::new(limit, period).expect("valid quota"),
    )
    .expect("valid limit")
    .keyed_by(["user"])
    .expect("valid part")
    .on_store_error(OnStoreError::Deny)
}

/// One limit per algorithm: 5 per minute (sliding window: 60 buckets of 1 s).
pub(super) fn five_per_minute(prefix: &str) -> Vec<Limit> {
    Algorithm::ALL
        .into_iter()
        .map(|a| limit_for(prefix, a, 5, Duration::from_secs(60)))
        .collect()
}

pub(super) fn name(prefix: &str, algorithm: Algorithm) -> String {
    format!("{prefix}-{}", algorithm.key_tag())
}
