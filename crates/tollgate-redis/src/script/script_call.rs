//! [`ScriptCall`]: a single-entry script as the store sends it, for the benchmark and the
//! tests that run a script by hand.

use tollgate::Limit;

use super::port::{port, single_args};

/// A single-entry script as the store runs it for a check of `cost` units on the server's
/// clock: its text, SHA and `ARGV`. Not part of the API: for the benchmark and the tests, which
/// run the script by hand (`redis-cli`, `redis-benchmark`, `MULTI`), where a wrong argument
/// would go unnoticed.
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct ScriptCall {
    /// The script's full text (load it exactly, final newline included, or the SHA differs).
    pub source: &'static str,
    /// Its SHA1, as `EVALSHA` takes it.
    pub sha: &'static str,
    /// Its `ARGV`.
    pub args: Vec<String>,
}

impl ScriptCall {
    /// The call a one-limit check of `cost` on `limit` makes, on the server's clock.
    pub fn check(limit: &Limit, cost: u64) -> ScriptCall {
        let port = port(limit.algorithm());
        ScriptCall {
            source: &port.single_source,
            sha: port.single.get_hash(),
            args: single_args(limit, cost)
                .iter()
                .map(u64::to_string)
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::{Algorithm, Quota};

    use crate::script::test_support::limit;

    /// The single-entry arguments of a check on the server's clock: GCRA's are inc, tau and
    /// whether T is a whole number of ms; the others' cost and their three parameters; never
    /// op or clock.
    #[test]
    fn single_entry_arguments() {
        // inc = cost × ceil(1 s / 3) µs, tau = 3 intervals.
        assert_eq!(
            ScriptCall::check(&limit(Algorithm::Gcra, 3), 2).args,
            ["666668", "1000002", "0"]
        );
        // T = 1 ms: whole.
        assert_eq!(
            ScriptCall::check(&limit(Algorithm::Gcra, 1000), 3).args,
            ["3000", "1000000", "1"]
        );
        assert_eq!(
            ScriptCall::check(&limit(Algorithm::FixedWindow, 3), 1).args,
            ["1", "3", "1000000", "0"]
        );
        let sw = Limit::new(
            "s",
            Algorithm::SlidingWindow { buckets: 7 },
            Quota::per_second(3).expect("valid"),
        )
        .expect("valid");
        assert_eq!(ScriptCall::check(&sw, 1).args, ["1", "3", "142858", "7"]);
    }
}
