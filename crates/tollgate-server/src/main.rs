//! The `tollgate` binary. It only wires things up: parse the command line, start tracing,
//! load the config, bind, and hand over to the library ([`tollgate_server::server`], and
//! `tollgate_load` for `tollgate bench`).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser as _;
use tollgate_server::cli::{self, Cli, Command};
use tollgate_server::config::{Config, ConfigError, Overrides};
use tollgate_server::server::{
    DEFAULT_WATCH_INTERVAL, Server, bind, hangup_survived, report_panics, shutdown_signal,
};

/// mimalloc rather than the system's allocator. The service allocates and frees a few small
/// buffers per request, often on another worker thread than the one that allocated them, and
/// glibc's malloc then makes the threads queue on its arena locks: a `futex` call per request on
/// the everyday path, and a fifth of the service's CPU (docs/benchmarks.md, "Allocator").
/// The library crates leave the choice to the binary that links them, as they should.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = match runtime.block_on(run(Cli::parse())) {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that stopped reading (`tollgate bench | head -1`) ends the output, as it
        // ends any command-line tool's: quietly, not as a failure.
        Err(e) if cli::OutputError::closed_by_reader(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", report(&e));
            ExitCode::FAILURE
        }
    };
    // Dropping a runtime waits for every blocking task to end: a config reload still parsing
    // (on the blocking pool) would hold the exit past `shutdown_timeout`. The drain is over
    // when `run` returns; whatever is left is abandoned.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    code
}

/// The error and its causes on one line; a [`ConfigError`]'s message already includes its
/// cause (file, field and reason), so it is printed alone.
fn report(e: &anyhow::Error) -> String {
    match e.downcast_ref::<ConfigError>() {
        Some(config) => config.to_string(),
        None => format!("{e:#}"),
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    cli::init_tracing();
    let overrides = Overrides::from_env();
    match cli.command {
        Command::Serve { config } => serve(config, overrides).await,
        Command::CheckConfig { file } => {
            let config = Config::load(&file, &overrides)?;
            // Every check runs before anything is printed: "ok" means the whole file passed
            // (docs/service.md: exit 0, or exit 1 with the problem on stderr).
            let tls_expires = match &config.server.tls {
                Some(tls) => Some((tls, tollgate_server::tls::check(tls)?)),
                None => None,
            };
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "{}: ok ({} limits, {} envoy rules, {} store)",
                config.origin,
                config.limits.len(),
                config.envoy.rules.len(),
                config.store.backend.name()
            )
            .map_err(cli::OutputError)?;
            if let Some((tls, expires)) = tls_expires {
                writeln!(
                    out,
                    "{}: certificate ok, expires {}",
                    tls.cert.display(),
                    tollgate_server::tls::format_time(expires)
                )
                .map_err(cli::OutputError)?;
            }
            write!(out, "{}", cli::imported_table(&config)).map_err(cli::OutputError)?;
            Ok(())
        }
        // The report is printed either way; a run that measured nothing (no decision, or
        // more than 1 % of calls failed) exits 1 with the reason (`Report::verdict`).
        #[cfg(feature = "load")]
        Command::Bench(args) => {
            args.run().await?.verdict()?;
            Ok(())
        }
        Command::Replay(args) => args.run().await,
        Command::Simulate(args) => args.run().await,
    }
}

/// `tollgate serve`: the file (or the defaults), bound, served until SIGINT or SIGTERM,
/// reloaded from the file when there is one. The gRPC listener is bound by the server, before
/// the store is opened, so a taken port stops start-up with its name too. Every panic is
/// counted and logged ([`report_panics`]).
async fn serve(path: Option<PathBuf>, overrides: Overrides) -> anyhow::Result<()> {
    // First: a SIGHUP from here on (while the file is read, the port bound, the store
    // opened) must not terminate the process.
    let _hangup = hangup_survived();
    report_panics();
    let config = match &path {
        Some(path) => Config::load(path, &overrides)?,
        None => Config::without_file(&overrides)?,
    };
    let listener = bind(&config.server.http, config.server.unix_mode)
        .with_context(|| format!("cannot listen on {} (server.http)", config.server.http))?;
    let mut server = Server::new(config);
    if let Some(path) = path {
        server = server.watch(path, overrides, DEFAULT_WATCH_INTERVAL);
    }
    server.run(listener, shutdown_signal()).await?;
    Ok(())
}
