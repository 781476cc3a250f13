//! Helpers shared by the script modules' tests.

use redis::Cmd;
use tollgate::{Algorithm, Entry, Limit, Quota};

/// `e` asking `cost` units (an entry's cost is set only through a validated request).
pub(super) fn costing<'a>(e: &Entry<'a>, cost: u64) -> Entry<'a> {
    tollgate::Request::new([e.clone()], cost)
        .expect("valid")
        .entries()[0]
        .clone()
}

/// A limit of `per_second` units per second.
pub(super) fn limit(algorithm: Algorithm, per_second: u64) -> Limit {
    Limit::new(
        "l",
        algorithm,
        Quota::per_second(per_second).expect("valid"),
    )
    .expect("valid")
}

/// A command's arguments as strings.
pub(super) fn cmd_args(cmd: &Cmd) -> Vec<String> {
    cmd.args_iter()
        .map(|a| match a {
            redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
            _ => String::new(),
        })
        .collect()
}
