//! The command line (`tollgate serve`, `tollgate check-config`, `tollgate bench`) and the
//! logging set-up of the binary.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::bench::BenchOptions;
use crate::duration;

/// A distributed rate limiter as a service.
#[derive(Debug, Parser)]
#[command(name = "tollgate", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the HTTP API, and the Envoy rate limit service when `server.grpc` is set
    /// (memory store unless the config names Redis).
    Serve {
        /// The config file (TOML); watched and reloaded on change or SIGHUP.
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Validate a config file without serving; exits non-zero with the problem.
    CheckConfig {
        /// The config file (TOML).
        file: PathBuf,
    },
    /// Drive a running service's POST /v1/check and report decisions/s and latency.
    Bench(BenchArgs),
}

/// `tollgate bench` options.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The service's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Connections, each with one request in flight.
    #[arg(long, short, default_value_t = 32)]
    concurrency: usize,
    /// How long to run, e.g. "10s".
    #[arg(long, short, default_value = "10s", value_parser = duration::parse)]
    duration: Duration,
    /// The limit to check (default: the first one listed).
    #[arg(long, short)]
    limit: Option<String>,
    /// Distinct key values to cycle through.
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
}

impl From<BenchArgs> for BenchOptions {
    fn from(a: BenchArgs) -> BenchOptions {
        BenchOptions {
            url: a.url,
            concurrency: a.concurrency,
            duration: a.duration,
            limit: a.limit,
            keys: a.keys,
        }
    }
}

/// Logs to stderr (colours only on a terminal), filtered by `RUST_LOG`, default `info` for
/// tollgate's crates.
pub fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                "tollgate=info,tollgate_server=info,tollgate_redis=info,tollgate_envoy=info".into()
            }),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}
