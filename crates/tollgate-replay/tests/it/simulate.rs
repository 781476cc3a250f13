//! The simulator's scenarios on the virtual clock, every algorithm side by side: each
//! scenario's stated outcome holds, and the figures behind it are the rules' own.

use std::time::Duration;

use tollgate_replay::{ALGORITHMS, Scenario, SimOptions, simulate};

fn options() -> SimOptions {
    SimOptions::algorithms(&ALGORITHMS, 100, Duration::from_secs(60)).expect("options")
}

async fn run(scenario: Scenario) -> tollgate_replay::Report {
    let report = simulate(scenario, &options()).await.expect("simulate");
    assert!(!report.expectations.is_empty());
    for e in &report.expectations {
        assert!(
            e.met,
            "{scenario}: expected {}, measured {}",
            e.expected, e.measured
        );
    }
    report
}

#[tokio::test]
async fn burst_at_the_edge_doubles_the_fixed_window_only() {
    let report = run(Scenario::BurstAtEdge).await;
    let max = |name: &str| {
        report
            .limits
            .iter()
            .find(|l| l.name == name)
            .and_then(|l| l.max_in_any_period())
            .expect("tracked")
    };
    assert_eq!(max("fixed_window"), 200, "both bursts admitted in full");
    assert_eq!(max("sliding_log"), 100);
    assert!(max("sliding_window") <= 100);
    // GCRA and the token bucket: the burst, then what refills in the 12 s of the two bursts
    // at 100/min.
    assert!(max("gcra") <= 120 && max("gcra") >= 110, "{}", max("gcra"));
    assert_eq!(max("gcra"), max("token_bucket"), "the same answers");
}

#[tokio::test]
async fn concurrent_workers_get_exactly_the_limit() {
    let report = run(Scenario::Concurrent).await;
    for l in &report.limits {
        assert_eq!(l.admitted, 100, "{}", l.name);
        assert_eq!(l.requests, 200, "{}", l.name);
    }
}

#[tokio::test]
async fn retries_without_jitter_arrive_together() {
    let report = run(Scenario::RetryStorm).await;
    assert_eq!(
        report.limits.len(),
        10,
        "each algorithm with and without jitter"
    );
}

#[tokio::test]
async fn bots_are_refused_and_users_are_not() {
    run(Scenario::Bots).await;
}

/// A burst larger than the limit (GCRA and token bucket, 10 a minute, burst 40): the steady
/// scenario admits the rate × the time plus the burst, and that is met (before, the bound
/// added the limit, not the burst, and marked the right count ✗).
#[tokio::test]
async fn a_steady_rate_with_a_burst_above_the_limit_is_met() {
    use tollgate::{Algorithm, Limit, Quota};
    let quota = Quota::per_minute(10)
        .and_then(|q| q.with_burst(40))
        .expect("quota");
    let limits = [Algorithm::Gcra, Algorithm::TokenBucket]
        .into_iter()
        .map(|a| {
            Limit::new(a.name(), a, quota)
                .and_then(|l| l.keyed_by(["client"]))
                .expect("limit")
        })
        .collect();
    let mut options = SimOptions::limits(limits);
    options.rate = Some(1.0);
    let report = simulate(Scenario::Steady, &options)
        .await
        .expect("simulate");
    for (l, e) in report.limits.iter().zip(&report.expectations) {
        // 4 minutes at 1/s: 240 asked; 40 × 4 = 40 by the rate, plus the burst of 40.
        assert!(
            l.admitted > 40 + 10 && l.admitted <= 80,
            "{}: {}",
            l.name,
            l.admitted
        );
        assert!(e.met, "{}: {} / {}", l.name, e.expected, e.measured);
    }
}

#[tokio::test]
async fn a_steady_rate_is_admitted_at_the_limits_rate() {
    let report = run(Scenario::Steady).await;
    for l in &report.limits {
        // 1.5× the rate for 4 minutes: 600 asked; about 400 (+ the burst) admitted.
        assert_eq!(l.requests, 600, "{}", l.name);
        assert!(
            l.admitted >= 390 && l.admitted <= 500,
            "{}: {}",
            l.name,
            l.admitted
        );
    }
}

#[tokio::test]
async fn the_report_page_has_a_chart_per_figure() {
    let report = run(Scenario::BurstAtEdge).await;
    let html = report.html();
    // One chart of every limit side by side, then per limit its series, and its most
    // refused keys and its waits when it refused some (the fixed window refuses nothing
    // here: it admits both bursts).
    let charts = html.matches("<svg").count();
    let refusing = report.limits.iter().filter(|l| l.denied() > 0).count();
    assert_eq!(refusing, report.limits.len() - 1);
    assert_eq!(charts, 1 + report.limits.len() + 2 * refusing, "{charts}");
    assert_eq!(html.matches("</svg>").count(), charts);
    assert!(html.contains("class=\"met\""));
    assert!(!html.contains("class=\"unmet\""));
}

#[tokio::test]
async fn immortal_key_needs_a_redis() {
    let err = simulate(Scenario::ImmortalKey, &options())
        .await
        .expect_err("no redis");
    assert!(err.to_string().contains("--redis"), "{err}");
}

/// Pacing: reserving slots keeps the upstream at its limit with no idle slot and one store
/// call per call sent; refusing and retrying sends the same calls with two orders of
/// magnitude more store calls.
#[tokio::test]
async fn reserving_slots_paces_exactly_with_one_call_each() {
    let report = run(Scenario::Pacing).await;
    let by = |name: &str| {
        report
            .limits
            .iter()
            .find(|l| l.name == name)
            .unwrap_or_else(|| panic!("{name} in the report"))
    };
    for name in ["reserve", "retry", "retry-jitter"] {
        assert_eq!(by(name).admitted, 600, "{name}: 4 × 50 workers × 3 calls");
        assert!(
            by(name).max_in_any_period().expect("tracked") <= 100,
            "{name}"
        );
    }
    assert_eq!(
        by("reserve").denied(),
        0,
        "a reservation is never refused here"
    );
    assert!(
        by("retry").denied() > 10 * 600,
        "retries refused again and again"
    );
}
