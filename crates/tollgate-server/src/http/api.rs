//! The JSON bodies of the HTTP API, in and out.
//!
//! Requests are parsed by hand from the raw bytes (not axum's `Json` extractor) so that every
//! malformed body gets the API's own `{"error": ...}` answer naming the field at fault.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use smallvec::SmallVec;
use tollgate::wire::ceil_millis;
use tollgate::{Algorithm, LimitDecision, Outcome, Source, Verdict};

use crate::config::LimitConfig;
use crate::duration;

/// `POST /v1/check` and `/v1/peek`: `{"limit": "sms", "key": {"user": "42"}, "cost": 1}` or
/// `{"limits": ["a", "b"], "key": {...}}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckRequest<'a> {
    #[serde(borrow)]
    limit: Option<Text<'a>>,
    #[serde(borrow)]
    limits: Option<Vec<Text<'a>>>,
    #[serde(default, borrow, deserialize_with = "key_parts_once")]
    key: KeyParts<'a>,
    cost: Option<u64>,
}

/// `POST /v1/reset`: as a check, without a cost.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResetRequest<'a> {
    #[serde(borrow)]
    limit: Option<Text<'a>>,
    #[serde(borrow)]
    limits: Option<Vec<Text<'a>>>,
    #[serde(default, borrow, deserialize_with = "key_parts_once")]
    key: KeyParts<'a>,
}

/// `POST /v1/acquire`: `{"limit": "upstream", "key": {...}, "cost": 1, "max_wait_ms": 5000,
/// "hold": false}`. One limit: a slot is one limit's.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcquireRequest<'a> {
    limit: String,
    #[serde(default, borrow, deserialize_with = "key_parts_once")]
    key: KeyParts<'a>,
    cost: Option<u64>,
    max_wait_ms: u64,
    #[serde(default)]
    hold: bool,
}

/// What an acquire asks, validated.
#[derive(Debug)]
pub struct Acquire {
    /// The limit.
    pub limit: String,
    /// The key parts.
    pub key: Vec<(String, String)>,
    /// Units (default 1).
    pub cost: u64,
    /// The longest wait for a slot the caller accepts.
    pub max_wait: std::time::Duration,
    /// Whether the service sleeps until the slot before answering.
    pub hold: bool,
}

impl AcquireRequest<'_> {
    /// The request, its wait bounded by `max_wait`.
    ///
    /// # Errors
    /// A wait above `max_wait`, naming the field.
    pub fn into_acquire(self, max_wait: std::time::Duration) -> Result<Acquire, String> {
        let asked = std::time::Duration::from_millis(self.max_wait_ms);
        if asked > max_wait {
            return Err(format!(
                "max_wait_ms: {} is above the most this service waits ({} ms)",
                self.max_wait_ms,
                max_wait.as_millis()
            ));
        }
        Ok(Acquire {
            limit: self.limit,
            key: key_parts(self.key),
            cost: self.cost.unwrap_or(1),
            max_wait: asked,
            hold: self.hold,
        })
    }
}

/// `POST /v1/adjust`: `{"limit": "tokens", "key": {...}, "delta": -120}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdjustRequest<'a> {
    limit: String,
    #[serde(default, borrow, deserialize_with = "key_parts_once")]
    key: KeyParts<'a>,
    delta: i64,
}

impl AdjustRequest<'_> {
    /// The limit, key parts and delta.
    pub fn into_parts(self) -> (String, Vec<(String, String)>, i64) {
        (self.limit, key_parts(self.key), self.delta)
    }
}

/// The key's state after a settlement.
#[derive(Debug, Serialize)]
pub struct AdjustBody {
    /// The limit.
    pub limit: String,
    /// The units charged (positive) or given back (negative), as asked.
    pub delta: i64,
    /// Its quota.
    pub quota: u64,
    /// Unit-cost requests that would pass now.
    pub remaining: u64,
    /// Until the key is back to a full quota, ms (rounded up).
    pub reset_after_ms: u64,
}

