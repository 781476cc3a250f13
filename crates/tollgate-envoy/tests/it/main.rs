//! Integration tests: a tonic client against the service on `127.0.0.1:0` (memory store,
//! FakeClock-driven limiter), and an independent Python `grpcio` client.

mod config;
mod dynamic_metadata;
mod overrides;
mod python;
mod readme_examples;
mod reference_answers;
mod rls;
mod support;
mod yaml;
mod yaml_rls;
