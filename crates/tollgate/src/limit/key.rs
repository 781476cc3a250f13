//! Keys: who is counted, built by exactly one function.
//!
//! `<prefix>:<limit>:{<name>=<value>,...}:<algorithm tag>`, for example
//! `tollgate:sms:{user=42}:fw`. Why each piece:
//! - every value is escaped: bytes outside `A-Z a-z 0-9 _ - . / @` become `%XX`, so no value can
//!   forge `:`, `,`, `=`, a brace, a newline or another limit's namespace, and non-UTF-8 bytes
//!   are written safely;
//! - an escaped value longer than 64 bytes becomes its first 24 escaped bytes (whole escapes
//!   only), `#` and 128 bits of its SHA-256 of the whole value (a `#` in a value is always
//!   escaped, so a digest cannot be forged either): a 1 MB header makes a short key, Redis
//!   memory per key stays bounded, and an operator reading `/v1/top` can still tell which
//!   client it is (`ua=Mozilla/5.0%20%28X11%3B%20L#3f1a…`, not `ua=#3f1a…`);
//! - the braces are the Redis Cluster hash tag: every key of one (limit, key parts) is in
//!   one slot, and limits keyed by the same parts share a slot, so checking them together is
//!   one atomic script even on a cluster. A limit keyed by no part has an empty tag (`{}`),
//!   which Redis Cluster ignores (it then hashes the whole key): two such limits may lie in
//!   two slots, and a request naming both is decided slot by slot, as any cross-slot request;
//! - the algorithm tag means that changing a limit's algorithm starts from fresh state instead
//!   of misreading (or tripping over the Redis type of) the old one. A sliding window's tag
//!   carries its bucket width in µs (`sw1000000`: 60 buckets of a minute), for the same reason:
//!   its state is bucket numbers, which another width would misread, so a reload that changes
//!   its period or bucket count so that the width changes starts afresh too.
//!
//! A property test checks that different inputs never make the same key.

use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, LazyLock};

use sha2::{Digest, Sha256};

use crate::{Limit, Namespace};

/// Escaped values longer than this are replaced by a readable prefix and a digest.
pub(crate) const MAX_ESCAPED_PART: usize = 64;

/// The most escaped bytes of a long value kept before its digest.
const READABLE_PREFIX: usize = 24;

/// The longest key part value a check accepts, in bytes, whichever face it comes from (HTTP
/// JSON, a header, an Envoy descriptor): a longer one is refused before its digest is
/// computed ([`crate::CheckError::KeyPartTooLong`]).
pub const MAX_KEY_VALUE: usize = 1024;

/// Seed for the in-process hash of keys, random per process so that hostile key values
/// cannot aim at one bucket of the memory store's maps.
static KEY_HASHER: LazyLock<foldhash::fast::RandomState> =
    LazyLock::new(foldhash::fast::RandomState::default);

/// A store key. Built only by [`Key::new`].
#[derive(Clone)]
pub struct Key {
    /// Shared: a request, a store map and a retry all hold the same text without copying it.
    text: Arc<str>,
    hash: u64,
}

