//! Reading the hops out of `X-Forwarded-For` and `Forwarded` (RFC 7239).
//!
//! Only the parsing lives here; which hops to believe is [`super::ClientIp`]'s business. Every
//! entry is returned, in header order (leftmost first), as an address or as the raw text
//! that is not one, so that the caller can stop at it.

use std::net::{IpAddr, SocketAddr};

use http::HeaderMap;

/// One hop: an address, or the entry's text when it is not one (`unknown`, `_hidden`, junk).
pub(super) type Hop = Result<IpAddr, String>;

/// Every `X-Forwarded-For` entry, across repeated header lines, leftmost first.
pub(super) fn x_forwarded_for(headers: &HeaderMap) -> Vec<Hop> {
    let mut hops = Vec::new();
    for value in headers.get_all("x-forwarded-for") {
        // Bytes that are not UTF-8 make their own entry junk, not the line's: the walk from
        // the right reads the client's entry before it reaches them.
        let text = String::from_utf8_lossy(value.as_bytes());
        for entry in text.split(',') {
            let entry = entry.trim();
            if !entry.is_empty() {
                hops.push(parse_node(entry).ok_or_else(|| entry.to_owned()));
            }
        }
    }
    hops
}

/// The `for=` node of every `Forwarded` element, across repeated header lines, leftmost first.
/// An element without `for=` is a hop whose address is not disclosed.
pub(super) fn forwarded(headers: &HeaderMap) -> Vec<Hop> {
    let mut hops = Vec::new();
    for value in headers.get_all(http::header::FORWARDED) {
        let text = String::from_utf8_lossy(value.as_bytes());
        let (elements, unclosed) = split_unquoted(&text, ',');
        let last = elements.len() - 1;
        for (i, element) in elements.into_iter().enumerate() {
            let element = element.trim();
            if element.is_empty() {
                continue;
            }
            if unclosed && i == last {
                // A quote never closed swallows the rest of the line: with a proxy that
                // appends its element to the client's line (`for=6.6.6.6;x=", for=<client>`),
                // the client would name its own address. Not an address: the walk stops here.
                hops.push(Err(element.to_owned()));
                continue;
            }
            let node = split_unquoted(element, ';').0.into_iter().find_map(|pair| {
                let (name, value) = pair.split_once('=')?;
                name.trim()
                    .eq_ignore_ascii_case("for")
                    .then(|| unquote(value.trim()))
            });
            hops.push(match node {
                Some(node) => parse_node(&node).ok_or(node),
                None => Err(element.to_owned()),
            });
        }
    }
    hops
}

/// Splits on `sep` outside double quotes (a backslash escapes inside quotes); and whether a
/// quote was left open (the last piece then runs to the end of `text`, separators and all).
fn split_unquoted(text: &str, sep: char) -> (Vec<&str>, bool) {
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
            pieces.push(&text[start..i]);
            start = i + c.len_utf8();
        }
    }
    pieces.push(&text[start..]);
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

/// `1.2.3.4`, `1.2.3.4:80`, `[2001:db8::1]`, `[2001:db8::1]:80`, or a bare IPv6 address.
fn parse_node(node: &str) -> Option<IpAddr> {
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
            x_forwarded_for(&h),
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
            forwarded(&h),
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
            forwarded(&h),
            vec![
                Err(r#"for=6.6.6.6;x=", for=203.0.113.5"#.to_owned()),
                ip("10.0.0.2"),
            ]
        );
    }
}
