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

use serde::Deserialize;

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
}

/// A rate limit's string fields.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawRateLimit {
    #[serde(default)]
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) replaces: Option<Vec<RawReplace>>,
}

/// One `replaces` entry's name.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawReplace {
    #[serde(default)]
    pub(super) name: Option<String>,
}

impl RawFile {
    /// `text`'s string fields; `None` when it does not fit this shape (the walk then finds
    /// why, and says it with the path).
    pub(super) fn read(text: &str) -> Option<RawFile> {
        serde_yaml_ng::from_str(text).ok()
    }
}
