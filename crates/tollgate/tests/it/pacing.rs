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
