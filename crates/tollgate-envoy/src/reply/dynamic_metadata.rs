//! The response's dynamic metadata (`[envoy] response_dynamic_metadata`, the reference's
//! `RESPONSE_DYNAMIC_METADATA`).
//!
//! Envoy's rate limit filter puts `RateLimitResponse.dynamic_metadata` into the request's
//! dynamic metadata (namespace `envoy.filters.http.ratelimit`), where access logs, Lua and
//! later filters read it. The reference fills it with a `google.protobuf.Struct`:
//!
//! ```json
//! {
//!   "domain": "<request domain>",
//!   "descriptors": [
//!     { "entries": ["<key>=<value>", …],
//!       "limit": "requests_per_unit:<n> unit:<UNIT>",     // a limit override, if any
//!       "hitsAddend": <n> }                               // the descriptor's own, if set
//!   ],
//!   "hitsAddend": <n>,                                    // the request's, when not 0
//!   "metadata": { … }                                     // merged, when not empty
//! }
//! ```
//!
//! `metadata` merges the YAML `metadata` of the limits of the descriptors that passed (status
//! not `OVER_LIMIT`), in descriptor order: a key already there keeps its value, unless both
//! values are maps, which are merged the same way (the reference's `mergeMetadata`).

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{ListValue, Struct, Value};

/// The dynamic metadata of the answer to `request`; `passed` holds the YAML `metadata` of
/// each descriptor that passed (in descriptor order; `None` for one without).
pub(crate) fn of<'a>(
    request: &RateLimitRequest,
    passed: impl IntoIterator<Item = Option<&'a Struct>>,
) -> Struct {
    let mut out = Struct::default();
    out.fields.insert("domain".into(), string(&request.domain));
    let descriptors = request.descriptors.iter().map(descriptor).collect();
    out.fields.insert("descriptors".into(), list(descriptors));
    if request.hits_addend != 0 {
        out.fields
            .insert("hitsAddend".into(), number(f64::from(request.hits_addend)));
    }
    let mut merged = Struct::default();
    for metadata in passed.into_iter().flatten() {
        merge(&mut merged, metadata);
    }
    if !merged.fields.is_empty() {
        out.fields
            .insert("metadata".into(), kind(Kind::StructValue(merged)));
    }
    out
}

/// One descriptor: its entries as `key=value`, its limit override as protobuf text, its own
/// `hits_addend` when set (0 included).
fn descriptor(d: &RateLimitDescriptor) -> Value {
    let mut fields = Struct::default();
    let entries = d
        .entries
        .iter()
        .map(|e| string(&format!("{}={}", e.key, e.value)))
        .collect();
    fields.fields.insert("entries".into(), list(entries));
    if let Some(limit) = &d.limit {
        fields
            .fields
            .insert("limit".into(), string(&override_text(limit)));
    }
    if let Some(hits) = &d.hits_addend {
        // A JSON number, as the reference's (exact up to 2^53).
        #[allow(clippy::cast_precision_loss)]
        let hits = hits.value as f64;
        fields.fields.insert("hitsAddend".into(), number(hits));
    }
    kind(Kind::StructValue(fields))
}

/// A limit override in protobuf's text format, as the reference writes it (Go's `String()`:
/// fields at their default left out, the unit by name).
fn override_text(limit: &RateLimitOverride) -> String {
    let mut parts = Vec::with_capacity(2);
    if limit.requests_per_unit != 0 {
        parts.push(format!("requests_per_unit:{}", limit.requests_per_unit));
    }
    if limit.unit != 0 {
        // WEEK (7) is newer than this crate's copy of the enum.
        let unit = match RateLimitUnit::try_from(limit.unit) {
            Ok(unit) => unit.as_str_name().to_owned(),
            Err(_) if limit.unit == 7 => "WEEK".to_owned(),
            Err(_) => limit.unit.to_string(),
        };
        parts.push(format!("unit:{unit}"));
    }
    parts.join(" ")
}

/// Merges `src` into `dest`: a new key is added; an existing one keeps its value, unless both
/// are maps, merged the same way.
fn merge(dest: &mut Struct, src: &Struct) {
    for (key, value) in &src.fields {
        match dest.fields.get_mut(key) {
            None => {
                dest.fields.insert(key.clone(), value.clone());
            }
            Some(Value {
                kind: Some(Kind::StructValue(into)),
            }) => {
                if let Some(Kind::StructValue(from)) = &value.kind {
                    merge(into, from);
                }
            }
            Some(_) => {}
        }
    }
}

/// A YAML `metadata` map (as JSON) as a protobuf `Struct`.
pub(crate) fn to_struct(map: &serde_json::Map<String, serde_json::Value>) -> Struct {
    Struct {
        fields: map.iter().map(|(k, v)| (k.clone(), to_value(v))).collect(),
    }
}

fn to_value(v: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    match v {
        J::Null => kind(Kind::NullValue(0)),
        J::Bool(b) => kind(Kind::BoolValue(*b)),
        J::Number(n) => number(n.as_f64().unwrap_or_default()),
        J::String(s) => string(s),
        J::Array(items) => list(items.iter().map(to_value).collect()),
        J::Object(map) => kind(Kind::StructValue(to_struct(map))),
    }
}

/// `s` in protobuf's JSON mapping (for `POST /json`): numbers that are whole (and exact in a
/// double) without a fraction, as Go's `protojson` writes them.
pub(crate) fn struct_json(s: &Struct) -> serde_json::Value {
    let mut keys: Vec<&String> = s.fields.keys().collect();
    keys.sort();
    serde_json::Value::Object(
        keys.into_iter()
            .map(|k| (k.clone(), value_json(&s.fields[k])))
            .collect(),
    )
}

