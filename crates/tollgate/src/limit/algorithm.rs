//! Which algorithm a limit uses, by the names the config file and the wire use.
//!
//! This is the user-facing choice; [`crate::rules`] holds the algorithms themselves.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::rules::DEFAULT_BUCKETS;

/// A rate-limiting algorithm. See `docs/algorithms.md` for guarantees, memory and cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// One counter per clock-aligned window; up to 2 × limit across a window edge.
    FixedWindow,
    /// One entry per admitted unit; exact on every interval.
    SlidingLog,
    /// Sub-bucket counters; never above the limit, may refuse early by one bucket.
    SlidingWindow {
        /// Number of sub-buckets per period (default 60).
        buckets: u32,
    },
    /// Whole tokens refilled at the quota's rate, up to `burst`.
    TokenBucket,
    /// Generic cell rate algorithm: same answers as the token bucket, one integer of state.
    Gcra,
}

impl Algorithm {
    /// Every algorithm, with default parameters.
    pub const ALL: [Algorithm; 5] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingWindow {
            buckets: DEFAULT_BUCKETS,
        },
        Algorithm::TokenBucket,
        Algorithm::Gcra,
    ];

    /// The sliding window with the default 60 sub-buckets.
    pub const fn sliding_window() -> Algorithm {
        Algorithm::SlidingWindow {
            buckets: DEFAULT_BUCKETS,
        }
    }

    /// The config name: `fixed_window`, `sliding_log`, `sliding_window`, `token_bucket`, `gcra`.
    pub const fn name(&self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::SlidingWindow { .. } => "sliding_window",
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::Gcra => "gcra",
        }
    }

    /// Whether it can hand out future slots ([`crate::Limiter::reserve`]): GCRA and the token
    /// bucket, whose state is a point in time (see [`crate::rules::Schedule`]).
    pub const fn reserves(&self) -> bool {
        matches!(self, Algorithm::Gcra | Algorithm::TokenBucket)
    }

    /// A short tag that ends every key of this algorithm, so that changing a limit's algorithm
    /// starts from fresh state instead of misreading the old one. [`crate::Key::new`] follows a
    /// sliding window's with its bucket width and GCRA's with its emission interval (µs).
    pub const fn key_tag(&self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fw",
            Algorithm::SlidingLog => "sl",
            Algorithm::SlidingWindow { .. } => "sw",
            Algorithm::TokenBucket => "tb",
            Algorithm::Gcra => "gcra",
        }
    }

    /// Whether the quota's `burst` applies (token bucket and GCRA) or its `limit` bounds a
    /// window.
    pub const fn uses_burst(&self) -> bool {
        matches!(self, Algorithm::TokenBucket | Algorithm::Gcra)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An algorithm name that is not one of the five.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown algorithm {0:?}: expected fixed_window, sliding_log, sliding_window, token_bucket or gcra"
)]
pub struct UnknownAlgorithm(pub String);

impl FromStr for Algorithm {
    type Err = UnknownAlgorithm;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| UnknownAlgorithm(s.to_owned()))
    }
}

impl Serialize for Algorithm {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Algorithm {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names round-trip and unknown names are refused with the list of valid ones.
    #[test]
    fn names_round_trip() {
        for a in Algorithm::ALL {
            assert_eq!(a.name().parse::<Algorithm>(), Ok(a));
        }
        let err = "leaky".parse::<Algorithm>().expect_err("unknown");
        assert!(err.to_string().contains("gcra"), "{err}");
    }
}
