//! Test harness for tollgate: the store conformance suite, written once and run against
//! every store; spawned Redis servers and clusters; a store that fails on demand
//! ([`FailingStore`]); and the Python gRPC client of the Envoy rate limit service
//! ([`python`]).

pub mod conformance;
mod failing_store;
mod fixture;
pub mod python;
mod redis_cluster;
mod redis_server;

pub use failing_store::FailingStore;
pub use fixture::Fixture;
pub use redis_cluster::{CLUSTER_TIMEOUT, RedisCluster};
pub use redis_server::{RedisServer, START_TIMEOUT};
