//! How many descriptors one call may carry, and how many entries one descriptor: `[envoy]
//! max_descriptors` and `max_entries`.
//!
//! Nothing else bounds them: the 1 MiB message limit ([`crate::MAX_MESSAGE_BYTES`]) admits
//! about 60,000 small descriptors (gRPC's default 4 MB, about 240,000), and each is matched,
//! keyed, charged and answered. A call is decided on the async runtime, in one piece, and its
//! descriptors go to the store as one atomic script, so an unbounded call holds a runtime
//! thread (and on Redis, the server) for as long as it likes. Envoy sends a handful of descriptors per request (one per rate limit action of the
//! route), each of a few entries, so the defaults are far above real use and still bound one
//! call's work, its keys and its Redis script. A call past a cap is refused as a whole with
//! `INVALID_ARGUMENT` naming the cap, the count received and the setting, before anything is
//! matched or charged.
//!
//! The settings themselves are bounded ([`CEILING_DESCRIPTORS`], [`CEILING_ENTRIES`]), so
//! that no config can turn the bound off.

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tonic::Status;

use crate::{EnvoyRules, RulesError};

/// Descriptors per call when `[envoy] max_descriptors` is not set.
pub const DEFAULT_MAX_DESCRIPTORS: usize = 256;
/// Entries per descriptor when `[envoy] max_entries` is not set.
pub const DEFAULT_MAX_ENTRIES: usize = 32;
/// The largest `max_descriptors` a config may set.
pub const CEILING_DESCRIPTORS: usize = 4096;
/// The largest `max_entries` a config may set.
pub const CEILING_ENTRIES: usize = 256;

/// The caps of one snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DescriptorCaps {
    descriptors: usize,
    entries: usize,
}

impl DescriptorCaps {
    /// The caps `config` sets, or the defaults.
    ///
    /// # Errors
    /// [`RulesError`] naming `envoy.max_descriptors` or `envoy.max_entries` when it is 0 or
    /// above its ceiling.
    pub(crate) fn from_config(config: &EnvoyRules) -> Result<DescriptorCaps, RulesError> {
        Ok(DescriptorCaps {
            descriptors: setting(
                "envoy.max_descriptors",
                config.max_descriptors,
                DEFAULT_MAX_DESCRIPTORS,
                CEILING_DESCRIPTORS,
            )?,
            entries: setting(
                "envoy.max_entries",
                config.max_entries,
                DEFAULT_MAX_ENTRIES,
                CEILING_ENTRIES,
            )?,
        })
    }

    /// Most entries per descriptor.
    pub(crate) fn entries(self) -> usize {
        self.entries
    }

    /// Refuses `request` when it has more descriptors, or a descriptor more entries, than
    /// the caps allow. Reads only the lengths: constant work per descriptor.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT`, e.g. `257 descriptors in one call, at most 256
    /// (envoy.max_descriptors)`.
    pub(crate) fn check(self, request: &RateLimitRequest) -> Result<(), Status> {
        let n = request.descriptors.len();
        if n > self.descriptors {
            return Err(Status::invalid_argument(format!(
                "{n} descriptors in one call, at most {} (envoy.max_descriptors)",
                self.descriptors
            )));
        }
        if let Some((i, d)) = request
            .descriptors
            .iter()
            .enumerate()
            .find(|(_, d)| d.entries.len() > self.entries)
        {
            return Err(Status::invalid_argument(format!(
                "descriptors[{i}]: {} entries, at most {} per descriptor (envoy.max_entries)",
                d.entries.len(),
                self.entries
            )));
        }
        Ok(())
    }
}

impl Default for DescriptorCaps {
    fn default() -> DescriptorCaps {
        DescriptorCaps {
            descriptors: DEFAULT_MAX_DESCRIPTORS,
            entries: DEFAULT_MAX_ENTRIES,
        }
    }
}

/// `value` (else `default`) when it is within `1..=ceiling`.
fn setting(
    field: &str,
    value: Option<usize>,
    default: usize,
    ceiling: usize,
) -> Result<usize, RulesError> {
    match value {
        None => Ok(default),
        Some(v) if (1..=ceiling).contains(&v) => Ok(v),
        Some(v) => Err(RulesError::new(
            field,
            format!("{v} is out of range, 1..={ceiling}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;

    use super::*;

    fn request(descriptors: usize, entries: usize) -> RateLimitRequest {
        RateLimitRequest {
            domain: "d".to_owned(),
            descriptors: vec![
                RateLimitDescriptor {
                    entries: vec![Entry::default(); entries],
                    ..RateLimitDescriptor::default()
                };
                descriptors
            ],
            hits_addend: 0,
        }
    }

    #[test]
    fn refuses_past_each_cap_and_admits_at_it() {
        let caps = DescriptorCaps::default();
        assert!(caps.check(&request(DEFAULT_MAX_DESCRIPTORS, 1)).is_ok());
        assert!(caps.check(&request(1, DEFAULT_MAX_ENTRIES)).is_ok());
        let many = caps
            .check(&request(DEFAULT_MAX_DESCRIPTORS + 1, 1))
            .expect_err("refused");
        assert_eq!(many.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            many.message(),
            "257 descriptors in one call, at most 256 (envoy.max_descriptors)"
        );
        let long = caps
            .check(&request(2, DEFAULT_MAX_ENTRIES + 1))
            .expect_err("refused");
        assert_eq!(
            long.message(),
            "descriptors[0]: 33 entries, at most 32 per descriptor (envoy.max_entries)"
        );
    }

    #[test]
    fn settings_are_bounded() {
        let config = |d, e| EnvoyRules {
            max_descriptors: d,
            max_entries: e,
            ..EnvoyRules::default()
        };
        assert_eq!(
            DescriptorCaps::from_config(&config(Some(4), Some(2))),
            Ok(DescriptorCaps {
                descriptors: 4,
                entries: 2
            })
        );
        let zero = DescriptorCaps::from_config(&config(Some(0), None)).expect_err("refused");
        assert_eq!(zero.field, "envoy.max_descriptors");
        let huge = DescriptorCaps::from_config(&config(None, Some(CEILING_ENTRIES + 1)))
            .expect_err("refused");
        assert_eq!(
            huge.to_string(),
            "envoy.max_entries: 257 is out of range, 1..=256"
        );
    }
}
