//! Test harness for tollgate: the store conformance suite, written once and run against
//! every store, and (with the Redis issue) spawned Redis servers and clusters; and the
//! Python gRPC client of the Envoy rate limit service ([`python`]).

pub mod conformance;
mod fixture;
pub mod python;
mod redis_cluster;
mod redis_server;

pub use fixture::Fixture;
pub use redis_cluster::{CLUSTER_TIMEOUT, RedisCluster};
pub use redis_server::{RedisServer, START_TIMEOUT};
