//! The follower task through a panic: a bug in it must not leave the store on the master it
//! had for ever.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tollgate::{Algorithm, Limit, Limiter, Outcome, Quota};
use tollgate_testkit::{FakeSentinel, RedisServer};

use super::PANIC_IN_NEXT_LOOK;
use crate::RedisStore;

/// The follower panics in a look; it is started again, and follows the master the sentinel
/// names next (before, the task died with the panic and the store stayed where it was).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_follower_survives_a_panic() {
    let first = RedisServer::start();
    let second = RedisServer::start();
    let sentinel = FakeSentinel::naming(first.port());
    let store = RedisStore::sentinel_builder([sentinel.url()], "mymaster")
        .build()
        .await
        .expect("connect through the fake sentinel");
    let limit = Limit::new(
        "l",
        Algorithm::Gcra,
        Quota::per_second(1_000).expect("valid"),
    )
    .and_then(|l| l.keyed_by(["user"]))
    .expect("valid");
    let limiter = Limiter::builder(store).limit(limit).build().expect("valid");
    let within = Duration::from_secs(20);
    PANIC_IN_NEXT_LOOK.store(true, Ordering::SeqCst);
    // The follower's routine check takes the panic.
    let deadline = Instant::now() + within;
    while PANIC_IN_NEXT_LOOK.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "the follower never looked");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sentinel.name_master("127.0.0.1", second.port());
    let deadline = Instant::now() + within;
    for n in 0.. {
        assert!(
            Instant::now() < deadline,
            "the store did not follow {} within {within:?}: the follower died",
            second.port()
        );
        let user = format!("u{n}");
        let key = [("user", user.as_str())];
        let name = limiter.prepare(&["l"], &key, 1).expect("valid").entries()[0]
            .key()
            .as_str()
            .to_owned();
        let v = limiter.check("l", &key).await.expect("known");
        if v.outcome() == Outcome::Allowed && second.integer(&["EXISTS", &name]) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
