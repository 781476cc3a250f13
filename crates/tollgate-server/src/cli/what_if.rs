//! `tollgate replay` and `tollgate simulate`: the command line's shell over
//! [`tollgate_replay`] (what a limit would do, before it is deployed).

use std::fs::File;
use std::io::{BufReader, IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use tollgate::{Algorithm, Limit, MemoryStore};
use tollgate_replay::{KeyMapping, LogFormat, LogOptions, Report, Scenario, SimOptions};

use crate::config::{Config, Overrides};
use crate::duration;

/// `tollgate replay` options.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The access log (combined/common log format, JSON lines, CSV with a header, or Envoy's
    /// default access-log format).
    log: PathBuf,
    /// The config whose limits are replayed: a tollgate.toml (its `[[limits]]`, each deciding
    /// every request), or a directory of envoyproxy/ratelimit YAML files (each request's
    /// descriptor, the --key parts in order, decided by the one limit it matches).
    #[arg(long, short)]
    config: PathBuf,
    /// With an Envoy directory: the domain of the requests' descriptors [default: the only
    /// domain].
    #[arg(long)]
    domain: Option<String>,
    /// Which log field fills which key part: `part=$field` (or `part=text`, a constant);
    /// repeat for each part. Combined-format fields: remote_addr, remote_user, time_local,
    /// request, method, path, protocol, status, body_bytes_sent, http_referer,
    /// http_user_agent. Envoy-format fields: start_time, method, path, protocol,
    /// response_code, response_flags, bytes_received, bytes_sent, duration,
    /// upstream_service_time, x_forwarded_for, user_agent, request_id, authority,
    /// upstream_host, client (the first address of x_forwarded_for).
    #[arg(long = "key", short, value_name = "PART=$FIELD")]
    keys: Vec<String>,
    /// The log's format [default: detected from its first 16 lines that are not blank: the
    /// first that is JSON, combined or Envoy decides; else CSV].
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
    /// Also suggest limits for the key of the first limit replayed: per window length (1 s,
    /// 10 s, 1 min, 10 min, 1 h) and algorithm, the smallest candidate that, replayed,
    /// refuses no more than --refuse-share of the keys (the log is read three more times).
    #[arg(long)]
    suggest: bool,
    /// With --suggest: the share of keys a suggested limit may refuse, as a fraction or a
    /// percentage (0.001 or 0.1%).
    #[arg(long, default_value = "0.1%", value_parser = parse_share, value_name = "SHARE")]
    refuse_share: f64,
    /// A key refused at most this many times is collateral (an ordinary client caught by a
    /// burst); more often, an abuser.
    #[arg(long, default_value_t = 5, value_name = "N")]
    collateral_max: u64,
    /// Also replay the first limit at these limits (units per its period), side by side:
    /// e.g. 50,100,200.
    #[arg(long, value_delimiter = ',', value_name = "LIMITS")]
    candidates: Vec<u64>,
}

/// `0.001`, `0.1%`: a share between 0 and 1.
fn parse_share(text: &str) -> Result<f64, String> {
    let (number, scale) = match text.trim().strip_suffix('%') {
        Some(pct) => (pct.trim(), 100.0),
        None => (text.trim(), 1.0),
    };
    let share = number
        .parse::<f64>()
        .map_err(|e| format!("{text:?}: {e}"))?
        / scale;
    if share > 0.0 && share < 1.0 {
        Ok(share)
    } else {
        Err(format!("{text:?}: a share is above 0 and below 1 (100 %)"))
    }
}

/// `tollgate simulate` options.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// steady, burst-at-edge, bots, retry-storm, pacing, concurrent or immortal-key.
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
    /// Simulate the limits of this config (a tollgate.toml, or a directory of
    /// envoyproxy/ratelimit YAML files) instead of --algorithms/--limit/--period.
    #[arg(long, short, conflicts_with = "algorithms")]
    config: Option<PathBuf>,
    /// steady: requests per second [default: 1.5× the limit's rate].
    #[arg(long)]
    rate: Option<f64>,
    /// How many periods to simulate.
    #[arg(long, default_value_t = 4)]
    periods: u32,
    /// concurrent: workers; retry-storm: clients; pacing: workers per instance (4 instances).
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

/// The config at `path`: a tollgate.toml, or a directory of the reference service's YAML
/// files, read as a config of `[envoy] config_dir` alone (its limits generated as the service
/// generates them).
fn load_config(path: &Path) -> anyhow::Result<Config> {
    if path.is_dir() {
        // Named as a file in the directory, so that `config_dir = "."` is the directory.
        let origin = path.join("(envoy directory)");
        let origin = origin.to_string_lossy();
        return Ok(Config::parse(
            "[envoy]\nconfig_dir = \".\"\n",
            &origin,
            &Overrides::default(),
        )?);
    }
    Ok(Config::load(path, &Overrides::default())?)
}

/// The limits of the config at `path` (only those in `only`, when given).
fn config_limits(path: &Path, only: &[String]) -> anyhow::Result<Vec<Limit>> {
    limits_of(&load_config(path)?, only)
}

