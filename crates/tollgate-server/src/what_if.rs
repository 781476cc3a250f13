//! `tollgate replay` and `tollgate simulate`: the command line's shell over
//! [`tollgate_replay`] (what a limit would do, before it is deployed).

use std::fs::File;
use std::io::{BufReader, IsTerminal as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use tollgate::{Algorithm, Limit};
use tollgate_replay::{KeyMapping, LogFormat, LogOptions, Report, Scenario, SimOptions};

use crate::config::{Config, Overrides};
use crate::duration;

/// `tollgate replay` options.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The access log (combined/common log format, JSON lines, or CSV with a header).
    log: PathBuf,
    /// The config whose limits are replayed (`[[limits]]` of a tollgate.toml).
    #[arg(long, short)]
    config: PathBuf,
    /// Which log field fills which key part: `part=$field` (or `part=text`, a constant);
    /// repeat for each part. Combined-format fields: remote_addr, remote_user, time_local,
    /// request, method, path, protocol, status, body_bytes_sent, http_referer,
    /// http_user_agent.
    #[arg(long = "key", short, value_name = "PART=$FIELD")]
    keys: Vec<String>,
    /// The log's format [default: detected from its first line].
    #[arg(long)]
    format: Option<LogFormat>,
    /// The field holding each line's time (JSON, CSV) [default: time].
    #[arg(long)]
    time_field: Option<String>,
    /// Also decide every request on this Redis, with the log's time passed to the scripts,
    /// and report where its answers differ from the memory store's (a scratch server: keys
    /// go under a prefix of their own and expire).
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// Replay only these limits (repeatable) [default: every limit of the config].
    #[arg(long)]
    limit: Vec<String>,
    /// Write an HTML report with SVG charts to DIR/index.html.
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
}

/// `tollgate simulate` options.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// steady, burst-at-edge, bots, retry-storm, concurrent or immortal-key.
    scenario: Scenario,
    /// The algorithms to run side by side [default: all five].
    #[arg(long, value_delimiter = ',')]
    algorithms: Vec<Algorithm>,
    /// Units per period for every algorithm.
    #[arg(long, default_value_t = 100)]
    limit: u64,
    /// The period, e.g. "1m".
    #[arg(long, default_value = "1m", value_parser = duration::parse)]
    period: Duration,
    /// Simulate the limits of this config instead of --algorithms/--limit/--period.
    #[arg(long, short, conflicts_with = "algorithms")]
    config: Option<PathBuf>,
    /// steady: requests per second [default: 1.5× the limit's rate].
    #[arg(long)]
    rate: Option<f64>,
    /// How many periods to simulate.
    #[arg(long, default_value_t = 4)]
    periods: u32,
    /// concurrent: workers; retry-storm: clients.
    #[arg(long, default_value_t = 50)]
    workers: usize,
    /// A Redis to run on for real: `concurrent` runs there too, `immortal-key` needs it
    /// (use a scratch server: the simulation writes keys under a prefix of its own).
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// Write an HTML report with SVG charts to DIR/index.html.
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
}

/// The limits of the config at `path` (only those in `only`, when given).
fn config_limits(path: &Path, only: &[String]) -> anyhow::Result<Vec<Limit>> {
    let config = Config::load(path, &Overrides::default())?;
    for name in only {
        if !config.limits.iter().any(|l| l.limit.name() == name) {
            anyhow::bail!("limit {name:?} is not in {}", config.origin);
        }
    }
    Ok(config
        .limits
        .into_iter()
        .filter(|l| only.is_empty() || only.iter().any(|n| n == l.limit.name()))
        .map(|l| l.limit.shadow(l.shadow))
        .collect())
}

/// Prints `report`'s summary, and writes its page when asked.
fn publish(report: &Report, dir: Option<&PathBuf>) -> anyhow::Result<()> {
    print!("{}", report.summary());
    if let Some(dir) = dir {
        let path = report.write_html(dir)?;
        println!("\nreport: {}", path.display());
    }
    Ok(())
}

impl ReplayArgs {
    /// Replays the log and prints (and writes) the report.
    ///
    /// # Errors
    /// A config, a mapping or a log that cannot be used, before the first line is replayed.
    pub async fn run(self) -> anyhow::Result<()> {
        let limits = config_limits(&self.config, &self.limit)?;
        let redis = match &self.redis {
            Some(url) => Some(
                tollgate_redis::RedisStore::builder(url.as_str())
                    .timeout(Duration::from_secs(5))
                    .build()
                    .await
                    .with_context(|| format!("cannot use Redis at {url}"))?,
            ),
            None => None,
        };
        let mapping = KeyMapping::parse(&self.keys).map_err(anyhow::Error::msg)?;
        let file =
            File::open(&self.log).with_context(|| format!("cannot open {}", self.log.display()))?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(size);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar
        });
        let options = LogOptions {
            format: self.format,
            time_field: self.time_field,
            mapping,
            redis,
        };
        let report = tollgate_replay::replay_log(
            BufReader::with_capacity(1 << 16, file),
            &format!(
                "replay of {} against {}",
                self.log.display(),
                self.config.display()
            ),
            limits,
            &options,
            &mut |bytes| {
                if let Some(bar) = &bar {
                    bar.set_position(bytes);
                }
            },
        )
        .await?;
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
        publish(&report, self.report.as_ref())
    }
}

impl SimulateArgs {
    /// Runs the scenario and prints (and writes) the report.
    ///
    /// # Errors
    /// A config or a quota that cannot be used; `immortal-key` without `--redis`; Redis
    /// failing.
    pub async fn run(self) -> anyhow::Result<()> {
        let mut options = match &self.config {
            Some(path) => SimOptions::limits(config_limits(path, &[])?),
            None => {
                let algorithms = if self.algorithms.is_empty() {
                    tollgate_replay::ALGORITHMS.to_vec()
                } else {
                    self.algorithms
                };
                SimOptions::algorithms(&algorithms, self.limit, self.period)?
            }
        };
        options.rate = self.rate;
        options.periods = self.periods.max(1);
        options.workers = self.workers;
        options.redis = self.redis;
        let report = tollgate_replay::simulate(self.scenario, &options).await?;
        publish(&report, self.report.as_ref())
    }
}