impl AdjustBody {
    /// The body for `decision`, the key's state after adjusting `limit` by `delta`.
    pub fn new(limit: String, delta: i64, decision: &tollgate::Decision) -> AdjustBody {
        AdjustBody {
            limit,
            delta,
            quota: decision.limit,
            remaining: decision.remaining,
            reset_after_ms: ceil_millis(decision.reset_after),
        }
    }
}

/// The answer to an acquire: a check's body, and the wait.
#[derive(Debug, Serialize)]
pub struct AcquireBody<'a> {
    /// As a check of the one limit.
    #[serde(flatten)]
    pub verdict: VerdictBody<'a>,
    /// When allowed: ms from the reservation until the slot begins (rounded up, so a caller
    /// that sleeps it never goes early); 0 to go now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// Whether the service already waited it (`"hold": true`): go now.
    pub held: bool,
}

/// A request's key parts, in name order (as a map would give them), each named once. Small
/// and borrowed from the body: a check's key is parsed without allocating.
pub type KeyParts<'a> = SmallVec<[(Cow<'a, str>, Cow<'a, str>); 4]>;

/// The `key` object, refusing a part named twice (`{"user": "A", "user": "B"}`), as serde
/// refuses a top-level field given twice: a JSON parser would keep the last value silently,
/// and which user is charged must not depend on that.
fn key_parts_once<'de: 'a, 'a, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<KeyParts<'a>, D::Error> {
    struct Parts<'a>(PhantomData<&'a ()>);
    impl<'de: 'a, 'a> Visitor<'de> for Parts<'a> {
        type Value = KeyParts<'a>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an object of key parts")
        }
        fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut parts = KeyParts::new();
            while let Some((Text(name), KeyValue(value))) = map.next_entry::<Text, KeyValue>()? {
                parts.push((name, value));
            }
            // Sorted once at the end: inserting each part in its place would cost a body of
            // a thousand parts (16 KiB allows that many, refused later) a million moves.
            parts.sort_by(|(a, _), (b, _)| a.cmp(b));
            if let Some(twice) = parts.windows(2).find(|w| w[0].0 == w[1].0) {
                return Err(de::Error::custom(format_args!(
                    "duplicate key part `{}`",
                    twice[0].0
                )));
            }
            Ok(parts)
        }
    }
    deserializer.deserialize_map(Parts(PhantomData))
}

/// A string of a request: borrowed from the body, or owned when JSON escapes made it differ
/// from its bytes there.
#[derive(Debug)]
pub struct Text<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(Strings::new(false)).map(Text)
    }
}

/// A key part's value: a string (as [`Text`]), or an integer taken as its decimal text.
#[derive(Debug)]
pub struct KeyValue<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for KeyValue<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(Strings::new(true))
            .map(KeyValue)
    }
}

/// The visitor of [`Text`] and [`KeyValue`]: a string borrowed when it can be, and, when
/// `integers`, an integer as its decimal text.
struct Strings<'a> {
    integers: bool,
    life: PhantomData<&'a ()>,
}

impl Strings<'_> {
    fn new(integers: bool) -> Self {
        Strings {
            integers,
            life: PhantomData,
        }
    }
}

impl<'de: 'a, 'a> Visitor<'de> for Strings<'a> {
    type Value = Cow<'a, str>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.integers {
            "a string or an integer"
        } else {
            "a string"
        })
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Cow<'a, str>, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Cow<'a, str>, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Cow<'a, str>, E> {
        if self.integers {
            Ok(Cow::Owned(v.to_string()))
        } else {
            Err(E::invalid_type(de::Unexpected::Unsigned(v), &self))
        }
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Cow<'a, str>, E> {
        if self.integers {
            Ok(Cow::Owned(v.to_string()))
        } else {
            Err(E::invalid_type(de::Unexpected::Signed(v), &self))
        }
    }
}

/// Limit names, key parts and cost, as asked (borrowed from the request).
pub type Parts<'s> = (
    SmallVec<[&'s str; 4]>,
    SmallVec<[(&'s str, &'s str); 4]>,
    u64,
);

