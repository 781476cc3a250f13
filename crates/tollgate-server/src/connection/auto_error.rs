//! hyper's own answers to a head it cannot parse, rewritten into the API's JSON errors.
//!
//! hyper answers a malformed request line or header (400), a URI too long (414) and a head
//! over the size limit (431) itself, before any service sees a request, with an empty body
//! and no hook to change it. Those answers are recognised on their way to the socket: a whole
//! head alone in one write, with one of those statuses and `content-length: 0`. Nothing the
//! API answers looks like that (every API error has a JSON body), so nothing else is touched.
//! hyper is set to write a head in one buffer (`writev(false)`), so the head arrives whole.

use crate::http::ApiError;

/// The JSON answer replacing `written`, when `written` is one of hyper's empty error answers.
pub(super) fn rewrite(written: &[u8]) -> Option<Vec<u8>> {
    let head = std::str::from_utf8(written)
        .ok()?
        .strip_suffix("\r\n\r\n")?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.strip_prefix("HTTP/1.1 ")?.get(..3)?;
    let error = match status {
        "400" => ApiError::Malformed,
        "414" => ApiError::UriTooLong,
        "431" => ApiError::HeadersTooLarge,
        _ => return None,
    };
    let mut empty = false;
    for line in lines {
        let (name, value) = line.split_once(':')?;
        if name.eq_ignore_ascii_case("content-length") {
            empty = value.trim() == "0";
        }
    }
    empty.then(|| error.raw_http1())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// hyper's empty 431 becomes the JSON error; an API error (with its body) is left alone.
    #[test]
    fn rewrites_only_empty_parse_error_answers() {
        let hyper = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: Thu, 01 Jan 2026 00:00:00 GMT\r\n\r\n";
        let answer = rewrite(hyper).expect("rewritten");
        let text = String::from_utf8(answer).expect("utf-8");
        assert!(text.starts_with("HTTP/1.1 431 "), "{text}");
        assert!(
            text.ends_with(r#"{"error":"request header fields too large"}"#),
            "{text}"
        );
        let api = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 20\r\n\r\n";
        assert_eq!(rewrite(api), None);
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(rewrite(ok), None);
    }
}
