//! `--candidates`: the first limit replayed at other values, as limits of their own, so that
//! the report can put them side by side with it.

use tollgate::{Limit, Quota};

use crate::replay_error::ReplayError;

/// `limit` at each of `values` (its limit per period; a burst different from the limit is
/// scaled with it), named `<name>-at-<value>`, to replay side by side with it.
///
/// # Errors
/// [`ReplayError::Limit`] for a value the quota cannot take;
/// [`ReplayError::DuplicateCandidate`] for a value given twice (both copies would be one
/// limit by name, and share its counters).
pub fn candidate_limits(limit: &Limit, values: &[u64]) -> Result<Vec<Limit>, ReplayError> {
    for (i, v) in values.iter().enumerate() {
        if values[..i].contains(v) {
            return Err(ReplayError::DuplicateCandidate(*v));
        }
    }
    let quota = limit.quota();
    values
        .iter()
        .map(|&v| {
            let mut q = Quota::new(v, quota.period())?;
            if quota.burst() != quota.limit() {
                let burst = (quota.burst() as f64 * v as f64 / quota.limit() as f64).round();
                q = q.with_burst((burst as u64).max(1))?;
            }
            let suffix = format!("-at-{v}");
            let base: String = limit
                .name()
                .chars()
                .take(64 - suffix.len().min(64))
                .collect();
            let mut l = Limit::new(format!("{base}{suffix}"), limit.algorithm(), q)?;
            if let Some(parts) = limit.key_parts() {
                l = l.keyed_by(parts.iter().map(|p| &**p))?;
            }
            Ok(l.shadow(limit.is_shadow()))
        })
        .collect()
}
