//! The command line (`tollgate serve`, `check-config`, `bench`, `replay`, `simulate`) and the
//! logging set-up of the binary.
//!
//! `tollgate bench` exists with the `load` feature (on by default): its options are parsed
//! here, like the rest of the command line, and run by [`tollgate_load`].

use std::io::IsTerminal as _;
use std::path::PathBuf;
#[cfg(feature = "load")]
use std::time::Duration;

#[cfg(feature = "load")]
use clap::Args;
use clap::{Parser, Subcommand};
#[cfg(feature = "load")]
use tollgate_load::{BenchOptions, GrpcTarget, LoadError, Report};

#[cfg(feature = "load")]
use crate::duration;

pub mod what_if;

/// Standard output refused a command's output. When its reader closed it
/// (`tollgate check-config … | head -1`), the command ends quietly, as any command-line tool
/// does: see [`OutputError::closed_by_reader`].
#[derive(Debug, thiserror::Error)]
#[error("cannot write to standard output")]
pub struct OutputError(#[source] pub std::io::Error);

impl OutputError {
    /// Whether `e` is standard output closed by its reader (a broken pipe on it; one on a
    /// socket stays an error).
    pub fn closed_by_reader(e: &anyhow::Error) -> bool {
        let broken = |io: &std::io::Error| io.kind() == std::io::ErrorKind::BrokenPipe;
        e.chain().any(|cause| {
            if let Some(OutputError(io)) = cause.downcast_ref::<OutputError>() {
                return broken(io);
            }
            #[cfg(feature = "load")]
            if let Some(LoadError::Output(io)) = cause.downcast_ref::<LoadError>() {
                return broken(io);
            }
            false
        })
    }
}

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
    /// Drive a running service's POST /v1/check (or, with --grpc, its Envoy rate limit
    /// service) and report decisions/s and latency. Exits 1, after the report, when the run
    /// made no decision at all, when more than 1 % of its calls failed (other: errors, bad
    /// answers, timeouts, refused connections), or when it ended failing (no decision in its
    /// last 100 ms, or 1 % of it, and calls failed).
    #[cfg(feature = "load")]
    Bench(BenchArgs),
    /// Replay an access log against a config's limits on the log's own clock: what each
    /// limit would have admitted and refused, whom, with which waits.
    Replay(what_if::ReplayArgs),
    /// Run a synthetic workload (or one of the classic experiments) against every algorithm
    /// side by side, with the outcome each should have.
    Simulate(what_if::SimulateArgs),
}

/// `tollgate bench` options.
#[cfg(feature = "load")]
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The service's base URL [default: http://127.0.0.1:8080, with --grpc
    /// http://127.0.0.1:8081].
    #[arg(long)]
    url: Option<String>,
    /// Connections, each with one request in flight.
    #[arg(long, short, default_value_t = 32)]
    concurrency: usize,
    /// How long to run, e.g. "10s".
    #[arg(long, short, default_value = "10s", value_parser = duration::parse)]
    duration: Duration,
    /// How long one call or connect may take before it is given up and counted as other;
    /// calls still in flight this long after the end (2s at most) are abandoned.
    #[arg(long, default_value = "2s", value_parser = duration::parse)]
    timeout: Duration,
    /// The limit to check (default: the first one listed). HTTP only.
    #[arg(long, short, conflicts_with = "grpc")]
    limit: Option<String>,
    /// Distinct key values to cycle through (with --grpc: values of the last descriptor entry,
    /// sent as `<value>-<i>`; 1 sends the descriptor unchanged).
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    /// Drive the Envoy rate limit service (gRPC ShouldRateLimit) instead of POST /v1/check.
    #[arg(long, requires = "domain", requires = "descriptor")]
    grpc: bool,
    /// The request's domain (with --grpc).
    #[arg(long, requires = "grpc")]
    domain: Option<String>,
    /// The descriptor's entries, `key=value[,key=value...]` in order (with --grpc); may be
    /// repeated to add entries.
    #[arg(long, requires = "grpc", value_delimiter = ',', value_parser = parse_entry)]
    descriptor: Vec<(String, String)>,
    /// HTTP/2 connections the --concurrency tasks share, as concurrent streams, the way Envoy
    /// multiplexes its calls (with --grpc; 0 = a connection per task).
    #[arg(long, requires = "grpc", default_value_t = 0)]
    channels: usize,
    /// With an https:// URL (with --grpc): the CA bundle (PEM) the service's certificate
    /// must chain to.
    #[arg(long, requires = "grpc")]
    cacert: Option<PathBuf>,
    /// With an https:// URL: a client certificate (PEM) for a service with tls_client_ca.
    #[arg(long, requires = "cacert", requires = "key")]
    cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, requires = "cert")]
    key: Option<PathBuf>,
}

