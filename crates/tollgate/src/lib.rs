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
//! use tollgate::{Algorithm, Limit, Limiter, MemoryStore, OnStoreError, Quota};
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
//! assert!(verdict.is_allowed());
//! assert_eq!(verdict.decision().remaining, 99);
//! # Ok::<(), Box<dyn std::error::Error>>(()) })
//! # }
//! ```

mod algorithm;
mod check_error;
mod clock;
mod decision;
mod key;
mod limit;
mod limit_error;
mod limiter;
mod namespace;
mod on_store_error;
mod quota;
mod request;
pub mod rules;
mod single_request;
mod status;
mod store;
mod store_error;
mod timestamp;
mod verdict;

pub use algorithm::{Algorithm, UnknownAlgorithm};
pub use check_error::CheckError;
pub use clock::{Clock, FakeClock, SystemClock};
pub use decision::Decision;
pub use key::{BuildKeyHasher, Key, KeyHasher, MAX_ESCAPED_PART};
pub use limit::{Limit, MAX_BUCKETS, MAX_NAME_LEN};
pub use limit_error::LimitError;
pub use limiter::{KeyedLimit, Limiter, LimiterBuilder, POLICY_RETRY_AFTER};
pub use namespace::Namespace;
pub use on_store_error::OnStoreError;
pub use quota::{MAX_PERIOD, MAX_UNITS, MIN_PERIOD, Quota};
pub use request::{Entry, Request};
pub use single_request::SingleRequest;
pub use status::Status;
pub use store::{
    DEFAULT_MAX_KEYS, DEFAULT_SWEEP_INTERVAL, Decisions, MemoryStore, MemoryStoreBuilder, Store,
};
pub use store_error::{BoxError, StoreError, StoreErrorKind};
pub use timestamp::Timestamp;
pub use verdict::{LimitDecision, Source, Verdict};
