//! The reference service's descriptor trees, as loaded from its YAML files (see `yaml.rs`).
//!
//! Plain, comparable data: the server keeps it in the `[envoy]` section, so a reload that
//! finds the same trees changes nothing, and one that finds different ones swaps the rules and
//! the generated limits together. Each descriptor with a `rate_limit` carries the name of the
//! tollgate limit generated for it (`limit`), fixed at load time so that matching and the
//! limiter agree on it.

use std::path::PathBuf;
use std::time::Duration;

/// All imported domains, in file-name order. Equal when their domains are: `read_digest`
/// says which bytes were read, not what they mean (a comment edited changes it), and a reload
/// that finds the same trees changes nothing.
#[derive(Debug, Clone, Default)]
pub struct Imported {
    /// One per file.
    pub domains: Vec<Domain>,
    /// The digest of what was read ([`crate::contents_digest`] of the files' names and
    /// texts, as [`crate::dir_contents`] shows them): a watcher that compared a snapshot of
    /// the directory before this load tells whether the load read the same (a file written
    /// meanwhile, caught half-way by the load, is then not taken for the snapshot).
    pub read_digest: u64,
}

impl PartialEq for Imported {
    fn eq(&self, other: &Imported) -> bool {
        self.domains == other.domains
    }
}

impl Eq for Imported {}

/// One YAML file: a domain and its descriptor tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Domain {
    /// The file it came from.
    pub file: PathBuf,
    /// `domain`.
    pub name: String,
    /// `descriptors`.
    pub descriptors: Vec<Descriptor>,
}

/// One descriptor of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// Where it is in its file (`descriptors[0].descriptors[1]`), for messages and tables.
    pub path: String,
    /// `key`.
    pub key: String,
    /// `value`; absent: any value (a key-only default). May contain `*` wildcards.
    pub value: Option<String>,
    /// `rate_limit`.
    pub rate_limit: Option<RateLimit>,
    /// `shadow_mode`: always answer OK, count would-be refusals.
    pub shadow_mode: bool,
    /// `quota_mode`: a quota descriptor (over limit only when all of the request's quota
    /// descriptors are).
    pub quota_mode: bool,
    /// `detailed_metric`: the reference's per-rule counters are labelled with the request's
    /// values (bounded, see `docs/envoy.md`).
    pub detailed_metric: bool,
    /// `value_to_metric`: the reference's per-rule counters are labelled with the request's
    /// value at this level where the config gives none (a key-only or wildcard entry).
    pub value_to_metric: bool,
    /// `share_threshold`: every value matching the wildcard shares one counter.
    pub share_threshold: bool,
    /// `metadata`: a map returned in the response's dynamic metadata when this entry's limit
    /// passed (`[envoy] response_dynamic_metadata`); `None` when absent or empty.
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// `descriptors`.
    pub descriptors: Vec<Descriptor>,
}

/// A `rate_limit` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimit {
    /// `requests_per_unit` (0: every request is over limit).
    pub requests_per_unit: u32,
    /// `unit`; `None` only when `unlimited`.
    pub unit: Option<Unit>,
    /// `unlimited`: always OK, never counted.
    pub unlimited: bool,
    /// `name`, what `replaces` refers to.
    pub name: Option<String>,
    /// `replaces[].name`: limits this one drops when both match one request.
    pub replaces: Vec<String>,
    /// The tollgate limit generated for it (none when unlimited or 0 per unit).
    pub limit: Option<String>,
}

/// The reference's units (its protocol's enum, UNKNOWN excluded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// 1 s.
    Second,
    /// 60 s.
    Minute,
    /// 3600 s.
    Hour,
    /// 86 400 s.
    Day,
    /// 7 days.
    Week,
    /// 30 days, as the reference counts a month.
    Month,
    /// 365 days, as the reference counts a year.
    Year,
}

impl Unit {
    /// The unit named `word` (any case, as the reference accepts).
    pub fn parse(word: &str) -> Option<Unit> {
        Some(match word.to_ascii_lowercase().as_str() {
            "second" => Unit::Second,
            "minute" => Unit::Minute,
            "hour" => Unit::Hour,
            "day" => Unit::Day,
            "week" => Unit::Week,
            "month" => Unit::Month,
            "year" => Unit::Year,
            _ => return None,
        })
    }