/// `key=value`, the key not empty.
#[cfg(feature = "load")]
fn parse_entry(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("expected key=value, got {text:?}")),
    }
}

#[cfg(feature = "load")]
impl BenchArgs {
    /// Runs the benchmark these options describe ([`tollgate_load::run`] or
    /// [`tollgate_load::run_grpc`]).
    ///
    /// # Errors
    /// [`LoadError`], as the bench run does.
    pub async fn run(self) -> Result<Report, LoadError> {
        let default_url = if self.grpc {
            "http://127.0.0.1:8081"
        } else {
            "http://127.0.0.1:8080"
        };
        let options = BenchOptions {
            url: self.url.unwrap_or_else(|| default_url.to_owned()),
            concurrency: self.concurrency,
            duration: self.duration,
            limit: self.limit,
            keys: self.keys,
        };
        if self.grpc {
            let target = GrpcTarget {
                domain: self.domain.unwrap_or_default(),
                descriptor: self.descriptor,
                channels: self.channels,
                tls: self.cacert.map(|ca| tollgate_load::ClientTls {
                    ca,
                    identity: self.cert.zip(self.key),
                }),
            };
            tollgate_load::run_grpc_with_timeout(options, target, self.timeout).await
        } else {
            tollgate_load::run_with_timeout(options, self.timeout).await
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

/// `tollgate check-config`'s table of the rules imported from `envoy.config_dir`: one row per
/// descriptor that decides something (domain, descriptor path, limit, rate, flags), empty when
/// nothing is imported.
pub fn imported_table(config: &crate::config::Config) -> String {
    let envoy = &config.envoy;
    let rows: Vec<[String; 5]> = envoy
        .imported
        .walk()
        .into_iter()
        .filter_map(|(domain, d)| {
            let rl = d.rate_limit.as_ref();
            let (limit, rate) = match rl {
                None if d.descriptors.is_empty() => ("-".to_owned(), "whitelisted".to_owned()),
                None => return None,
                Some(rl) if rl.unlimited => ("-".to_owned(), "unlimited".to_owned()),
                Some(rl) => (
                    rl.limit.clone().unwrap_or_else(|| "-".to_owned()),
                    format!(
                        "{}/{}",
                        rl.requests_per_unit,
                        rl.unit.map_or("?", tollgate_envoy::Unit::name)
                    ),
                ),
            };
            let mut flags = Vec::new();
            if d.shadow_mode || envoy.shadow {
                flags.push("shadow".to_owned());
            }
            if d.quota_mode || envoy.quota_mode {
                flags.push("quota".to_owned());
            }
            if d.share_threshold {
                flags.push("shared".to_owned());
            }
            if let Some(rl) = rl {
                flags.extend(rl.replaces.iter().map(|r| format!("replaces={r}")));
            }
            let entry = match &d.value {
                Some(v) => format!("{}={v}", d.key),
                None => d.key.clone(),
            };
            Some([
                domain.name.clone(),
                format!("{} ({entry})", d.path),
                limit,
                rate,
                flags.join(","),
            ])
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let algorithm = envoy
        .algorithm
        .map_or_else(|| "fixed_window".to_owned(), |a| a.to_string());
    let mut out = format!("imported envoy rules (algorithm {algorithm}):\n");
    let header = ["DOMAIN", "DESCRIPTOR", "LIMIT", "RATE", "FLAGS"].map(str::to_owned);
    let mut widths = [0usize; 5];
    for row in std::iter::once(&header).chain(&rows) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::OutputError;
    use std::io::{Error, ErrorKind};

    #[test]
    fn only_a_closed_standard_output_ends_quietly() {
        let closed = anyhow::Error::new(OutputError(Error::from(ErrorKind::BrokenPipe)));
        assert!(OutputError::closed_by_reader(&closed));
        let full = anyhow::Error::new(OutputError(Error::from(ErrorKind::StorageFull)));
        assert!(!OutputError::closed_by_reader(&full));
        // A broken pipe elsewhere (a socket) is an error like any other.
        let socket = anyhow::Error::new(Error::from(ErrorKind::BrokenPipe));
        assert!(!OutputError::closed_by_reader(&socket));
    }

    #[cfg(feature = "load")]
    #[test]
    fn a_bench_report_closed_by_its_reader_ends_quietly() {
        use tollgate_load::LoadError;
        let closed = anyhow::Error::new(LoadError::Output(Error::from(ErrorKind::BrokenPipe)));
        assert!(OutputError::closed_by_reader(&closed));
        let socket = anyhow::Error::new(LoadError::Io(Error::from(ErrorKind::BrokenPipe)));
        assert!(!OutputError::closed_by_reader(&socket));
    }
}
