//! A verdict's JSON body, written by hand: the body of every check, peek and acquire.
//!
//! Why by hand: the check is the service's hot path, and serde's derive spent more on this
//! body than the memory store spent deciding. It sent every field name through serde_json's
//! string escaper and every number through the `io::Write` path: about 3,200 instructions a
//! check (callgrind, a one-limit check). Here field names are literals, numbers go through
//! `itoa`, and a limit name is copied as it is unless it holds a byte JSON must escape.
//!
//! The bytes are exactly serde_json's for the documented body types
//! ([`api::VerdictBody`](super::api::VerdictBody), [`api::AcquireBody`](super::api::AcquireBody)):
//! the tests compare the two on generated verdicts, so the types stay the one description of
//! the body and this file only the fast way to write it.

use tollgate::wire::ceil_millis;
use tollgate::{LimitDecision, Outcome, Source, Verdict};

/// What an acquire adds to a check's body.
#[derive(Debug, Clone, Copy)]
pub(super) struct AcquireFields {
    /// When allowed: ms until the slot (`wait_ms`, left out when `None`).
    pub(super) wait_ms: Option<u64>,
    /// Whether the service already waited it (`held`).
    pub(super) held: bool,
}

/// A verdict body's bytes besides its decisions, rounded up (an acquire's two fields
/// included).
const VERDICT_BODY: usize = 128;
/// One decision's bytes, for a short limit name, rounded up.
const DECISION_BODY: usize = 128;

/// The body for `verdict`, whose outcome is `outcome` (with an acquire's fields when given),
/// in a buffer sized for it.
pub(super) fn write(
    verdict: &Verdict,
    outcome: Outcome,
    acquire: Option<AcquireFields>,
) -> Vec<u8> {
    let decisions = verdict.decisions();
    let mut out = Vec::with_capacity(VERDICT_BODY + decisions.len() * DECISION_BODY);
    let top = verdict.shown();
    field(&mut out, b"{\"allowed\":");
    boolean(&mut out, outcome == Outcome::Allowed);
    field(&mut out, b",\"limit\":");
    number(&mut out, top.limit);
    field(&mut out, b",\"remaining\":");
    number(&mut out, top.remaining);
    field(&mut out, b",\"reset_after_ms\":");
    number(&mut out, ceil_millis(top.reset_after));
    field(&mut out, b",\"retry_after_ms\":");
    optional(&mut out, top.refusal().map(|r| r.retry_after_millis()));
    field(&mut out, b",\"decisions\":[");
    for (i, d) in decisions.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        decision(&mut out, d);
    }
    out.push(b']');
    if let Some(acquire) = acquire {
        if let Some(wait) = acquire.wait_ms {
            field(&mut out, b",\"wait_ms\":");
            number(&mut out, wait);
        }
        field(&mut out, b",\"held\":");
        boolean(&mut out, acquire.held);
    }
    out.push(b'}');
    out
}

/// One limit's decision, as [`api::DecisionBody`](super::api::DecisionBody).
fn decision(out: &mut Vec<u8>, d: &LimitDecision) {
    let decision = &d.decision;
    field(out, b"{\"limit\":");
    string(out, &d.limit);
    field(out, b",\"allowed\":");
    boolean(out, d.shown_allowed());
    field(out, b",\"quota\":");
    number(out, decision.limit);
    field(out, b",\"remaining\":");
    number(out, decision.remaining);
    field(out, b",\"reset_after_ms\":");
    number(out, ceil_millis(decision.reset_after));
    field(out, b",\"retry_after_ms\":");
    optional(out, decision.refusal().map(|r| r.retry_after_millis()));
    if d.shadow {
        field(out, b",\"shadow\":true");
    }
    if d.shadow_refused() {
        field(out, b",\"shadow_denied\":true");
    }
    if let Source::Policy { error, .. } = d.source {
        field(out, b",\"store_error\":");
        string(out, error.as_str());
    }
    out.push(b'}');
}

fn field(out: &mut Vec<u8>, literal: &[u8]) {
    out.extend_from_slice(literal);
}

fn boolean(out: &mut Vec<u8>, value: bool) {
    out.extend_from_slice(if value { b"true" } else { b"false" });
}

