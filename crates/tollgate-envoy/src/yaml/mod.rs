//! Loads a directory of the reference service's (envoyproxy/ratelimit) YAML files, unchanged.
//!
//! The reference reads `$RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY/*.yaml`, one
//! domain per file; `[envoy] config_dir` names that last directory. Files ending in `.yaml` or
//! `.yml` are read in name order; dot files and subdirectories are skipped.
//!
//! Files are parsed into a generic YAML value and walked by hand rather than deserialized into
//! structs: the reference's own checks (non-string keys, unknown keys, `unlimited` with a unit,
//! …) need the path of the offending node, which this walk always knows. Its refusals are ours:
//! duplicate domain, duplicate key (same key and value at one level), empty key or domain, bad
//! unit, a non-string key, `unlimited` with a unit, `replaces` naming itself or empty, an
//! unknown field. `metadata` is any map (its content is not checked, as the reference's).
//! `quota_mode` is read (a quota descriptor, see `decide.rs`).
//!
//! Each counted `rate_limit` then gets its generated tollgate limit name (`limit_names.rs`).
//!
//! Beside it: `imported.rs` (the trees as loaded), `import_error.rs`, `limit_names.rs` (the
//! names of the limits made for imported `rate_limit`s) and `node_budget.rs` (a file's nodes
//! counted, aliases expanded, before it is parsed: an alias bomb is refused unbuilt).

pub(crate) mod import_error;
pub(crate) mod imported;
pub(crate) mod limit_names;
mod node_budget;
mod raw_text;

pub use node_budget::MAX_NODES;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_yaml_ng::{Mapping, Value};

use crate::ImportError;
use crate::yaml::imported::{Descriptor, Domain, Imported, RateLimit, Unit};
use crate::yaml::limit_names::name_limits;
use crate::yaml::raw_text::{RawDescriptor, RawFile, RawRateLimit};

/// The largest YAML file read: the reference's configs are a few KiB, and a careless 100 MB
/// file in the directory (a log, a dump) once took gigabytes and minutes to load. A larger
/// file is refused unread, naming it and its size.
pub const MAX_FILE_BYTES: u64 = 2 * 1024 * 1024;

/// The most YAML one directory may hold, all files together: each file is capped, and this
/// caps their number's share (a directory of thousands of files at the file cap would be
/// gigabytes read at every load, and at every poll of the watcher). A directory past it is
/// refused, naming it and its size.
pub const MAX_DIR_BYTES: u64 = 32 * 1024 * 1024;

/// The most YAML files one directory may hold: the reference's directories hold one file per
/// domain, a few dozen. Bytes alone do not bound their number (32 MiB is millions of one-line
/// files, each listed, stat'ed and read at every poll of the watcher, and each domain compared
/// with the others at every load). A directory past it is refused, naming it, before any file
/// is read.
pub const MAX_DIR_FILES: usize = 10_000;

/// The deepest nesting accepted (flow collections `[`/`{`, and compact `- - -` sequences on
/// one line), checked by a linear scan before parsing: the parser takes seconds on a
/// 100 000-deep `[` before refusing it. Descriptor trees nest a few levels.
pub const MAX_DEPTH: usize = 64;

/// Reads every YAML file of `dir`; a domain in two files is refused ([`load_dir_with`]).
///
/// # Errors
/// [`ImportError`] naming the file (and the path in it) of the first problem.
pub fn load_dir(dir: &Path) -> Result<Imported, ImportError> {
    load_dir_with(dir, false)
}

