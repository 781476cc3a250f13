//! The store's health, as `/readyz`, `/metrics` (`tollgate_store_up`) and the status page
//! see it: a call on a probe key, straight to the store (not through the limiter, so probes
//! are not decisions, errors or latencies of the traffic).
//!
//! On Redis the probe is a **check that writes**: a fixed window's `SET … PX` on the probe key
//! (a limit it never reaches; the key expires a second after its window). A read alone
//! answered while Redis refused every write: out of memory (`maxmemory` with `noeviction`),
//! a read-only replica, an ACL user without write rights — every deny-policy check then
//! answered 503 while `tollgate_store_up` stayed 1 and `/readyz` 200 (measured: 72 s, 6 700
//! checks of 6 700). On the memory store it stays a peek, which writes nothing (a check
//! there would hold a key under `max_keys`).
//!
//! `/readyz` probes every time it is asked (an orchestrator asks every few seconds). The
//! scrape and the status page share one result at most a second old: a status page left
//! open, or several, cost the store one probe a second, not one per viewer and poll. A
//! result that says "up" is not reused while the circuit breaker is open: the page never
//! shows an old "up" beside an open breaker.

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
    last: Mutex<Option<Probed>>,
}

/// One probe's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Probed {
    /// The error's kind (`connection`, `timeout`, `circuit_open`, `out_of_memory`, …), or
    /// `None`: it answered.
    pub(crate) error: Option<&'static str>,
    /// How long the answer (or the failure) took.
    pub(crate) took: Duration,
    /// When it ended.
    pub(crate) at: Instant,
}

impl StoreProbe {
    pub(crate) fn new(namespace: &Namespace) -> StoreProbe {
        // A fixed window no probe rate reaches: every probe is admitted and writes.
        let limit = Quota::per_second(1_000_000)
            .and_then(|q| Limit::new("readyz", Algorithm::FixedWindow, q))
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

    /// Probes the store now: a check on Redis (a write), a peek on the memory store.
    ///
    /// # Errors
    /// The store's failure.
    pub(crate) async fn probe(&self, store: &AnyStore) -> Result<(), StoreError> {
        let request = Request::new([Entry::new(&self.limit, self.key.clone())], 1)
            .map_err(|e| StoreError::Protocol(format!("the probe request: {e}")))?;
        let op = if store.kind() == "memory" {
            Op::Peek
        } else {
            Op::Check
        };
        store.boxed().decide(&request, op, None).await.map(|_| ())
    }

    /// The last result if under a second old (and not "up" while the breaker is open), else
    /// a new probe's.
    pub(crate) async fn recent(&self, store: &AnyStore) -> Probed {
        let cached = *self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(probed) = cached
            && probed.at.elapsed() < FRESH_FOR
            && !(probed.error.is_none() && store.circuit_open() == Some(true))
        {
            return probed;
        }
        let started = Instant::now();
        let result = self.probe(store).await;
        let probed = Probed {
            error: result.err().map(|e| e.kind().as_str()),
            took: started.elapsed(),
            at: Instant::now(),
        };
        *self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(probed);
        probed
    }
}
