//! Test harness for tollgate: the store conformance suite, written once and run against
//! every store, and (with the Redis issue) spawned Redis servers and clusters.

pub mod conformance;
mod fixture;

pub use fixture::Fixture;
