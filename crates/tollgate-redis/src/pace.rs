//! Pacing on Redis: `lua/pace.lua` (over the algorithm functions, like the general script),
//! its arguments and its reply — reservations, their cancellation and settlements, each one
//! script call on one key.

use std::time::Duration;

use redis::{Cmd, Value};
use tollgate::{Admission, Decision, Entry, NotUntil, Pace, Paced, Slot, StoreError, Timestamp};

use crate::script::{PACE_SCRIPT, pace_params};

/// One pacing call's arguments, owned (it may be settled after its caller is gone).
#[derive(Debug, Clone)]
pub(crate) struct PaceCall {
    key: String,
    op: &'static str,
    tag: &'static str,
    units: i64,
    arg: u64,
    params: [u64; 3],
    limit: u64,
    /// The caller's clock; `None`: the server's.
    now: Option<u64>,
}

impl PaceCall {
    /// `pace` on `entry` at `now` (the server's clock when `None`).
    pub(crate) fn new(entry: &Entry<'_>, pace: Pace, now: Option<Timestamp>) -> PaceCall {
        let (tag, params) = pace_params(entry.limit());
        let cost = i64::try_from(entry.cost()).unwrap_or(i64::MAX);
        let (op, units, arg) = match pace {
            Pace::Reserve { max_wait } => (
                "r",
                cost,
                u64::try_from(max_wait.as_micros()).unwrap_or(u64::MAX),
            ),
            Pace::Cancel { ticket } => ("c", cost, ticket),
            Pace::Adjust { delta } => ("a", delta, 0),
        };
        PaceCall {
            key: entry.key().as_str().to_owned(),
            op,
            tag,
            units,
            // Lua's numbers are doubles: a wait beyond 2^53 µs (285 years) is no limit.
            arg: arg.min(1 << 53),
            params,
            limit: entry.limit().quota().limit(),
            now: now.map(Timestamp::as_micros),
        }
    }

    /// The `EVALSHA` of this call with its `deadline` (µs on the server's clock) if any.
    pub(crate) fn invocation(&self, deadline: Option<u64>) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(PACE_SCRIPT.get_hash())
            .arg(1)
            .arg(&self.key)
            .arg(self.op)
            .arg(self.tag)
            .arg(self.units)
            .arg(self.arg)
            .arg(&self.params[..]);
        match self.now {
            Some(now) => cmd.arg(now),
            None => cmd.arg(""),
        };
        if let Some(deadline) = deadline {
            cmd.arg(deadline);
        }
        cmd
    }

    /// A reservation whose caller is gone: the cancellation that gives its slot back, when
    /// `reply` says a slot was taken.
    pub(crate) fn cancel_of(&self, reply: Value) -> Option<Cmd> {
        if self.op != "r" {
            return None;
        }
        let slot = self.decode(reply).ok()?.slot?;
        Some(
            PaceCall {
                op: "c",
                arg: slot.ticket(),
                ..self.clone()
            }
            .invocation(None),
        )
    }

    /// Reads the script's reply.
    ///
    /// # Errors
    /// [`StoreError::Protocol`] for any shape but eight integers as `lua/pace.lua` says.
    pub(crate) fn decode(&self, reply: Value) -> Result<Paced, StoreError> {
        let bad = || StoreError::Protocol(format!("pace script reply: {reply:?}"));
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
        let &[_now, verdict, remaining, reset, retry, wait, ticket, given] = ints.as_slice() else {
            return Err(bad());
        };
        let micros = |i: i64| {
            u64::try_from(i)
                .map(Duration::from_micros)
                .map_err(|_| bad())
        };
        let admission = match verdict {
            1 => Admission::Allowed,
            -1 => Admission::Refused(NotUntil::new(micros(retry)?)),
            _ => return Err(bad()),
        };
        let slot = if wait >= 0 {
            Some(Slot::new(
                micros(wait)?,
                u64::try_from(ticket).map_err(|_| bad())?,
            ))
        } else {
            None
        };
        Ok(Paced {
            decision: Decision {
                admission,
                limit: self.limit,
                remaining: u64::try_from(remaining).map_err(|_| bad())?,
                reset_after: micros(reset)?,
            },
            slot,
            given_back: given == 1,
        })
    }
}
