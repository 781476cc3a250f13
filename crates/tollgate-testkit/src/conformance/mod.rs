//! The store conformance suite: one set of behaviours every [`Store`](tollgate::Store) must show, written
//! once and run unchanged against the memory store, Redis and Redis Cluster.
//!
//! Use it from a store crate's integration tests:
//! ```text
//! async fn fixture(clock: tollgate::FakeClock) -> tollgate_testkit::Fixture<MyStore> { ... }
//! tollgate_testkit::conformance_suite!(fixture);
//! ```
//! The macro expands to one `#[tokio::test]` per behaviour below (the caller needs `tokio`
//! with `macros` and `rt-multi-thread`). Every check goes through a [`Limiter`](tollgate::Limiter) built with the
//! test's [`FakeClock`](tollgate::FakeClock), so stores are always given an explicit `now` and time moves only when a
//! test advances it. Periods are minutes long: a Redis key's real TTL then always outlives the
//! few real milliseconds a test takes.

use tollgate::Timestamp;

mod algorithms;
mod all_or_nothing;
mod basics;
mod costs;
mod harness;
mod modes;
mod numbers;
mod pacing;

pub use algorithms::{
    fixed_window_admits_twice_the_limit_across_an_edge, gcra_with_another_rate_starts_afresh,
    sliding_log_never_exceeds_the_limit_in_any_period,
    sliding_window_stays_within_one_bucket_of_exact,
    sliding_window_with_another_width_starts_afresh,
};
pub use all_or_nothing::{multi_limit_is_all_or_nothing, one_limit_two_keys_is_all_or_nothing};
pub use basics::{
    denied_calls_change_nothing, exact_under_concurrent_tasks, exactly_limit_admitted,
    keys_are_independent, peek_consumes_nothing, reset_forgets_the_key,
};
pub use costs::{
    cost_above_one, cost_too_large_is_an_error, mixed_costs_are_all_or_nothing,
    mixed_costs_exact_under_concurrent_tasks,
};
pub use modes::{
    any_of_group_refuses_only_when_all_refuse, counted_peeks_answer_from_the_count,
    counted_refusals_charge_every_entry, lease_mode_counts_every_unit_taken,
};
pub use numbers::{remaining_and_reset_after_track_each_call, retry_after_is_exact};
pub use pacing::{
    adjust_charges_debt_and_refunds_within_full, adjust_debt_is_capped_at_one_capacity,
    adjust_keeps_reservations_beyond_the_cap, cancel_gives_back_only_the_last_slot,
    concurrent_reservations_are_the_schedule, reservations_take_consecutive_slots,
    window_algorithms_cannot_reserve,
};

/// Every test's start: 2030-01-01T00:00:00Z, aligned to every window used here.
pub const START: Timestamp = Timestamp::from_micros(1_893_456_000_000_000);

/// Expands to the whole suite for a fixture function
/// `async fn(FakeClock) -> Fixture<impl Store>`.
#[macro_export]
macro_rules! conformance_suite {
    ($fixture:path) => {
        $crate::conformance_suite!(@each $fixture;
            exactly_limit_admitted,
            exact_under_concurrent_tasks,
            denied_calls_change_nothing,
            peek_consumes_nothing,
            reset_forgets_the_key,
            remaining_and_reset_after_track_each_call,
            retry_after_is_exact,
            cost_above_one,
            cost_too_large_is_an_error,
            mixed_costs_are_all_or_nothing,
            mixed_costs_exact_under_concurrent_tasks,
            multi_limit_is_all_or_nothing,
            one_limit_two_keys_is_all_or_nothing,
            keys_are_independent,
            fixed_window_admits_twice_the_limit_across_an_edge,
            sliding_log_never_exceeds_the_limit_in_any_period,
            sliding_window_stays_within_one_bucket_of_exact,
            sliding_window_with_another_width_starts_afresh,
            gcra_with_another_rate_starts_afresh,
            lease_mode_counts_every_unit_taken,
            any_of_group_refuses_only_when_all_refuse,
            counted_refusals_charge_every_entry,
            counted_peeks_answer_from_the_count,
            reservations_take_consecutive_slots,
            concurrent_reservations_are_the_schedule,
            cancel_gives_back_only_the_last_slot,
            window_algorithms_cannot_reserve,
            adjust_charges_debt_and_refunds_within_full,
            adjust_debt_is_capped_at_one_capacity,
            adjust_keeps_reservations_beyond_the_cap,
        );
    };
    (@each $fixture:path; $($test:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                let clock = ::tollgate::FakeClock::new($crate::conformance::START);
                let fixture = $fixture(clock.clone()).await;
                $crate::conformance::$test(clock, fixture).await;
            }
        )*
    };
}
