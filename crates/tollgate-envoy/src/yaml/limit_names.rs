//! The names of the limits generated for imported `rate_limit`s.
//!
//! The name is part of every counter key, so it must be stable across runs and instances,
//! and it must depend on its own domain and path alone: a name settled by which other files
//! happen to exist would hand one domain's live counters to another when a file is added or
//! removed (an audit: adding domain `a:b` beside `a_b` gave `a:b` the name `a_b.user`, and
//! with it `a_b`'s over-limit users).
//!
//! So a name is `<domain>.<key>[_<value>]…`, readable in metrics and `GET /v1/limits`, only
//! when that is a faithful rendering: domain, keys and values all of `A-Z a-z 0-9 _ -` (no
//! `.`, nothing replaced), at most 64 characters, not under the override limits' prefix.
//! Then the domain is everything before the first `.`, so two domains never meet. Every
//! other name is the readable text with characters outside `A-Z a-z 0-9 _ - .` replaced by
//! `_`, cut to 46 characters, then `..` and a 64-bit FNV-1a digest of the domain and path: a
//! faithful name never holds `..` (no component is empty or has a `.`), so the two kinds
//! never meet either. Within one domain, `key_value` can still read like a key with a `_` (key
//! `a_b` beside key `a` with value `b`): the second of those, in its file's order, takes the
//! digested form. That order is the domain's own file's, so it moves only when that file does.

use std::collections::HashSet;

use tollgate::MAX_NAME_LEN;

use crate::matching::OVERRIDE_PREFIX;
use crate::yaml::imported::{Descriptor, Imported};

/// Gives every counted `rate_limit` its tollgate limit name (see the module docs).
pub(crate) fn name_limits(imported: &mut Imported) {
    fn go(domain: &str, prefix: &Path, list: &mut [Descriptor], taken: &mut HashSet<String>) {
        for d in list {
            let mut path = prefix.clone();
            path.push(&d.key, d.value.as_deref());
            if let Some(rl) = &mut d.rate_limit
                && !rl.unlimited
                && rl.requests_per_unit > 0
            {
                let name = limit_name(domain, &path, taken);
                taken.insert(name.clone());
                rl.limit = Some(name);
            }
            go(domain, &path, &mut d.descriptors, taken);
        }
    }
    for domain in &mut imported.domains {
        // Per domain: another domain's names never decide this one's.
        let mut taken = HashSet::new();
        let name = domain.name.clone();
        go(&name, &Path::default(), &mut domain.descriptors, &mut taken);
    }
}

/// A descriptor's path from its domain: the readable text, whether it is faithful so far,
/// and the components for the digest.
#[derive(Debug, Clone)]
struct Path {
    /// `.<key>[_<value>]` per level.
    text: String,
    /// Every key and value so far is of `A-Z a-z 0-9 _ -`.
    faithful: bool,
    /// Each key, NUL-terminated, then `\x01` and its value if it has one, then a NUL.
    digest_input: Vec<u8>,
}

impl Default for Path {
    /// The domain's own level: nothing yet, faithful.
    fn default() -> Path {
        Path {
            text: String::new(),
            faithful: true,
            digest_input: Vec::new(),
        }
    }
}

impl Path {
    fn push(&mut self, key: &str, value: Option<&str>) {
        self.text.push('.');
        self.text.push_str(key);
        self.faithful &= plain(key);
        self.digest_input.extend_from_slice(key.as_bytes());
        self.digest_input.push(0);
        if let Some(v) = value {
            self.text.push('_');
            self.text.push_str(v);
            self.faithful &= plain(v);
            self.digest_input.push(1);
            self.digest_input.extend_from_slice(v.as_bytes());
        }
        self.digest_input.push(0);
    }
}

/// Of `A-Z a-z 0-9 _ -`, and not empty.
fn plain(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
}

/// `<domain><path>`, faithful when it can be and not `taken` in its domain, else digested.
fn limit_name(domain: &str, path: &Path, taken: &HashSet<String>) -> String {
    let text = format!("{domain}{}", path.text);
    if plain(domain)
        && path.faithful
        && text.len() <= MAX_NAME_LEN
        && !text.starts_with(OVERRIDE_PREFIX)
        && !taken.contains(&text)
    {
        return text;
    }
    let mut input = Vec::with_capacity(domain.len() + 1 + path.digest_input.len());
    input.extend_from_slice(domain.as_bytes());
    input.push(0);
    input.extend_from_slice(&path.digest_input);
    let digest = fnv1a(&input);
    let head: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(MAX_NAME_LEN - 18)
        .collect();
    format!("{head}..{digest:016x}")
}

/// 64-bit FNV-1a: short, stable, dependency-free; names only need to be distinct.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(levels: &[(&str, Option<&str>)]) -> Path {
        let mut p = Path::default();
        for (k, v) in levels {
            p.push(k, *v);
        }
        p
    }

    fn name(domain: &str, levels: &[(&str, Option<&str>)]) -> String {
        limit_name(domain, &path(levels), &HashSet::new())
    }

    #[test]
    fn faithful_names_read_like_the_yaml() {
        assert_eq!(
            name(
                "messaging",
                &[("message_type", Some("marketing")), ("to_number", None)]
            ),
            "messaging.message_type_marketing.to_number"
        );
    }

    /// The audit's pairs: each would have read as the other.
    #[test]
    fn names_that_could_meet_are_told_apart() {
        let pairs = [
            (
                name("a:b", &[("user", None)]),
                name("a_b", &[("user", None)]),
            ),
            (name("a.b", &[("c", None)]), name("a", &[("b.c", None)])),
            (
                name("envoy", &[("override", None), ("minute", None)]),
                "envoy.override.minute".to_owned(),
            ),
            (name("d", &[("k", Some(""))]), name("d", &[("k", None)])),
        ];
        for (one, other) in pairs {
            assert_ne!(one, other);
            assert!(tollgate::validate_name("name", &one).is_ok(), "{one}");
        }
        assert_eq!(name("a_b", &[("user", None)]), "a_b.user");
        assert!(name("a:b", &[("user", None)]).contains(".."));
        assert!(name("envoy", &[("override", None), ("minute", None)]).contains(".."));
    }

    /// A clash within a domain digests the second, whatever other domains exist.
    #[test]
    fn a_clash_within_a_domain_digests_the_second() {
        let mut taken = HashSet::new();
        let first = limit_name("d", &path(&[("a_b", None)]), &taken);
        taken.insert(first.clone());
        let second = limit_name("d", &path(&[("a", Some("b"))]), &taken);
        assert_eq!(first, "d.a_b");
        assert!(second.starts_with("d.a_b.."), "{second}");
        assert!(second.len() <= MAX_NAME_LEN);
    }

    #[test]
    fn long_names_are_cut_and_digested() {
        let long = "k".repeat(80);
        let n = name("d", &[(long.as_str(), None)]);
        assert_eq!(n.len(), MAX_NAME_LEN);
        assert!(tollgate::validate_name("name", &n).is_ok());
    }
}
