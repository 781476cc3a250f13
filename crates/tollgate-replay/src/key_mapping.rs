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
    push_key_text(
        &mut out,
        parts.iter().map(|(name, v)| (&**name, values[*v].as_str())),
    );
    out
}

/// Appends the key of `(part, value)`s to `out` as reports show it and look it up:
/// `part=value,part=value`, with `\`, `,` and `=` in a name or a value escaped by a
/// backslash. Unambiguous: the key (a=`x,b=y`, b=`z`) is `a=x\,b\=y,b=z` and (a=`x`,
/// b=`y,b=z`) is `a=x,b=y\,b\=z`; unescaped, both were `a=x,b=y,b=z`, and their counts and
/// timelines merged.
pub(crate) fn push_key_text<'a>(
    out: &mut String,
    parts: impl IntoIterator<Item = (&'a str, &'a str)>,
) {
    for (i, (name, value)) in parts.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_escaped(out, name);
        out.push('=');
        push_escaped(out, value);
    }
}

fn push_escaped(out: &mut String, text: &str) {
    if !text.contains(['\\', ',', '=']) {
        out.push_str(text);
        return;
    }
    for c in text.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
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

    /// Before: both keys were `a=x,b=y,b=z`.
    #[test]
    fn key_texts_are_unambiguous() {
        let text = |parts: &[(&str, &str)]| {
            let mut out = String::new();
            push_key_text(&mut out, parts.iter().copied());
            out
        };
        let one = text(&[("a", "x,b=y"), ("b", "z")]);
        let two = text(&[("a", "x"), ("b", "y,b=z")]);
        assert_ne!(one, two);
        assert_eq!(one, r"a=x\,b\=y,b=z");
        assert_eq!(two, r"a=x,b=y\,b\=z");
        assert_ne!(text(&[("a", "x\\"), ("b", "y")]), text(&[("a", "x\\,b=y")]));
        assert_eq!(text(&[("user", "alice")]), "user=alice");
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
