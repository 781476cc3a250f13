//! The reference service's HTTP face: a `RateLimitRequest` and its response as JSON.
//!
//! envoyproxy/ratelimit serves `POST /json` for clients that cannot speak gRPC; the body is the
//! request in protobuf's canonical JSON mapping and the answer the response in the same
//! mapping (200 when OK, 429 when over limit). This module is only the mapping, both ways, for
//! the fields the service reads and writes; deciding is [`crate::should_rate_limit`]'s, the
//! same call as gRPC's.
//!
//! Reading follows the mapping's rules: fields in lowerCamelCase or as in the `.proto`
//! (`hitsAddend` or `hits_addend`); 32- and 64-bit integers as numbers or decimal strings;
//! enums by name or number; a wrapper (`hits_addend` of a descriptor) as its bare value;
//! unknown fields refused. Writing follows them too: lowerCamelCase, default values left out
//! (`limitRemaining` 0 is absent), enums by name, durations as `"<seconds>s"`.

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::google::protobuf::UInt64Value;
use serde::Deserialize;
use serde::de::{self, Deserializer};
use serde_json::{Map, Value, json};

/// A `RateLimitRequest` in the JSON mapping, as `POST /json` reads it: deserialize it (with
/// the caller's own error reporting), then convert it with `RateLimitRequest::from`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonRateLimitRequest {
    #[serde(default)]
    domain: String,
    #[serde(default)]
    descriptors: Vec<JsonDescriptor>,
    #[serde(default, alias = "hits_addend", deserialize_with = "u32_of")]
    #[serde(rename = "hitsAddend")]
    hits_addend: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonDescriptor {
    #[serde(default)]
    entries: Vec<JsonEntry>,
    #[serde(default)]
    limit: Option<JsonOverride>,
    #[serde(default, alias = "hits_addend", deserialize_with = "opt_u64_of")]
    #[serde(rename = "hitsAddend")]
    hits_addend: Option<u64>,
    #[serde(default, alias = "is_negative_hits", rename = "isNegativeHits")]
    is_negative_hits: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonEntry {
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonOverride {
    #[serde(default, alias = "requests_per_unit", deserialize_with = "u32_of")]
    #[serde(rename = "requestsPerUnit")]
    requests_per_unit: u32,
    #[serde(default, deserialize_with = "unit_of")]
    unit: i32,
}

impl From<JsonRateLimitRequest> for RateLimitRequest {
    fn from(parsed: JsonRateLimitRequest) -> Self {
        RateLimitRequest {
            domain: parsed.domain,
            hits_addend: parsed.hits_addend,
            descriptors: parsed
                .descriptors
                .into_iter()
                .map(|d| RateLimitDescriptor {
                    entries: d
                        .entries
                        .into_iter()
                        .map(|e| Entry {
                            key: e.key,
                            value: e.value,
                        })
                        .collect(),
                    limit: d.limit.map(|l| RateLimitOverride {
                        requests_per_unit: l.requests_per_unit,
                        unit: l.unit,
                    }),
                    hits_addend: d.hits_addend.map(|value| UInt64Value { value }),
                    is_negative_hits: d.is_negative_hits,
                })
                .collect(),
        }
    }
}

/// The response in the JSON mapping.
pub fn response_json(response: &RateLimitResponse) -> Value {
    let mut out = Map::new();
    if response.overall_code != 0 {
        out.insert("overallCode".into(), code_name(response.overall_code));
    }
    if !response.statuses.is_empty() {
        let statuses = response.statuses.iter().map(status_json).collect();
        out.insert("statuses".into(), Value::Array(statuses));
    }
    if let Some(metadata) = &response.dynamic_metadata {
        out.insert(
            "dynamicMetadata".into(),
            crate::reply::dynamic_metadata::struct_json(metadata),
        );
    }
    if !response.response_headers_to_add.is_empty() {
        let headers = response
            .response_headers_to_add
            .iter()
            .map(header_json)
            .collect();
        out.insert("responseHeadersToAdd".into(), Value::Array(headers));
    }
    Value::Object(out)
}

fn status_json(s: &DescriptorStatus) -> Value {
    let mut out = Map::new();
    if s.code != 0 {
        out.insert("code".into(), code_name(s.code));
    }
    if let Some(l) = &s.current_limit {
        let mut limit = Map::new();
        if !l.name.is_empty() {
            limit.insert("name".into(), json!(l.name));
        }
        if l.requests_per_unit != 0 {
            limit.insert("requestsPerUnit".into(), json!(l.requests_per_unit));
        }
        if l.unit != 0 {
            let unit = Unit::try_from(l.unit).map_or(json!(l.unit), |u| json!(u.as_str_name()));
            limit.insert("unit".into(), unit);
        }
        out.insert("currentLimit".into(), Value::Object(limit));
    }
    if s.limit_remaining != 0 {
        out.insert("limitRemaining".into(), json!(s.limit_remaining));
    }
    if let Some(d) = &s.duration_until_reset {
        out.insert(
            "durationUntilReset".into(),
            json!(format!("{}s", d.seconds)),
        );
    }
    Value::Object(out)
}

fn header_json(h: &HeaderValue) -> Value {
    json!({ "key": h.key, "value": h.value })
}

fn code_name(code: i32) -> Value {
    Code::try_from(code).map_or(json!(code), |c| json!(c.as_str_name()))
}

/// A JSON number or decimal string, as the mapping writes integers.
fn integer<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    match Value::deserialize(d)? {
        Value::Number(n) => n
            .as_u64()
            .ok_or_else(|| de::Error::custom(format!("{n} is not an unsigned integer"))),
        Value::String(s) => s
            .parse()
            .map_err(|_| de::Error::custom(format!("{s:?} is not an unsigned integer"))),
        other => Err(de::Error::custom(format!(
            "expected an unsigned integer, found {other}"
        ))),
    }
}

fn u32_of<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let n = integer(d)?;
    u32::try_from(n).map_err(|_| de::Error::custom(format!("{n} is larger than a uint32")))
}

