//! Turning names, key parts and costs into a [`Request`]: every key built once and everything
//! a check can refuse found once, as a typed [`CheckError`], before any store call. The one
//! way in, for configured limits and for limits built per request ([`Limiter::prepare_with`]).

use smallvec::SmallVec;

use super::{CostedLimit, KeyedLimit, Limiter};
use crate::request::ask::Asked;
use crate::{Ask, CheckError, Entry, Key, Limit, MAX_KEY_VALUE, Request, Store};

impl<S: Store> Limiter<S> {
    /// Prepares a check of `cost` units against `limits` for `key`: every key built once,
    /// everything a check can refuse validated once, before any store call. The request can
    /// then be decided as a check or a peek ([`Limiter::decide`]) or reset
    /// ([`Limiter::reset`]).
    ///
    /// ```
    /// use tollgate::{Algorithm, Limit, Limiter, MemoryStore, Op, Outcome, Quota};
    ///
    /// # tokio_test();
    /// # fn tokio_test() { let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// # rt.block_on(async {
    /// let limiter = Limiter::builder(MemoryStore::new())
    ///     .limit(Limit::new("api", Algorithm::SlidingLog, Quota::per_minute(10)?)?.keyed_by(["user"])?)
    ///     .build()?;
    /// let request = limiter.prepare(&["api"], &[("user", "42")], 4)?;
    /// assert_eq!(limiter.decide(&request, Op::Peek).await.decision().remaining, 10);
    /// assert_eq!(limiter.decide(&request, Op::Check).await.outcome(), Outcome::Allowed);
    /// assert_eq!(limiter.decide(&request, Op::Peek).await.decision().remaining, 6);
    /// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap() }
    /// ```
    ///
    /// # Errors
    /// [`CheckError`]: unknown limit, missing key part, key part too long, no limit, a limit
    /// named twice, a cost of 0 or above an enforced limit's capacity (above a shadow
    /// limit's, the request is prepared: that limit would refuse it, and is counted so).
    pub fn prepare<V: AsRef<[u8]>>(
        &self,
        limits: &[&str],
        key: &[(&str, V)],
        cost: u64,
    ) -> Result<Request<'_>, CheckError> {
        let mut entries: SmallVec<[Entry<'_>; 2]> = SmallVec::new();
        for &name in limits {
            entries.push(self.entry(name, key)?);
        }
        Request::new(entries, cost)
    }

