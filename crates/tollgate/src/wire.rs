//! A verdict on the wire: the values of the rate-limit header fields, in one place for every
//! face (the tower layer's HTTP headers, the service's HTTP API, the Envoy service's
//! response headers).
//!
//! Following draft-ietf-httpapi-ratelimit-headers-10, each field is a structured-field list
//! with one item per limit, the item being the limit's name as a string:
//! - `RateLimit-Policy: "<limit>";q=<limit>;w=<period seconds>`;
//! - `RateLimit: "<limit>";r=<remaining>;t=<seconds>`: `t` is, when the limit refuses, the
//!   wait until this cost would pass, otherwise the time until its quota is full again; `r`
//!   is dropped with `hide_remaining`;
//! - `Retry-After: <seconds>` on refusals.
//!
//! Every duration is rounded **up** to whole seconds, so a client that waits what it is told
//! is never early (`w` of a 1.5 s period is 2); a `Retry-After` is never 0. Limits decided by
//! an `allow` or `deny` failure policy (the store was down) have no real count, so they get
//! no `RateLimit` item; shadow limits never show (a client must not see a limit that is not
//! enforced). Values are plain strings: each face wraps them in its own header type.

use std::time::Duration;

use smallvec::SmallVec;

use crate::{Decision, Entry, LimitDecision, Quota, Request, Verdict};

/// `RateLimit-Policy`, lower case as HTTP/2 wants it.
pub const RATELIMIT_POLICY: &str = "ratelimit-policy";
/// `RateLimit`.
pub const RATELIMIT: &str = "ratelimit";
/// `Retry-After`.
pub const RETRY_AFTER: &str = "retry-after";

/// Whole seconds, rounded up.
///
/// ```
/// use std::time::Duration;
/// use tollgate::wire::ceil_secs;
///
/// assert_eq!(ceil_secs(Duration::ZERO), 0);
/// assert_eq!(ceil_secs(Duration::from_nanos(1)), 1);
/// assert_eq!(ceil_secs(Duration::from_millis(1_200)), 2);
/// ```
pub fn ceil_secs(d: Duration) -> u64 {
    // Saturating: `Duration::MAX` overflowed (a panic in debug builds, 0 in release, so
    // `retry_after_secs` said "retry in 1 s" for a refusal that never ends).
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

/// Whole milliseconds, rounded up.
pub fn ceil_millis(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// A `Retry-After` value: whole seconds, rounded up, at least 1.
///
/// ```
/// use std::time::Duration;
/// use tollgate::wire::retry_after_secs;
///
/// assert_eq!(retry_after_secs(Duration::from_millis(1_200)), 2);
/// assert_eq!(retry_after_secs(Duration::from_micros(500)), 1);
/// assert_eq!(retry_after_secs(Duration::ZERO), 1);
/// assert_eq!(retry_after_secs(Duration::from_secs(3)), 3);
/// ```
pub fn retry_after_secs(d: Duration) -> u64 {
    ceil_secs(d).max(1)
}

/// `t` of a `RateLimit` item (and `X-RateLimit-Reset`): until this cost passes when refused,
/// until the quota is full again when admitted.
pub fn wait_secs(d: &Decision) -> u64 {
    match d.refusal() {
        Some(refusal) => refusal.retry_after_secs(),
        None => ceil_secs(d.reset_after),
    }
}

/// The `RateLimit-Policy` value for these limits (empty when there are none).
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Quota, wire};
///
/// let a = Quota::per_minute(100)?;
/// let b = Quota::new(5, Duration::from_millis(1_500))?;
/// assert_eq!(
///     wire::policy([("global", &a), ("user", &b)]),
///     r#""global";q=100;w=60, "user";q=5;w=2"#
/// );
/// # Ok::<(), tollgate::LimitError>(())
/// ```
pub fn policy<'a>(limits: impl IntoIterator<Item = (&'a str, &'a Quota)>) -> String {
    // One item is a name and about 15 bytes: most values fit without growing.
    let mut out = String::with_capacity(48);
    for (name, quota) in limits {
        push_item(&mut out, name);
        push_param(&mut out, ";q=", quota.limit());
        push_param(&mut out, ";w=", ceil_secs(quota.period()).max(1));
    }
    out
}

