//! `delay_up_to`: requests wait for their slot instead of being refused, one slot apart; a
//! request dropped while it waits gives its slot back. Decisions on a fake clock, waits on
//! tokio's paused timer (auto-advanced), so every wait is measured exactly.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use tokio::time::Instant;
use tollgate::{Algorithm, Quota};
use tollgate_tower::{ClientIp, ConfigError, Global, RateLimitLayer, Rejection};
use tower::limit::ConcurrencyLimitLayer;
use tower::{Layer, service_fn};

use crate::support::*;

const MINUTE: Duration = Duration::from_secs(60);

/// One call a second, no burst beyond one, per client.
fn one_a_second(algorithm: Algorithm) -> tollgate::Limit {
    tollgate::Limit::new(
        "upstream",
        algorithm,
        Quota::new(60, MINUTE)
            .and_then(|q| q.with_burst(1))
            .expect("quota"),
    )
    .and_then(|l| l.keyed_by(["ip"]))
    .expect("limit")
}

/// Four concurrent requests against one call a second, waiting up to 2.5 s: three go at 0, 1
/// and 2 s (their slots), the fourth's slot (3 s) is too far and it is refused with 429.
#[tokio::test(start_paused = true)]
async fn requests_go_at_their_slots() {
    for algorithm in [Algorithm::Gcra, Algorithm::TokenBucket] {
        let clock = clock();
        let limiter = limiter(memory(&clock), &clock, vec![one_a_second(algorithm)]);
        let layer = RateLimitLayer::new(limiter, ["upstream"], ClientIp::new())
            .expect("layer")
            .delay_up_to(Duration::from_millis(2_500))
            .expect("delay");
        let svc = service(&layer);
        let started = Instant::now();
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let svc = svc.clone();
                tokio::spawn(async move {
                    let resp = send(&svc, from("192.0.2.1")).await;
                    (
                        resp.status(),
                        started.elapsed(),
                        header(&resp, "retry-after"),
                    )
                })
            })
            .collect();
        let mut passed = Vec::new();
        let mut refused = Vec::new();
        for task in tasks {
            let (status, after, retry_after) = task.await.expect("task");
            match status {
                StatusCode::OK => passed.push(after),
                StatusCode::TOO_MANY_REQUESTS => refused.push((after, retry_after)),
                other => panic!("{algorithm:?}: unexpected {other}"),
            }
        }
        passed.sort();
        let secs = |s: u64| Duration::from_secs(s);
        assert_eq!(passed, [secs(0), secs(1), secs(2)], "{algorithm:?}");
        assert_eq!(refused.len(), 1, "{algorithm:?}: {refused:?}");
        // Refused at once, not after a wait; told to come back when a slot is within reach.
        assert_eq!(refused[0].0, Duration::ZERO, "{algorithm:?}");
        assert_eq!(refused[0].1, "1", "{algorithm:?}");
        // Another client has its own schedule.
        let before = Instant::now();
        let resp = send(&svc, from("192.0.2.2")).await;
        assert_status(&resp, StatusCode::OK);
        assert_eq!(before.elapsed(), Duration::ZERO, "{algorithm:?}");
    }
}

/// A request dropped while it waits (its client went away) gives its slot back: the next
/// request gets that slot (1 s), not the one after it (2 s).
#[tokio::test(start_paused = true)]
async fn a_dropped_request_gives_its_slot_back() {
    let clock = clock();
    let limiter = limiter(memory(&clock), &clock, vec![one_a_second(Algorithm::Gcra)]);
    let layer = RateLimitLayer::new(limiter, ["upstream"], ClientIp::new())
        .expect("layer")
        .delay_up_to(Duration::from_secs(10))
        .expect("delay");
    let svc = service(&layer);
    assert_status(&send(&svc, from("192.0.2.1")).await, StatusCode::OK);
    let waiting = {
        let svc = svc.clone();
        tokio::spawn(async move { send(&svc, from("192.0.2.1")).await.status() })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "the second request waits for its slot"
    );
    waiting.abort();
    assert!(waiting.await.expect_err("aborted").is_cancelled());
    // Let the spawned cancellation run.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    let before = Instant::now();
    assert_status(&send(&svc, from("192.0.2.1")).await, StatusCode::OK);
    assert_eq!(before.elapsed(), Duration::from_secs(1));
}

