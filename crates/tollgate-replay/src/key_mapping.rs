//! `--key part=$field`: which log field fills which key part of a limit.
//!
//! A part takes a field (`user=$remote_user`) or a constant (`tenant=acme`, every line the
//! same). The mapping is checked against the log's fields and against every limit's key parts
//! before the first line is replayed, so a typo is an error, not an empty report.

use std::str::FromStr;

use tollgate::Limit;

use crate::replay_error::ReplayError;

/// Where one key part's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartSource {
    /// A field of each line, by name (`$remote_user`, `$user`).
    Field(String),
    /// The same text for every line.
    Literal(String),
}

/// The key parts a replay fills, in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyMapping {
    parts: Vec<(String, PartSource)>,
}

impl KeyMapping {
    /// A mapping from `part=$field` / `part=text` specifications.
    ///
    /// # Errors
    /// A message naming the specification: no `=`, an empty part or field, a part twice.
    pub fn parse<S: AsRef<str>>(specs: &[S]) -> Result<KeyMapping, String> {
        let mut parts: Vec<(String, PartSource)> = Vec::new();
        for spec in specs {
            let spec = spec.as_ref();
            let (part, source) = spec
                .split_once('=')
                .ok_or_else(|| format!("--key {spec:?}: expected part=$field or part=text"))?;
            if part.is_empty() {
                return Err(format!("--key {spec:?}: the key part's name is empty"));
            }
            let source = match source.strip_prefix('$') {
                Some("") => return Err(format!("--key {spec:?}: the field's name is empty")),
                Some(field) => PartSource::Field(field.to_owned()),
                None => PartSource::Literal(source.to_owned()),
            };
            if parts.iter().any(|(p, _)| p == part) {
                return Err(format!("--key {spec:?}: key part {part:?} is mapped twice"));
            }
            parts.push((part.to_owned(), source));
        }
        Ok(KeyMapping { parts })
    }

    /// The parts and their sources, in order.
    pub fn parts(&self) -> &[(String, PartSource)] {
        &self.parts
    }

    /// The index of `part` in [`KeyMapping::parts`].
    pub fn index_of(&self, part: &str) -> Option<usize> {
        self.parts.iter().position(|(p, _)| p == part)
    }
}

impl FromStr for KeyMapping {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        KeyMapping::parse(&s.split(',').collect::<Vec<_>>())
    }
}

/// The event's value indices filling `limit`'s key parts, in its key order, and the parts'
/// names.
pub(crate) fn key_indices(
    limit: &Limit,
    mapping: &KeyMapping,
) -> Result<Vec<(Box<str>, usize)>, ReplayError> {
    limit
        .key_parts()
        .unwrap_or_default()
        .iter()
        .map(|part| {
            mapping
                .index_of(part)
                .map(|i| (part.clone(), i))
                .ok_or_else(|| ReplayError::UnmappedPart {
                    limit: limit.name().to_owned(),
                    part: part.to_string(),
                })
        })
        .collect()
}

/// A key as reports show it: `part=value,part=value`.
pub(crate) fn key_text(parts: &[(Box<str>, usize)], values: &[String]) -> String {
    let mut out = String::new();
    for (i, (name, v)) in parts.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(name);
        out.push('=');
        out.push_str(&values[*v]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_and_constants() {
        let m = KeyMapping::parse(&["user=$remote_user", "tenant=acme"]).expect("valid");
        assert_eq!(
            m.parts(),
            &[
                ("user".into(), PartSource::Field("remote_user".into())),
                ("tenant".into(), PartSource::Literal("acme".into())),
            ]
        );
        assert_eq!(m.index_of("tenant"), Some(1));
    }

    #[test]
    fn bad_specifications_are_named() {
        for (spec, says) in [
            ("user", "expected part=$field"),
            ("=$remote_user", "name is empty"),
            ("user=$", "field's name is empty"),
        ] {
            let e = KeyMapping::parse(&[spec]).expect_err(spec);
            assert!(e.contains(says) && e.contains(spec), "{e}");
        }
        let e = KeyMapping::parse(&["user=$a", "user=$b"]).expect_err("twice");
        assert!(e.contains("mapped twice"), "{e}");
    }
}
