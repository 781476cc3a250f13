//! Script replies decoded into typed decisions, in one place, so no caller indexes a reply.

use std::time::Duration;

use redis::Value;
use smallvec::SmallVec;
use tollgate::rules::{Gcra, GcraState, Rule};
use tollgate::{Admission, Decision, Entry, Limit, NotUntil, StoreError, Timestamp};

use super::port::{params, port};
use super::reply::{Reply, reply_width};

/// Decodes a script's reply for `entries` (each at its own cost) into the instant the script used (none
/// when it read no clock) and one decision per entry. Every reply is read as one shape,
/// `{ now, (verdict, b, c, d) × n }`, a one-integer reply being a single entry's verdict with
/// neither instant nor the other three; each entry's row says what its four mean.
///
/// # Errors
/// [`StoreError::Protocol`] for any other shape.
pub(crate) fn decode(
    reply: Value,
    entries: &[&Entry<'_>],
) -> Result<(Option<u64>, SmallVec<[Decision; 2]>), StoreError> {
    let bad = |what: &str| StoreError::Protocol(format!("script reply: {what}"));
    let (now, ints) = match reply {
        Value::Int(verdict) if entries.len() == 1 => (None, vec![verdict]),
        Value::Array(items) => {
            let mut ints = Vec::with_capacity(items.len());
            for v in items {
                match v {
                    Value::Int(i) => ints.push(i),
                    other => return Err(bad(&format!("expected an integer, got {other:?}"))),
                }
            }
            let Some((&now, rest)) = ints.split_first() else {
                return Err(bad("an empty array"));
            };
            let now = u64::try_from(now).map_err(|_| bad(&format!("negative now: {now}")))?;
            (Some(now), rest.to_vec())
        }
        other => return Err(bad(&format!("expected an array, got {other:?}"))),
    };
    let widths: SmallVec<[usize; 2]> = entries
        .iter()
        .map(|e| reply_width(port(e.limit().algorithm()).reply))
        .collect();
    let expected: usize = widths.iter().sum();
    if ints.len() != expected {
        return Err(bad(&format!(
            "expected {} integers for {} entries, got {}",
            1 + expected,
            entries.len(),
            1 + ints.len()
        )));
    }
    let mut rest = &ints[..];
    let mut decisions = SmallVec::new();
    for (e, &w) in entries.iter().zip(&widths) {
        let (own, after) = rest.split_at(w);
        rest = after;
        let mut four = [0_i64; 4];
        four[..w].copy_from_slice(own);
        decisions.push(decide(e.limit(), e.cost(), four)?);
    }
    Ok((now, decisions))
}

/// The decision of one entry of `limit` at `cost` from its four integers, as its row says.
fn decide(limit: &Limit, cost: u64, four: [i64; 4]) -> Result<Decision, StoreError> {
    match port(limit.algorithm()).reply {
        Reply::Decision => decision(limit, four),
        Reply::GcraUsed => gcra_decision(limit, cost, four[0]),
    }
}

/// `verdict, remaining, reset_after_us, retry_after_us`, read as they are.
fn decision(
    limit: &Limit,
    [verdict, remaining, reset, retry]: [i64; 4],
) -> Result<Decision, StoreError> {
    let bad = |what: &str| StoreError::Protocol(format!("script reply: {what}"));
    let unsigned =
        |i: i64, what: &str| u64::try_from(i).map_err(|_| bad(&format!("negative {what}: {i}")));
    let allowed = match verdict {
        1 => true,
        -1 => false,
        other => return Err(bad(&format!("verdict {other}"))),
    };
    let admission = if allowed {
        Admission::Allowed
    } else {
        Admission::Refused(NotUntil::new(Duration::from_micros(unsigned(
            retry,
            "retry_after",
        )?)))
    };
    Ok(Decision {
        admission,
        limit: limit.quota().limit(),
        remaining: unsigned(remaining, "remaining")?,
        reset_after: Duration::from_micros(unsigned(reset, "reset_after")?),
    })
}

/// GCRA's one integer (`lua/gcra.lua`): the key's `tat − now` after an admitted call or, as
/// −1 − it, before a denied one. The decision then comes from the Rust rule itself, on that
/// state at now = 0, so the numbers are the memory store's by construction. A reply the rule
/// contradicts is a protocol error.
fn gcra_decision(limit: &Limit, cost: u64, reply: i64) -> Result<Decision, StoreError> {
    let allowed = reply >= 0;
    let used = if allowed { reply } else { -1 - reply };
    let state = GcraState {
        tat: used.unsigned_abs(),
    };
    // What the rule says of that state: for a denial, the decision itself; for an admit (the
    // state after it), the same numbers without a wait.
    let ruled = Gcra::new(limit.quota()).peek(&state, Timestamp::from_micros(0), cost);
    let [_, tau, _] = params(limit);
    if (allowed && state.tat > tau) || (!allowed && ruled.is_allowed()) {
        return Err(StoreError::Protocol(format!(
            "script reply: GCRA {reply} contradicts the rule (cost {cost}, tau {tau} µs)"
        )));
    }
    Ok(Decision {
        admission: if allowed {
            Admission::Allowed
        } else {
            ruled.admission
        },
        ..ruled
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::{Algorithm, Key, Namespace, Quota};

    use crate::script::test_support::{costing, limit};

    /// A reply of the wrong shape is a protocol error, never a panic or a wrong decision.
    #[test]
    fn malformed_replies_are_protocol_errors() {
        let limit = limit(Algorithm::FixedWindow, 5);
        let entry = Entry::new(
            &limit,
            Key::new(&Namespace::default(), &limit, &[("u", "1")]),
        );
        let one = [&entry];
        let ints = |v: &[i64]| Value::Array(v.iter().map(|&i| Value::Int(i)).collect());
        for reply in [
            Value::Int(2),
            Value::Nil,
            ints(&[]),
            ints(&[1, 1]),
            ints(&[1, 2, 0, 0, -1]),
            ints(&[1, 0, 0, 0, 0]),
            ints(&[1, -1, 0, 0, -5]),
            ints(&[-1, 1, 0, 0, 0]),
            Value::Array(vec![
                Value::Int(1),
                Value::Nil,
                Value::Int(0),
                Value::Int(0),
                Value::Int(0),
            ]),
        ] {
            let err = decode(reply.clone(), &one).expect_err("malformed");
            assert!(matches!(err, StoreError::Protocol(_)), "{reply:?}: {err}");
        }
        let (now, d) = decode(ints(&[7, -1, 3, 10, 25]), &one).expect("well formed");
        assert_eq!(now, Some(7));
        assert!(!d[0].is_allowed());
        assert_eq!(d[0].limit, 5);
        assert_eq!(d[0].remaining, 3);
        assert_eq!(d[0].retry_after(), Some(Duration::from_micros(25)));
        // Two entries, one of each reply: each read by its own row.
        let gcra = self::limit(Algorithm::Gcra, 5);
        let second = Entry::new(&gcra, Key::new(&Namespace::default(), &gcra, &[("u", "1")]));
        let (_, d) =
            decode(ints(&[7, 1, 4, 10, -1, 400_000]), &[&entry, &second]).expect("well formed");
        assert!(d[0].is_allowed() && d[0].remaining == 4, "{d:?}");
        assert!(d[1].is_allowed() && d[1].remaining == 3, "{d:?}");
        assert_eq!(d[1].reset_after, Duration::from_millis(400));
    }

    /// GCRA's one integer becomes the decision the Rust rule gives for that state; a reply the
    /// rule contradicts, or of another shape, is a protocol error.
    #[test]
    fn gcra_integer_replies() {
        // 5 per second: T = 200 000 µs, tau = 1 s.
        let limit =
            Limit::new("g", Algorithm::Gcra, Quota::per_second(5).expect("valid")).expect("valid");
        let entry = Entry::new(
            &limit,
            Key::new(&Namespace::default(), &limit, &[("u", "1")]),
        );
        let decide = |reply: Value, cost: u64| {
            let entry = costing(&entry, cost);
            decode(reply, &[&entry]).map(|(now, d)| (now, d[0]))
        };
        // Admitted, 2 units now used: 3 left, full again in 400 ms.
        let (now, d) = decide(Value::Int(400_000), 1).expect("valid");
        assert_eq!(now, None);
        assert_eq!(d, Decision::allowed(5, 3, Duration::from_millis(400)));
        // Denied with 900 ms used: cost 1 needs 100 ms more, cost 2 needs 300 ms.
        for (cost, retry) in [(1, 100), (2, 300)] {
            let (_, d) = decide(Value::Int(-1 - 900_000), cost).expect("valid");
            assert!(!d.is_allowed());
            assert_eq!(d.remaining, 0);
            assert_eq!(d.reset_after, Duration::from_millis(900));
            assert_eq!(
                d.retry_after(),
                Some(Duration::from_millis(retry)),
                "cost {cost}"
            );
        }
        // Contradictions: "denied" with room for the cost; "admitted" past tau; other shapes.
        for (reply, cost) in [
            (Value::Int(-1), 1),
            (Value::Int(-1 - 700_000), 1),
            (Value::Int(1_000_001), 1),
            (Value::Array(vec![Value::Int(1)]), 1),
            (Value::Nil, 1),
        ] {
            let err = decide(reply.clone(), cost).expect_err("malformed");
            assert!(matches!(err, StoreError::Protocol(_)), "{reply:?}: {err}");
        }
    }
}
