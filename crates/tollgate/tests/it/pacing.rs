//! Reservations given back through the limiter: by [`Limiter::cancel`], once, and by a
//! dropped [`Limiter::acquire`], which forgets the key's cached refusals as a cancel does.

use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use tollgate::{
    Algorithm, Clock, FakeClock, Limit, Limiter, MemoryStore, Op, Outcome, Quota, Timestamp,
};

const KEY: [(&str, &str); 1] = [("user", "1")];
const SECOND: Duration = Duration::from_secs(1);

/// GCRA, 1/s, burst 1, keyed by user, over a memory store on `clock`; the deny cache on or
/// off.
fn limiter(clock: &FakeClock, deny_cache: usize) -> Limiter<MemoryStore> {
    let quota = Quota::per_second(1)
        .expect("valid")
        .with_burst(1)
        .expect("valid");
    let limit = Limit::new("paced", Algorithm::Gcra, quota)
        .expect("valid")
        .keyed_by(["user"])
        .expect("valid");
    Limiter::builder(
        MemoryStore::builder()
            .clock(clock.clone())
            .sweep_interval(None)
            .build(),
    )
    .clock(clock.clone())
    .deny_cache(deny_cache)
    .limit(limit)
    .build()
    .expect("valid")
}

fn clock() -> FakeClock {
    FakeClock::new(Timestamp::from_millis(1_900_000_000_000))
}

/// A check of the key through the limiter (deny cache included).
async fn check(l: &Limiter<MemoryStore>) -> Outcome {
    l.check("paced", &KEY).await.expect("valid").outcome()
}

/// Whether the store itself would admit the key now (no deny cache, charging nothing).
fn store_admits(l: &Limiter<MemoryStore>, clock: &FakeClock) -> bool {
    let request = l.prepare(&["paced"], &KEY, 1).expect("valid");
    l.store()
        .decide_at(&request, Op::Peek, clock.now())
        .expect("peek")[0]
        .is_allowed()
}

/// Polls `acquire` once and sees it wait for its slot (reserved, and slept for).
async fn waits_once<F: Future>(mut acquire: std::pin::Pin<&mut F>) {
    std::future::poll_fn(|cx| {
        assert!(acquire.as_mut().poll(cx).is_pending(), "waits for its slot");
        Poll::Ready(())
    })
    .await;
}

/// A dropped `acquire` gives its slot back and, as `Limiter::cancel`, forgets the refusal the
/// deny cache took while the slot was held: once the store admits again, so does the limiter.
#[tokio::test]
async fn dropped_acquire_forgets_the_cached_refusal() {
    let clock = clock();
    let l = limiter(&clock, 1_000);
    assert_eq!(check(&l).await, Outcome::Allowed);
    {
        // Polled once: the next slot is reserved (1 s away) and slept for.
        let mut acquire = pin!(l.acquire("paced", &KEY, 1, 10 * SECOND));
        waits_once(acquire.as_mut()).await;
        assert!(
            matches!(check(&l).await, Outcome::Limited { .. }),
            "the slot is held"
        );
        assert_eq!(l.deny_cache_len(), 1, "the refusal is cached");
    } // dropped: the slot goes back in a spawned task
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    clock.advance(SECOND);
    assert!(store_admits(&l, &clock), "the slot went back to the store");
    assert_eq!(
        check(&l).await,
        Outcome::Allowed,
        "the limiter answers as the store: no stale refusal"
    );
}

/// A refusal cached after the drop but before the slot went back (the spawned cancellation
/// had not run yet) is forgotten too: the cache is told once the units are back.
#[tokio::test]
async fn a_refusal_cached_before_the_slot_went_back_is_forgotten() {
    let clock = clock();
    let l = limiter(&clock, 1_000);
    assert_eq!(check(&l).await, Outcome::Allowed);
    {
        let mut acquire = pin!(l.acquire("paced", &KEY, 1, 10 * SECOND));
        waits_once(acquire.as_mut()).await;
    }
    // The current-thread runtime has not run the cancellation: the slot is still held.
    assert!(matches!(check(&l).await, Outcome::Limited { .. }));
    assert_eq!(l.deny_cache_len(), 1, "the refusal is cached");
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    clock.advance(SECOND);
    assert!(store_admits(&l, &clock), "the slot went back to the store");
    assert_eq!(check(&l).await, Outcome::Allowed);
}

