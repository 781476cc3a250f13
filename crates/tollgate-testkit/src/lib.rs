//! Test harness for tollgate: the store conformance suite, written once and run against
//! every store; spawned Redis servers, clusters (with replicas, failover and live slot
//! moves) and Sentinel groups, plaintext or TLS ([`TlsFiles`]); a store that fails on demand
//! ([`FailingStore`]) and one that counts its calls ([`CountingStore`]); the Python gRPC client of the Envoy rate limit service ([`python`]);
//! and what the benchmarks measure Redis with ([`RedisServer::command_stats`],
//! [`RedisServer::cpu_time`], [`RedisBenchmark`]).

mod awkward_limits;
mod cluster_node;
mod command_stats;
pub mod conformance;
mod counting_store;
mod failing_store;
mod fixture;
mod log_capture;
mod process_cpu_time;
pub mod python;
mod redis_benchmark;
mod redis_cluster;
mod redis_server;
mod resp;
mod rng;
mod sentinel;
mod sentinel_fake;
mod sentinel_group;
mod slot_move;
mod supervisor;
mod tls_files;
mod tls_server;

pub use awkward_limits::awkward_limits;
pub use command_stats::CommandStats;
pub use counting_store::CountingStore;
pub use failing_store::FailingStore;
pub use fixture::Fixture;
pub use log_capture::LogCapture;
pub use process_cpu_time::process_cpu_time;
pub use redis_benchmark::RedisBenchmark;
pub use redis_cluster::{CLUSTER_TIMEOUT, RedisCluster};
pub use redis_server::{RedisServer, START_TIMEOUT};
pub use rng::Rng;
pub use sentinel::Sentinel;
pub use sentinel_fake::FakeSentinel;
pub use sentinel_group::{SENTINEL_TIMEOUT, SentinelGroup};
pub use slot_move::SlotMove;
pub use tls_files::TlsFiles;
pub use tls_server::TlsServer;
