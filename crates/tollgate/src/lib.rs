//! # tollgate
//!
//! Distributed rate limiting with exact algorithms. A [`Limiter`] holds named [`Limit`]s
//! (an [`Algorithm`] applied to a [`Quota`], keyed by named parts, with an
//! [`OnStoreError`] policy) over a [`Store`]: the in-process [`MemoryStore`] here, or Redis and
//! Redis Cluster in `tollgate-redis`, so that every instance of a service sees one limit.
//!
//! The crate is pure: no async runtime, no network. Algorithms are functions of
//! `(state, now, cost)` in [`rules`]; time is always passed in (see [`Clock`]).
//!
//! ```
//! use tollgate::{Algorithm, Limit, Limiter, MemoryStore, OnStoreError, Outcome, Quota};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let rt = tokio::runtime::Builder::new_current_thread().build()?;
//! # rt.block_on(async {
//! let limiter = Limiter::builder(MemoryStore::new())
//!     .limit(
//!         Limit::new("api", Algorithm::SlidingLog, Quota::per_minute(100)?)?
//!             .keyed_by(["user"])?
//!             .on_store_error(OnStoreError::Local),
//!     )
//!     .build()?;
//! let verdict = limiter.check("api", &[("user", "42")]).await?;
//! match verdict.outcome() {
//!     Outcome::Allowed => assert_eq!(verdict.decision().remaining, 99),
//!     Outcome::Limited { retry_after } => println!("429, retry in {retry_after:?}"),
//!     Outcome::Unavailable { error, .. } => println!("503, the store failed: {error:?}"),
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(()) })
//! # }
//! ```
//!
//! ## How a check goes
//! [`Limiter::prepare`] builds the [`Request`] (keys built and everything validated once,
//! [`CheckError`] otherwise), [`Limiter::decide`] runs it as an [`Op::Check`] or
//! [`Op::Peek`] in one store call, and the [`Verdict`] holds one [`LimitDecision`] per limit.
//! `check`, `check_n`, `check_all` and `check_all_n` do both steps for the common cases;
//! [`Limiter::prepare_with`] prepares entries built per call ([`Ask`]: a cost, a shadow flag
//! or a [`Need`] per entry, a limit made for this request), keyed and validated the same way.
//!
//! ## What a refusal is
//! Each [`Decision`] carries an [`Admission`]: [`Admission::Allowed`], or
//! [`Admission::Refused`] with a [`NotUntil`] that knows its wait, so "allowed, retry in 2 s"
//! cannot be written. What a client is shown — a shadow limit's refusal as an admission
//! ([`LimitDecision::shown_allowed`]), several refusals merged ([`longest_refusal`]), the
//! limit that speaks for the verdict ([`Verdict::decisive`], [`Verdict::shown`]), the header
//! values ([`wire`]) — is decided here, once, for every face.
//!
//! ## How a store failure looks to a caller
//! Never as an `Err`: a check always gets a verdict. When the store fails (Redis down, a
//! timeout, an open circuit breaker, a full memory store), each limit's [`OnStoreError`]
//! policy decides. [`Verdict::outcome`] then says [`Outcome::Unavailable`] when a `deny`
//! policy refuses (answer 503, not 429: the client did nothing wrong), and
//! [`Verdict::store_error`] names the failure when an `allow` or `local` policy let the
//! request through. Failures are also counted (`tollgate_store_errors_total{kind}`) and logged
//! at most once a second.
//!
//! ## One store type at run time
//! [`Store`] is generic for speed; [`BoxStore`] erases it when the store is chosen at run
//! time (the service's config, the tower layer, the Envoy service all use it).

mod clock;
pub mod lease;
mod limit;
mod limiter;
mod log_throttle;
mod pacing;
mod request;
pub mod rules;
mod store;
mod verdict;
pub mod wire;

pub use clock::timestamp::Timestamp;
pub use clock::{Clock, FakeClock, SteadyClock, SystemClock};
pub use lease::lease_grant::LeaseGrant;
pub use lease::lease_take::LeaseTake;
pub use lease::{DEFAULT_LEASE_TTL, Lease};
pub use limit::algorithm::{Algorithm, UnknownAlgorithm};
/// The memory store's pass-through hasher, for the benchmarks' own maps (feature `bench`).
#[cfg(feature = "bench")]
pub use limit::key::{BuildKeyHasher, KeyHasher};
pub use limit::key::{Key, MAX_KEY_VALUE};
pub use limit::limit_error::LimitError;
pub use limit::namespace::Namespace;
pub use limit::quota::Quota;
pub use limit::{Limit, MAX_NAME_LEN, validate_name};
pub use limiter::check_error::CheckError;
pub use limiter::deny_cache::DEFAULT_DENY_CACHE_ENTRIES;
pub use limiter::top_denied::{Span, TOP_CAPACITY, TopKey};
pub use limiter::{CostedLimit, Limiter, LimiterBuilder};
pub use log_throttle::LogThrottle;
pub use pacing::reservation::Reservation;
pub use pacing::settle_error::SettleError;
pub use pacing::{Pace, Paced, Slot};
pub use request::ask::Ask;
pub use request::op::Op;
pub use request::single_request::SingleRequest;
pub use request::{Entry, Need, Request};
pub use store::on_store_error::OnStoreError;
pub use store::store_error::{BoxError, StoreError, StoreErrorKind};
pub use store::{BoxStore, DEFAULT_MAX_KEYS, MemoryStore, MemoryStoreBuilder, Store};
pub use verdict::decision::{Admission, Decision, NotUntil};
pub use verdict::decisions::Decisions;
pub use verdict::outcome::Outcome;
pub use verdict::status::Status;
pub use verdict::{LimitDecision, Source, Verdict, longest_refusal};
