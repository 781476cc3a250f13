//! Refusals as responses. The default, [`problem_json`], is a short
//! `application/problem+json` body (RFC 9457) whose status and detail come from the
//! [`Rejection`]. [`grpc`] answers gRPC clients (tonic) the way they expect: HTTP 200 with a
//! `grpc-status` (`RESOURCE_EXHAUSTED` for a used-up quota, `UNAVAILABLE` when the store is
//! down), since gRPC clients read no HTTP status. Replace either with
//! [`crate::RateLimitLayer::respond_with`]; the layer adds `Retry-After` and the rate-limit
//! fields to whatever it returns.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Response, header};

use crate::Rejection;

/// Builds the response for a refused request.
pub type Responder = Arc<dyn Fn(&Rejection) -> Response<Bytes> + Send + Sync>;

/// `{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"…"}` with the
/// rejection's status.
pub fn problem_json(rejection: &Rejection) -> Response<Bytes> {
    let status = rejection.status();
    let mut body = String::with_capacity(128);
    body.push_str(r#"{"type":"about:blank","title":"#);
    push_json_string(&mut body, status.canonical_reason().unwrap_or("Error"));
    body.push_str(r#","status":"#);
    body.push_str(status.as_str());
    body.push_str(r#","detail":"#);
    push_json_string(&mut body, &rejection.detail());
    body.push('}');
    let mut response = Response::new(Bytes::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}

/// A gRPC "trailers-only" refusal: HTTP 200, `content-type: application/grpc`, and
/// `grpc-status` / `grpc-message` as headers. Codes: 8 `RESOURCE_EXHAUSTED` (quota used up),
/// 3 `INVALID_ARGUMENT` (a cost no limit ever admits), 14 `UNAVAILABLE` (store down),
/// 3 `INVALID_ARGUMENT` or 13 `INTERNAL` (no key: the request's fault or the server's),
/// 13 `INTERNAL` (misconfiguration, a panic).
pub fn grpc(rejection: &Rejection) -> Response<Bytes> {
    let code: u16 = match rejection {
        Rejection::RateLimited(_) => 8,
        // Never passes as asked, whatever the wait: not "not now" (RESOURCE_EXHAUSTED, which
        // retry policies retry), but the request's own fault.
        Rejection::TooCostly { .. } => 3,
        Rejection::StoreUnavailable { .. } => 14,
        Rejection::NoKey(e) if e.status() == http::StatusCode::BAD_REQUEST => 3,
        _ => 13,
    };
    let mut message = String::new();
    for b in rejection.detail().bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            message.push(char::from(b));
        } else {
            message.push_str(&format!("%{b:02X}"));
        }
    }
    let mut response = Response::new(Bytes::new());
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    headers.insert("grpc-status", HeaderValue::from(code));
    if let Ok(value) = HeaderValue::try_from(message) {
        headers.insert("grpc-message", value);
    }
    response
}

fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KeyError;

    /// gRPC refusals carry the status as headers, the message percent-encoded.
    #[test]
    fn grpc_refusal() {
        let r = Rejection::RateLimited(crate::RateLimited {
            limit: "rpc".into(),
            retry_after: std::time::Duration::from_millis(1_500),
        });
        let resp = grpc(&r);
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["grpc-status"], "8");
        assert_eq!(resp.headers()["content-type"], "application/grpc");
        assert_eq!(
            resp.headers()["grpc-message"],
            "rate limit rpc exceeded; retry in 2 s"
        );
        let down = grpc(&Rejection::StoreUnavailable {
            error: None,
            retry_after: std::time::Duration::from_secs(1),
        });
        assert_eq!(down.headers()["grpc-status"], "14");
        let never = grpc(&Rejection::TooCostly {
            limit: "rpc".into(),
            cost: 50,
            capacity: 5,
        });
        assert_eq!(never.headers()["grpc-status"], "3");
    }

    /// The body is JSON with the status and a detail, escaped.
    #[test]
    fn problem_body() {
        let r = Rejection::NoKey(KeyError::MissingHeader("x-\"key\"\n".into()));
        let resp = problem_json(&r);
        assert_eq!(resp.status(), 400);
        assert_eq!(
            resp.body(),
            r#"{"type":"about:blank","title":"Bad Request","status":400,"detail":"cannot tell who is calling: missing header x-\"key\"\u000a"}"#
        );
    }
}
