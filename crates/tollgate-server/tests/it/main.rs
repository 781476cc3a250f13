//! Integration tests for the `tollgate` service: the HTTP API in-process (memory and a spawned
//! Redis), bad input, config errors, hot reload, and the real binary end to end.

mod api;
mod bad_input;
mod binary;
mod config;
mod redis;
mod reload;
mod support;
