//! [`Stat`]: a rule's statistics key, split into the labels the reference's Prometheus
//! mapping gives it.

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
    pub(crate) fn new(domain: &str, levels: &[String]) -> Stat {
        let (first, rest) = levels
            .split_first()
            .map_or(("", &[][..]), |(f, r)| (&**f, r));
        Stat {
            domain: domain.into(),
            key1: first.into(),
            key2: (!rest.is_empty()).then(|| rest.join(".").into()),
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
}
