//! Pacing on Redis: `lua/pace.lua` (over the algorithm functions, like the general script),
//! its arguments and its reply — reservations, their cancellation and settlements, each one
//! script call on one key.

use std::time::Duration;

use redis::{Cmd, Value};
use tokio::time::Instant;
use tollgate::{Admission, Decision, Entry, NotUntil, Pace, Paced, Slot, StoreError, Timestamp};

use crate::script::{PACE_SCRIPT, pace_params};

/// How long a reservation's call may have taken and count as no wait (µs): the limiter's
/// rule (`tollgate`'s `limiter/pacing.rs`, `ORDINARY_CALL`).
const ORDINARY_CALL_US: u64 = 1_000;

/// One pacing call's arguments, owned (it may be settled after its caller is gone).
#[derive(Debug, Clone)]
pub(crate) struct PaceCall {
    key: String,
    op: &'static str,
    tag: &'static str,
    units: i64,
    /// Cancel: the ticket. Reserve: unused, see `budget`.
    arg: u64,
    /// Reserve: the caller's `max_wait` (µs) and when the call started. Each try sends what
    /// is left of it: the wait is counted from the reservation, not from each try.
    budget: Option<(u64, Instant)>,
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
        let (op, units, arg, budget) = match pace {
            Pace::Reserve { max_wait } => (
                "r",
                cost,
                0,
                Some((
                    u64::try_from(max_wait.as_micros()).unwrap_or(u64::MAX),
                    Instant::now(),
                )),
            ),
            Pace::Cancel { ticket } => ("c", cost, ticket, None),
            Pace::Adjust { delta } => ("a", delta, 0, None),
        };
        PaceCall {
            key: entry.key().as_str().to_owned(),
            op,
            tag,
            units,
            // Lua's numbers are doubles: a wait beyond 2^53 µs (285 years) is no limit.
            arg: arg.min(1 << 53),
            budget,
            params,
            limit: entry.limit().quota().limit(),
            now: now.map(Timestamp::as_micros),
        }
    }

    /// ARGV[4]: a cancellation's ticket; a reservation's longest wait, what is left of its
    /// `max_wait` now (`-1` once none is: the script refuses whatever the slot).
    fn arg(&self) -> i64 {
        let Some((max_wait, started)) = self.budget else {
            return i64::try_from(self.arg).unwrap_or(i64::MAX);
        };
        let spent = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        // As the limiter counts a reservation's store call: not at all within a millisecond
        // (a round trip; a max_wait of 0 still takes a free slot), in full beyond.
        let spent = if spent <= ORDINARY_CALL_US { 0 } else { spent };
        match max_wait.checked_sub(spent) {
            // Lua's numbers are doubles: a wait beyond 2^53 µs (285 years) is no limit.
            Some(left) => i64::try_from(left.min(1 << 53)).unwrap_or(i64::MAX),
            None => -1,
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
            .arg(self.arg())
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
                budget: None,
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

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::{Algorithm, Key, Limit, Quota};

    /// ARGV[4] of a call's invocation.
    fn budget_sent(call: &PaceCall) -> i64 {
        let cmd = call.invocation(None);
        let arg = cmd.args_iter().nth(7).expect("ARGV[4]");
        let redis::Arg::Simple(bytes) = arg else {
            panic!("a cursor arg")
        };
        std::str::from_utf8(bytes)
            .expect("text")
            .parse()
            .expect("a number")
    }

    /// Each try of a reservation sends what is left of its max_wait, counted from the call:
    /// a try sent a second later (a late answer sent again) accepts a second less, and one
    /// sent after the whole of it accepts none (-1: refused whatever the slot).
    #[tokio::test(start_paused = true)]
    async fn each_try_sends_what_is_left_of_max_wait() {
        let quota = Quota::per_second(20).expect("valid");
        let limit = Limit::new("p", Algorithm::Gcra, quota).expect("valid");
        let namespace = tollgate::Namespace::new("t").expect("valid");
        let key = Key::new(&namespace, &limit, &[("user", "1")]);
        let entry = Entry::new(&limit, key);
        let pace = Pace::Reserve {
            max_wait: Duration::from_millis(1500),
        };
        let call = PaceCall::new(&entry, pace, None);
        assert_eq!(budget_sent(&call), 1_500_000);
        // A millisecond (a round trip) is not counted; more is, in full.
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(budget_sent(&call), 1_500_000);
        tokio::time::advance(Duration::from_millis(999)).await;
        assert_eq!(budget_sent(&call), 500_000);
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!(budget_sent(&call), 0);
        tokio::time::advance(Duration::from_micros(1)).await;
        assert_eq!(budget_sent(&call), -1);
        // A cancellation sends its ticket, whenever.
        let cancel = PaceCall::new(&entry, Pace::Cancel { ticket: 42 }, None);
        assert_eq!(budget_sent(&cancel), 42);
    }
}