impl CheckRequest<'_> {
    /// The limit names, key parts and cost (default 1).
    ///
    /// # Errors
    /// When both or neither of `limit` and `limits` are given.
    pub fn parts(&self) -> Result<Parts<'_>, String> {
        let names = names(self.limit.as_ref(), self.limits.as_deref())?;
        Ok((names, borrowed(&self.key), self.cost.unwrap_or(1)))
    }
}

impl ResetRequest<'_> {
    /// The limit names and key parts.
    ///
    /// # Errors
    /// As [`CheckRequest::parts`].
    pub fn parts(&self) -> Result<Parts<'_>, String> {
        let names = names(self.limit.as_ref(), self.limits.as_deref())?;
        Ok((names, borrowed(&self.key), 1))
    }
}

fn names<'s>(
    limit: Option<&'s Text<'_>>,
    limits: Option<&'s [Text<'_>]>,
) -> Result<SmallVec<[&'s str; 4]>, String> {
    match (limit, limits) {
        (Some(_), Some(_)) => Err("give either \"limit\" or \"limits\", not both".into()),
        (Some(limit), None) => Ok(smallvec::smallvec![&*limit.0]),
        (None, Some(limits)) => Ok(limits.iter().map(|l| &*l.0).collect()),
        (None, None) => Err("missing field \"limit\" (or \"limits\")".into()),
    }
}

fn borrowed<'s>(key: &'s KeyParts<'_>) -> SmallVec<[(&'s str, &'s str); 4]> {
    key.iter().map(|(n, v)| (&**n, &**v)).collect()
}

/// Owned key parts, for the requests that keep them past the body.
fn key_parts(key: KeyParts<'_>) -> Vec<(String, String)> {
    key.into_iter()
        .map(|(n, v)| (n.into_owned(), v.into_owned()))
        .collect()
}

/// Parses a JSON body, naming the field at fault.
///
/// # Errors
/// A message for the client.
pub fn parse<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, String> {
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        None => return Err("request body is empty: expected a JSON object".into()),
        // serde reads a struct from an array too, its fields in order
        // (`["sms", null, {"user": "1"}, 1]` was a check): every body here is an object.
        Some(b'{') => {}
        Some(_) => return Err("request body is not a JSON object: expected {...}".into()),
    }
    // The common case first, without tracking the path; a body that fails is parsed again
    // with it, for the message (the same parser, so the same verdict).
    if let Ok(value) = serde_json::from_slice(body) {
        return Ok(value);
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        match path.as_str() {
            "." => format!("invalid JSON: {}", e.inner()),
            _ => format!("invalid JSON at {path}: {}", e.inner()),
        }
    })?;
    de.end().map_err(|e| format!("invalid JSON: {e}"))?;
    Ok(value)
}

/// The answer to a check or peek. Top-level fields describe the most restrictive enforced
/// limit; `decisions` lists every limit in the order asked.
///
/// The service writes this body by hand (`http/verdict_json.rs`, the check's hot path); this
/// type describes it, and the tests check that the bytes written are serde_json's for it.
#[derive(Debug, Serialize)]
pub struct VerdictBody<'a> {
    /// Whether the request passes.
    pub allowed: bool,
    /// The most restrictive limit's quota (`RateLimit-Policy` `q=`).
    pub limit: u64,
    /// Its remaining unit-cost requests.
    pub remaining: u64,
    /// Until its key is back to a full quota, ms (rounded up).
    pub reset_after_ms: u64,
    /// When denied: until this cost would pass, ms (rounded up).
    pub retry_after_ms: Option<u64>,
    /// Each limit's decision.
    pub decisions: Vec<DecisionBody<'a>>,
}

