//! What the status page shows of the metrics the core records: decisions per limit and
//! outcome since the process started, and the store call latencies of the last minute.
//!
//! The core records them through the `metrics` facade only; `metrics::tee_recorder` copies
//! them here as they are recorded, so the page needs no parsing of the Prometheus exposition
//! and the hot path does no extra work beyond one more relaxed add. Process-wide, like the
//! recorder: every server in a process (several, in tests) shares it, told apart by limit
//! names. A program embedding the service with its own recorder installed first gets
//! neither `/metrics` nor these figures (zeros on the page), as [`crate::metrics`] warns.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Instant;

use super::latency_window::{LatencyWindow, Percentiles};

/// Counts and latencies teed off the recorder.
#[derive(Debug)]
pub struct Observed {
    /// `(limit, outcome)` → decisions.
    decisions: RwLock<HashMap<(String, String), Arc<AtomicU64>>>,
    latency: LatencyWindow,
    origin: Instant,
}

/// One limit's decisions since the process started, by outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DecisionCounts {
    /// Admitted by the store (or the deny cache).
    pub allowed: u64,
    /// Refused by the quota.
    pub denied: u64,
    /// Admitted by an `allow`/`local` policy while the store failed.
    pub store_error_allowed: u64,
    /// Refused by a `deny`/`local` policy while the store failed.
    pub store_error_denied: u64,
}

static OBSERVED: OnceLock<Arc<Observed>> = OnceLock::new();

/// The process's figures.
pub fn observed() -> Arc<Observed> {
    Arc::clone(OBSERVED.get_or_init(|| {
        Arc::new(Observed {
            decisions: RwLock::default(),
            latency: LatencyWindow::default(),
            origin: Instant::now(),
        })
    }))
}

impl Observed {
    /// The counter of `limit`'s decisions with `outcome` (made on first use).
    pub(crate) fn decision_counter(&self, limit: &str, outcome: &str) -> Arc<AtomicU64> {
        let key = (limit.to_owned(), outcome.to_owned());
        if let Some(c) = self
            .decisions
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&key)
        {
            return Arc::clone(c);
        }
        Arc::clone(
            self.decisions
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .entry(key)
                .or_default(),
        )
    }

    /// `limit`'s decisions since the process started.
    pub fn decisions(&self, limit: &str) -> DecisionCounts {
        let map = self
            .decisions
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let get = |outcome: &str| {
            map.get(&(limit.to_owned(), outcome.to_owned()))
                .map_or(0, |c| c.load(Ordering::Relaxed))
        };
        DecisionCounts {
            allowed: get("allowed"),
            denied: get("denied"),
            store_error_allowed: get("store_error_allowed"),
            store_error_denied: get("store_error_denied"),
        }
    }

    /// Records one store call's latency.
    pub(crate) fn store_latency(&self, seconds: f64) {
        self.latency
            .record(seconds, self.origin.elapsed().as_secs());
    }

    /// Percentiles of the store calls of the last minute.
    pub fn store_latency_percentiles(&self) -> Option<Percentiles> {
        self.latency.percentiles(self.origin.elapsed().as_secs())
    }
}
