//! One entry of a request built per call, for [`crate::Limiter::prepare_with`].
//!
//! Most faces name configured limits and give one cost (`Limiter::prepare`). Some build a
//! request entry by entry: a cost per entry (Envoy's per-descriptor `hits_addend`), a rule
//! in shadow mode over an enforced limit, an entry whose refusal the request does not need
//! on its own (Envoy's quota mode), or a limit made for this one request (an Envoy
//! descriptor's `limit` override). An `Ask` says all of that; the limiter still builds every
//! key and validates every entry, so no face builds keys or bypasses a check.

use crate::{Limit, Need};

/// Which limit an [`Ask`] is for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Asked<'l, 'k> {
    /// A limit of the limiter, by name.
    Named(&'k str),
    /// A limit made for this request.
    Own(&'l Limit),
}

/// One entry of [`crate::Limiter::prepare_with`]: a limit, the key parts it takes its key
/// from, a cost (default 1), a shadow flag and a [`Need`] (default [`Need::Must`]).
///
/// ```
/// use tollgate::{Algorithm, Ask, Limit, Limiter, MemoryStore, Need, Op, Outcome, Quota};
///
/// # tokio_test();
/// # fn tokio_test() { let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// # rt.block_on(async {
/// let limiter = Limiter::builder(MemoryStore::new())
///     .limit(Limit::new("api", Algorithm::Gcra, Quota::per_minute(10)?)?.keyed_by(["user"])?)
///     .build()?;
/// // A limit made for this request only (say, a rate the caller asked for).
/// let asked = Limit::new("per_call", Algorithm::FixedWindow, Quota::per_minute(2)?)?;
/// let key = [("user", "42")];
/// let request = limiter.prepare_with([
///     Ask::named("api", &key).cost(3),
///     Ask::limit(&asked, &key).shadow(true),
/// ])?;
/// let verdict = limiter.decide(&request, Op::Check).await;
/// assert_eq!(verdict.outcome(), Outcome::Allowed);
/// assert_eq!(verdict.decisions()[0].decision.remaining, 7);
/// assert!(verdict.decisions()[1].shadow);
/// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap() }
/// ```
#[derive(Debug, Clone)]
pub struct Ask<'l, 'k, V> {
    pub(crate) limit: Asked<'l, 'k>,
    pub(crate) key: &'k [(&'k str, V)],
    pub(crate) cost: u64,
    pub(crate) shadow: bool,
    pub(crate) need: Need,
}

impl<'l, 'k, V> Ask<'l, 'k, V> {
    /// The limiter's limit `name`, keyed by the parts of `key` it is keyed by.
    pub fn named(name: &'k str, key: &'k [(&'k str, V)]) -> Ask<'l, 'k, V> {
        Ask::of(Asked::Named(name), key)
    }

    /// `limit`, made for this request (not one of the limiter's), keyed in the limiter's
    /// namespace by the parts of `key` it is keyed by (all of them for a limit keyed by
    /// whatever it is given). Its key includes its name: give it a name of its own, apart
    /// from the limiter's limits.
    pub fn limit(limit: &'l Limit, key: &'k [(&'k str, V)]) -> Ask<'l, 'k, V> {
        Ask::of(Asked::Own(limit), key)
    }

    fn of(limit: Asked<'l, 'k>, key: &'k [(&'k str, V)]) -> Ask<'l, 'k, V> {
        Ask {
            limit,
            key,
            cost: 1,
            shadow: false,
            need: Need::Must,
        }
    }

    /// Asks `cost` units (validated as every cost: at least 1, at most the limit's
    /// capacity).
    #[must_use]
    pub fn cost(mut self, cost: u64) -> Ask<'l, 'k, V> {
        self.cost = cost;
        self
    }

    /// Decides this entry in shadow mode when `shadow` (a rule in shadow mode over an
    /// enforced limit). A shadow limit stays a shadow entry whatever this says.
    #[must_use]
    pub fn shadow(mut self, shadow: bool) -> Ask<'l, 'k, V> {
        self.shadow = shadow;
        self
    }

    /// What the request needs of this entry (see [`Need`]).
    #[must_use]
    pub fn need(mut self, need: Need) -> Ask<'l, 'k, V> {
        self.need = need;
        self
    }
}
