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
//! `/readyz` probes every time it is asked (an orchestrator asks every few seconds), one
//! probe in flight at a time: a `/readyz` that arrives while one is in flight waits, then
//! takes the result of a probe that began after it arrived. The
//! scrape and the status page share one result at most a second old: a status page left
//! open, or several, cost the store one probe a second, not one per viewer and poll. A
//! result that says "up" is not reused while the circuit breaker is open: the page never
//! shows an old "up" beside an open breaker.
//!
//! Every probe, `/readyz`'s included, ends in [`StoreProbe::settle`]: its result becomes the
//! one the scrape and the page reuse, and goes into the outage history, unless a probe that
//! ended later was settled first (two probes may overlap). So the history's down and up follow
//! the order the probes ended in, a result is recorded once (not again at each reuse), and
//! after `/readyz` saw the store answer, the page does not show, nor record as a new outage,
//! a failure from before it.
//!
//! An outage is recorded with the kind of its failure (`connection`, `timeout`, …), which
//! says what to do. When the breaker found the outage first (the traffic's failures opened it
//! before a probe ran), the probe is refused by the breaker without reaching Redis: its own
//! error is `circuit_open`, which says only that calls are being skipped. The outage is then
//! recorded with the kind of the failure that opened the breaker (its cause,
//! [`AnyStore::circuit_cause`]: `kind: message`), and as `circuit_open` only when no cause is
//! known.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use tollgate::{Algorithm, Entry, Key, Limit, Namespace, Op, Quota, Request, Store, StoreError};

use crate::status::history::History;
use crate::store::AnyStore;

/// How long a probe result is reused.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// The probe's limit and key, and the last result.
#[derive(Debug)]
pub(crate) struct StoreProbe {
    limit: Limit,
    key: Key,
    last: Mutex<Option<Probed>>,
    /// One probe at a time: a caller that finds one in flight waits for it, then reuses the
    /// result of a probe that began after it arrived (as fresh as its own would be). Without
    /// it every `GET /readyz` was a Redis write of its own (12,987 requests, 13,002 EVALSHA in
    /// 5 s), and the page's and the scrape's reads that met a stale result each probed too
    /// (87 probes in 5 s under a `/v1/status` flood, where one a second was meant).
    turn: tokio::sync::Mutex<()>,
}

