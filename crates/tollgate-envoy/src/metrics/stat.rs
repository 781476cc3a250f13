//! [`Stat`]: a rule's statistics key, sanitized as the reference sanitizes its stat names and
//! split into the labels the reference's Prometheus mapping gives it.

use std::sync::Arc;

use metrics::Label;

/// A rule's statistics key, split as the reference's Prometheus mapping splits it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Stat {
    domain: Arc<str>,
    key1: Arc<str>,
    key2: Option<Arc<str>>,
}

impl Stat {
    /// The key of `levels` (`key` or `key_value` each) in `domain`.
    ///
    /// The reference names its statistics `<domain>.<level>.<level>…` sanitized as a whole
    /// (`SanitizeStatName`, [`sanitize`]); the labels are that name cut at the dots that join
    /// its levels (a dot inside a value stays inside its level). A dot the sanitizing turns
    /// into `_` (an IPv4 address across two levels) joins them, as in the reference's name.
    /// The characters [`sanitize`] replaces whatever their place ([`unsafe_in_label`]) are
    /// replaced as each part is added, so that the joins' places stay those of the text
    /// sanitized (a control character beyond ASCII takes two bytes, its `_` one).
    pub(crate) fn new(domain: &str, levels: &[String]) -> Stat {
        let mut key =
            String::with_capacity(domain.len() + levels.iter().map(|l| l.len() + 1).sum::<usize>());
        push_label_safe(&mut key, domain);
        let mut joins = Vec::with_capacity(levels.len());
        for level in levels {
            joins.push(key.len());
            key.push('.');
            push_label_safe(&mut key, level);
        }
        let key = sanitize(&key);
        // The joining dots the sanitizing left (it only ever makes `_` of one).
        let mut cuts = joins.into_iter().filter(|&at| key.as_bytes()[at] == b'.');
        let (domain, key1, key2) = match (cuts.next(), cuts.next()) {
            (None, _) => (&key[..], "", None),
            (Some(a), None) => (&key[..a], &key[a + 1..], None),
            (Some(a), Some(b)) => (&key[..a], &key[a + 1..b], Some(&key[b + 1..])),
        };
        Stat {
            domain: domain.into(),
            key1: key1.into(),
            key2: key2.map(Into::into),
        }
    }

    /// The bytes of its labels' values.
    pub(crate) fn bytes(&self) -> usize {
        self.domain.len() + self.key1.len() + self.key2.as_deref().map_or(0, str::len)
    }

    /// Its labels: shared strings, built without copying text.
    pub(crate) fn labels(&self) -> Vec<Label> {
        let mut labels = Vec::with_capacity(3);
        labels.push(Label::new("domain", Arc::clone(&self.domain)));
        labels.push(Label::new("key1", Arc::clone(&self.key1)));
        if let Some(k2) = &self.key2 {
            labels.push(Label::new("key2", Arc::clone(k2)));
        }
        labels
    }
}

/// `key` or `key_value`, as the reference writes one level.
pub(crate) fn level(key: &str, value: Option<&str>) -> String {
    match value {
        Some(v) if !v.is_empty() => format!("{key}_{v}"),
        _ => key.to_owned(),
    }
}

/// Whether `c` becomes `_` in a label value, beyond the reference's rules: `\`, `"` and
/// control characters. The Prometheus exporter (metrics-exporter-prometheus 0.17,
/// `sanitize_label_value`) takes a backslash for the start of an escape already written, so
/// that `c"d` and `c\"d` both render `c\"d` (one series overwriting the other in the scrape,
/// its hits lost), `e\` and `e\\` both `e\\`; and it writes control characters other than
/// a line feed raw, which scrapers may refuse. Descriptor values come from callers
/// (`detailed_metric`, `value_to_metric`, overrides), so none of these reach the exporter.
fn unsafe_in_label(c: char) -> bool {
    c == '\\' || c == '"' || c.is_control()
}

/// Appends `text` to `out`, each [`unsafe_in_label`] character as `_`.
fn push_label_safe(out: &mut String, text: &str) {
    if text.contains(unsafe_in_label) {
        out.extend(
            text.chars()
                .map(|c| if unsafe_in_label(c) { '_' } else { c }),
        );
    } else {
        out.push_str(text);
    }
}