/// The first test with the deny cache off: the store's answer the limiter's must match.
#[tokio::test]
async fn dropped_acquire_gives_its_slot_back() {
    let clock = clock();
    let l = limiter(&clock, 0);
    assert_eq!(check(&l).await, Outcome::Allowed);
    {
        let mut acquire = pin!(l.acquire("paced", &KEY, 1, 10 * SECOND));
        waits_once(acquire.as_mut()).await;
        assert!(matches!(check(&l).await, Outcome::Limited { .. }));
    }
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    clock.advance(SECOND);
    assert_eq!(check(&l).await, Outcome::Allowed);
}

/// A reservation is given back once: cancelled again, after its slot (and ticket) went to the
/// next reservation, it gives back nothing, and that next reservation keeps its slot.
#[tokio::test]
async fn a_second_cancel_gives_back_nothing() {
    let clock = clock();
    let l = limiter(&clock, 0);
    let reserve = || l.reserve("paced", &KEY, 1, 10 * SECOND);
    assert_eq!(reserve().await.expect("valid").wait(), Some(Duration::ZERO));
    let r1 = reserve().await.expect("valid");
    assert_eq!(r1.wait(), Some(SECOND));
    assert!(
        l.cancel(&r1).await.expect("cancel"),
        "the last slot returns"
    );
    let r2 = reserve().await.expect("valid");
    assert_eq!(r2.wait(), Some(SECOND), "r1's slot, handed out again");
    assert!(
        !l.cancel(&r1).await.expect("cancel"),
        "r1 was given back already: r2's slot is not r1's to give"
    );
    let clone = r1.clone();
    assert!(
        !l.cancel(&clone).await.expect("cancel"),
        "a clone is the same reservation"
    );
    let r3 = reserve().await.expect("valid");
    assert_eq!(r3.wait(), Some(2 * SECOND), "the slot after r2's");
    assert!(
        l.cancel(&r3).await.expect("cancel"),
        "r3's own slot is still its to give back"
    );
}

/// A store whose reservations reach the memory store `delay` late, on the store's clock (as a
/// Redis script that runs a second after it was sent: a stalled node, a cluster client's own
/// retries): the fake clock moves on by `delay` before the reservation is decided.
struct Delayed {
    inner: MemoryStore,
    clock: FakeClock,
    delay_us: std::sync::atomic::AtomicU64,
}

impl Delayed {
    fn set_delay(&self, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).expect("small");
        self.delay_us
            .store(us, std::sync::atomic::Ordering::Relaxed);
    }
}

impl tollgate::Store for Delayed {
    async fn decide(
        &self,
        request: &tollgate::Request<'_>,
        op: Op,
        now: Option<Timestamp>,
    ) -> Result<tollgate::Decisions, tollgate::StoreError> {
        self.inner.decide(request, op, now).await
    }

    async fn reset(&self, request: &tollgate::Request<'_>) -> Result<(), tollgate::StoreError> {
        self.inner.reset(request).await
    }

    async fn take_lease(
        &self,
        take: &tollgate::LeaseTake<'_>,
        now: Option<Timestamp>,
    ) -> Result<tollgate::LeaseGrant, tollgate::StoreError> {
        self.inner.take_lease(take, now).await
    }

    async fn pace(
        &self,
        entry: &tollgate::Entry<'_>,
        pace: tollgate::Pace,
        _now: Option<Timestamp>,
    ) -> Result<tollgate::Paced, tollgate::StoreError> {
        if matches!(pace, tollgate::Pace::Reserve { .. }) {
            let us = self.delay_us.load(std::sync::atomic::Ordering::Relaxed);
            self.clock.advance(Duration::from_micros(us));
        }
        // The store's clock, as Redis's `TIME`: the instant the call is decided at.
        self.inner.pace(entry, pace, None).await
    }

    fn in_process(&self) -> bool {
        false
    }
}

/// GCRA 20/s, burst 1 (the audit's), over [`Delayed`] on `clock`.
fn delayed_limiter(clock: &FakeClock) -> Limiter<std::sync::Arc<Delayed>> {
    let quota = Quota::per_second(20)
        .expect("valid")
        .with_burst(1)
        .expect("valid");
    let limit = Limit::new("paced", Algorithm::Gcra, quota)
        .expect("valid")
        .keyed_by(["user"])
        .expect("valid");
    let store = Delayed {
        inner: MemoryStore::builder()
            .clock(clock.clone())
            .sweep_interval(None)
            .build(),
        clock: clock.clone(),
        delay_us: 0.into(),
    };
    Limiter::builder(std::sync::Arc::new(store))
        .clock(clock.clone())
        .limit(limit)
        .build()
        .expect("valid")
}

