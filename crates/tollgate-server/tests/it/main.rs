//! Integration tests for the `tollgate` service: the HTTP API in-process (memory and a spawned
//! Redis), bad input, config errors, hot reload, the Envoy gRPC service, the real binary
//! end to end, and what a hostile client can hold (timeouts, connection cap, drain).

mod api;
mod bad_input;
mod binary;
mod config;
mod envoy_health;
mod envoy_one_counter;
mod envoy_quota;
mod envoy_reference;
mod envoy_service_cases;
mod envoy_settings;
mod envoy_shadow_counter;
mod envoy_yaml;
mod grpc;
mod hardening;
mod lease;
mod lease_reset;
mod pacing;
mod prometheus;
mod redis;
mod redis_down;
mod redis_frozen;
mod redis_kinds;
mod reload;
mod status;
mod status_page;
mod strict_http;
mod support;
mod tls;
mod what_if;
