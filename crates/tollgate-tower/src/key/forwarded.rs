//! Reading the hops out of `X-Forwarded-For` and `Forwarded` (RFC 7239).
//!
//! Only the parsing lives here; which hops to believe is [`super::ClientIp`]'s business. The
//! hops come rightmost first, lazily, as an address or as the raw text that is not one, so
//! that the caller stops at the first hop it does not trust and nothing left of it is parsed:
//! the left of the header is the client's to write, and a client behind a trusted proxy could
//! otherwise make every request parse thousands of entries it wrote (8,001 entries took
//! 1.4 ms per request when the whole header was parsed first).
//!
//! `X-Forwarded-For` is split from the right on the raw bytes (a comma is never part of a
//! multi-byte character, so this is the split of the text). A `Forwarded` line is scanned
//! once for its quotes, which only the left can tell, but its elements are parsed from the
//! right, only as far as the walk goes.

use std::net::{IpAddr, SocketAddr};
use std::ops::Range;

use http::HeaderMap;

/// One hop: an address, or the entry's text when it is not one (`unknown`, `_hidden`, junk).
pub(super) type Hop = Result<IpAddr, String>;

/// The `X-Forwarded-For` entries, across repeated header lines, rightmost first, each parsed
/// only when the walk reaches it.
pub(super) fn x_forwarded_for(headers: &HeaderMap) -> impl Iterator<Item = Hop> + '_ {
    headers
        .get_all("x-forwarded-for")
        .iter()
        .rev()
        .flat_map(|value| value.as_bytes().rsplit(|b| *b == b','))
        .filter_map(|raw| {
            // Bytes that are not UTF-8 make their own entry junk, not the line's: the walk
            // from the right reads the client's entry before it reaches them.
            let text = String::from_utf8_lossy(raw);
            let entry = text.trim();
            (!entry.is_empty()).then(|| parse_node(entry).ok_or_else(|| entry.to_owned()))
        })
}

/// The `for=` node of every `Forwarded` element, across repeated header lines, rightmost
/// first, each parsed only when the walk reaches it. An element without `for=` is a hop
/// whose address is not disclosed.
pub(super) fn forwarded(headers: &HeaderMap) -> impl Iterator<Item = Hop> + '_ {
    headers
        .get_all(http::header::FORWARDED)
        .iter()
        .rev()
        .flat_map(|value| {
            let text = String::from_utf8_lossy(value.as_bytes());
            // Spans, not slices: the iterator below owns the line's text.
            let (spans, unclosed) = unquoted_spans(&text, ',');
            let last = spans.len().saturating_sub(1);
            spans
                .into_iter()
                .enumerate()
                .rev()
                .filter_map(move |(i, span)| element_hop(&text[span], unclosed && i == last))
        })
}

/// The hop of one `Forwarded` element (`None` for an empty one); `unclosed` when a quote
/// opened in it was never closed.
fn element_hop(element: &str, unclosed: bool) -> Option<Hop> {
    let element = element.trim();
    if element.is_empty() {
        return None;
    }
    if unclosed {
        // A quote never closed swallows the rest of the line: with a proxy that appends its
        // element to the client's line (`for=6.6.6.6;x=", for=<client>`), the client would
        // name its own address. Not an address: the walk stops here.
        return Some(Err(element.to_owned()));
    }
    let node = split_unquoted(element, ';').0.into_iter().find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("for")
            .then(|| unquote(value.trim()))
    });
    Some(match node {
        Some(node) => parse_node(&node).ok_or(node),
        None => Err(element.to_owned()),
    })
}

/// Splits on `sep` outside double quotes (a backslash escapes inside quotes); and whether a
/// quote was left open (the last piece then runs to the end of `text`, separators and all).
fn split_unquoted(text: &str, sep: char) -> (Vec<&str>, bool) {
    let (spans, unclosed) = unquoted_spans(text, sep);
    (
        spans.into_iter().map(|span| &text[span]).collect(),
        unclosed,
    )
}

