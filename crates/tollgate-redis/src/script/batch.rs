//! A batch's call: the general batch script, or an algorithm's lone-check batch script when
//! every request fits it; and the split of its reply into each request's own.

use redis::{Cmd, Script, Value};
use tollgate::StoreError;

use super::op::Op;
use super::part::Part;
use super::port::{BATCH_SCRIPT, PORTS, Port};
use super::time_source::TimeSource;

/// The `EVALSHA` of the batch script for `parts`: the lone-check batch script of their
/// algorithm when [`lone_batch`] finds one, else `lua/batch.lua` with every part's keys, then
/// per part a header (op, or 3 for a check with a deadline; whether a clock follows; entry
/// count), the clock unless it is the server's, the deadline if any, and its entries.
pub(crate) fn batch_invocation(parts: &[&Part]) -> Cmd {
    if let Some((row, script, caller)) = lone_batch(parts) {
        return lone_batch_invocation(row, script, caller, parts);
    }
    let mut cmd = redis::cmd("EVALSHA");
    let keys: usize = parts.iter().map(|p| p.len()).sum();
    cmd.arg(BATCH_SCRIPT.get_hash()).arg(keys);
    for p in parts {
        for k in &p.keys {
            cmd.arg(k.as_str());
        }
    }
    for p in parts {
        let clock = p.at != TimeSource::Server;
        let op = if p.deadline.is_some() {
            3
        } else {
            p.op as usize
        };
        cmd.arg(op + 4 * usize::from(clock) + 8 * p.len());
        if clock {
            cmd.arg(p.at.arg());
        }
        if let Some(deadline) = p.deadline {
            cmd.arg(deadline);
        }
        p.entry_args(&mut cmd);
    }
    cmd
}

/// When every part of `parts` is one check of one key of the same algorithm, that algorithm
/// has a lone-check batch script, and every part is on the server's clock (`false`) or every
/// one on the caller's (`true`): the algorithm's row, its script and which clock. The batch
/// then goes as that script ([`lone_batch_invocation`]), else as the general batch script.
fn lone_batch(parts: &[&Part]) -> Option<(&'static Port, &'static Script, bool)> {
    let first = parts.first()?;
    let caller = match first.at {
        TimeSource::Server => false,
        TimeSource::Caller(_) => true,
        TimeSource::ServerInstant(_) => return None,
    };
    let [entry] = first.entries[..] else {
        return None;
    };
    let row = &PORTS[usize::from(entry.port)];
    let script = row.lone_batch.as_ref()?;
    let alike = |p: &&Part| {
        p.op == Op::Check
            && !p.needs_general()
            && matches!(p.entries[..], [e] if e.port == entry.port)
            && match p.at {
                TimeSource::Server => !caller,
                TimeSource::Caller(_) => caller,
                TimeSource::ServerInstant(_) => false,
            }
    };
    parts.iter().all(alike).then_some((row, script, caller))
}

/// The `EVALSHA` of `row`'s lone-check batch script (`lua/batch_gcra.lua`): each part's key,
/// then the clock (`''` the server's, `'c'` the caller's, followed by the earliest deadline of
/// the parts, if any), then the parts in runs of
/// consecutive parts with the same single-entry arguments (one limit, one cost): per run its
/// length and those arguments once, followed on the caller's clock by each part's instant.
fn lone_batch_invocation(row: &Port, script: &Script, caller: bool, parts: &[&Part]) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(parts.len());
    for p in parts {
        cmd.arg(p.keys[0].as_str());
    }
    // The batch's deadline: the earliest of its parts' (`lua/batch_gcra.lua`).
    let clock = if caller { "c" } else { "" };
    match parts.iter().filter_map(|p| p.deadline).min() {
        Some(deadline) => cmd.arg(format!("{clock}{deadline}")),
        None => cmd.arg(clock),
    };
    let args = |p: &Part| {
        let e = &p.entries[0];
        (row.single_args)(e.cost, e.params)
    };
    let mut rest = parts;
    while let Some(first) = rest.first() {
        let asked = args(first);
        let n = rest.iter().take_while(|p| args(p) == asked).count();
        cmd.arg(n);
        for a in &asked {
            cmd.arg(*a);
        }
        for p in &rest[..n] {
            if let TimeSource::Caller(now) = p.at {
                cmd.arg(now);
            }
        }
        rest = &rest[n..];
    }
    cmd
}

/// Splits the batch script's reply into each part's own reply, shaped as the general script
/// answers (`{ now, four integers per entry }`, decoded by [`decode`]) or, from a lone-check
/// batch script, as the part's single-entry script answers; or that part's own failure (a
/// string in the reply, see `lua/batch.lua`).
///
/// # Errors
/// [`StoreError::Protocol`] when the reply does not have the parts' shape (every part fails).
pub(crate) fn split_batch(
    reply: Value,
    parts: &[&Part],
) -> Result<Vec<Result<Value, StoreError>>, StoreError> {
    let bad = |what: String| StoreError::Protocol(format!("batch script reply: {what}"));
    let Value::Array(items) = reply else {
        return Err(bad(format!("expected an array, got {reply:?}")));
    };
    if lone_batch(parts).is_some() {
        // One value per request, as its single-entry script answers, or its failure.
        if items.len() != parts.len() {
            return Err(bad(format!(
                "{} values for {} requests",
                items.len(),
                parts.len()
            )));
        }
        return Ok(items.into_iter().map(own_failure).collect());
    }
    let mut items = items.into_iter();
    let mut out = Vec::with_capacity(parts.len());
    for (i, p) in parts.iter().enumerate() {
        match items.next().map(own_failure) {
            Some(Ok(late)) if crate::deadline::is_late(&late) => out.push(Ok(late)),
            Some(Err(failed)) => out.push(Err(failed)),
            Some(Ok(now)) => {
                let len = p.reply_len();
                let mut own = Vec::with_capacity(1 + len);
                own.push(now);
                own.extend(items.by_ref().take(len));
                if own.len() != 1 + len {
                    return Err(bad(format!("request {i} is cut short")));
                }
                out.push(Ok(Value::Array(own)));
            }
            None => return Err(bad(format!("no answer for request {i}"))),
        }
    }
    if items.next().is_some() {
        return Err(bad("more values than requests".to_owned()));
    }
    Ok(out)
}