/// Reads every YAML file of `dir`. With `merge_domains` (the reference's
/// `MERGE_DOMAIN_CONFIG`, `[envoy] merge_domain_config`), a domain may be spread over several
/// files: each file is one [`crate::Domain`] of [`Imported::domains`], and the top-level
/// descriptors of the files of one domain are matched as one list (in file-name order), so
/// the same top-level key and value in two of them is refused, as the reference refuses it.
/// Without it, a domain in two files is refused.
///
/// # Errors
/// [`ImportError`] naming the file (and the path in it) of the first problem.
pub fn load_dir_with(dir: &Path, merge_domains: bool) -> Result<Imported, ImportError> {
    let read = |path: &Path, source| ImportError::Read {
        path: path.to_owned(),
        source,
    };
    let files = yaml_files(dir)?;
    // Files over their own cap are refused by it, naming them, when they are read.
    let total = files
        .iter()
        .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
        .filter(|&len| len <= MAX_FILE_BYTES)
        .fold(0_u64, u64::saturating_add);
    if total > MAX_DIR_BYTES {
        return Err(invalid(
            dir,
            "",
            format!(
                "{total} bytes of YAML in {} files, more than the {} MiB a config directory \
                 may hold",
                files.len(),
                MAX_DIR_BYTES / (1024 * 1024)
            ),
        ));
    }
    let mut imported = Imported::default();
    let mut digest = ContentsDigest::default();
    // Each domain's files so far (their indices in `imported.domains`).
    let mut by_name: HashMap<String, Vec<usize>> = HashMap::new();
    for file in files {
        let text = read_capped(&file).map_err(|e| read(&file, e))?;
        digest.file(&file, &text);
        let domain = parse_file(&text, &file)?;
        let earlier = by_name.entry(domain.name.clone()).or_default();
        let same = earlier.iter().map(|&i| &imported.domains[i]);
        if let Some(first) = same.clone().next() {
            if !merge_domains {
                return Err(invalid(
                    &file,
                    "domain",
                    format!(
                        "duplicate domain {:?} (already in {}; envoy.merge_domain_config = true \
                         merges them)",
                        domain.name,
                        first.file.display()
                    ),
                ));
            }
            for (i, d) in domain.descriptors.iter().enumerate() {
                let twin = same.clone().find_map(|other| {
                    other
                        .descriptors
                        .iter()
                        .find(|o| o.key == d.key && o.value == d.value)
                        .map(|o| (other, o))
                });
                if let Some((other, o)) = twin {
                    return Err(invalid(
                        &file,
                        format!("descriptors[{i}]"),
                        format!(
                            "duplicate key {:?} in domain {:?} (already in {} at {})",
                            crate::metrics::level(&d.key, d.value.as_deref()),
                            domain.name,
                            other.file.display(),
                            o.path
                        ),
                    ));
                }
            }
        }
        earlier.push(imported.domains.len());
        imported.domains.push(domain);
    }
    imported.read_digest = digest.finish();
    name_limits(&mut imported);
    Ok(imported)
}

/// The digest of `contents` ([`dir_contents`]' text of a directory): equal to a load's
/// [`Imported::read_digest`] when the load read the same files with the same texts.
pub fn contents_digest(contents: &str) -> u64 {
    use std::hash::Hasher as _;
    let mut h = std::hash::DefaultHasher::new();
    h.write(contents.as_bytes());
    h.finish()
}

/// [`contents_digest`] of the text [`dir_contents`] would show, hashed file by file (the
/// hasher takes bytes as a stream: pieces hash as their concatenation).
#[derive(Default)]
struct ContentsDigest(std::hash::DefaultHasher);

impl ContentsDigest {
    /// One file, as `dir_contents` writes it.
    fn file(&mut self, file: &Path, text: &str) {
        use std::hash::Hasher as _;
        self.0.write(file.display().to_string().as_bytes());
        self.0.write(b"\0");
        self.0.write(text.as_bytes());
        self.0.write(b"\0");
    }

    fn finish(self) -> u64 {
        use std::hash::Hasher as _;
        self.0.finish()
    }
}