/// The limits of `config` (only those in `only`, when given).
fn limits_of(config: &Config, only: &[String]) -> anyhow::Result<Vec<Limit>> {
    for name in only {
        if !config.limits.iter().any(|l| l.limit.name() == name) {
            anyhow::bail!("limit {name:?} is not in {}", config.origin);
        }
    }
    Ok(config
        .limits
        .iter()
        .filter(|l| only.is_empty() || only.iter().any(|n| n == l.limit.name()))
        .map(|l| l.limit.clone().shadow(l.shadow))
        .collect())
}

/// An Envoy directory's rules as the service compiles them, to find the one limit (and key)
/// each replayed request's descriptor matches.
struct EnvoyRoute {
    snapshot: tollgate_envoy::Snapshot<MemoryStore>,
    domain: String,
    /// The descriptor's entry keys: the --key parts, in order.
    entries: Vec<String>,
    /// The replayed limits' names, in the replay's order.
    limits: Vec<String>,
}

impl EnvoyRoute {
    /// The rules of `config` (read from an Envoy directory) for requests of `domain`, their
    /// descriptors' entries named by `mapping`'s parts, routed among `limits`.
    fn new(
        config: &Config,
        limits: &[Limit],
        domain: Option<&str>,
        mapping: &KeyMapping,
    ) -> anyhow::Result<EnvoyRoute> {
        // Matching touches no counter: a throwaway store.
        let store = MemoryStore::builder().sweep_interval(None).build();
        let limiter = tollgate::Limiter::builder(store)
            .limits(config.limits.iter().map(|l| l.limit.clone()))
            .build()?;
        let snapshot = tollgate_envoy::Snapshot::new(&config.envoy, Arc::new(limiter))?;
        let domains = snapshot.domains();
        let domain = match (domain, &domains[..]) {
            (Some(d), _) if domains.contains(&d) => d.to_owned(),
            (None, [only]) => (*only).to_owned(),
            (given, _) => anyhow::bail!(
                "{}: {} (its domains: {})",
                Path::new(&config.origin)
                    .parent()
                    .unwrap_or(Path::new(&config.origin))
                    .display(),
                match given {
                    Some(d) => format!("no domain {d:?}"),
                    None => "several domains: choose one with --domain".to_owned(),
                },
                domains.join(", ")
            ),
        };
        Ok(EnvoyRoute {
            entries: mapping.parts().iter().map(|(p, _)| p.to_string()).collect(),
            limits: limits.iter().map(|l| l.name().to_owned()).collect(),
            snapshot,
            domain,
        })
    }

    /// The limit deciding a request of these values (the descriptor's, in order), and its
    /// key; `None` when nothing replayed limits it.
    fn route(&self, values: &[String]) -> Option<(usize, Vec<(String, String)>)> {
        let descriptor: Vec<(&str, &str)> = self
            .entries
            .iter()
            .zip(values)
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let (limit, key) = self.snapshot.limit_for(&self.domain, &descriptor)?;
        let i = self.limits.iter().position(|l| **l == *limit)?;
        Some((i, key))
    }
}

/// Prints `report`'s summary, and writes its page when asked.
fn publish(report: &Report, dir: Option<&PathBuf>) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    write!(out, "{}", report.summary()).map_err(super::OutputError)?;
    if let Some(dir) = dir {
        let path = report.write_html(dir)?;
        writeln!(out, "\nreport: {}", path.display()).map_err(super::OutputError)?;
    }
    Ok(())
}

impl ReplayArgs {
    /// Replays the log and prints (and writes) the report.
    ///
    /// # Errors
    /// A config, a mapping or a log that cannot be used, before the first line is replayed.
    pub async fn run(self) -> anyhow::Result<()> {
        let envoy = self.config.is_dir();
        self.check_against(envoy)?;
        // The keys' timelines (--report) and --suggest read the log again after the replay:
        // refused now for a pipe, rather than lost at the end of the replay.
        let rereads: Vec<&str> = [
            ("--report", self.report.is_some() && !envoy),
            ("--suggest", self.suggest),
        ]
        .into_iter()
        .filter_map(|(option, on)| on.then_some(option))
        .collect();
        if !rereads.is_empty() {
            tollgate_replay::check_rereadable(&self.log, &rereads.join(" and "))?;
        }
        let config = load_config(&self.config)?;
        let mut limits = limits_of(&config, &self.limit)?;
        let candidates = add_candidates(&mut limits, &self.candidates)?;
        let redis = match &self.redis {
            Some(url) => Some(connect_redis(url).await?),
            None => None,
        };
        let mapping = KeyMapping::parse(&self.keys).map_err(anyhow::Error::msg)?;
        let file =
            File::open(&self.log).with_context(|| format!("cannot open {}", self.log.display()))?;
        let bar = progress_bar(file.metadata().map(|m| m.len()).unwrap_or(0));
        let options = LogOptions {
            format: self.format,
            time_field: self.time_field.clone(),
            mapping,
            redis,
        };
        let title = format!(
            "replay of {} against {}",
            self.log.display(),
            self.config.display()
        );
        let mut progress = |bytes| {
            if let Some(bar) = &bar {
                bar.set_position(bytes);
            }
        };
        let reader = BufReader::with_capacity(1 << 16, file);
        let mut report = if envoy {
            let rules =
                EnvoyRoute::new(&config, &limits, self.domain.as_deref(), &options.mapping)?;
            let route = |values: &[String]| rules.route(values);
            tollgate_replay::replay_log_routed(
                reader,
                &format!("{title}, domain {}", rules.domain),
                limits.clone(),
                &options,
                &route,
                &mut progress,
            )
            .await?
        } else {
            tollgate_replay::replay_log(reader, &title, limits.clone(), &options, &mut progress)
                .await?
        };
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
        report.candidates = candidates;
        report.collateral_max = Some(self.collateral_max);
        self.second_reads(&mut report, envoy, &limits, &options)?;
        publish(&report, self.report.as_ref())
    }