fn opt_u64_of<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    integer(d).map(Some)
}

/// A unit by name (`MINUTE`) or number.
fn unit_of<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    match Value::deserialize(d)? {
        Value::String(s) => Unit::from_str_name(&s).map(|u| u as i32).ok_or_else(|| {
            de::Error::custom(format!(
                "{s:?} is not a unit (SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR)"
            ))
        }),
        Value::Number(n) => n
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .ok_or_else(|| de::Error::custom(format!("{n} is not a unit"))),
        other => Err(de::Error::custom(format!(
            "expected a unit name or number, found {other}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request `body` holds, or the deserializer's message.
    fn parse_request(body: &[u8]) -> Result<RateLimitRequest, String> {
        serde_json::from_slice::<JsonRateLimitRequest>(body)
            .map(RateLimitRequest::from)
            .map_err(|e| e.to_string())
    }

    /// Both spellings of a field, integers as strings, units by name; unknown fields and
    /// unknown units refused (the server's parser adds the place: `api::parse`).
    #[test]
    fn requests_read_as_the_mapping_writes_them() {
        let r = parse_request(
            br#"{"domain":"d","hits_addend":"3","descriptors":[{"entries":[{"key":"k","value":"v"}],
                 "limit":{"requestsPerUnit":5,"unit":"HOUR"},"hitsAddend":"2"}]}"#,
        )
        .expect("valid");
        assert_eq!(r.domain, "d");
        assert_eq!(r.hits_addend, 3);
        let d = &r.descriptors[0];
        assert_eq!(
            (d.entries[0].key.as_str(), d.entries[0].value.as_str()),
            ("k", "v")
        );
        assert_eq!(d.limit.map(|l| (l.requests_per_unit, l.unit)), Some((5, 3)));
        assert_eq!(d.hits_addend.map(|h| h.value), Some(2));
        let e = parse_request(br#"{"domain":"d","descriptors":[{"entries":[{"kye":"k"}]}]}"#)
            .expect_err("unknown field");
        assert!(e.contains("unknown field `kye`"), "{e}");
        let e = parse_request(br#"{"domain":"d","descriptors":[{"limit":{"unit":"FORTNIGHT"}}]}"#)
            .expect_err("bad unit");
        assert!(e.contains("FORTNIGHT"), "{e}");
        parse_request(b"{").expect_err("truncated");
    }
}
