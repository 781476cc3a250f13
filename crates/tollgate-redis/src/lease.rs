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

/// One lease call's arguments, owned: a take (and give-back) on one key.
#[derive(Debug, Clone)]
pub(crate) struct LeaseCall {
    key: String,
    limit: u64,
    period: u64,
    want: u64,
    need: u64,
    give_back: u64,
    give_back_window: u64,
    /// The caller's clock; `None`: the server's.
    now: Option<u64>,
}

impl LeaseCall {
    /// `take` at `now` (the server's clock when `None`).
    pub(crate) fn new(take: &LeaseTake<'_>, now: Option<Timestamp>) -> LeaseCall {
        let quota = take.limit.quota();
        LeaseCall {
            key: take.key.as_str().to_owned(),
            limit: quota.limit(),
            period: quota.period_micros(),
            want: take.want,
            need: take.need,
            give_back: take.give_back,
            give_back_window: take.give_back_window,
            now: now.map(Timestamp::as_micros),
        }
    }

    /// The `EVALSHA` of this call with its `deadline` (µs on the server's clock,
    /// `deadline.rs`) if any.
    pub(crate) fn invocation(&self, deadline: Option<u64>) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(LEASE_SCRIPT.get_hash())
            .arg(1)
            .arg(&self.key)
            .arg(self.limit)
            .arg(self.period)
            .arg(self.want)
            .arg(self.need)
            .arg(self.give_back)
            .arg(self.give_back_window);
        match (self.now, deadline) {
            (Some(now), _) => cmd.arg(now),
            (None, Some(_)) => cmd.arg(""),
            (None, None) => &mut cmd,
        };
        if let Some(deadline) = deadline {
            cmd.arg(deadline);
        }
        cmd
    }

    /// The call that gives back `units` granted in `window` and takes nothing: a grant whose
    /// caller was gone when it arrived (`store/unanswered.rs`).
    pub(crate) fn give_back_only(&self, units: u64, window: u64) -> Cmd {
        LeaseCall {
            want: 0,
            need: 0,
            give_back: units,
            give_back_window: window,
            ..self.clone()
        }
        .invocation(None)
    }
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
