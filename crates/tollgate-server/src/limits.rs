//! The set of limits the service enforces, swapped whole on reload, and the operations on it.
//!
//! A [`Limits`] is immutable: a reload builds a new one over the **same** store (so counters
//! survive) and swaps it in atomically; requests in flight finish on the set they started
//! with. It also holds the Envoy rules compiled over the same limiter (one
//! [`tollgate_envoy::Snapshot`]), so the HTTP API and the gRPC service share every counter
//! and a reload swaps limits and rules together: no call sees new rules with old limits.
//!
//! Shadow limits are checked like the others but never refuse: a would-be denial is counted
//! (`tollgate_shadow_denied_total`) and reported in the response's `decisions`. They are
//! checked after the enforced limits, one by one, and only when the enforced limits admit
//! the request (a refused request would not have reached the protected service either).
//! Every input is validated before the first store call, so a bad request changes nothing.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use tollgate::{CheckError, Clock, LimitDecision, LimitError, Limiter, Namespace, Verdict};
use tollgate_envoy::{EnvoyRules, RulesError, Snapshot};

use crate::config::LimitConfig;
use crate::metrics;
use crate::store::AnyStore;

/// The most limits one request may name.
pub const MAX_LIMITS_PER_REQUEST: usize = 16;
/// The most key parts one request may carry.
pub const MAX_KEY_PARTS: usize = 16;
/// The longest key part value, in bytes.
pub const MAX_KEY_VALUE: usize = 1024;

/// Named limits over the shared store, and the Envoy rules over them.
pub struct Limits {
    limiter: Arc<Limiter<AnyStore>>,
    configs: Vec<LimitConfig>,
    shadow: HashSet<Arc<str>>,
    envoy: Arc<Snapshot<AnyStore>>,
}

/// Why a limit set cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum LimitsError {
    /// The limiter refused the limits (two share a name).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// An `[envoy]` rule does not fit the limits.
    #[error(transparent)]
    Envoy(#[from] RulesError),
}

/// A validated request: names in the caller's order, key parts, cost.
#[derive(Debug)]
pub struct Asked<'a> {
    names: Vec<&'a str>,
    key: Vec<(&'a str, &'a str)>,
    cost: u64,
}

/// What the limits say about a request.
#[derive(Debug)]
pub struct Outcome {
    /// The enforced limits' verdict (`None` when only shadow limits were named).
    pub enforced: Option<Verdict>,
    /// Each named limit's decision, in the caller's order, with whether it is a shadow limit.
    pub decisions: Vec<(LimitDecision, bool)>,
}

impl Outcome {
    /// Whether the request passes (shadow limits never refuse).
    pub fn is_allowed(&self) -> bool {
        self.enforced.as_ref().is_none_or(Verdict::is_allowed)
    }
}

impl Limits {
    /// Builds the limiter for `configs` over `store`, and compiles the Envoy `rules` over it.
    ///
    /// A rule whose limit is a shadow limit is a shadow rule (a shadow limit never refuses,
    /// whichever API asks).
    ///
    /// # Errors
    /// [`LimitsError`] if two limits share a name or a rule does not fit the limits (the
    /// config loader refuses both first).
    pub fn build(
        configs: Vec<LimitConfig>,
        rules: &EnvoyRules,
        store: AnyStore,
        namespace: Namespace,
        clock: Option<impl Clock>,
    ) -> Result<Limits, LimitsError> {
        let mut builder = Limiter::builder(store)
            .namespace(namespace)
            .limits(configs.iter().map(|c| c.limit.clone()));
        if let Some(clock) = clock {
            builder = builder.clock(clock);
        }
        let shadow: HashSet<Arc<str>> = configs
            .iter()
            .filter(|c| c.shadow)
            .map(|c| c.limit.name_arc().clone())
            .collect();
        let limiter = Arc::new(builder.build()?);
        let mut rules = rules.clone();
        for rule in &mut rules.rules {
            rule.shadow |= shadow.contains(rule.limit.as_str());
        }
        let envoy = Arc::new(Snapshot::new(&rules, Arc::clone(&limiter))?);
        Ok(Limits {
            limiter,
            configs,
            shadow,
            envoy,
        })
    }

    /// The Envoy rules compiled over this set's limiter, for the gRPC service.
    pub fn envoy(&self) -> &Arc<Snapshot<AnyStore>> {
        &self.envoy
    }

    /// The limits as configured, in file order.
    pub fn configs(&self) -> &[LimitConfig] {
        &self.configs
    }

