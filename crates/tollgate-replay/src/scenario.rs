//! The workloads `tollgate simulate` knows, by name.

use std::fmt;
use std::str::FromStr;

/// A synthetic workload, or one of the three experiments of the classic lesson on Redis rate
/// limiters (exact under concurrency, the fixed window's edge, the immortal key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// One client at a steady rate (`--rate`, default 1.5× the limit).
    Steady,
    /// The limit just before a window boundary and again just after it: the fixed window
    /// admits about twice its limit within a short span, the sliding log never more than
    /// its limit in any period.
    BurstAtEdge,
    /// Many bots far over the limit among regular clients under it.
    Bots,
    /// Clients sharing one limit, each retrying when refused after `retry_after`: all at the
    /// same instant without jitter, spread with it.
    RetryStorm,
    /// 4 instances × `--workers` workers sending calls to an upstream at the first limit's
    /// rate: reserving slots of the limit's schedule against refuse-and-retry (with and
    /// without jitter).
    Pacing,
    /// Workers all asking at the same instant: exactly the limit passes (with `--redis`, on a
    /// real Redis with real concurrency too).
    Concurrent,
    /// Needs `--redis`: a naive two-command fixed window (INCR, then EXPIRE) with a crash
    /// between the two leaves a key without expiry; tollgate's one script never does.
    ImmortalKey,
}

/// Every scenario, in the order `--help` lists them.
pub const SCENARIOS: &[Scenario] = &[
    Scenario::Steady,
    Scenario::BurstAtEdge,
    Scenario::Bots,
    Scenario::RetryStorm,
    Scenario::Pacing,
    Scenario::Concurrent,
    Scenario::ImmortalKey,
];

impl Scenario {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Steady => "steady",
            Scenario::BurstAtEdge => "burst-at-edge",
            Scenario::Bots => "bots",
            Scenario::RetryStorm => "retry-storm",
            Scenario::Pacing => "pacing",
            Scenario::Concurrent => "concurrent",
            Scenario::ImmortalKey => "immortal-key",
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scenario {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SCENARIOS
            .iter()
            .copied()
            .find(|c| c.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = SCENARIOS.iter().map(|c| c.name()).collect();
                format!(
                    "unknown scenario {s:?}: expected one of {}",
                    names.join(", ")
                )
            })
    }
}