    /// Its length: the window of the generated limit.
    pub fn period(self) -> Duration {
        const DAY: u64 = 86_400;
        Duration::from_secs(match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => DAY,
            Unit::Week => 7 * DAY,
            Unit::Month => 30 * DAY,
            Unit::Year => 365 * DAY,
        })
    }

    /// Its name in lower case.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }
}

impl Imported {
    /// Every descriptor of every domain, depth first, with its domain.
    pub fn walk(&self) -> Vec<(&Domain, &Descriptor)> {
        fn go<'a>(
            d: &'a Domain,
            list: &'a [Descriptor],
            out: &mut Vec<(&'a Domain, &'a Descriptor)>,
        ) {
            for desc in list {
                out.push((d, desc));
                go(d, &desc.descriptors, out);
            }
        }
        let mut out = Vec::new();
        for d in &self.domains {
            go(d, &d.descriptors, &mut out);
        }
        out
    }
}

/// The key part name of a descriptor at `depth` (0 at the top): the generated limits are keyed
/// by the value of every entry down to theirs, as the reference keys its counters.
pub(crate) fn part_name(depth: usize) -> String {
    format!("d{depth}")
}

impl Imported {
    /// One tollgate limit per counted `rate_limit` (a fixed window of one `unit` by default,
    /// as the reference counts), keyed by the entries down to it, failing by `policy`.
    ///
    /// # Errors
    /// [`crate::ImportError::Invalid`] if the core refuses a generated limit.
    pub fn limits(
        &self,
        algorithm: tollgate::Algorithm,
        policy: tollgate::OnStoreError,
    ) -> Result<Vec<tollgate::Limit>, crate::ImportError> {
        fn go(
            d: &Domain,
            list: &[Descriptor],
            depth: usize,
            algorithm: tollgate::Algorithm,
            policy: tollgate::OnStoreError,
            out: &mut Vec<tollgate::Limit>,
        ) -> Result<(), crate::ImportError> {
            for desc in list {
                if let Some(rl) = &desc.rate_limit
                    && let (Some(name), Some(unit)) = (&rl.limit, rl.unit)
                {
                    let err = |e: tollgate::LimitError| crate::ImportError::Invalid {
                        file: d.file.clone(),
                        path: format!("{}.rate_limit", desc.path),
                        reason: e.to_string(),
                    };
                    // The reference takes any 32-bit count; the core counts at most 10⁹
                    // units a window, and one a microsecond: said of the field at fault.
                    let quota =
                        tollgate::Quota::new(u64::from(rl.requests_per_unit), unit.period())
                            .map_err(|e| crate::ImportError::Invalid {
                                file: d.file.clone(),
                                path: format!("{}.rate_limit.requests_per_unit", desc.path),
                                reason: format!(
                                    "{e}: tollgate counts at most 1000000000 requests per unit, \
                                     and one per microsecond (write a lower count, or \
                                     unlimited: true for no limit)"
                                ),
                            })?;
                    // A sliding log counts at most 10 000 units: said of the count, with the
                    // algorithm that takes it (set in `[envoy] algorithm`, not in the YAML).
                    let limit = tollgate::Limit::new(name.as_str(), algorithm, quota)
                        .map_err(|e| match &e {
                            tollgate::LimitError::TooLarge { field: "limit", .. } => {
                                crate::ImportError::Invalid {
                                    file: d.file.clone(),
                                    path: format!("{}.rate_limit.requests_per_unit", desc.path),
                                    reason: format!(
                                        "{e}: with envoy.algorithm = \"{algorithm}\" (a sliding \
                                         log keeps one entry per request); \
                                         envoy.algorithm = \"sliding_window\" takes it"
                                    ),
                                }
                            }
                            _ => err(e),
                        })?
                        .keyed_by((0..=depth).map(part_name))
                        .map_err(err)?
                        .on_store_error(policy);
                    out.push(limit);
                }
                go(d, &desc.descriptors, depth + 1, algorithm, policy, out)?;
            }
            Ok(())
        }
        let mut out = Vec::new();
        for d in &self.domains {
            go(d, &d.descriptors, 0, algorithm, policy, &mut out)?;
        }
        Ok(out)
    }
}
