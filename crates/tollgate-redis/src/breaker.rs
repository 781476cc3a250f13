//! A circuit breaker, so that a dead Redis costs no latency: after `threshold` consecutive
//! transient failures the store answers [`StoreError::CircuitOpen`] at once for `cool_down`,
//! then lets exactly one probe through; the probe's success closes the breaker, its failure
//! opens it for another cool-down.
//!
//! Only transient failures count (timeouts, lost connections, cluster errors): a script or
//! protocol error means Redis answered, so it resets the count.
//!
//! **A burst of failures from one event counts once.** When the one multiplexed connection
//! drops (`CLIENT KILL`, a proxy reset, a failover), every call in flight on it fails at
//! once: counted one by one, a single drop under load would open the breaker and refuse
//! every caller for a cool-down although the connection is back a moment later. So a failure
//! counts only if its call started after the last counted failure: calls already in flight
//! when a failure was counted belong to the same event. Only a counted failure moves that mark:
//! moved by every failure seen, it ran ahead of steady overlapping traffic against a frozen
//! Redis (each call fails a timeout after it started, by when others have started), so no
//! failure after the first counted and the breaker never opened. A Redis that stays down still
//! opens the breaker, as each new call, started after the last counted failure, counts: one
//! failure per timeout or so however many calls overlap, each failure when calls follow one
//! another. Lock-free (atomics): it sits on every call. Transitions are logged and exported as
//! `tollgate_store_circuit_open` (gauge, 1 while open) and `tollgate_store_circuit_opened_total`;
//! the errors themselves are counted by the limiter (`tollgate_store_errors_total`), not here.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate::StoreError;

/// Breaker state shared by every clone of a store.
#[derive(Debug)]
pub(crate) struct Breaker {
    threshold: u32,
    cool_down: Duration,
    failures: AtomicU32,
    /// Microseconds after `origin` when the last counted failure was seen.
    last_failure: AtomicU64,
    /// Microseconds after `origin` until which the breaker stays open.
    open_until: AtomicU64,
    probing: AtomicBool,
    origin: Instant,
    /// The last counted failure (its kind and message): why the breaker is open, for the
    /// status page. Written only when a failure is counted (rare), read on demand.
    cause: std::sync::Mutex<Option<String>>,
}

/// The longest cause kept, in bytes.
const CAUSE_MAX: usize = 200;

/// How a call was let through, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Permit {
    kind: PermitKind,
    /// Microseconds after the breaker's origin when the call started.
    started: u64,
}

/// Whether a call is an ordinary one or the probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PermitKind {
    /// The breaker is closed.
    Closed,
    /// The one probe after a cool-down.
    Probe,
}

impl Breaker {
    /// A closed breaker opening after `threshold` consecutive transient failures (0 = never).
    pub(crate) fn new(threshold: u32, cool_down: Duration) -> Breaker {
        Breaker {
            threshold,
            cool_down,
            failures: AtomicU32::new(0),
            last_failure: AtomicU64::new(0),
            open_until: AtomicU64::new(0),
            probing: AtomicBool::new(false),
            origin: Instant::now(),
            cause: std::sync::Mutex::new(None),
        }
    }

    /// Why the breaker is open: the kind and message of the last failure it counted; `None`
    /// while closed.
    pub(crate) fn cause(&self) -> Option<String> {
        if !self.is_open() {
            return None;
        }
        self.cause
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// Lets a call through, or refuses it while open.
    ///
    /// # Errors
    /// [`StoreError::CircuitOpen`] during a cool-down, or while another call is the probe.
    pub(crate) fn admit(&self) -> Result<Permit, StoreError> {
        self.admit_at(self.now())
    }

    /// [`Breaker::admit`] at `started` (µs after the origin).
    fn admit_at(&self, started: u64) -> Result<Permit, StoreError> {
        let permit = |kind| Permit { kind, started };
        if self.threshold == 0 || self.failures.load(Ordering::Acquire) < self.threshold {
            return Ok(permit(PermitKind::Closed));
        }
        if started < self.open_until.load(Ordering::Acquire) {
            return Err(StoreError::CircuitOpen);
        }
        match self
            .probing
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Ok(permit(PermitKind::Probe)),
            Err(_) => Err(StoreError::CircuitOpen),
        }
    }

    /// Whether the breaker is open (cooling down or probing): the failures counted reached
    /// the threshold and no call has succeeded since.
    pub(crate) fn is_open(&self) -> bool {
        self.threshold > 0 && self.failures.load(Ordering::Acquire) >= self.threshold
    }

    /// Closes the breaker now: a healthy node was found by other means than a call (behind
    /// Sentinel, a new master that answered `ROLE`), so callers need not wait out the
    /// cool-down for a probe to find it.
    pub(crate) fn close(&self) {
        let before = self.failures.swap(0, Ordering::AcqRel);
        if self.threshold > 0 && before >= self.threshold {
            tracing::info!("a new redis master answers; circuit closed");
            metrics::gauge!("tollgate_store_circuit_open").set(0.0);
        }
    }