    /// Refuses the options that do not go with the config's kind (`envoy`: a directory of
    /// the reference's YAML rather than a `tollgate.toml`).
    fn check_against(&self, envoy: bool) -> anyhow::Result<()> {
        if envoy && self.redis.is_some() {
            anyhow::bail!("--redis compares a tollgate.toml's limits; not an Envoy directory");
        }
        if !envoy && self.domain.is_some() {
            anyhow::bail!("--domain is for an Envoy directory as --config");
        }
        if envoy && (self.suggest || !self.candidates.is_empty()) {
            anyhow::bail!(
                "--suggest and --candidates replay a tollgate.toml's limits; not an Envoy directory"
            );
        }
        Ok(())
    }

    /// What needs the log read again, after the replay: the most refused keys' timelines
    /// (for the HTML report) and the suggestion (`--suggest`).
    fn second_reads(
        &self,
        report: &mut Report,
        envoy: bool,
        limits: &[Limit],
        options: &LogOptions,
    ) -> anyhow::Result<()> {
        let open = || File::open(&self.log).map(|f| BufReader::with_capacity(1 << 16, f));
        if self.report.is_some() && !envoy {
            // The most refused keys' timelines: the log read once more, for those keys only.
            let keys: Vec<Vec<String>> = report
                .limits
                .iter()
                .map(|l| {
                    l.top_denied(tollgate_replay::report::TIMELINE_KEYS)
                        .into_iter()
                        .map(|(k, _)| k.to_owned())
                        .collect()
                })
                .collect();
            report.timelines = tollgate_replay::key_timelines(open()?, limits, options, &keys)?;
        }
        if self.suggest {
            let suggest = tollgate_replay::SuggestOptions {
                refuse_share: self.refuse_share,
                collateral_max: self.collateral_max,
                ..tollgate_replay::SuggestOptions::default()
            };
            report.suggestion = Some(tollgate_replay::suggest(
                &mut || open(),
                &limits[0],
                options,
                &suggest,
            )?);
        }
        Ok(())
    }
}

/// `--candidates`: the first limit's candidate variants appended to `limits`, and which of
/// them the report compares (the first limit and its variants); `None` without candidates.
fn add_candidates(
    limits: &mut Vec<Limit>,
    candidates: &[u64],
) -> anyhow::Result<Option<tollgate_replay::report::CandidateSet>> {
    if candidates.is_empty() {
        return Ok(None);
    }
    let first = limits[0].clone();
    let extra = tollgate_replay::suggest::candidate_limits(&first, candidates)?;
    let set = tollgate_replay::report::CandidateSet {
        of: first.name().to_owned(),
        limits: std::iter::once(0)
            .chain(limits.len()..limits.len() + extra.len())
            .collect(),
    };
    limits.extend(extra);
    Ok(Some(set))
}

/// `--redis`: the store the replay compares against.
async fn connect_redis(url: &str) -> anyhow::Result<tollgate_redis::RedisStore> {
    tollgate_redis::RedisStore::builder(url)
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .with_context(|| format!("cannot use Redis at {url}"))
}

/// A progress bar over `size` bytes of log, on a terminal only.
fn progress_bar(size: u64) -> Option<indicatif::ProgressBar> {
    std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(size);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    })
}

impl SimulateArgs {
    /// Runs the scenario and prints (and writes) the report.
    ///
    /// # Errors
    /// A config or a quota that cannot be used; `immortal-key` without `--redis`; Redis
    /// failing; an expectation of the scenario not met (✗: the report is printed first).
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
        publish(&report, self.report.as_ref())?;
        // A ✗ is a failure: scripts and CI that run a scenario must see it.
        let unmet = report.expectations.iter().filter(|e| !e.met).count();
        if unmet > 0 {
            anyhow::bail!("{unmet} expectation(s) of the scenario not met (✗ above)");
        }
        Ok(())
    }
}