/// The files of `dir` that [`load_dir`] reads, in the order it reads them. A symbolic link
/// is followed only when its target lies inside `dir` (a Kubernetes ConfigMap's `..data`
/// links do); one that leads out of it is refused, naming it, rather than followed silently.
fn yaml_files(dir: &Path) -> Result<Vec<PathBuf>, ImportError> {
    let read = |path: &Path, source| ImportError::Read {
        path: path.to_owned(),
        source,
    };
    let root = dir.canonicalize().map_err(|e| read(dir, e))?;
    let mut files: Vec<PathBuf> = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| read(dir, e))? {
        let path = entry.map_err(|e| read(dir, e))?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let yaml = name.ends_with(".yaml") || name.ends_with(".yml");
        if !yaml || name.starts_with('.') {
            continue;
        }
        let link = path
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink());
        if link {
            let target = path.canonicalize().map_err(|e| read(&path, e))?;
            if !target.starts_with(&root) {
                return Err(invalid(
                    &path,
                    "",
                    format!(
                        "is a link to {}, outside envoy.config_dir: not followed",
                        target.display()
                    ),
                ));
            }
        }
        if path.is_file() {
            if files.len() == MAX_DIR_FILES {
                return Err(invalid(
                    dir,
                    "",
                    format!(
                        "more than {MAX_DIR_FILES} YAML files, more than a config directory \
                         may hold"
                    ),
                ));
            }
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// `path`'s text, unless it is larger than [`MAX_FILE_BYTES`] (then an error saying so,
/// without reading it).
fn read_capped(path: &Path) -> std::io::Result<String> {
    let len = std::fs::metadata(path)?.len();
    if len > MAX_FILE_BYTES {
        return Err(std::io::Error::other(format!(
            "{len} bytes, larger than the {} KiB a config file may be",
            MAX_FILE_BYTES / 1024
        )));
    }
    std::fs::read_to_string(path)
}

/// Refuses `text` nested deeper than [`MAX_DEPTH`], in one pass (quoted strings and comments
/// skipped).
fn nesting_within_bounds(text: &str, file: &Path) -> Result<(), ImportError> {
    let mut flow = 0usize;
    for (n, line) in text.lines().enumerate() {
        let mut compact = 0usize;
        let mut leading = true;
        let mut quote: Option<char> = None;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') => quote = Some(c),
                (None, '#') => break,
                (None, '[' | '{') => flow += 1,
                (None, ']' | '}') => flow = flow.saturating_sub(1),
                (None, '-') if leading && chars.peek() == Some(&' ') => compact += 1,
                (None, ' ') => {}
                _ => leading = false,
            }
            if flow > MAX_DEPTH || compact > MAX_DEPTH {
                return Err(invalid(
                    file,
                    "",
                    format!("line {}: nested deeper than {MAX_DEPTH} levels", n + 1),
                ));
            }
        }
    }
    Ok(())
}

/// What [`load_dir`] would read in `dir`, as one string (each file's name and content; or
/// the error that stops the reading): equal strings load equal rules, so a watcher that
/// compares them sees every edit, added or removed file, and directory swap.
pub fn dir_contents(dir: &Path) -> String {
    let mut out = String::new();
    let files = match yaml_files(dir) {
        Ok(files) => files,
        Err(e) => return format!("unreadable {}: {e}", dir.display()),
    };
    let mut read = 0_u64;
    for file in files {
        out.push_str(&file.display().to_string());
        out.push('\0');
        // An oversized file, or any past the directory's cap, is not read every poll: its
        // size and time say when it changes.
        match std::fs::metadata(&file) {
            Ok(m) if m.len() > MAX_FILE_BYTES || read.saturating_add(m.len()) > MAX_DIR_BYTES => {
                out.push_str(&format!(
                    "too large: {} bytes, modified {:?}",
                    m.len(),
                    m.modified().ok()
                ));
            }
            _ => match std::fs::read_to_string(&file) {
                Ok(text) => {
                    read = read.saturating_add(text.len() as u64);
                    out.push_str(&text);
                }
                Err(e) => out.push_str(&format!("unreadable: {e}")),
            },
        }
        out.push('\0');
    }
    out
}

/// Parses one file's text (`file` names it in errors); limits are not named yet.
///
/// # Errors
/// [`ImportError::Syntax`] or [`ImportError::Invalid`].
pub fn parse_file(text: &str, file: &Path) -> Result<Domain, ImportError> {
    nesting_within_bounds(text, file)?;
    let syntax = |source| ImportError::Syntax {
        file: file.to_owned(),
        source,
    };
    if !node_budget::within_node_budget(text).map_err(syntax)? {
        return Err(invalid(
            file,
            "",
            format!(
                "more than {MAX_NODES} YAML nodes once its aliases are expanded (each alias \
                 stands for the whole node its anchor names)"
            ),
        ));
    }
    let mut value: Value = serde_yaml_ng::from_str(text).map_err(syntax)?;
    // Merge keys (`<<: *defaults`), which the reference's YAML library applies.
    value.apply_merge().map_err(syntax)?;
    let raw = RawFile::read(text).unwrap_or_default();
    let at = Walk { file };
    let map = at.map(&value, "")?;
    at.known(map, "", &["domain", "descriptors"])?;
    let name = at
        .string(map, "", "domain", raw.domain.as_deref())?
        .unwrap_or_default();
    if name.is_empty() {
        return Err(invalid(file, "domain", "must not be empty"));
    }
    let descriptors = at.descriptors(map, "", raw.descriptors.as_deref())?;
    Ok(Domain {
        file: file.to_owned(),
        name,
        descriptors,
    })
}