fn number(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

fn optional(out: &mut Vec<u8>, value: Option<u64>) {
    match value {
        Some(value) => number(out, value),
        None => out.extend_from_slice(b"null"),
    }
}

/// A JSON string. Limit names are plain ASCII in practice and are copied between quotes; a
/// string with a byte JSON escapes (`"`, `\`, a control character) is left to serde_json,
/// so that it is escaped exactly as serde_json escapes it.
fn string(out: &mut Vec<u8>, value: &str) {
    if value.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(value.as_bytes());
        out.push(b'"');
    } else if serde_json::to_writer(&mut *out, value).is_err() {
        // Writing into a Vec cannot fail; a string that could not be written must not
        // leave the body malformed.
        out.extend_from_slice(b"\"\"");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use proptest::prelude::*;
    use tollgate::{
        Decision, LimitDecision, Need, OnStoreError, Quota, Source, StoreErrorKind, Verdict,
    };

    use super::*;
    use crate::http::api::{AcquireBody, VerdictBody};

    fn source() -> impl Strategy<Value = Source> {
        prop_oneof![
            Just(Source::Store),
            Just(Source::DenyCache),
            Just(Source::Lease),
            (
                prop_oneof![
                    Just(OnStoreError::Allow),
                    Just(OnStoreError::Deny),
                    Just(OnStoreError::Local)
                ],
                prop_oneof![
                    Just(StoreErrorKind::Timeout),
                    Just(StoreErrorKind::Connection),
                    Just(StoreErrorKind::CircuitOpen),
                ],
            )
                .prop_map(|(policy, error)| Source::Policy { policy, error }),
        ]
    }

    fn need() -> impl Strategy<Value = Need> {
        prop_oneof![Just(Need::Must), Just(Need::OneOf), Just(Need::Optional)]
    }

    /// Names as config allows them, and names no config would allow (quotes, backslashes,
    /// control characters, non-ASCII), which must still come out as serde_json writes them.
    fn name() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z][a-z0-9_.-]{0,20}",
            any::<String>(),
            Just("a\"b\\c\n\u{1}\u{7f}é".to_owned()),
        ]
    }

    fn limit_decision() -> impl Strategy<Value = LimitDecision> {
        (
            name(),
            1..=u64::MAX,
            any::<u64>(),
            any::<u64>(),
            prop::option::of(any::<u64>()),
            source(),
            any::<bool>(),
            need(),
        )
            .prop_map(
                |(limit, quota, remaining, reset_nanos, wait_nanos, source, shadow, need)| {
                    let reset = Duration::from_nanos(reset_nanos);
                    let decision = match wait_nanos {
                        None => Decision::allowed(quota, remaining, reset),
                        Some(wait) => {
                            Decision::refused(quota, remaining, reset, Duration::from_nanos(wait))
                        }
                    };
                    LimitDecision {
                        limit: Arc::from(limit.as_str()),
                        // The body shows the decision's numbers, not the quota's.
                        quota: Quota::per_second(1 + quota % 1_000_000)
                            .expect("a quota within bounds"),
                        decision,
                        source,
                        shadow,
                        need,
                    }
                },
            )
    }

    fn verdict() -> impl Strategy<Value = Verdict> {
        prop::collection::vec(limit_decision(), 1..5)
            .prop_map(|d| Verdict::from_decisions(d).expect("at least one decision"))
    }

    proptest! {
        /// A check's body is, byte for byte, serde_json's for `VerdictBody`.
        #[test]
        fn a_check_body_is_serde_jsons(verdict in verdict()) {
            let expected = serde_json::to_vec(&VerdictBody::new(&verdict)).expect("serializes");
            prop_assert_eq!(
                String::from_utf8(write(&verdict, verdict.outcome(), None)).expect("UTF-8"),
                String::from_utf8(expected).expect("UTF-8")
            );
        }

        /// An acquire's body is, byte for byte, serde_json's for `AcquireBody`.
        #[test]
        fn an_acquire_body_is_serde_jsons(
            verdict in verdict(),
            wait_ms in prop::option::of(any::<u64>()),
            held in any::<bool>(),
        ) {
            let expected = serde_json::to_vec(&AcquireBody {
                verdict: VerdictBody::new(&verdict),
                wait_ms,
                held,
            })
            .expect("serializes");
            let written = write(&verdict, verdict.outcome(), Some(AcquireFields { wait_ms, held }));
            prop_assert_eq!(
                String::from_utf8(written).expect("UTF-8"),
                String::from_utf8(expected).expect("UTF-8")
            );
        }
    }

    /// The body of a plain refusal, spelled out: what a client reads.
    #[test]
    fn a_refusal_reads_as_documented() {
        let verdict = Verdict::from_decisions([LimitDecision {
            limit: Arc::from("sms"),
            quota: Quota::per_minute(100).expect("a valid quota"),
            decision: Decision::refused(
                100,
                0,
                Duration::from_millis(1_500),
                Duration::from_micros(1_200_001),
            ),
            source: Source::Store,
            shadow: false,
            need: Need::Must,
        }])
        .expect("one decision");
        assert_eq!(
            String::from_utf8(write(&verdict, verdict.outcome(), None)).expect("UTF-8"),
            concat!(
                r#"{"allowed":false,"limit":100,"remaining":0,"reset_after_ms":1500,"#,
                r#""retry_after_ms":1201,"decisions":[{"limit":"sms","allowed":false,"#,
                r#""quota":100,"remaining":0,"reset_after_ms":1500,"retry_after_ms":1201}]}"#
            )
        );
    }
}