/// At most one line a second for failed probes (`/readyz` asked in a loop while Redis is down).
static PROBE_FAILED_LOG: tollgate::LogThrottle = tollgate::LogThrottle::new();

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
            turn: tokio::sync::Mutex::new(()),
        }
    }

    /// Probes the store now (`/readyz`), settling the result ([`StoreProbe::settle`]): the
    /// page and the scrape reuse it, the outage history records it.
    ///
    /// # Errors
    /// The store's failure.
    pub(crate) async fn probe_now(
        &self,
        store: &AnyStore,
        history: &History,
    ) -> Result<(), &'static str> {
        let arrived = Instant::now();
        let _turn = self.turn.lock().await;
        if let Some(probed) = self.began_since(arrived) {
            return probed.error.map_or(Ok(()), Err);
        }
        let probed = self.probe(store, history).await;
        probed.error.map_or(Ok(()), Err)
    }

    /// The last result, if its probe began at or after `since`.
    fn began_since(&self, since: Instant) -> Option<Probed> {
        let last = *self.lock();
        last.filter(|p| p.at.checked_sub(p.took).is_some_and(|began| began >= since))
    }

    /// One probe, its failure logged (at most once a second) and its result settled.
    async fn probe(&self, store: &AnyStore, history: &History) -> Probed {
        let started = Instant::now();
        let result = self.call(store).await;
        if let Err(e) = &result
            && let Some(skipped) = PROBE_FAILED_LOG.admit()
        {
            tracing::warn!(kind = e.kind().as_str(), cause = %e, skipped, "store health probe failed");
        }
        let probed = Probed::ended(started, result.as_ref().err());
        self.settle(probed, &Breaker::of(store), history)
    }

    /// The last result if under a second old (and not "up" while the breaker is open), else
    /// a new probe's, settled ([`StoreProbe::settle`]): the newest result either way.
    pub(crate) async fn recent(&self, store: &AnyStore, history: &History) -> Probed {
        if let Some(probed) = self.reusable(store.circuit_open()) {
            return probed;
        }
        let _turn = self.turn.lock().await;
        // Another reader may have probed while this one waited for its turn.
        if let Some(probed) = self.reusable(store.circuit_open()) {
            return probed;
        }
        self.probe(store, history).await
    }

    /// The last result, if it may be reused with the breaker `circuit_open`: under a second
    /// old, and not "up" beside an open breaker.
    fn reusable(&self, circuit_open: Option<bool>) -> Option<Probed> {
        let last = *self.lock();
        last.filter(|probed| {
            probed.at.elapsed() < FRESH_FOR
                && !(probed.error.is_none() && circuit_open == Some(true))
        })
    }

    /// Makes `probed` the last result and records it in `history` (an open `breaker`
    /// counting as a failure, of the kind that opened it: [`Breaker::kind`]), unless a probe
    /// that ended at or after it was settled already: then `probed` is old news, changes
    /// nothing, and the newer result is returned. One lock around both, so the history sees
    /// the probes in the order they ended whatever the order they are settled in.
    pub(crate) fn settle(&self, probed: Probed, breaker: &Breaker, history: &History) -> Probed {
        let mut last = self.lock();
        if let Some(newer) = *last
            && newer.at >= probed.at
        {
            return newer;
        }
        *last = Some(probed);
        let error = match probed.error {
            // The probe's own failure, at Redis.
            Some(kind) if kind != CIRCUIT_OPEN => Some(kind),
            // Refused by the breaker, or answered beside an open one.
            Some(_) => Some(breaker.kind()),
            None => breaker.open.then(|| breaker.kind()),
        };
        history.probed(wall_clock(probed.at), error);
        probed
    }

    /// One call on the probe key: a check on Redis (a write), a peek on the memory store.
    async fn call(&self, store: &AnyStore) -> Result<(), StoreError> {
        let request = Request::new([Entry::new(&self.limit, self.key.clone())], 1)
            .map_err(|e| StoreError::Protocol(format!("the probe request: {e}")))?;
        let op = if store.kind() == "memory" {
            Op::Peek
        } else {
            Op::Check
        };
        store.boxed().decide(&request, op, None).await.map(|_| ())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Probed>> {
        self.last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The kind of [`tollgate::StoreError::CircuitOpen`].
const CIRCUIT_OPEN: &str = "circuit_open";

/// The Redis circuit breaker as a probe ends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Breaker {
    /// Open (`false` on the memory store, or before Redis is connected).
    pub(crate) open: bool,
    /// Why, while open: the failure that opened it, `kind: message`.
    pub(crate) cause: Option<String>,
}

impl Breaker {
    /// The breaker of `store`, now.
    fn of(store: &AnyStore) -> Breaker {
        Breaker {
            open: store.circuit_open() == Some(true),
            cause: store.circuit_cause(),
        }
    }

    /// The kind of failure an outage it found is recorded as: its cause's (`connection` of
    /// `connection: …`), or `circuit_open` when no cause is known (it closed meanwhile, or
    /// its cause is empty).
    fn kind(&self) -> &str {
        self.cause
            .as_deref()
            .map(|cause| cause.split_once(": ").map_or(cause, |(kind, _)| kind))
            .filter(|kind| !kind.is_empty())
            .unwrap_or(CIRCUIT_OPEN)
    }
}

impl Probed {
    /// The result of a probe started at `started` and ending now, failed with `error`.
    fn ended(started: Instant, error: Option<&StoreError>) -> Probed {
        Probed {
            error: error.map(|e| e.kind().as_str()),
            took: started.elapsed(),
            at: Instant::now(),
        }
    }
}

/// The wall-clock time of `at` (the history's clock).
fn wall_clock(at: Instant) -> SystemTime {
    let now = SystemTime::now();
    now.checked_sub(at.elapsed()).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(at: Instant) -> Probed {
        Probed {
            error: Some("timeout"),
            took: Duration::from_millis(50),
            at,
        }
    }

    const CLOSED: Breaker = Breaker {
        open: false,
        cause: None,
    };

    /// An open breaker with `cause`.
    fn open(cause: Option<&str>) -> Breaker {
        Breaker {
            open: true,
            cause: cause.map(str::to_owned),
        }
    }

    fn answered(at: Instant) -> Probed {
        Probed {
            error: None,
            took: Duration::from_millis(1),
            at,
        }
    }

    /// The recovery as it was seen wrongly: the page's probe fails (Redis frozen), `/readyz`'s
    /// answers (Redis back), then a failure that ended before that answer is settled (the
    /// page's cached result, or a probe that overlapped `/readyz`'s). It is not news: the
    /// outage stays the real one, from the first failure to the answer, and what the page
    /// reuses is the answer. A failure after the answer is a new outage.
    #[test]
    fn an_older_failure_is_not_news_after_an_answer() {
        let probe = StoreProbe::new(&Namespace::default());
        let history = History::new(Duration::from_secs(10));
        let t0 = Instant::now()
            .checked_sub(Duration::from_millis(500))
            .expect("half a second after boot");
        let (t1, t2) = (
            t0 + Duration::from_millis(100),
            t0 + Duration::from_millis(200),
        );

        assert_eq!(probe.settle(failed(t0), &CLOSED, &history), failed(t0));
        let down = history.outage().expect("down from the first failure");
        assert_eq!((down.to_ms, down.error.as_str()), (None, "timeout"));

        // `/readyz` sees the store answer.
        assert_eq!(probe.settle(answered(t2), &CLOSED, &history), answered(t2));
        let outage = history.outage().expect("the outage");
        assert_eq!(outage.from_ms, down.from_ms);
        let lasted = outage.to_ms.expect("over at the answer") - outage.from_ms;
        assert!(lasted.abs_diff(200) <= 1, "{outage:?}");

        // An older failure, settled late: old news.
        assert_eq!(probe.settle(failed(t1), &CLOSED, &history), answered(t2));
        assert_eq!(
            probe.settle(failed(t0), &open(None), &history),
            answered(t2)
        );
        assert_eq!(history.outage(), Some(outage.clone()), "unchanged");
        assert_eq!(
            probe.reusable(Some(false)),
            Some(answered(t2)),
            "the page reuses the answer"
        );

        // A failure after the answer is news: a new outage.
        let t3 = t2 + Duration::from_millis(100);
        assert_eq!(probe.settle(failed(t3), &CLOSED, &history), failed(t3));
        let again = history.outage().expect("a new outage");
        assert_eq!(again.to_ms, None);
        assert!(
            again.from_ms >= outage.to_ms.unwrap_or(u64::MAX),
            "{again:?} after {outage:?}"
        );
        assert_eq!(probe.reusable(Some(false)), Some(failed(t3)));
    }

    /// An answer with the breaker open (of no known cause) is recorded as `circuit_open`
    /// (checks are refused without a call) and not reused while it is open; results over a
    /// second old are not reused.
    #[test]
    fn reuse_is_bounded() {
        let probe = StoreProbe::new(&Namespace::default());
        let history = History::new(Duration::from_secs(10));
        let now = Instant::now();
        probe.settle(answered(now), &open(None), &history);
        let outage = history.outage().expect("an open breaker is down");
        assert_eq!(outage.error, "circuit_open");
        assert_eq!(probe.reusable(Some(true)), None);
        assert_eq!(probe.reusable(Some(false)), Some(answered(now)));

        let probe = StoreProbe::new(&Namespace::default());
        let old = now
            .checked_sub(FRESH_FOR + Duration::from_millis(1))
            .expect("a second after boot");
        probe.settle(failed(old), &CLOSED, &history);
        assert_eq!(probe.reusable(None), None, "over a second old");
    }

    /// A probe the open breaker refused (`circuit_open`), or answered beside it, records the
    /// outage as the kind of the failure that opened the breaker; `circuit_open` only when
    /// no cause is known. A probe's own failure keeps its kind.
    #[test]
    fn the_breaker_records_its_cause() {
        let refused = |at| Probed {
            error: Some(CIRCUIT_OPEN),
            took: Duration::ZERO,
            at,
        };
        let now = Instant::now();
        for (probed, breaker, kind) in [
            (
                refused(now),
                open(Some("connection: refused")),
                "connection",
            ),
            (refused(now), open(Some("timeout")), "timeout"),
            (answered(now), open(Some("oom: OOM command")), "oom"),
            (refused(now), open(None), CIRCUIT_OPEN),
            (refused(now), CLOSED, CIRCUIT_OPEN),
            (failed(now), open(Some("connection: refused")), "timeout"),
        ] {
            let probe = StoreProbe::new(&Namespace::default());
            let history = History::new(Duration::from_secs(10));
            probe.settle(probed, &breaker, &history);
            let outage = history.outage().expect("down");
            assert_eq!(outage.error, kind, "{probed:?} with {breaker:?}");
        }
    }
}