/// The audit's held acquires (max_wait 1.5 s) answered 2.3 s after the request: the store call
/// took a second before the script ran, which then measured max_wait from its own now. The
/// budget is counted from the reservation: a slot whose wait, added to the time the store
/// call took, goes past max_wait is given back and refused.
#[tokio::test]
async fn a_delayed_store_call_leaves_less_of_max_wait() {
    let clock = clock();
    let limiter = delayed_limiter(&clock);
    let max_wait = Duration::from_millis(1500);
    // A queue 1.75 s deep (35 slots, 50 ms apart), taken at once.
    for i in 0..35 {
        let r = limiter
            .reserve("paced", &KEY, 1, Duration::from_secs(2))
            .await
            .expect("valid");
        assert_eq!(r.wait(), Some(Duration::from_millis(50 * i)), "slot {i}");
    }
    // Sent now, decided a second later: the next slot is 750 ms after that, 1.75 s from the
    // request, past its 1.5 s.
    let start = clock.now();
    limiter.store().set_delay(SECOND);
    let r = limiter
        .reserve("paced", &KEY, 1, max_wait)
        .await
        .expect("valid");
    let spent = Duration::from_micros(clock.now().as_micros() - start.as_micros());
    assert_eq!(spent, SECOND);
    assert!(
        r.wait().is_none_or(|w| spent + w <= max_wait),
        "answered {spent:?} after the request with a wait of {:?}: {:?} in all, max_wait {max_wait:?}",
        r.wait(),
        spent + r.wait().unwrap_or_default()
    );
    assert_eq!(
        r.outcome(),
        Outcome::Limited {
            retry_after: Duration::from_millis(250)
        },
        "{r:?}"
    );
    assert!(r.slot().is_none(), "a refused reservation holds no slot");
    // The slot went back: the next reservation, undelayed, gets it (750 ms from now).
    limiter.store().set_delay(Duration::ZERO);
    let next = limiter
        .reserve("paced", &KEY, 1, max_wait)
        .await
        .expect("valid");
    assert_eq!(next.wait(), Some(Duration::from_millis(750)));
    // Within the budget a delayed call keeps its slot: 200 ms late, the slot 600 ms after.
    limiter.store().set_delay(Duration::from_millis(200));
    let r = limiter
        .reserve("paced", &KEY, 1, max_wait)
        .await
        .expect("valid");
    assert_eq!(r.wait(), Some(Duration::from_millis(600)));
}

/// Whatever the store's delay, a granted slot begins within max_wait of the request.
#[tokio::test]
async fn granted_slots_begin_within_max_wait_of_the_request() {
    let clock = clock();
    let limiter = delayed_limiter(&clock);
    let max_wait = Duration::from_millis(1500);
    let (mut granted, mut refused) = (0, 0);
    for i in 0..200_u64 {
        limiter
            .store()
            .set_delay(Duration::from_millis((i * 37) % 1700));
        let start = clock.now();
        let r = limiter
            .reserve("paced", &KEY, 1, max_wait)
            .await
            .expect("valid");
        let spent = Duration::from_micros(clock.now().as_micros() - start.as_micros());
        match r.wait() {
            Some(w) => {
                granted += 1;
                assert!(spent + w <= max_wait, "#{i}: {spent:?} + {w:?}");
            }
            None => refused += 1,
        }
    }
    assert!(
        granted > 0 && refused > 0,
        "{granted} granted, {refused} refused"
    );
}

/// `max_wait` is at most an hour (`rules::DEBT_HORIZON_US`): with `Duration::MAX` a queue ran
/// the key's `tat` arbitrarily far, past what settlements count with.
#[tokio::test]
async fn max_wait_above_an_hour_is_refused() {
    let clock = clock();
    let l = limiter(&clock, 0);
    let hour = Duration::from_micros(tollgate::rules::DEBT_HORIZON_US);
    for too_long in [Duration::MAX, hour + Duration::from_micros(1)] {
        let error = l
            .reserve("paced", &KEY, 1, too_long)
            .await
            .expect_err("above an hour");
        assert!(
            matches!(error, tollgate::CheckError::MaxWaitTooLong { longest, .. } if longest == hour),
            "{error:?}"
        );
        assert!(error.to_string().contains("3600000 ms"), "{error}");
        let error = l
            .acquire("paced", &KEY, 1, too_long)
            .await
            .expect_err("above an hour");
        assert!(
            matches!(error, tollgate::CheckError::MaxWaitTooLong { .. }),
            "{error:?}"
        );
    }
    // Nothing was reserved; an hour itself is accepted.
    let r = l.reserve("paced", &KEY, 1, hour).await.expect("an hour");
    assert_eq!(r.wait(), Some(Duration::ZERO));
}
