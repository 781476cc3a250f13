//! Integration tests of the Redis store, against a `redis-server` and a three-master Redis
//! Cluster spawned by this binary (one of each, shared by every test; each test uses its own
//! connection and key namespace).

mod acl;
mod breaker;
mod cluster;
mod coalesce;
mod cold_start;
mod common;
mod concurrency;
mod conformance_cluster;
mod conformance_redis;
mod deadlines;
mod differential;
mod differential_clock;
mod dropped_connection;
mod failover;
mod faults;
mod frozen_master;
mod future_size;
mod gcra_rounding;
mod gcra_server_clock;
mod lease;
mod pace_state;
mod pacing_processes;
mod resets;
mod resharding;
mod sentinel;
mod server_errors;
mod server_time;
mod shadow_cost;
mod tls;