    /// Prepares a check of `cost` units against several (limit, key) pairs, each with its own
    /// key parts, decided all or nothing in one store call. One limit may appear with
    /// different keys (an Envoy request limiting two clients at once).
    ///
    /// # Errors
    /// As [`Limiter::prepare`].
    pub fn prepare_keyed<V: AsRef<[u8]>>(
        &self,
        items: &[KeyedLimit<'_, V>],
        cost: u64,
    ) -> Result<Request<'_>, CheckError> {
        let mut entries: SmallVec<[Entry<'_>; 2]> = SmallVec::new();
        for &(name, key) in items {
            entries.push(self.entry(name, key)?);
        }
        Request::new(entries, cost)
    }

    /// Prepares a check of several (limit, key) pairs, each with its own key parts and its
    /// own cost, decided all or nothing in one store call (an Envoy request whose
    /// descriptors ask different `hits_addend`s).
    ///
    /// # Errors
    /// As [`Limiter::prepare`], for each entry's cost.
    pub fn prepare_keyed_costs<V: AsRef<[u8]>>(
        &self,
        items: &[CostedLimit<'_, V>],
    ) -> Result<Request<'_>, CheckError> {
        let mut entries: SmallVec<[Entry<'_>; 2]> = SmallVec::new();
        for &(name, key, cost) in items {
            entries.push(self.entry(name, key)?.with_cost(cost));
        }
        Request::with_costs(entries)
    }

    /// Prepares a check of entries built for this call ([`Ask`]): each a limit of the
    /// limiter or one made for this request, with its key parts, its own cost, a shadow flag
    /// and a [`Need`](crate::Need). Keys are built and everything is validated as by
    /// [`Limiter::prepare`]: the one way in for requests that are more than names and a cost
    /// (the Envoy face's rules in shadow mode, quota descriptors, per-request `limit`
    /// overrides).
    ///
    /// # Errors
    /// As [`Limiter::prepare`], for each entry; for a limit keyed by whatever it is given,
    /// [`CheckError::KeyPartTooLong`] also for a part *name* above
    /// [`MAX_KEY_VALUE`](crate::MAX_KEY_VALUE) bytes (the name is the caller's too).
    pub fn prepare_with<'l, 'k, V: AsRef<[u8]> + 'k>(
        &'l self,
        asks: impl IntoIterator<Item = Ask<'l, 'k, V>>,
    ) -> Result<Request<'l>, CheckError> {
        let mut entries: SmallVec<[Entry<'l>; 2]> = SmallVec::new();
        for ask in asks {
            let limit = match ask.limit {
                Asked::Named(name) => self.named(name)?,
                Asked::Own(limit) => limit,
            };
            let mut entry = self.entry_for(limit, ask.key)?.with_cost(ask.cost);
            entry.shadow |= ask.shadow;
            entry.need = ask.need;
            entries.push(entry);
        }
        Request::with_costs(entries)
    }

    /// The key `limit` uses for `key` (for operators inspecting Redis).
    ///
    /// # Errors
    /// [`CheckError::UnknownLimit`], [`CheckError::MissingKeyPart`] or
    /// [`CheckError::KeyPartTooLong`].
    pub fn key<V: AsRef<[u8]>>(&self, limit: &str, key: &[(&str, V)]) -> Result<Key, CheckError> {
        self.entry(limit, key).map(|e| e.key)
    }

    /// The entry for limit `name` and the parts of `key` it is keyed by: the one place a
    /// key is built from a caller's parts.
    fn entry<'l, V: AsRef<[u8]>>(
        &'l self,
        name: &str,
        key: &[(&str, V)],
    ) -> Result<Entry<'l>, CheckError> {
        self.entry_for(self.named(name)?, key)
    }

    /// The limit named `name`.
    fn named(&self, name: &str) -> Result<&Limit, CheckError> {
        self.limits
            .get(name)
            .ok_or_else(|| CheckError::UnknownLimit(name.to_owned()))
    }

    /// The entry for `limit` (the limiter's or one made for a request) and the parts of
    /// `key` it is keyed by.
    fn entry_for<'l, V: AsRef<[u8]>>(
        &self,
        limit: &'l Limit,
        key: &[(&str, V)],
    ) -> Result<Entry<'l>, CheckError> {
        let mut parts: SmallVec<[(&str, &[u8]); 4]> = SmallVec::new();
        match limit.key_parts() {
            Some(names) => {
                for part in names {
                    let value = key.iter().find(|(n, _)| *n == &**part).ok_or_else(|| {
                        CheckError::MissingKeyPart {
                            limit: limit.name().to_owned(),
                            part: part.to_string(),
                        }
                    })?;
                    parts.push((part, value.1.as_ref()));
                }
            }
            None => {
                // Keyed by whatever it is given: the names are the caller's too.
                if let Some((name, _)) = key.iter().find(|(n, _)| n.len() > MAX_KEY_VALUE) {
                    return Err(CheckError::KeyPartTooLong {
                        part: name.chars().take(32).collect(),
                        max: MAX_KEY_VALUE,
                    });
                }
                parts.extend(key.iter().map(|(n, v)| (*n, v.as_ref())));
                // In name order: the parts are named, and `[("a", …), ("b", …)]` and
                // `[("b", …), ("a", …)]` are one caller (two keys, each with half the
                // quota, when they were kept in the order given). Stable: a name given twice
                // keeps its values' order.
                parts.sort_by(|a, b| a.0.cmp(b.0));
            }
        }
        if let Some((part, _)) = parts.iter().find(|(_, v)| v.len() > MAX_KEY_VALUE) {
            return Err(CheckError::KeyPartTooLong {
                part: (*part).to_owned(),
                max: MAX_KEY_VALUE,
            });
        }
        Ok(Entry::new(limit, Key::new(&self.namespace, limit, &parts)))
    }
}