/// One limit's decision.
#[derive(Debug, Serialize)]
pub struct DecisionBody<'a> {
    /// The limit's name (borrowed from the verdict: the body is written once, at once).
    pub limit: &'a str,
    /// Whether it admits (always `true` for a shadow limit).
    pub allowed: bool,
    /// Its quota.
    pub quota: u64,
    /// Remaining unit-cost requests.
    pub remaining: u64,
    /// Until full again, ms.
    pub reset_after_ms: u64,
    /// When denied: until this cost would pass, ms.
    pub retry_after_ms: Option<u64>,
    /// A shadow limit: never refuses.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub shadow: bool,
    /// A shadow limit that would have refused.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub shadow_denied: bool,
    /// The store error, when the limit's failure policy decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store_error: Option<&'static str>,
}

impl VerdictBody<'_> {
    /// The body for `verdict`.
    pub fn new(verdict: &Verdict) -> VerdictBody<'_> {
        let top = verdict.shown();
        VerdictBody {
            allowed: verdict.outcome() == Outcome::Allowed,
            limit: top.limit,
            remaining: top.remaining,
            reset_after_ms: ceil_millis(top.reset_after),
            retry_after_ms: top.refusal().map(|r| r.retry_after_millis()),
            decisions: verdict.decisions().iter().map(decision_body).collect(),
        }
    }
}

fn decision_body(d: &LimitDecision) -> DecisionBody<'_> {
    let decision = &d.decision;
    DecisionBody {
        limit: &d.limit,
        allowed: d.shown_allowed(),
        quota: decision.limit,
        remaining: decision.remaining,
        reset_after_ms: ceil_millis(decision.reset_after),
        retry_after_ms: decision.refusal().map(|r| r.retry_after_millis()),
        shadow: d.shadow,
        shadow_denied: d.shadow_refused(),
        store_error: match d.source {
            Source::Store | Source::DenyCache | Source::Lease => None,
            Source::Policy { error, .. } => Some(error.as_str()),
        },
    }
}

/// `GET /v1/limits`.
#[derive(Debug, Serialize)]
pub struct LimitsBody {
    /// `memory`, `redis` or `redis_cluster`.
    pub store: &'static str,
    /// The limits, in file order.
    pub limits: Vec<LimitBody>,
}

/// One configured limit.
#[derive(Debug, Serialize)]
pub struct LimitBody {
    /// Name.
    pub name: String,
    /// Algorithm (config name).
    pub algorithm: &'static str,
    /// Units per period.
    pub limit: u64,
    /// The period as written in config (`"1m"`).
    pub period: String,
    /// The period in ms.
    pub period_ms: u64,
    /// Burst, for token bucket and GCRA.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    /// Sub-buckets, for the sliding window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub buckets: Option<u32>,
    /// Key part names.
    pub key: Vec<String>,
    /// Failure policy.
    pub on_store_error: tollgate::OnStoreError,
    /// Shadow (never refuses).
    pub shadow: bool,
    /// `exact` or `lease`.
    pub mode: &'static str,
    /// Lease mode: units per take, when fixed (else chosen from the rate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease: Option<u64>,
    /// Lease mode: how long unspent units are held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_ttl: Option<String>,
}

impl LimitBody {
    /// The listing of one limit.
    pub fn new(config: &LimitConfig) -> LimitBody {
        let l = &config.limit;
        let q = l.quota();
        LimitBody {
            name: l.name().to_owned(),
            algorithm: l.algorithm().name(),
            limit: q.limit(),
            period: duration::format(q.period()),
            period_ms: ceil_millis(q.period()),
            burst: l.algorithm().uses_burst().then(|| q.burst()),
            buckets: match l.algorithm() {
                Algorithm::SlidingWindow { buckets } => Some(buckets),
                _ => None,
            },
            key: l
                .key_parts()
                .unwrap_or_default()
                .iter()
                .map(|p| p.to_string())
                .collect(),
            on_store_error: l.policy(),
            shadow: config.shadow,
            mode: if l.lease_mode().is_some() {
                "lease"
            } else {
                "exact"
            },
            lease: l.lease_mode().and_then(|m| m.fixed_units()),
            lease_ttl: l.lease_mode().map(|m| duration::format(m.lease_ttl())),
        }
    }
}

