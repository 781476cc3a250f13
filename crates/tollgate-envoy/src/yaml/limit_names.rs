//! The names of the limits generated for imported `rate_limit`s.
//!
//! `<domain>.<key>[_<value>]…` with characters outside `A-Z a-z 0-9 _ - .` replaced by `_`, so
//! that metrics and `GET /v1/limits` read like the YAML; a name longer than 64 characters, or
//! one already taken, is cut to 47 and suffixed with a 64-bit FNV-1a digest of the domain and
//! path. The name is part of every counter key, so it must be stable across runs and
//! instances: a digest of the path, never a counter or a random value.

use std::collections::HashSet;

use tollgate::MAX_NAME_LEN;

use crate::yaml::imported::{Descriptor, Imported};

/// Gives every counted `rate_limit` its tollgate limit name (see the module docs).
pub(crate) fn name_limits(imported: &mut Imported) {
    fn go(domain: &str, prefix: &str, list: &mut [Descriptor], taken: &mut HashSet<String>) {
        for d in list {
            let segment = match &d.value {
                Some(v) => format!("{}_{v}", d.key),
                None => d.key.clone(),
            };
            let path = format!("{prefix}.{segment}");
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
    let mut taken = HashSet::new();
    for domain in &mut imported.domains {
        let name = domain.name.clone();
        go(&name, "", &mut domain.descriptors, &mut taken);
    }
}

/// `<domain><path>` made a valid limit name, unique among `taken`.
fn limit_name(domain: &str, path: &str, taken: &HashSet<String>) -> String {
    let readable: String = format!("{domain}{path}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if readable.len() <= MAX_NAME_LEN && !taken.contains(&readable) {
        return readable;
    }
    let digest = fnv1a(format!("{domain}\u{0}{path}").as_bytes());
    let head: String = readable.chars().take(MAX_NAME_LEN - 17).collect();
    format!("{head}.{digest:016x}")
}

/// 64-bit FNV-1a: short, stable, dependency-free; names only need to be distinct.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