/// A batch script's value for one request: the late marker is its answer (`deadline.rs`);
/// another string is that request's own failure (the script caught it, `lua/batch.lua`,
/// `lua/batch_gcra.lua`); anything else is its answer.
fn own_failure(value: Value) -> Result<Value, StoreError> {
    match value {
        late if crate::deadline::is_late(&late) => Ok(late),
        Value::BulkString(message) => Err(crate::error::in_batch(
            String::from_utf8_lossy(&message).into_owned(),
        )),
        Value::SimpleString(message) => Err(crate::error::in_batch(message)),
        answer => Ok(answer),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::{Algorithm, Entry, Key, Limit, Namespace};

    use crate::script::port::port_index;
    use crate::script::test_support::{cmd_args, costing, limit};

    /// A batch goes as GCRA's lone-check script only when every request is one GCRA check on
    /// one kind of clock; any other request (a peek, two entries, another algorithm, a
    /// give-back's instant, clocks mixed) sends the whole batch as the general batch script.
    /// The lone script's arguments: the keys, the clock, then inc, tau and whole (and, on the
    /// caller's clock, the instant) per request.
    #[test]
    fn batches_pick_the_lone_gcra_script_only_when_every_request_fits() {
        let gcra = limit(Algorithm::Gcra, 4);
        let fw = limit(Algorithm::FixedWindow, 4);
        let ns = Namespace::default();
        let entry = |l: &'static Limit, u: &str| Entry::new(l, Key::new(&ns, l, &[("u", u)]));
        let gcra: &'static Limit = Box::leak(Box::new(gcra));
        let fw: &'static Limit = Box::leak(Box::new(fw));
        let (g1, g2, f1) = (entry(gcra, "1"), entry(gcra, "2"), entry(fw, "1"));
        let part = |op, entries: &[&Entry<'_>], at| Part::new(op, entries, at, false);
        let args = cmd_args;
        let lone = PORTS[usize::from(port_index(Algorithm::Gcra))]
            .lone_batch
            .as_ref()
            .expect("GCRA has one")
            .get_hash();
        let general = BATCH_SCRIPT.get_hash();
        let sha = |parts: &[&Part]| args(&batch_invocation(parts))[1].clone();

        let server = [
            part(Op::Check, &[&g1], TimeSource::Server),
            part(Op::Check, &[&g2], TimeSource::Server),
        ];
        let cmd = batch_invocation(&[&server[0], &server[1]]);
        let (k1, k2) = (g1.key().as_str(), g2.key().as_str());
        assert_eq!(
            args(&cmd),
            [
                "EVALSHA", lone, "2", k1, k2, "", "2", "250000", "1000000", "1"
            ]
        );
        let caller = [
            part(Op::Check, &[&g1], TimeSource::Caller(7)),
            part(Op::Check, &[&g2], TimeSource::Caller(9)),
        ];
        assert_eq!(
            args(&batch_invocation(&[&caller[0], &caller[1]]))[5..],
            ["c", "2", "250000", "1000000", "1", "7", "9"]
        );
        // A run per stretch of requests that ask alike: here costs 1, 1, 3, 1.
        let g3 = costing(&g2, 3);
        let runs = [
            part(Op::Check, &[&g1], TimeSource::Caller(7)),
            part(Op::Check, &[&g2], TimeSource::Caller(8)),
            part(Op::Check, &[&g3], TimeSource::Caller(9)),
            part(Op::Check, &[&g1], TimeSource::Caller(10)),
        ];
        assert_eq!(
            args(&batch_invocation(&runs.iter().collect::<Vec<_>>()))[7..],
            [
                "c", "2", "250000", "1000000", "1", "7", "8", "1", "750000", "1000000", "1", "9",
                "1", "250000", "1000000", "1", "10"
            ]
        );

        for odd in [
            part(Op::Peek, &[&g2], TimeSource::Server),
            part(Op::Check, &[&g2, &f1], TimeSource::Server),
            part(Op::Check, &[&f1], TimeSource::Server),
            part(Op::Check, &[&g2], TimeSource::Caller(7)),
            part(Op::GiveBack, &[&g2], TimeSource::ServerInstant(7)),
        ] {
            assert_eq!(sha(&[&server[0], &odd]), general, "{odd:?}");
            assert_eq!(sha(&[&odd, &server[0]]), general, "{odd:?} first");
        }
        assert_eq!(sha(&[&server[0], &server[1]]), lone);
    }
}
