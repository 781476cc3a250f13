//! [`SimOptions`]: what `tollgate simulate` runs with, and the virtual clock's start.

use std::time::Duration;

use tollgate::{Algorithm, Limit, Quota};

use crate::replay_error::ReplayError;

/// The virtual clock's start: 2027-01-15 08:00:00 UTC, a whole hour (so a whole minute and
/// second too).
pub const T0_US: u64 = 1_800_000_000_000_000;

/// What to simulate with.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// The limits, side by side (each decided on its own).
    pub limits: Vec<Limit>,
    /// `steady`: requests per second (default 1.5× each limit's rate).
    pub rate: Option<f64>,
    /// How many periods of the first limit to simulate (default 4).
    pub periods: u32,
    /// `concurrent`: workers; `retry-storm`: clients (default 50).
    pub workers: usize,
    /// The seed of the retry storm's jitter.
    pub seed: u64,
    /// A Redis URL: `concurrent` also runs on it with real concurrency; `immortal-key`
    /// needs it.
    pub redis: Option<String>,
}

impl SimOptions {
    /// The five algorithms (or `algorithms`), each at `limit` per `period`, named after
    /// their algorithm.
    ///
    /// # Errors
    /// [`ReplayError::Limit`] for a quota out of range.
    pub fn algorithms(
        algorithms: &[Algorithm],
        limit: u64,
        period: Duration,
    ) -> Result<SimOptions, ReplayError> {
        let quota = Quota::new(limit, period)?;
        let limits = algorithms
            .iter()
            .map(|a| Limit::new(a.name(), *a, quota).and_then(|l| l.keyed_by(["client"])))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(SimOptions::limits(limits))
    }

    /// `limits`, with the defaults for the rest.
    pub fn limits(limits: Vec<Limit>) -> SimOptions {
        SimOptions {
            limits,
            rate: None,
            periods: 4,
            workers: 50,
            seed: 1,
            redis: None,
        }
    }
}