/// `name` as the reference's `SanitizeStatName` (`src/utils/utilities.go`) makes it: `:` and
/// `|` become `_`, then so do the dots of every match of
/// `\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}` (an IPv4 address), found left to right as Go's
/// `ReplaceAllStringFunc` finds them. Before that, `\`, `"` and control characters become
/// `_` ([`unsafe_in_label`]: the exporter would merge or garble them). Every other character,
/// other dots included, is kept.
pub(crate) fn sanitize(name: &str) -> String {
    let mut safe = String::with_capacity(name.len());
    push_label_safe(&mut safe, name);
    let mut bytes: Vec<u8> = safe
        .bytes()
        .map(|b| if b == b':' || b == b'|' { b'_' } else { b })
        .collect();
    let mut at = 0;
    while at < bytes.len() {
        match ipv4_at(&bytes, at) {
            Some(end) => {
                for b in &mut bytes[at..end] {
                    if *b == b'.' {
                        *b = b'_';
                    }
                }
                at = end;
            }
            None => at += 1,
        }
    }
    // Only ASCII bytes were replaced, by an ASCII byte: still UTF-8.
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The end of the match of `\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}` that starts at `at`, as a
/// backtracking (leftmost-first) engine such as Go's `regexp` picks it: each group greedy.
/// A group followed by a dot must be all of its run of digits (a shorter one is followed by
/// a digit), so there is nothing to backtrack; the last group takes up to three digits.
fn ipv4_at(bytes: &[u8], at: usize) -> Option<usize> {
    let mut i = at;
    for group in 0..4 {
        let start = i;
        while i < bytes.len() && i - start < 3 && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
        if group < 3 {
            if bytes.get(i) != Some(&b'.') {
                return None;
            }
            i += 1;
        }
    }
    Some(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One level is `key1` alone; deeper levels go to `key2`, joined by dots.
    #[test]
    fn keys_split_as_the_reference_mapping() {
        let s = Stat::new(
            "messaging",
            &["message_type_marketing".into(), "to_number".into()],
        );
        assert_eq!(
            (&*s.key1, s.key2.as_deref()),
            ("message_type_marketing", Some("to_number"))
        );
        let s = Stat::new("d", &["a".into()]);
        assert_eq!(s.key2, None);
        let s = Stat::new("d", &["a".into(), "b_1".into(), "c".into()]);
        assert_eq!(s.key2.as_deref(), Some("b_1.c"));
        assert_eq!(level("k", None), "k");
        assert_eq!(level("k", Some("v")), "k_v");
    }

    /// The labels of `levels` in `domain`: (domain, key1, key2).
    fn labels(domain: &str, levels: &[&str]) -> (String, String, Option<String>) {
        let levels: Vec<String> = levels.iter().map(|&l| l.to_owned()).collect();
        let s = Stat::new(domain, &levels);
        (
            s.domain.to_string(),
            s.key1.to_string(),
            s.key2.as_deref().map(str::to_owned),
        )
    }

    /// The reference's `TestEscapingInvalidChartersInMetricName`
    /// (`test/stats/manager_impl_test.go`): each key, and the name its `total_hits` counter
    /// gets.
    #[test]
    fn stat_names_are_sanitized_as_the_reference() {
        for (key, want) in [
            ("path_/foo/bar", "path_/foo/bar"),
            ("path_/foo:*:bar", "path_/foo_*_bar"),
            ("path_/foo|bar|baz", "path_/foo_bar_baz"),
            ("path_/foo:bar|baz", "path_/foo_bar_baz"),
        ] {
            assert_eq!(sanitize(key), want, "{key}");
            let name = format!("ratelimit.service.rate_limit.{}.total_hits", sanitize(key));
            assert_eq!(
                name,
                format!("ratelimit.service.rate_limit.{want}.total_hits")
            );
            assert_eq!(
                labels("d", &[key]),
                ("d".into(), want.into(), None),
                "{key}"
            );
        }
        // Each level, and the domain, as part of the whole name.
        assert_eq!(
            labels("a:b", &["k1_x|y", "path_/foo:*:bar"]),
            (
                "a_b".into(),
                "k1_x_y".into(),
                Some("path_/foo_*_bar".into())
            )
        );
    }

    /// The dots of an IPv4 address become `_` (the reference's `ipv4Regex`); other dots stay,
    /// inside their level: a value's dot makes no level.
    #[test]
    fn ipv4_dots_become_underscores_and_other_dots_stay() {
        assert_eq!(
            sanitize("remote_address_10.0.0.1"),
            "remote_address_10_0_0_1"
        );
        assert_eq!(sanitize("host_example.com"), "host_example.com");
        assert_eq!(
            sanitize("v_1.2.3"),
            "v_1.2.3",
            "three groups are no address"
        );
        // Leftmost-first, each group greedy, the search going on after a match.
        assert_eq!(sanitize("1234.5.6.7"), "1234_5_6_7");
        assert_eq!(sanitize("1.2.3.4567.8.9.1"), "1_2_3_4567_8_9_1");
        assert_eq!(sanitize("1.2.3.4.5"), "1_2_3_4.5");
        assert_eq!(sanitize("a1111.2.3.4"), "a1111_2_3_4", "from the second 1");
        assert_eq!(sanitize("::1"), "__1");
        assert_eq!(
            labels("edge", &["remote_address_10.0.0.1", "host_a.example.com"]),
            (
                "edge".into(),
                "remote_address_10_0_0_1".into(),
                Some("host_a.example.com".into())
            )
        );
        // An address across two levels: the reference's name has no dot between them.
        assert_eq!(
            labels("d", &["v_1.2", "3.4_x", "k"]),
            ("d".into(), "v_1_2_3_4_x".into(), Some("k".into()))
        );
        // Not ASCII: kept as is.
        assert_eq!(sanitize("k_é:1.2.3.4"), "k_é_1_2_3_4");
    }

    /// `\`, `"` and control characters become `_`: values the exporter would render alike
    /// (`c"d` and `c\"d` both as `c\"d`) stay apart. A control character beyond ASCII (two
    /// bytes, its `_` one) moves no cut between levels.
    #[test]
    fn backslashes_quotes_and_controls_become_underscores() {
        assert_eq!(sanitize(r#"c"d"#), "c_d");
        assert_eq!(sanitize(r#"c\"d"#), "c__d");
        assert_eq!(sanitize("e\\"), "e_");
        assert_eq!(sanitize("e\\\\"), "e__");
        assert_eq!(sanitize("t\tn\nr\r\u{7f}\u{85}:x"), "t_n_r____x");
        assert_eq!(
            labels("d\u{9b}", &["k_\u{85}v", "w_\"1.2.3.4"]),
            ("d_".into(), "k__v".into(), Some("w__1_2_3_4".into()))
        );
    }
}
