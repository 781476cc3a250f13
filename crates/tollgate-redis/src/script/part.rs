//! [`Part`]: one request's call, owned, and the give-back that undoes it.

use redis::{Cmd, Value};
use smallvec::SmallVec;
use tollgate::{Entry, Key, Need};

use super::op::Op;
use super::port::{PORTS, emission_interval, params, port_index};
use super::reply::{Reply, reply_width};
use super::time_source::TimeSource;

/// One request's call, owned (a queued request waits while its caller's borrowed request
/// stays with the caller): op, clock, and each entry's key, row, cost and parameters. Sent as
/// its own call ([`invocation`]) or as a share of a batch ([`batch_invocation`]).
#[derive(Debug, Clone)]
pub(crate) struct Part {
    pub(super) op: Op,
    pub(super) at: TimeSource,
    /// A check's deadline, µs on the server's clock (`deadline.rs`).
    pub(super) deadline: Option<u64>,
    /// The server's clock when the call was sent, at the latest (`store::clock::Sent`): the
    /// clock of a give-back whose reply tells no instant (GCRA's).
    pub(super) sent_after: Option<u64>,
    pub(super) keys: SmallVec<[Key; 2]>,
    pub(super) entries: SmallVec<[PartEntry; 2]>,
    /// A check charges every entry whether it admits or not
    /// (`tollgate::Request::count_refusals`).
    pub(super) counts_refusals: bool,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct PartEntry {
    pub(super) port: u8,
    pub(super) cost: u64,
    pub(super) params: [u64; 3],
    /// What the request needs of it: its tag's mark (`lua/request.lua`).
    pub(super) need: Need,
}

impl Part {
    /// `op` on `entries` (one slot on a cluster) on clock `at`; `counts_refusals` for a
    /// request that counts refusals.
    pub(crate) fn new(
        op: Op,
        entries: &[&Entry<'_>],
        at: TimeSource,
        counts_refusals: bool,
    ) -> Part {
        Part {
            op,
            at,
            deadline: None,
            sent_after: None,
            keys: entries.iter().map(|e| e.key().clone()).collect(),
            entries: entries
                .iter()
                .map(|e| PartEntry {
                    port: port_index(e.limit().algorithm()),
                    cost: e.cost(),
                    params: params(e.limit()),
                    need: e.need(),
                })
                .collect(),
            counts_refusals,
        }
    }

    /// Whether this call needs the general script, whatever its size: a check or a peek of a
    /// request that counts refusals (the single-entry scripts do not count, and a counting
    /// peek answers from the count as it stands, `lua/request.lua`).
    pub(super) fn needs_general(&self) -> bool {
        self.counts_refusals && matches!(self.op, Op::Check | Op::Peek)
    }

    pub(super) fn len(&self) -> usize {
        self.keys.len()
    }

    /// The give-back that undoes this check, when `reply` (its own call's reply, or its share
    /// of a batch's) says it charged: of every entry that admitted when the request was
    /// admitted (`Need::admits`: every entry, unless entries need less), of every entry when
    /// the request counts refusals. `None` for a peek, a give-back, a refusal, a late answer
    /// (`deadline.rs`: nothing charged) or a reply of another shape. Its clock is the instant
    /// the check decided at, as for a cross-slot undo.
    pub(crate) fn undo_of(&self, reply: &Value) -> Option<Part> {
        if self.op != Op::Check {
            return None;
        }
        let (now, answers): (Option<i64>, &[Value]) = match reply {
            Value::Int(_) if self.entries.len() == 1 => (None, std::slice::from_ref(reply)),
            Value::Array(items) => match items.split_first() {
                Some((Value::Int(now), rest)) => (Some(*now), rest),
                _ => return None,
            },
            _ => return None,
        };
        let mut rest = answers;
        let mut admits: SmallVec<[bool; 2]> = SmallVec::new();
        for e in &self.entries {
            let row = &PORTS[usize::from(e.port)];
            let width = reply_width(row.reply);
            if rest.len() < width {
                return None;
            }
            let admitted = match (row.reply, &rest[0]) {
                (Reply::GcraUsed, Value::Int(v)) => *v >= 0,
                (Reply::Decision, Value::Int(v)) => *v == 1,
                _ => return None,
            };
            admits.push(admitted || self.counts_refusals);
            rest = &rest[width..];
        }
        if !Need::admits(
            self.entries
                .iter()
                .map(|e| e.need)
                .zip(admits.iter().copied()),
        ) {
            return None;
        }
        let charged = |i: &usize| admits[*i];
        let kept: SmallVec<[usize; 2]> = (0..self.entries.len()).filter(charged).collect();
        if kept.is_empty() {
            return None;
        }
        let now = match now {
            Some(t) => Some(u64::try_from(t).ok()?),
            None => None,
        };
        // A lone entry's reset (µs): GCRA's one integer, the others' third value.
        let reset_us = match (&self.entries[..], answers) {
            ([one], [first, rest @ ..]) => {
                match (PORTS[usize::from(one.port)].reply, first, rest) {
                    (Reply::GcraUsed, Value::Int(used), _) => u64::try_from(*used).ok(),
                    (Reply::Decision, _, [_, Value::Int(reset), ..]) => u64::try_from(*reset).ok(),
                    _ => None,
                }
            }
            _ => None,
        };
        Some(Part {
            op: Op::GiveBack,
            at: self.undo_clock(now, reset_us),
            deadline: None,
            sent_after: None,
            keys: kept.iter().map(|&i| self.keys[i].clone()).collect(),
            entries: kept
                .iter()
                .map(|&i| PartEntry {
                    need: Need::Must,
                    ..self.entries[i]
                })
                .collect(),
            counts_refusals: false,
        })
    }

    /// Whether this call may charge (a check): a peek or a give-back has nothing to undo.
    pub(crate) fn charges(&self) -> bool {
        self.op == Op::Check
    }

    /// Sets the deadline of a check (`deadline.rs`); a peek or a give-back takes none.
    pub(crate) fn set_deadline(&mut self, deadline: Option<u64>) {
        self.deadline = deadline.filter(|_| self.op == Op::Check);
    }

    /// Sets when the call was sent, on the server's clock at the latest (`store::clock::Sent`).
    pub(crate) fn set_sent_after(&mut self, after: Option<u64>) {
        self.sent_after = after;
    }

    /// The clock of the give-back that undoes this check, `now` being the instant its reply
    /// says it decided at, if it says one, and `reset_us` its one entry's reset (µs), if it
    /// has one entry: the caller's instant; else that instant; else, on the server's clock,
    /// when the call was sent (GCRA's reply tells no instant).
    ///
    /// A lone GCRA or token bucket entry on the server's clock gives back only what its key
    /// may still hold of the charge, counted from the instant given (`lua/gcra.lua`, `at`):
    /// for it, that instant is the earliest the charge can have counted from, its key's new
    /// state (now + reset) less the charge. Exact for a key that was charged ahead of time
    /// (its give-back is whole however late it comes); for one that was full, the time since
    /// the charge is kept back.
    pub(crate) fn undo_clock(&self, now: Option<u64>, reset_us: Option<u64>) -> TimeSource {
        let at = match (self.at, now, self.sent_after) {
            (TimeSource::Caller(t), _, _) => return TimeSource::Caller(t),
            (_, Some(t), _) => t,
            (TimeSource::Server, None, Some(t)) => t,
            (at, None, _) => return at,
        };
        if let ([one], Some(reset)) = (&self.entries[..], reset_us)
            && let Some(t) = emission_interval(one.port, one.params)
        {
            // (GCRA's reset counts from a ms at least `at`'s: the sum is a lower bound.)
            let start = at
                .saturating_add(reset)
                .saturating_sub(one.cost.saturating_mul(t));
            return TimeSource::ServerInstant(start);
        }
        TimeSource::ServerInstant(at)
    }

    /// Each entry's tag and arguments, as `lua/request.lua` reads them: the row's
    /// single-entry arguments (GCRA: inc, tau and whole; the others: cost and three parameters).
    pub(super) fn entry_args(&self, cmd: &mut Cmd) {
        for e in &self.entries {
            let row = &PORTS[usize::from(e.port)];
            let mark = match e.need {
                _ if self.counts_refusals => "+",
                Need::Must => "",
                Need::OneOf => "?",
                Need::Optional => "~",
            };
            if mark.is_empty() {
                cmd.arg(row.tag);
            } else {
                cmd.arg(format!("{mark}{}", row.tag));
            }
            for a in (row.single_args)(e.cost, e.params) {
                cmd.arg(a);
            }
        }
    }

    /// Integers its reply holds after `now`: one per GCRA entry, four per other entry.
    pub(super) fn reply_len(&self) -> usize {
        self.entries
            .iter()
            .map(|e| reply_width(PORTS[usize::from(e.port)].reply))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::{Algorithm, Key, Limit, Namespace};

    use crate::script::batch::batch_invocation;
    use crate::script::invocation::invocation;
    use crate::script::test_support::{cmd_args, limit};

    /// A check's deadline goes where the op goes (a number above 2), in every call shape;
    /// the give-back of an unanswered check (`unanswered.rs`) is built only from a reply
    /// that charged every entry, on the clock it charged at.
    #[test]
    fn deadlines_and_undoes() {
        let gcra: &'static Limit = Box::leak(Box::new(limit(Algorithm::Gcra, 4)));
        let fw: &'static Limit = Box::leak(Box::new(limit(Algorithm::FixedWindow, 4)));
        let ns = Namespace::default();
        let g = Entry::new(gcra, Key::new(&ns, gcra, &[("u", "1")]));
        let f = Entry::new(fw, Key::new(&ns, fw, &[("u", "1")]));
        let mut one = Part::new(Op::Check, &[&g], TimeSource::Server, false);
        one.set_deadline(Some(99_000_000));
        let args = cmd_args(&invocation(&one));
        assert_eq!(
            args.last().map(String::as_str),
            Some("99000000"),
            "{args:?}"
        );
        let mut two = Part::new(Op::Check, &[&g, &f], TimeSource::Caller(7), false);
        two.set_deadline(Some(99_000_000));
        let args = cmd_args(&invocation(&two));
        assert_eq!(&args[5..7], ["99000000", "7"], "{args:?}");
        let batch = cmd_args(&batch_invocation(&[&one, &two]));
        // The general batch: the second part's header says op 3 (+ 4: a clock follows).
        assert!(batch.contains(&(3 + 4 + 8 * 2).to_string()), "{batch:?}");
        let lone = cmd_args(&batch_invocation(&[&one, &one]));
        assert_eq!(lone[5], "99000000", "{lone:?}");
        let mut peek = Part::new(Op::Peek, &[&g], TimeSource::Server, false);
        peek.set_deadline(Some(99_000_000));
        assert!(peek.deadline.is_none());

        let int = Value::Int;
        // GCRA alone, admitted, its reply telling no instant: undone on the server's clock
        // from when it was sent (`lua/gcra.lua`, `at`); on the server's clock as it reads
        // it when that is not known (before the clock's first sample).
        let undo = one.undo_of(&int(5)).expect("charged");
        assert_eq!(
            (undo.op, undo.at, undo.deadline),
            (Op::GiveBack, TimeSource::Server, None)
        );
        // Sent at 98 s, its key's state 300 ms ahead after the charge (4/s: T = 250 ms): the
        // charge counted from 98.05 s at the earliest (the reply counts from a ms at least
        // the send's).
        one.set_sent_after(Some(98_000_000));
        let undo = one.undo_of(&int(300_000)).expect("charged");
        assert_eq!(undo.at, TimeSource::ServerInstant(98_050_000));
        let args = cmd_args(&invocation(&undo));
        assert_eq!(&args[args.len() - 2..], ["2", "s98050000"], "{args:?}");
        assert!(one.undo_of(&int(-3)).is_none(), "a refusal charged nothing");
        let late = Value::BulkString(b"late 123".to_vec());
        assert!(
            one.undo_of(&late).is_none(),
            "a late script charged nothing"
        );
        // Two entries: both admitted, undone at the caller's instant; one refused: nothing.
        let both = Value::Array(vec![int(7), int(0), int(1), int(3), int(10), int(-1)]);
        assert_eq!(
            two.undo_of(&both).map(|u| u.at),
            Some(TimeSource::Caller(7))
        );
        let refused = Value::Array(vec![int(7), int(0), int(-1), int(0), int(10), int(4)]);
        assert!(two.undo_of(&refused).is_none());
        assert!(peek.undo_of(&int(5)).is_none(), "a peek charges nothing");
        let server = Part::new(Op::Check, &[&f], TimeSource::Server, false);
        let fw_reply = Value::Array(vec![int(42), int(1), int(3), int(10), int(-1)]);
        assert_eq!(
            server.undo_of(&fw_reply).map(|u| u.at),
            Some(TimeSource::ServerInstant(42))
        );
        // A token bucket: its key's state (42 s + its reset, 0.5 s) less the charge.
        let tb: &'static Limit = Box::leak(Box::new(limit(Algorithm::TokenBucket, 4)));
        let t = Entry::new(tb, Key::new(&ns, tb, &[("u", "1")]));
        let bucket = Part::new(Op::Check, &[&t], TimeSource::Server, false);
        let tb_reply = Value::Array(vec![int(42_000_000), int(1), int(3), int(500_000), int(-1)]);
        assert_eq!(
            bucket.undo_of(&tb_reply).map(|u| u.at),
            Some(TimeSource::ServerInstant(42_250_000))
        );
    }
}