/// The `RateLimit-Policy` value for the enforced limits of `decisions` (each limit once).
pub fn policy_of<'a>(decisions: impl IntoIterator<Item = &'a LimitDecision>) -> String {
    let mut seen: SmallVec<[&str; 4]> = SmallVec::new();
    let items = decisions.into_iter().filter(|d| !d.shadow).filter(|d| {
        let fresh = !seen.contains(&&*d.limit);
        if fresh {
            seen.push(&d.limit);
        }
        fresh
    });
    policy(items.map(|d| (&*d.limit, &d.quota)))
}

/// The `RateLimit-Policy` value for the enforced entries of `request` (each limit once): what
/// a face that checks a fixed set of limits sends with every response (the tower layer
/// computes it once, when it is built).
pub fn policy_of_request(request: &Request<'_>) -> String {
    let mut seen: SmallVec<[&str; 4]> = SmallVec::new();
    let items = request
        .entries()
        .iter()
        .filter(|e| !e.is_shadow())
        .map(Entry::limit)
        .filter(|l| {
            let fresh = !seen.contains(&l.name());
            if fresh {
                seen.push(l.name());
            }
            fresh
        });
    policy(items.map(|l| (l.name(), l.quota())))
}

/// The `RateLimit` value for `decisions` (enforced, counted, each limit once), or `None` when
/// no limit has a real count.
pub fn rate_limit<'a>(
    decisions: impl IntoIterator<Item = &'a LimitDecision>,
    hide_remaining: bool,
) -> Option<String> {
    let mut out = String::with_capacity(48);
    let mut seen: SmallVec<[&str; 4]> = SmallVec::new();
    for d in decisions {
        if !d.shows_count() || seen.contains(&&*d.limit) {
            continue;
        }
        seen.push(&d.limit);
        push_item(&mut out, &d.limit);
        if !hide_remaining {
            push_param(&mut out, ";r=", d.decision.remaining);
        }
        push_param(&mut out, ";t=", wait_secs(&d.decision));
    }
    (!out.is_empty()).then_some(out)
}

/// The `Retry-After` seconds for a verdict, when it refuses.
pub fn retry_after(verdict: &Verdict) -> Option<u64> {
    verdict.retry_after().map(retry_after_secs)
}

/// Appends a parameter (`;q=100`). With `itoa` rather than `write!`: these values are
/// written on every decision of every face, and `fmt`'s machinery cost several times the
/// digits' own work there (callgrind, a one-limit check).
fn push_param(out: &mut String, name: &str, value: u64) {
    out.push_str(name);
    out.push_str(itoa::Buffer::new().format(value));
}

/// Appends an sf-string item: quoted, `"` and `\` escaped, bytes outside printable ASCII
/// dropped (limit names are plain ASCII anyway). Only printable ASCII is ever written, so
/// every value here is a valid header value.
fn push_item(out: &mut String, name: &str) {
    if !out.is_empty() {
        out.push_str(", ");
    }
    out.push('"');
    for c in name.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => {}
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names are sf-strings with `"` and `\` escaped.
    #[test]
    fn escapes_sf_strings() {
        let mut s = String::new();
        push_item(&mut s, r#"a"b\c"#);
        assert_eq!(s, r#""a\"b\\c""#);
    }

    /// Milliseconds round up too: a wait of 1 µs is 1 ms, never 0.
    #[test]
    fn millis_round_up() {
        assert_eq!(ceil_millis(Duration::ZERO), 0);
        assert_eq!(ceil_millis(Duration::from_micros(1)), 1);
        assert_eq!(ceil_millis(Duration::from_micros(1_001)), 2);
        assert_eq!(ceil_millis(Duration::from_secs(2)), 2_000);
    }

    /// Whole seconds round up and saturate: `Duration::MAX` overflowed (0 in release builds,
    /// "retry in 1 s" for a refusal that never ends).
    #[test]
    fn seconds_round_up_and_saturate() {
        assert_eq!(ceil_secs(Duration::from_millis(1_001)), 2);
        assert_eq!(ceil_secs(Duration::MAX), u64::MAX);
    }
}