impl Key {
    /// The key for `limit` and the named `parts`, in `namespace`.
    ///
    /// ```
    /// use tollgate::{Algorithm, Key, Limit, Namespace, Quota};
    ///
    /// let sms = Limit::new("sms", Algorithm::FixedWindow, Quota::per_minute(100)?)?;
    /// let key = Key::new(&Namespace::default(), &sms, &[("user", "42")]);
    /// assert_eq!(key.as_str(), "tollgate:sms:{user=42}:fw");
    /// let hostile = Key::new(&Namespace::default(), &sms, &[("user", "42}:x{")]);
    /// assert_eq!(hostile.as_str(), "tollgate:sms:{user=42%7D%3Ax%7B}:fw");
    /// let ns = Namespace::new("app:eu")?;
    /// let key = Key::new(&ns, &sms, &[("user", "42")]);
    /// assert_eq!((key.prefix(), key.limit_name()), ("app:eu", "sms"));
    /// # Ok::<(), tollgate::LimitError>(())
    /// ```
    pub fn new<V: AsRef<[u8]>>(namespace: &Namespace, limit: &Limit, parts: &[(&str, V)]) -> Key {
        let mut text = String::with_capacity(64);
        text.push_str(namespace.prefix());
        text.push(':');
        push_part(&mut text, limit.name().as_bytes());
        text.push_str(":{");
        for (i, (name, value)) in parts.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            push_part(&mut text, name.as_bytes());
            text.push('=');
            push_part(&mut text, value.as_ref());
        }
        text.push_str("}:");
        // The algorithm's tag, and a sliding window's bucket width or GCRA's emission
        // interval (`Limit::key_tag`): a changed width or rate starts afresh.
        text.push_str(limit.key_tag());
        let hash = KEY_HASHER.hash_one(&text);
        Key {
            text: text.into(),
            hash,
        }
    }

    /// The key as stored.
    #[inline]
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The Redis Cluster hash tag: the text between the braces.
    pub fn hash_tag(&self) -> &str {
        let start = self.text.find('{').map_or(0, |i| i + 1);
        let end = self.text[start..]
            .find('}')
            .map_or(self.text.len(), |i| start + i);
        &self.text[start..end]
    }

    /// The limit's name, read back from the key (names never contain `:` or `{`).
    pub fn limit_name(&self) -> &str {
        let before_tag = self.text.find(":{").unwrap_or(0);
        let start = self.text[..before_tag].rfind(':').map_or(0, |i| i + 1);
        &self.text[start..before_tag]
    }

    /// The namespace's prefix, read back from the key (everything before `:<limit>:{`).
    pub fn prefix(&self) -> &str {
        let before_tag = self.text.find(":{").unwrap_or(0);
        let end = self.text[..before_tag].rfind(':').unwrap_or(0);
        &self.text[..end]
    }

    /// A hash of the key, computed once, for in-process maps.
    #[inline]
    pub fn prehash(&self) -> u64 {
        self.hash
    }
}

/// Appends `raw` escaped, or, when the escaped form would be too long, the escaped start of
/// it (at most [`READABLE_PREFIX`] bytes, whole escapes only), `#` and its digest.
fn push_part(out: &mut String, raw: &[u8]) {
    let width = |b: u8| if is_plain(b) { 1 } else { 3 };
    let escaped_len: usize = raw.iter().map(|&b| width(b)).sum();
    if escaped_len > MAX_ESCAPED_PART {
        let mut kept = 0;
        let mut shown = 0;
        for &b in raw {
            if shown + width(b) > READABLE_PREFIX {
                break;
            }
            shown += width(b);
            kept += 1;
        }
        push_escaped(out, &raw[..kept]);
        let digest = Sha256::digest(raw);
        out.push('#');
        for b in &digest[..16] {
            push_hex(out, *b);
        }
        return;
    }
    push_escaped(out, raw);
}

/// Appends `raw`, every byte outside the plain set as `%XX`.
fn push_escaped(out: &mut String, raw: &[u8]) {
    for &b in raw {
        if is_plain(b) {
            out.push(char::from(b));
        } else {
            out.push('%');
            push_hex(out, b);
        }
    }
}

fn is_plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'/' | b'@')
}

fn push_hex(out: &mut String, b: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push(char::from(HEX[usize::from(b >> 4)]));
    out.push(char::from(HEX[usize::from(b & 0xF)]));
}

impl PartialEq for Key {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.text == other.text
    }
}

impl Eq for Key {}

impl Hash for Key {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.text, f)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A [`Hasher`] for maps keyed by [`Key`]: a key hashes itself once, when built, and writes
/// that hash here, so lookups never hash the key text again.
/// Public only with the `bench` feature (the benchmarks' baseline maps).
#[derive(Debug, Default, Clone, Copy)]
#[cfg_attr(not(feature = "bench"), allow(unreachable_pub))]
pub struct KeyHasher(u64);

/// Builds [`KeyHasher`]s: `HashMap<Key, V, BuildKeyHasher>`.
#[cfg_attr(not(feature = "bench"), allow(unreachable_pub))]
pub type BuildKeyHasher = std::hash::BuildHasherDefault<KeyHasher>;