/// [`split_unquoted`]'s pieces as byte ranges of `text`.
fn unquoted_spans(text: &str, sep: char) -> (Vec<Range<usize>>, bool) {
    let mut in_quotes = false;
    let mut escaped = false;
    let mut start = 0;
    let mut pieces = Vec::new();
    for (i, c) in text.char_indices() {
        if escaped {
            escaped = false;
        } else if in_quotes && c == '\\' {
            escaped = true;
        } else if c == '"' {
            in_quotes = !in_quotes;
        } else if c == sep && !in_quotes {
            pieces.push(start..i);
            start = i + c.len_utf8();
        }
    }
    pieces.push(start..text.len());
    (pieces, in_quotes)
}

/// A token, or a quoted string with its escapes resolved.
fn unquote(value: &str) -> String {
    let Some(inner) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) else {
        return value.to_owned();
    };
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
thread_local! {
    /// Entries parsed on this thread: tests prove that a walk reads no further than it must.
    pub(super) static PARSED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// `1.2.3.4`, `1.2.3.4:80`, `[2001:db8::1]`, `[2001:db8::1]:80`, or a bare IPv6 address.
fn parse_node(node: &str) -> Option<IpAddr> {
    #[cfg(test)]
    PARSED.with(|n| n.set(n.get() + 1));
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(addr) = node.parse::<SocketAddr>() {
        return Some(addr.ip());
    }
    node.strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .and_then(|n| n.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(name: &'static str, values: &[&'static str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(name, HeaderValue::from_static(v));
        }
        h
    }

    /// The hops in header order, as the tests write them.
    fn leftmost_first(hops: impl Iterator<Item = Hop>) -> Vec<Hop> {
        let mut hops: Vec<Hop> = hops.collect();
        hops.reverse();
        hops
    }

    fn ip(s: &str) -> Hop {
        Ok(s.parse().expect("ip"))
    }

    /// Entries of repeated lines are read in order; ports and brackets are stripped.
    #[test]
    fn x_forwarded_for_entries() {
        let h = headers(
            "x-forwarded-for",
            &[
                "1.1.1.1, 2.2.2.2:8080",
                "[2001:db8::1]:443,2001:db8::2 , junk",
            ],
        );
        assert_eq!(
            leftmost_first(x_forwarded_for(&h)),
            vec![
                ip("1.1.1.1"),
                ip("2.2.2.2"),
                ip("2001:db8::1"),
                ip("2001:db8::2"),
                Err("junk".to_owned())
            ]
        );
    }

    /// `for=` nodes are read through quotes and other parameters; undisclosed ones are errors.
    #[test]
    fn forwarded_nodes() {
        let h = headers(
            "forwarded",
            &[
                r#"for=192.0.2.43, For="[2001:db8:cafe::17]:4711";proto=http;by=203.0.113.43"#,
                r#"proto=https;for="198.51.100.7";host="a,b", for=unknown, by=1.2.3.4"#,
            ],
        );
        assert_eq!(
            leftmost_first(forwarded(&h)),
            vec![
                ip("192.0.2.43"),
                ip("2001:db8:cafe::17"),
                ip("198.51.100.7"),
                Err("unknown".to_owned()),
                Err("by=1.2.3.4".to_owned()),
            ]
        );
    }

    /// A quote never closed makes the rest of its line one entry that is not an address: the
    /// element a proxy appended after it is not read as the client's.
    #[test]
    fn an_unclosed_quote_swallows_no_address() {
        let h = headers(
            "forwarded",
            &[r#"for=6.6.6.6;x=", for=203.0.113.5"#, "for=10.0.0.2"],
        );
        assert_eq!(
            leftmost_first(forwarded(&h)),
            vec![
                Err(r#"for=6.6.6.6;x=", for=203.0.113.5"#.to_owned()),
                ip("10.0.0.2"),
            ]
        );
    }
}
