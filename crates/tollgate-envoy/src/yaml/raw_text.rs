//! [`RawFile`]: the text of every scalar the reference reads as a string (`domain`, a
//! descriptor's `key` and `value`, a rate limit's `name` and `replaces[].name`), as written.
//!
//! The reference decodes these fields into Go strings (gopkg.in/yaml.v2), which keeps a plain
//! scalar's text whatever it looks like: `value: 0x1F` is `"0x1F"`, `1.10` is `"1.10"`,
//! `True` is `"True"`, `1e3` is `"1e3"`. The generic value this loader walks resolves them
//! first (31, 1.1, true, 1000.0), and printing those back changed them: an audit's
//! descriptor `hex: 0x1F` matched only requests sending `hex=31`, and `0x1F` went unlimited.
//! Deserialized into `String`s, `serde_yaml_ng` gives the text as written, so the walk reads
//! these fields from here. The rest of the walk (its checks, their paths) is unchanged: this
//! tree only lends text, and where it cannot (a file it does not fit, which the walk then
//! refuses with its own error), the walk prints the resolved scalar as before.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// One file's string fields, as written.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawFile {
    #[serde(default)]
    pub(super) domain: Option<String>,
    #[serde(default)]
    pub(super) descriptors: Option<Vec<RawDescriptor>>,
}

/// One descriptor's string fields, and its children's.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawDescriptor {
    #[serde(default)]
    pub(super) key: Option<String>,
    #[serde(default)]
    pub(super) value: Option<String>,
    #[serde(default)]
    pub(super) rate_limit: Option<RawRateLimit>,
    #[serde(default)]
    pub(super) descriptors: Option<Vec<RawDescriptor>>,
    /// A merge key's maps (`<<: *base`), whose fields this one lacks it takes.
    #[serde(default, rename = "<<")]
    merge: Option<Merge<RawDescriptor>>,
}

/// A rate limit's string fields.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawRateLimit {
    #[serde(default)]
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) replaces: Option<Vec<RawReplace>>,
    #[serde(default, rename = "<<")]
    merge: Option<Merge<RawRateLimit>>,
}

/// A merge key's value: one map, or a list of maps (the first holding a field wins), each
/// read by the file's own deserializer, so that their scalars keep their text too.
#[derive(Debug)]
struct Merge<T>(Vec<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Merge<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Maps<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Maps<T> {
            type Value = Merge<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map or a list of maps")
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Merge<T>, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(|t| Merge(vec![t]))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Merge<T>, A::Error> {
                let mut maps = Vec::new();
                while let Some(t) = seq.next_element()? {
                    maps.push(t);
                }
                Ok(Merge(maps))
            }
        }
        d.deserialize_any(Maps(PhantomData))
    }
}

/// One `replaces` entry's name.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawReplace {
    #[serde(default)]
    pub(super) name: Option<String>,
}

impl RawFile {
    /// `text`'s string fields, merge keys applied as the walked value applies them
    /// (`Value::apply_merge`: a field the map has wins, then the merged maps in order);
    /// `None` when it does not fit this shape (the walk then finds why, and says it with the
    /// path).
    pub(super) fn read(text: &str) -> Option<RawFile> {
        let mut file: RawFile = serde_yaml_ng::from_str(text).ok()?;
        for d in file.descriptors.iter_mut().flatten() {
            d.apply_merge();
        }
        Some(file)
    }
}

impl RawDescriptor {
    fn apply_merge(&mut self) {
        for mut from in self.merge.take().map(|m| m.0).unwrap_or_default() {
            from.apply_merge();
            self.key = self.key.take().or(from.key);
            self.value = self.value.take().or(from.value);
            self.rate_limit = self.rate_limit.take().or(from.rate_limit);
            self.descriptors = self.descriptors.take().or(from.descriptors);
        }
        if let Some(rl) = &mut self.rate_limit {
            rl.apply_merge();
        }
        for d in self.descriptors.iter_mut().flatten() {
            d.apply_merge();
        }
    }
}

impl RawRateLimit {
    fn apply_merge(&mut self) {
        for mut from in self.merge.take().map(|m| m.0).unwrap_or_default() {
            from.apply_merge();
            self.name = self.name.take().or(from.name);
            self.replaces = self.replaces.take().or(from.replaces);
        }
    }
}