fn invalid(file: &Path, path: impl Into<String>, reason: impl Into<String>) -> ImportError {
    ImportError::Invalid {
        file: file.to_owned(),
        path: path.into(),
        reason: reason.into(),
    }
}

fn join(at: &str, field: &str) -> String {
    if at.is_empty() {
        field.to_owned()
    } else {
        format!("{at}.{field}")
    }
}

/// The walk over one file, which it names in errors.
struct Walk<'f> {
    file: &'f Path,
}

const DESCRIPTOR_FIELDS: &[&str] = &[
    "key",
    "value",
    "rate_limit",
    "descriptors",
    "shadow_mode",
    "quota_mode",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
];
const RATE_LIMIT_FIELDS: &[&str] = &["unit", "requests_per_unit", "unlimited", "name", "replaces"];

impl Walk<'_> {
    fn err(&self, path: impl Into<String>, reason: impl Into<String>) -> ImportError {
        invalid(self.file, path, reason)
    }

    fn map<'v>(&self, value: &'v Value, at: &str) -> Result<&'v Mapping, ImportError> {
        value.as_mapping().ok_or_else(|| {
            let at = if at.is_empty() { "(top)" } else { at };
            self.err(at, "must be a map")
        })
    }

    /// Refuses non-string keys and keys not in `fields`.
    fn known(&self, map: &Mapping, at: &str, fields: &[&str]) -> Result<(), ImportError> {
        for key in map.keys() {
            let Some(key) = key.as_str() else {
                return Err(self.err(
                    if at.is_empty() { "(top)" } else { at },
                    format!("key is not a string: {}", show(key)),
                ));
            };
            if !fields.contains(&key) {
                return Err(self.err(join(at, key), "unknown field"));
            }
        }
        Ok(())
    }

    /// The string `field` of `map`; `raw`, its text as written (`raw_text.rs`), for a
    /// scalar the parser resolved to a number or a boolean.
    fn string(
        &self,
        map: &Mapping,
        at: &str,
        field: &str,
        raw: Option<&str>,
    ) -> Result<Option<String>, ImportError> {
        match map.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            // The reference reads scalars as strings, as written (`value: 0x1F` is "0x1F").
            Some(Value::Number(_) | Value::Bool(_)) if raw.is_some() => Ok(raw.map(str::to_owned)),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(Value::Bool(b)) => Ok(Some(b.to_string())),
            Some(other) => Err(self.err(
                join(at, field),
                format!("must be a string, not {}", show(other)),
            )),
        }
    }

    fn flag(&self, map: &Mapping, at: &str, field: &str) -> Result<bool, ImportError> {
        match map.get(field) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(self.err(
                join(at, field),
                format!("must be true or false, not {}", show(other)),
            )),
        }
    }

    /// The list `field` of `map` (empty when absent) and its path.
    fn list<'v>(
        &self,
        map: &'v Mapping,
        at: &str,
        field: &str,
    ) -> Result<(&'v [Value], String), ImportError> {
        let list_at = join(at, field);
        match map.get(field) {
            None | Some(Value::Null) => Ok((&[], list_at)),
            Some(Value::Sequence(list)) => Ok((list, list_at)),
            Some(other) => Err(self.err(list_at, format!("must be a list, not {}", show(other)))),
        }
    }

    /// The list `descriptors` of `map`; `raw`, its string fields as written.
    fn descriptors(
        &self,
        map: &Mapping,
        at: &str,
        raw: Option<&[RawDescriptor]>,
    ) -> Result<Vec<Descriptor>, ImportError> {
        let (list, list_at) = self.list(map, at, "descriptors")?;
        let mut out: Vec<Descriptor> = Vec::with_capacity(list.len());
        // (key, value) → index in `out`: a level of tens of thousands of entries is checked
        // in linear time (compared pairwise, 40 000 took seconds).
        let mut seen: std::collections::HashMap<(String, Option<String>), usize> =
            std::collections::HashMap::with_capacity(list.len());
        for (i, item) in list.iter().enumerate() {
            let here = format!("{list_at}[{i}]");
            let d = self.descriptor(item, &here, raw.and_then(|r| r.get(i)))?;
            if let Some(&first) = seen.get(&(d.key.clone(), d.value.clone())) {
                let what = match &d.value {
                    Some(v) => format!("{}_{v}", d.key),
                    None => d.key.clone(),
                };
                return Err(self.err(
                    here,
                    format!("duplicate key {what:?} (already at {})", out[first].path),
                ));
            }
            seen.insert((d.key.clone(), d.value.clone()), out.len());
            out.push(d);
        }
        Ok(out)
    }

    fn descriptor(
        &self,
        item: &Value,
        at: &str,
        raw: Option<&RawDescriptor>,
    ) -> Result<Descriptor, ImportError> {
        let map = self.map(item, at)?;
        self.known(map, at, DESCRIPTOR_FIELDS)?;
        let text =
            |field: fn(&RawDescriptor) -> &Option<String>| raw.and_then(|r| field(r).as_deref());
        let key = self
            .string(map, at, "key", text(|r| &r.key))?
            .unwrap_or_default();
        if key.is_empty() {
            return Err(self.err(join(at, "key"), "descriptor has an empty key"));
        }
        let value = self
            .string(map, at, "value", text(|r| &r.value))?
            .filter(|v| !v.is_empty());
        let share_threshold = self.flag(map, at, "share_threshold")?;
        if share_threshold && !value.as_deref().is_some_and(|v| v.contains('*')) {
            return Err(self.err(
                join(at, "share_threshold"),
                "only applies to a wildcard value (one with `*`)",
            ));
        }
        let rate_limit = match map.get("rate_limit") {
            None | Some(Value::Null) => None,
            Some(rl) => Some(self.rate_limit(
                rl,
                &join(at, "rate_limit"),
                raw.and_then(|r| r.rate_limit.as_ref()),
            )?),
        };
        Ok(Descriptor {
            path: at.to_owned(),
            key,
            value,
            rate_limit,
            shadow_mode: self.flag(map, at, "shadow_mode")?,
            quota_mode: self.flag(map, at, "quota_mode")?,
            detailed_metric: self.flag(map, at, "detailed_metric")?,
            value_to_metric: self.flag(map, at, "value_to_metric")?,
            share_threshold,
            metadata: self.metadata(map, at)?,
            descriptors: self.descriptors(map, at, raw.and_then(|r| r.descriptors.as_deref()))?,
        })
    }

    /// `metadata`: any map, kept as JSON for the response's dynamic metadata (the reference
    /// makes a protobuf `Struct` of it); absent or empty: none. Keys that are numbers or
    /// booleans become their text, as the reference's `%v`.
    fn metadata(
        &self,
        map: &Mapping,
        at: &str,
    ) -> Result<Option<serde_json::Map<String, serde_json::Value>>, ImportError> {
        let at = join(at, "metadata");
        match map.get("metadata") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Mapping(m)) if m.is_empty() => Ok(None),
            Some(v @ Value::Mapping(_)) => match self.json(v, &at)? {
                serde_json::Value::Object(object) => Ok(Some(object)),
                _ => unreachable!("a mapping converts to an object"),
            },
            Some(other) => Err(self.err(at, format!("must be a map, not {}", show(other)))),
        }
    }

    /// A metadata value as JSON.
    fn json(&self, value: &Value, at: &str) -> Result<serde_json::Value, ImportError> {
        use serde_json::Value as J;
        Ok(match value {
            Value::Null => J::Null,
            Value::Bool(b) => J::Bool(*b),
            Value::Number(n) => {
                let f = n.as_f64().unwrap_or(f64::NAN);
                let number = n
                    .as_i64()
                    .map(serde_json::Number::from)
                    .or_else(|| n.as_u64().map(serde_json::Number::from))
                    .or_else(|| serde_json::Number::from_f64(f));
                J::Number(number.ok_or_else(|| {
                    self.err(at, format!("{n} is not a finite number (JSON has none)"))
                })?)
            }
            Value::String(s) => J::String(s.clone()),
            Value::Sequence(list) => J::Array(
                list.iter()
                    .enumerate()
                    .map(|(i, v)| self.json(v, &format!("{at}[{i}]")))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Mapping(m) => {
                let mut object = serde_json::Map::with_capacity(m.len());
                for (k, v) in m {
                    let key = match k {
                        Value::String(s) => s.clone(),
                        Value::Number(n) => n.to_string(),
                        Value::Bool(b) => b.to_string(),
                        other => {
                            return Err(
                                self.err(at, format!("key is not a string: {}", show(other)))
                            );
                        }
                    };
                    let value = self.json(v, &join(at, &key))?;
                    object.insert(key, value);
                }
                J::Object(object)
            }
            Value::Tagged(t) => {
                return Err(self.err(at, format!("a value tagged {} is not metadata", t.tag)));
            }
        })
    }

    fn rate_limit(
        &self,
        value: &Value,
        at: &str,
        raw: Option<&RawRateLimit>,
    ) -> Result<RateLimit, ImportError> {
        let map = self.map(value, at)?;
        self.known(map, at, RATE_LIMIT_FIELDS)?;
        let unlimited = self.flag(map, at, "unlimited")?;
        let unit = match self.string(map, at, "unit", None)? {
            None => None,
            Some(word) => match Unit::parse(&word) {
                Some(unit) => Some(unit),
                None => {
                    return Err(self.err(
                        join(at, "unit"),
                        format!(
                            "invalid rate limit unit {word:?} (second, minute, hour, day, week, month, year)"
                        ),
                    ));
                }
            },
        };
        match (unlimited, unit) {
            (true, Some(_)) => {
                return Err(self.err(
                    join(at, "unit"),
                    "should not specify rate limit unit when unlimited",
                ));
            }
            (false, None) => {
                return Err(self.err(join(at, "unit"), "required (unless unlimited)"));
            }
            _ => {}
        }
        let requests_per_unit = match map.get("requests_per_unit") {
            None | Some(Value::Null) => 0,
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    self.err(
                        join(at, "requests_per_unit"),
                        format!(
                            "must be a whole number from 0 to {}, not {}",
                            u32::MAX,
                            show(v)
                        ),
                    )
                })?,
        };
        let name = self
            .string(map, at, "name", raw.and_then(|r| r.name.as_deref()))?
            .filter(|n| !n.is_empty());
        let raw_replaces = raw.and_then(|r| r.replaces.as_deref());
        let replaces = self.replaces(map, at, name.as_deref(), raw_replaces)?;
        Ok(RateLimit {
            requests_per_unit,
            unit,
            unlimited,
            name,
            replaces,
            limit: None,
        })
    }

    fn replaces(
        &self,
        map: &Mapping,
        at: &str,
        own: Option<&str>,
        raw: Option<&[raw_text::RawReplace]>,
    ) -> Result<Vec<String>, ImportError> {
        let (list, list_at) = self.list(map, at, "replaces")?;
        let mut out = Vec::with_capacity(list.len());
        for (i, item) in list.iter().enumerate() {
            let here = format!("{list_at}[{i}]");
            let entry = self.map(item, &here)?;
            self.known(entry, &here, &["name"])?;
            let text = raw.and_then(|r| r.get(i)).and_then(|r| r.name.as_deref());
            let name = self.string(entry, &here, "name", text)?.unwrap_or_default();
            if name.is_empty() {
                return Err(self.err(
                    join(&here, "name"),
                    "should not have an empty replaces entry",
                ));
            }
            if own == Some(name.as_str()) {
                return Err(self.err(
                    join(&here, "name"),
                    "replaces should not contain name of same descriptor",
                ));
            }
            out.push(name);
        }
        Ok(out)
    }
}

/// A YAML value, short, for messages.
fn show(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        Value::Sequence(_) => "a list".to_owned(),
        Value::Mapping(_) => "a map".to_owned(),
        Value::Tagged(t) => format!("a value tagged {}", t.tag),
    }
}
