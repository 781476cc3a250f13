//! The store's health, as `/readyz`, `/metrics` (`tollgate_store_up`) and the status page
//! see it: a peek (which writes nothing) on a probe key, straight to the store (not through
//! the limiter, so probes are not decisions, errors or latencies of the traffic).
//!
//! `/readyz` probes every time it is asked (an orchestrator asks every few seconds). The
//! scrape and the status page share one result at most a second old: a status page left
//! open, or several, cost the store one peek a second, not one per viewer and poll.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tollgate::{Algorithm, Entry, Key, Limit, Namespace, Op, Quota, Request, Store, StoreError};

use crate::store::AnyStore;

/// How long a probe result is reused.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// The probe's limit and key, and the last result.
#[derive(Debug)]
pub(crate) struct StoreProbe {
    limit: Limit,
    key: Key,
    last: Mutex<Option<(Instant, Probed)>>,
}

/// One probe's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Probed {
    /// The error's kind (`connection`, `timeout`, `circuit_open`, …), or `None`: it answered.
    pub(crate) error: Option<&'static str>,
    /// How long the answer (or the failure) took.
    pub(crate) took: Duration,
}

impl StoreProbe {
    pub(crate) fn new(namespace: &Namespace) -> StoreProbe {
        let limit = Quota::per_second(1)
            .and_then(|q| Limit::new("readyz", Algorithm::Gcra, q))
            .and_then(|l| l.keyed_by(["probe"]));
        let limit = match limit {
            Ok(limit) => limit,
            Err(e) => unreachable!("the probe limit is valid: {e}"),
        };
        let key = Key::new(namespace, &limit, &[("probe", "readyz")]);
        StoreProbe {
            limit,
            key,
            last: Mutex::new(None),
        }
    }

    /// Peeks the probe key now.
    ///
    /// # Errors
    /// The store's failure.
    pub(crate) async fn probe(&self, store: &AnyStore) -> Result<(), StoreError> {
        let request = Request::new([Entry::new(&self.limit, self.key.clone())], 1)
            .map_err(|e| StoreError::Protocol(format!("the probe request: {e}")))?;
        store
            .boxed()
            .decide(&request, Op::Peek, None)
            .await
            .map(|_| ())
    }

    /// The last result if under a second old, else a new probe's.
    pub(crate) async fn recent(&self, store: &AnyStore) -> Probed {
        let cached = *self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((at, probed)) = cached
            && at.elapsed() < FRESH_FOR
        {
            return probed;
        }
        let started = Instant::now();
        let result = self.probe(store).await;
        let probed = Probed {
            error: result.err().map(|e| e.kind().as_str()),
            took: started.elapsed(),
        };
        *self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((Instant::now(), probed));
        probed
    }
}