    /// Checks everything a check can refuse before any store call: limit names, key parts
    /// (present, bounded), cost (between 1 and every limit's capacity).
    ///
    /// # Errors
    /// The first problem, as a [`CheckError`] or a message.
    pub fn validate<'a>(
        &self,
        names: &'a [String],
        key: &'a [(String, String)],
        cost: u64,
    ) -> Result<Asked<'a>, String> {
        if names.is_empty() {
            return Err(CheckError::NoLimits.to_string());
        }
        if names.len() > MAX_LIMITS_PER_REQUEST {
            return Err(format!(
                "at most {MAX_LIMITS_PER_REQUEST} limits per request"
            ));
        }
        if key.len() > MAX_KEY_PARTS {
            return Err(format!("at most {MAX_KEY_PARTS} key parts per request"));
        }
        if let Some((name, _)) = key.iter().find(|(_, v)| v.len() > MAX_KEY_VALUE) {
            return Err(format!(
                "key part {name:?} is longer than {MAX_KEY_VALUE} bytes"
            ));
        }
        let key: Vec<(&str, &str)> = key.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        if cost == 0 {
            return Err(CheckError::ZeroCost.to_string());
        }
        for (i, name) in names.iter().enumerate() {
            if names[..i].contains(name) {
                return Err(CheckError::DuplicateLimit(name.clone()).to_string());
            }
            let limit = self
                .limiter
                .get(name)
                .ok_or_else(|| CheckError::UnknownLimit(name.clone()).to_string())?;
            self.limiter.key(name, &key).map_err(|e| e.to_string())?;
            if cost > limit.capacity() {
                let err = CheckError::CostExceedsCapacity {
                    limit: name.clone(),
                    cost,
                    capacity: limit.capacity(),
                };
                return Err(err.to_string());
            }
        }
        Ok(Asked {
            names: names.iter().map(String::as_str).collect(),
            key,
            cost,
        })
    }

    /// Checks and consumes: the enforced limits all or nothing, then each shadow limit.
    ///
    /// # Errors
    /// Only if validation and the limiter disagree (a bug); store failures become decisions.
    pub async fn check(&self, asked: &Asked<'_>) -> Result<Outcome, CheckError> {
        let (shadow, enforced): (Vec<&str>, Vec<&str>) =
            asked.names.iter().partition(|n| self.shadow.contains(**n));
        let enforced = match enforced.is_empty() {
            true => None,
            false => Some(
                self.limiter
                    .check_all(&enforced, &asked.key, asked.cost)
                    .await?,
            ),
        };
        let mut shadow_decisions = Vec::with_capacity(shadow.len());
        if enforced.as_ref().is_none_or(Verdict::is_allowed) {
            for name in shadow {
                let verdict = self
                    .limiter
                    .check_all(&[name], &asked.key, asked.cost)
                    .await?;
                if !verdict.is_allowed() {
                    metrics::shadow_denied(name);
                }
                shadow_decisions.extend(verdict.decisions().iter().cloned());
            }
        } else if !shadow.is_empty() {
            let verdict = self.limiter.peek(&shadow, &asked.key, asked.cost).await?;
            shadow_decisions.extend(verdict.decisions().iter().cloned());
        }
        Ok(self.outcome(asked, enforced, shadow_decisions))
    }

    /// Answers as [`Limits::check`] would, consuming nothing.
    ///
    /// # Errors
    /// As [`Limits::check`].
    pub async fn peek(&self, asked: &Asked<'_>) -> Result<Outcome, CheckError> {
        let (shadow, enforced): (Vec<&str>, Vec<&str>) =
            asked.names.iter().partition(|n| self.shadow.contains(**n));
        let enforced = match enforced.is_empty() {
            true => None,
            false => Some(self.limiter.peek(&enforced, &asked.key, asked.cost).await?),
        };
        let shadow = match shadow.is_empty() {
            true => Vec::new(),
            false => self
                .limiter
                .peek(&shadow, &asked.key, asked.cost)
                .await?
                .decisions()
                .to_vec(),
        };
        Ok(self.outcome(asked, enforced, shadow))
    }

    /// Forgets the key's state for every named limit.
    ///
    /// # Errors
    /// [`CheckError::Store`] when the store fails.
    pub async fn reset(&self, asked: &Asked<'_>) -> Result<(), CheckError> {
        self.limiter.reset(&asked.names, &asked.key).await
    }

    /// Lists decisions in the caller's order.
    fn outcome(
        &self,
        asked: &Asked<'_>,
        enforced: Option<Verdict>,
        shadow: Vec<LimitDecision>,
    ) -> Outcome {
        let mut all: Vec<LimitDecision> = enforced
            .iter()
            .flat_map(|v| v.decisions().iter().cloned())
            .collect();
        all.extend(shadow);
        let decisions = asked
            .names
            .iter()
            .filter_map(|name| {
                let d = all.iter().find(|d| &*d.limit == *name)?;
                Some((d.clone(), self.shadow.contains(*name)))
            })
            .collect();
        Outcome {
            enforced,
            decisions,
        }
    }
}

impl fmt::Debug for Limits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limits")
            .field("limiter", &self.limiter)
            .field("shadow", &self.shadow)
            .field("envoy", &self.envoy)
            .finish()
    }
}
