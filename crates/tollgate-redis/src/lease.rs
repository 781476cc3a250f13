//! Lease mode on Redis: `lua/lease.lua` (after the prelude), its arguments and its reply.
//!
//! One script call per take, give-back included: an instance returning an expired lease's
//! units and taking a new one for the same key pays one round trip, not two. The key is the
//! fixed window's own, so a limit switched between exact and lease mode keeps its count.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Cmd, Script, Value};
use tollgate::{LeaseGrant, LeaseTake, StoreError, Timestamp};

const PRELUDE: &str = include_str!("../lua/prelude.lua");
const LEASE: &str = include_str!("../lua/lease.lua");

/// The lease script, loaded with the others (`script::all_scripts`).
pub(crate) static LEASE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&format!("{PRELUDE}\n{LEASE}")));

/// The `EVALSHA` of `take` at `now` (the server's clock when `None`).
pub(crate) fn invocation(take: &LeaseTake<'_>, now: Option<Timestamp>) -> Cmd {
    let quota = take.limit.quota();
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(LEASE_SCRIPT.get_hash())
        .arg(1)
        .arg(take.key.as_str())
        .arg(quota.limit())
        .arg(quota.period_micros())
        .arg(take.want)
        .arg(take.need)
        .arg(take.give_back)
        .arg(take.give_back_window);
    if let Some(now) = now {
        cmd.arg(now.as_micros());
    }
    cmd
}

/// Reads the script's reply.
///
/// # Errors
/// [`StoreError::Protocol`] for any shape but six non-negative integers (the last −1 or
/// more).
pub(crate) fn decode(reply: Value) -> Result<LeaseGrant, StoreError> {
    let bad = || StoreError::Protocol(format!("lease script reply: {reply:?}"));
    let Value::Array(items) = &reply else {
        return Err(bad());
    };
    let ints: Vec<i64> = items
        .iter()
        .map(|v| match v {
            Value::Int(i) => Ok(*i),
            _ => Err(bad()),
        })
        .collect::<Result<_, _>>()?;
    let &[_now, granted, window, remaining, valid, retry] = ints.as_slice() else {
        return Err(bad());
    };
    let unsigned = |i: i64| u64::try_from(i).map_err(|_| bad());
    Ok(LeaseGrant {
        granted: unsigned(granted)?,
        window: unsigned(window)?,
        valid_for: Duration::from_micros(unsigned(valid)?),
        remaining: unsigned(remaining)?,
        retry_after: match retry {
            -1 => None,
            r => Some(Duration::from_micros(unsigned(r)?)),
        },
    })
}