/// A request waiting for its slot holds none of the inner service's readiness: behind a
/// concurrency limit of 2 inside the layer, two requests of one client sleeping for their
/// slots (1 s, 2 s) leave both permits free, and another client's request goes at once. (It
/// waited 1 s, for the permit the first sleeper held.) The sleepers still go at their slots.
#[tokio::test(start_paused = true)]
async fn a_waiting_request_holds_no_inner_permit() {
    let clock = clock();
    let limiter = limiter(memory(&clock), &clock, vec![one_a_second(Algorithm::Gcra)]);
    let layer = RateLimitLayer::new(limiter, ["upstream"], ClientIp::new())
        .expect("layer")
        .delay_up_to(Duration::from_secs(5))
        .expect("delay");
    let inner = ConcurrencyLimitLayer::new(2).layer(service_fn(|_req: Request<String>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
    }));
    let svc = layer.layer(inner);
    let started = Instant::now();
    let sleepers: Vec<_> = (0..3)
        .map(|_| {
            let svc = svc.clone();
            tokio::spawn(async move {
                let resp = send(&svc, from("192.0.2.1")).await;
                (resp.status(), started.elapsed())
            })
        })
        .collect();
    // Every sleeper has its slot and sleeps (the first has passed).
    tokio::time::sleep(Duration::from_millis(1)).await;
    let before = Instant::now();
    let resp = send(&svc, from("192.0.2.99")).await;
    assert_status(&resp, StatusCode::OK);
    assert_eq!(
        before.elapsed(),
        Duration::ZERO,
        "another client waited for a permit a sleeping request held"
    );
    let mut went = Vec::new();
    for sleeper in sleepers {
        let (status, after) = sleeper.await.expect("task");
        assert_eq!(status, StatusCode::OK);
        went.push(after);
    }
    went.sort();
    let secs = |s: u64| Duration::from_secs(s);
    assert_eq!(went, [secs(0), secs(1), secs(2)]);
}

/// Without `delay_up_to` the same requests are refused at once: the option is what waits.
#[tokio::test(start_paused = true)]
async fn without_the_option_requests_are_refused() {
    let clock = clock();
    let limiter = limiter(memory(&clock), &clock, vec![one_a_second(Algorithm::Gcra)]);
    let layer = RateLimitLayer::new(limiter, ["upstream"], ClientIp::new()).expect("layer");
    let svc = service(&layer);
    let started = Instant::now();
    assert_eq!(
        statuses(&svc, 3, || from("192.0.2.1")).await,
        [200, 429, 429]
    );
    assert_eq!(started.elapsed(), Duration::ZERO);
    let resp = send(&svc, from("192.0.2.1")).await;
    assert!(matches!(
        resp.extensions().get::<Rejection>(),
        Some(Rejection::RateLimited(_))
    ));
}

/// Delaying needs one limit that hands out slots; anything else is refused when the layer is
/// built, naming why.
#[test]
fn delay_needs_one_limit_with_slots() {
    let clock = clock();
    let limiter = limiter(
        memory(&clock),
        &clock,
        vec![
            one_a_second(Algorithm::Gcra),
            limit("window", Algorithm::SlidingLog, 5, MINUTE, &[]),
        ],
    );
    let both = RateLimitLayer::new(
        limiter.clone(),
        ["upstream", "window"],
        (Global, ClientIp::new()),
    )
    .expect("layer");
    let error = both
        .delay_up_to(Duration::from_secs(1))
        .expect_err("two limits");
    assert!(
        matches!(error, ConfigError::DelayNeedsOneLimit(2)),
        "{error}"
    );
    let window = RateLimitLayer::new(limiter, ["window"], Global).expect("layer");
    let error = window
        .delay_up_to(Duration::from_secs(1))
        .expect_err("sliding log");
    assert!(
        matches!(&error, ConfigError::CannotDelay { limit, algorithm } if limit == "window" && algorithm == "sliding_log"),
        "{error}"
    );
}

/// A delayed request is validated as a checked one: a cost the limit can never admit is a
/// 413 at once, taking no slot.
#[tokio::test(start_paused = true)]
async fn a_delayed_request_too_costly_is_413() {
    let clock = clock();
    let limiter = limiter(memory(&clock), &clock, vec![one_a_second(Algorithm::Gcra)]);
    let layer = RateLimitLayer::new(limiter, ["upstream"], ClientIp::new())
        .expect("layer")
        .delay_up_to(Duration::from_secs(10))
        .expect("delay")
        .cost(|parts| if parts.uri.path() == "/big" { 5 } else { 1 });
    let svc = service(&layer);
    let big = request_from("192.0.2.1", |b| b.uri("/big"));
    let resp = send(&svc, big).await;
    assert_status(&resp, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(matches!(
        resp.extensions().get::<Rejection>(),
        Some(Rejection::TooCostly { cost: 5, .. })
    ));
    let before = Instant::now();
    assert_status(&send(&svc, from("192.0.2.1")).await, StatusCode::OK);
    assert_eq!(
        before.elapsed(),
        Duration::ZERO,
        "the refused request took no slot"
    );
}

/// `delay_up_to` waits an hour at most (`tollgate::rules::DEBT_HORIZON_US`, the deepest queue
/// settlements count with): longer is a configuration error, naming the limit.
#[test]
fn delay_up_to_longer_than_an_hour_is_refused() {
    let clock = clock();
    let limiter = limiter(memory(&clock), &clock, vec![one_a_second(Algorithm::Gcra)]);
    let hour = Duration::from_micros(tollgate::rules::DEBT_HORIZON_US);
    let layer = RateLimitLayer::new(limiter, ["upstream"], ClientIp::new()).expect("layer");
    for too_long in [Duration::MAX, hour + Duration::from_millis(1)] {
        let error = layer
            .clone()
            .delay_up_to(too_long)
            .expect_err("above an hour");
        assert!(
            matches!(
                &error,
                ConfigError::Invalid(tollgate::CheckError::MaxWaitTooLong { limit, longest, .. })
                    if limit == "upstream" && *longest == hour
            ),
            "{error}"
        );
    }
    layer.delay_up_to(hour).expect("an hour");
}