/// `GET /v1/top?limit=NAME&k=20`: who is being limited.
#[derive(Debug, Serialize)]
pub struct TopBody {
    /// The limit.
    pub limit: String,
    /// Refusals ÷ checks over the last minute (`null` without a check).
    pub deny_ratio: Option<f64>,
    /// The span of `recent`.
    pub recent_window: &'static str,
    /// Counters per sketch: a key refused more than (refusals counted ÷ this) times is
    /// always listed.
    pub capacity: usize,
    /// The most refused keys over the last five minutes, most refused first.
    pub recent: Vec<TopKeyBody>,
    /// The same since the service (or the last reload) started.
    pub since_start: Vec<TopKeyBody>,
}

/// One of the most refused keys.
#[derive(Debug, Serialize)]
pub struct TopKeyBody {
    /// Its parts, as stored: values percent-escaped, long ones as `#<digest>`.
    pub key: BTreeMap<String, String>,
    /// Refusals counted (the truth is between `denied − error` and `denied`).
    pub denied: u64,
    /// The most `denied` may overstate.
    pub error: u64,
    /// Half or more of `denied` may be other keys' refusals (`error ≥ denied − error`): a
    /// key listed because it came in at the end of a flood of others, not one to block on
    /// this count alone ([`tollgate::TopKey::uncertain`]).
    pub uncertain: bool,
}

impl TopKeyBody {
    /// The body for `top`.
    pub fn new(top: &tollgate::TopKey) -> TopKeyBody {
        let text = top.key.as_str();
        let parts = text
            .find('{')
            .and_then(|start| {
                text[start + 1..]
                    .find('}')
                    .map(|end| &text[start + 1..start + 1 + end])
            })
            .unwrap_or_default();
        let key = parts
            .split(',')
            .filter(|p| !p.is_empty())
            .map(|p| match p.split_once('=') {
                Some((name, value)) => (name.to_owned(), value.to_owned()),
                None => (p.to_owned(), String::new()),
            })
            .collect();
        TopKeyBody {
            key,
            denied: top.count,
            error: top.error,
            uncertain: top.uncertain(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key's parts come out in name order whatever order they were given in, borrowed
    /// from the body unless escapes made them differ from it.
    #[test]
    fn key_parts_are_sorted_and_borrowed() {
        let body = br#"{"limit": "l", "key": {"c": "3", "a": 1, "b": "\u0032"}}"#;
        let request: CheckRequest = parse(body).expect("parses");
        let (names, key, cost) = request.parts().expect("parts");
        assert_eq!((names.as_slice(), cost), (&["l"][..], 1));
        assert_eq!(key.as_slice(), [("a", "1"), ("b", "2"), ("c", "3")]);
        assert!(matches!(request.key[2].1, Cow::Borrowed("3")));
        assert!(matches!(request.key[1].1, Cow::Owned(_)));
    }

    /// A body that is not an object is refused, an array included (serde reads a struct from
    /// an array, its fields in order: this one was a check, and charged).
    #[test]
    fn only_an_object_is_a_body() {
        for body in [
            &br#"["sms", null, {"user": "arr"}, 1]"#[..],
            br#" "sms" "#,
            b"42",
        ] {
            let error = parse::<CheckRequest>(body).expect_err("refused");
            assert_eq!(error, "request body is not a JSON object: expected {...}");
        }
        assert!(parse::<CheckRequest>(b" \n{\"limit\": \"sms\"}").is_ok());
    }

    /// A part named twice is refused, however far apart the two are and however many parts
    /// there are.
    #[test]
    fn a_part_named_twice_is_refused_among_many() {
        let mut parts: Vec<String> = (0..500).map(|i| format!(r#""p{i}": "v""#)).collect();
        let body =
            |parts: &[String]| format!(r#"{{"limit": "l", "key": {{{}}}}}"#, parts.join(", "));
        assert!(parse::<CheckRequest>(body(&parts).as_bytes()).is_ok());
        parts.push(r#""p7": "again""#.to_owned());
        let error = parse::<CheckRequest>(body(&parts).as_bytes()).expect_err("refused");
        assert!(error.contains("duplicate key part `p7`"), "{error}");
    }
}