    /// Whether a transient failure of an ordinary call started at `started` and seen at `now`
    /// counts: only if the call started at or after the last counted failure, which it then
    /// moves to `now`. Of calls in flight together that fail, one counts; a failure not
    /// counted leaves the mark where it was (see the module's documentation).
    fn counts(&self, started: u64, now: u64) -> bool {
        self.last_failure
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| {
                (last <= started).then_some(last.max(now))
            })
            .is_ok()
    }

    /// Records the outcome of a call let through by [`Breaker::admit`].
    pub(crate) fn record<T>(&self, permit: Permit, result: &Result<T, StoreError>) {
        self.record_at(permit, result, || self.now());
    }

    /// [`Breaker::record`] with the clock `now` (µs after the origin; read only on a
    /// transient failure, so that a success costs no clock read).
    fn record_at<T>(&self, permit: Permit, result: &Result<T, StoreError>, now: impl Fn() -> u64) {
        // An overloaded call is not the store's failure: Redis was answering the others.
        let transient =
            matches!(result, Err(e) if e.is_transient() && !matches!(e, StoreError::Overloaded(_)));
        if !transient {
            let before = self.failures.swap(0, Ordering::AcqRel);
            if self.threshold > 0 && before >= self.threshold {
                tracing::info!("redis answers again; circuit closed");
                metrics::gauge!("tollgate_store_circuit_open").set(0.0);
            }
        } else if permit.kind == PermitKind::Closed && !self.counts(permit.started, now()) {
            // In flight when an earlier failure was counted: the same event.
        } else {
            if let Err(e) = result {
                let mut text = format!("{}: {e}", e.kind().as_str());
                if text.len() > CAUSE_MAX {
                    let mut end = CAUSE_MAX;
                    while !text.is_char_boundary(end) {
                        end -= 1;
                    }
                    text.truncate(end);
                    text.push('…');
                }
                *self
                    .cause
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(text);
            }
            let failures = self
                .failures
                .fetch_add(1, Ordering::AcqRel)
                .saturating_add(1);
            let probe = permit.kind == PermitKind::Probe;
            if self.threshold > 0 && (probe || failures == self.threshold) {
                let until = now().saturating_add(self.cool_down.as_micros() as u64);
                self.open_until.store(until, Ordering::Release);
                if !probe {
                    tracing::warn!(
                        failures,
                        cool_down_ms = self.cool_down.as_millis() as u64,
                        "redis failing; circuit open, skipping it during the cool-down"
                    );
                    metrics::counter!("tollgate_store_circuit_opened_total").increment(1);
                    metrics::gauge!("tollgate_store_circuit_open").set(1.0);
                } else {
                    tracing::debug!("probe failed; circuit stays open");
                }
            }
        }
        if permit.kind == PermitKind::Probe {
            self.probing.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fail() -> Result<(), StoreError> {
        Err(StoreError::Timeout(Duration::from_millis(1)))
    }

    /// Opens after the threshold, refuses during the cool-down, probes once, closes on success.
    #[test]
    fn opens_probes_and_closes() {
        let b = Breaker::new(3, Duration::ZERO);
        for _ in 0..3 {
            let p = b.admit().expect("closed");
            b.record(p, &fail());
        }
        // Cool-down of zero: the next call is the probe, a concurrent one is refused.
        let probe = b.admit().expect("probe");
        assert_eq!(probe.kind, PermitKind::Probe);
        assert!(matches!(b.admit(), Err(StoreError::CircuitOpen)));
        assert!(b.is_open());
        assert_eq!(
            b.cause().as_deref(),
            Some("timeout: store call timed out after 1ms")
        );
        b.record(probe, &Ok(()));
        assert!(!b.is_open());
        assert_eq!(b.cause(), None, "closed: no cause");
        assert_eq!(b.admit().expect("closed again").kind, PermitKind::Closed);
    }

    /// An overloaded call (Redis answered others, this process read its reply too late) is
    /// no store failure: many of them never open the breaker, and they show Redis alive.
    #[test]
    fn overloaded_calls_do_not_open_it() {
        let b = Breaker::new(3, Duration::from_secs(3600));
        let overloaded: Result<(), StoreError> =
            Err(StoreError::Overloaded(Duration::from_millis(1)));
        for _ in 0..2 {
            let p = b.admit().expect("closed");
            b.record(p, &fail());
        }
        for _ in 0..10 {
            let p = b.admit().expect("closed");
            b.record(p, &overloaded);
        }
        assert_eq!(b.failures.load(Ordering::Acquire), 0);
        assert!(!b.is_open());
    }

    /// Calls in flight together that fail together (one dropped connection) count once:
    /// the breaker stays closed. Calls made one after another each count.
    #[test]
    fn a_burst_counts_once() {
        let b = Breaker::new(3, Duration::from_secs(3600));
        let in_flight: Vec<Permit> = (0..50).map(|_| b.admit().expect("closed")).collect();
        std::thread::sleep(Duration::from_millis(2)); // the failures are seen after they started
        for p in in_flight {
            b.record(p, &fail());
        }
        assert_eq!(b.failures.load(Ordering::Acquire), 1);
        assert_eq!(b.admit().expect("still closed").kind, PermitKind::Closed);
        for _ in 0..2 {
            let p = b.admit().expect("closed");
            b.record(p, &fail());
        }
        assert!(matches!(b.admit(), Err(StoreError::CircuitOpen)));
    }

    /// Milliseconds on the breaker's clock (µs after its origin): the tests below pass the
    /// time to `admit_at` and `record_at` instead of waiting for it to pass.
    const fn ms(n: u64) -> u64 {
        n * 1_000
    }

    /// Steady traffic against a frozen Redis: a call starts every 6 ms and fails one timeout
    /// (50 ms, seen 4 ms late) after it started, so about nine calls are always in flight and
    /// every failure is seen after later calls started. Each call started after the last
    /// counted failure counts, so the breaker opens after its threshold of timeouts (one
    /// counted about every timeout), neither sooner nor never. It stayed closed for the
    /// whole outage when every failure seen, counted or not, moved the mark.
    #[test]
    fn overlapping_failures_of_a_frozen_redis_open_it() {
        const THRESHOLD: u32 = 5;
        const EVERY: u64 = ms(6);
        const FAILS_AFTER: u64 = ms(54);
        let b = Breaker::new(THRESHOLD, Duration::from_secs(3600));
        let mut in_flight = std::collections::VecDeque::new();
        let mut refused_at = None;
        for k in 0..1_600 {
            let now = k * EVERY; // 1,600 calls: 9.6 s of outage
            while let Some(&(fails_at, permit)) = in_flight.front() {
                if fails_at > now {
                    break;
                }
                in_flight.pop_front();
                b.record_at(permit, &fail(), || fails_at);
            }
            match b.admit_at(now) {
                Ok(permit) => in_flight.push_back((now + FAILS_AFTER, permit)),
                Err(StoreError::CircuitOpen) => {
                    refused_at = Some(now);
                    break;
                }
                Err(e) => panic!("admit: {e}"),
            }
        }
        let refused_at = refused_at.unwrap_or_else(|| {
            panic!(
                "never opened in 9.6 s: {} failures counted",
                b.failures.load(Ordering::Acquire)
            )
        });
        assert!(b.is_open());
        let threshold = u64::from(THRESHOLD);
        // Each counted failure is seen a timeout after its call, which started after the
        // previous counted one (by at most one call's spacing).
        assert!(
            refused_at >= threshold * FAILS_AFTER,
            "opened after {refused_at} µs: sooner than one failure per timeout"
        );
        assert!(
            refused_at <= threshold * (FAILS_AFTER + EVERY) + EVERY,
            "opened after {refused_at} µs"
        );
    }

    /// 64 calls started together fail together, seen over a few ms: one failure. So do 64
    /// calls started over the last timeout, all in flight when their connection dropped. A
    /// call started after that counts, so does the next burst; the breaker opens at the
    /// threshold of counted failures, not sooner.
    #[test]
    fn a_burst_of_64_counts_once() {
        let b = Breaker::new(3, Duration::from_secs(3600));
        let together: Vec<Permit> = (0..64)
            .map(|_| b.admit_at(ms(10)).expect("closed"))
            .collect();
        for (i, p) in (0_u64..).zip(together) {
            b.record_at(p, &fail(), || ms(60) + i * 50);
        }
        assert_eq!(b.failures.load(Ordering::Acquire), 1);
        // In flight when the drop came (staggered over 45 ms), all failing at that moment.
        let staggered: Vec<Permit> = (0..64)
            .map(|i| b.admit_at(ms(100) + i * 700).expect("closed"))
            .collect();
        for p in staggered.into_iter().rev() {
            b.record_at(p, &fail(), || ms(150));
        }
        assert_eq!(b.failures.load(Ordering::Acquire), 2);
        assert_eq!(
            b.admit_at(ms(151)).expect("still closed").kind,
            PermitKind::Closed
        );
        // A call started after the last counted failure counts: the threshold.
        let p = b.admit_at(ms(151)).expect("closed");
        b.record_at(p, &fail(), || ms(201));
        assert!(matches!(b.admit_at(ms(202)), Err(StoreError::CircuitOpen)));
    }

    /// During the cool-down every call is refused without trying.
    #[test]
    fn refuses_during_cool_down() {
        let b = Breaker::new(1, Duration::from_secs(3600));
        let p = b.admit().expect("closed");
        b.record(p, &fail());
        assert!(matches!(b.admit(), Err(StoreError::CircuitOpen)));
        // A script error is not transient: Redis answered. It does not open the breaker.
        let b = Breaker::new(1, Duration::from_secs(3600));
        let p = b.admit().expect("closed");
        b.record::<()>(p, &Err(StoreError::Protocol("x".into())));
        assert_eq!(b.admit().expect("still closed").kind, PermitKind::Closed);
    }
}