fn value_json(v: &Value) -> serde_json::Value {
    use serde_json::Value as J;
    match &v.kind {
        None | Some(Kind::NullValue(_)) => J::Null,
        Some(Kind::BoolValue(b)) => J::Bool(*b),
        Some(Kind::NumberValue(n)) => {
            const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
            if n.fract() == 0.0 && n.abs() < EXACT {
                #[allow(clippy::cast_possible_truncation)]
                J::from(*n as i64)
            } else {
                serde_json::Number::from_f64(*n).map_or(J::Null, J::Number)
            }
        }
        Some(Kind::StringValue(s)) => J::String(s.clone()),
        Some(Kind::StructValue(s)) => struct_json(s),
        Some(Kind::ListValue(l)) => J::Array(l.values.iter().map(value_json).collect()),
    }
}

fn kind(kind: Kind) -> Value {
    Value { kind: Some(kind) }
}

fn string(s: &str) -> Value {
    kind(Kind::StringValue(s.to_owned()))
}

fn number(n: f64) -> Value {
    kind(Kind::NumberValue(n))
}

fn list(values: Vec<Value>) -> Value {
    kind(Kind::ListValue(ListValue { values }))
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;

    use super::*;

    fn request(
        domain: &str,
        descriptors: &[&[(&str, &str)]],
        hits_addend: u32,
    ) -> RateLimitRequest {
        RateLimitRequest {
            domain: domain.into(),
            descriptors: descriptors
                .iter()
                .map(|entries| RateLimitDescriptor {
                    entries: entries
                        .iter()
                        .map(|(k, v)| Entry {
                            key: (*k).into(),
                            value: (*v).into(),
                        })
                        .collect(),
                    ..RateLimitDescriptor::default()
                })
                .collect(),
            hits_addend,
        }
    }

    fn metadata(json: serde_json::Value) -> Struct {
        match json {
            serde_json::Value::Object(map) => to_struct(&map),
            _ => panic!("an object"),
        }
    }

    /// The cases of the reference's `TestRatelimitToMetadata` (src/service/ratelimit_test.go),
    /// with its expected JSON: the passed descriptors' metadata only, `hitsAddend` when not 0.
    #[test]
    fn the_reference_cases() {
        let got = of(&request("fake-domain", &[&[("key1", "val1")]], 0), []);
        assert_eq!(
            struct_json(&got),
            serde_json::json!({"descriptors": [{"entries": ["key1=val1"]}], "domain": "fake-domain"})
        );
        let service = |n: &str| metadata(serde_json::json!({ "name": n }));
        let got = of(
            &request("quota-domain", &[&[("quota_key", "quota_val")]], 0),
            [Some(&service("service_1"))],
        );
        assert_eq!(
            struct_json(&got),
            serde_json::json!({"descriptors": [{"entries": ["quota_key=quota_val"]}],
                "domain": "quota-domain", "metadata": {"name": "service_1"}})
        );
        // Descriptors 1 and 2 passed: the first one's `name` wins.
        let (s2, s3) = (service("service_2"), service("service_3"));
        let got = of(
            &request(
                "mixed-domain",
                &[
                    &[("regular_key", "regular_val")],
                    &[("quota_key", "quota_val")],
                    &[("another_quota", "another_val")],
                ],
                0,
            ),
            [Some(&s2), Some(&s3)],
        );
        assert_eq!(
            struct_json(&got),
            serde_json::json!({"descriptors": [
                {"entries": ["regular_key=regular_val"]},
                {"entries": ["quota_key=quota_val"]},
                {"entries": ["another_quota=another_val"]}],
                "domain": "mixed-domain", "metadata": {"name": "service_2"}})
        );
        let got = of(
            &request("addend-domain", &[&[("test_key", "test_val")]], 5),
            [None],
        );
        assert_eq!(
            struct_json(&got),
            serde_json::json!({"descriptors": [{"entries": ["test_key=test_val"]}],
                "domain": "addend-domain", "hitsAddend": 5})
        );
    }

    /// Maps merge recursively; elsewhere the first value stays.
    #[test]
    fn merging_keeps_the_first_value_and_merges_maps() {
        let a =
            metadata(serde_json::json!({"name": "a", "svc": {"x": 1, "deep": {"p": 1}}, "l": [1]}));
        let b = metadata(
            serde_json::json!({"name": "b", "svc": {"x": 2, "y": 3, "deep": {"q": 2}}, "l": [2], "n": null}),
        );
        let mut merged = Struct::default();
        merge(&mut merged, &a);
        merge(&mut merged, &b);
        assert_eq!(
            struct_json(&merged),
            serde_json::json!({"name": "a", "svc": {"x": 1, "y": 3, "deep": {"p": 1, "q": 2}}, "l": [1], "n": null})
        );
    }

    /// A limit override as Go's protobuf text (without its random extra space).
    #[test]
    fn overrides_as_protobuf_text() {
        let text = |requests_per_unit, unit| {
            override_text(&RateLimitOverride {
                requests_per_unit,
                unit,
            })
        };
        assert_eq!(text(42, 3), "requests_per_unit:42 unit:HOUR");
        assert_eq!(text(1, 7), "requests_per_unit:1 unit:WEEK");
        assert_eq!(text(5, 0), "requests_per_unit:5");
    }
}