impl Hasher for KeyHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only reached if something other than a `Key` is hashed: fold the bytes in.
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Algorithm, Quota};
    use proptest::prelude::*;

    fn limit(name: &str) -> Limit {
        Limit::new(name, Algorithm::Gcra, Quota::per_second(1).expect("valid")).expect("valid")
    }

    /// The key has exactly one hash tag and stays inside its limit's namespace.
    fn assert_confined(key: &Key, limit_name: &str) {
        let s = key.as_str();
        assert!(s.starts_with(&format!("tollgate:{limit_name}:{{")), "{s}");
        assert!(s.ends_with("}:gcra1000000"), "{s}");
        assert_eq!(s.matches('{').count(), 1, "{s}");
        assert_eq!(s.matches('}').count(), 1, "{s}");
        assert!(s.bytes().all(|b| b.is_ascii_graphic()), "{s}");
        assert!(s.len() <= 200, "{} bytes", s.len());
    }

    /// Hostile values — separators, braces, newlines, NUL, invalid UTF-8, 1 MB — stay
    /// confined and short.
    #[test]
    fn hostile_parts_are_confined() {
        let ns = Namespace::default();
        let l = limit("api");
        let big = vec![b'a'; 1 << 20];
        let values: [&[u8]; 7] = [
            b"a:b",
            b"}{",
            b"line\nbreak",
            b"nul\0byte",
            &[0xff, 0xfe, 0x80],
            b"#0123",
            &big,
        ];
        for v in values {
            assert_confined(&Key::new(&ns, &l, &[("user", v)]), "api");
        }
        let long = Key::new(&ns, &l, &[("user", &big[..])]);
        assert!(
            long.as_str().contains(&format!("user={}#", "a".repeat(24))),
            "{long}"
        );
        // The readable start keeps whole escapes, and the digest covers the whole value.
        let agent = b"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko)";
        let key = Key::new(&ns, &l, &[("ua", &agent[..])]);
        assert!(
            key.as_str().contains("ua=Mozilla/5.0%20%28X11%3B#"),
            "{key}"
        );
        let mut other = agent.to_vec();
        other.push(b'!');
        assert_ne!(key, Key::new(&ns, &l, &[("ua", &other[..])]));
        assert_confined(&key, "api");
    }

    /// A value cannot pose as another part list or another limit.
    #[test]
    fn no_forged_separators() {
        let ns = Namespace::default();
        let a = Key::new(&ns, &limit("api"), &[("user", "1"), ("ip", "2")]);
        let b = Key::new(&ns, &limit("api"), &[("user", "1,ip=2")]);
        assert_ne!(a, b);
        assert_eq!(a.hash_tag(), "user=1,ip=2");
        assert_eq!(a.limit_name(), "api");
    }

    fn part() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..12),
            proptest::collection::vec(
                prop_oneof![Just(b'%'), Just(b'#'), Just(b','), Just(b'=')],
                0..6
            ),
            proptest::collection::vec(any::<u8>(), 20..120),
        ]
    }

    proptest! {
        /// Distinct (limit, parts) inputs never produce the same key.
        #[test]
        fn distinct_inputs_distinct_keys(
            a in proptest::collection::vec(("[a-c]{1,2}", part()), 0..3),
            b in proptest::collection::vec(("[a-c]{1,2}", part()), 0..3),
            la in "[xy]", lb in "[xy]",
        ) {
            let ns = Namespace::default();
            let ka = Key::new(&ns, &limit(&la), &a.iter().map(|(n, v)| (n.as_str(), v.as_slice())).collect::<Vec<_>>());
            let kb = Key::new(&ns, &limit(&lb), &b.iter().map(|(n, v)| (n.as_str(), v.as_slice())).collect::<Vec<_>>());
            if la != lb || a != b {
                prop_assert_ne!(ka.as_str(), kb.as_str());
            } else {
                prop_assert_eq!(ka, kb);
            }
        }

        /// Any value stays confined in its limit's namespace.
        #[test]
        fn any_value_is_confined(v in proptest::collection::vec(any::<u8>(), 0..300)) {
            let k = Key::new(&Namespace::default(), &limit("api"), &[("user", v)]);
            assert_confined(&k, "api");
        }
    }
}
