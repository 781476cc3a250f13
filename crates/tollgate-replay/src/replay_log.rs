//! `tollgate replay`: a log, streamed, through a [`Replayer`], into a [`Report`].

use std::io::BufRead;

use tollgate::{Entry, Limit, Namespace, Op, Request, Store, Timestamp};
use tollgate_redis::RedisStore;

use crate::key_mapping::KeyMapping;
use crate::log_format::LogFormat;
use crate::log_reader::{Event, LogReader};
use crate::replay_error::ReplayError;
use crate::replayer::Replayer;
use crate::report::{Expectation, MALFORMED_SHOWN, Report};

/// How to read a log.
#[derive(Debug, Clone, Default)]
pub struct LogOptions {
    /// Its format; `None`: detected from the first line.
    pub format: Option<LogFormat>,
    /// The field holding each line's time (JSON, CSV; default `time`).
    pub time_field: Option<String>,
    /// Which field fills which key part.
    pub mapping: KeyMapping,
    /// A Redis to decide every request on as well, with the log's time passed to the
    /// scripts (the caller's clock), to show they give the memory store's answers. Keys go
    /// under a prefix of their own (`tollgate-replay-<pid>-<time>`), and expire.
    pub redis: Option<RedisStore>,
}

/// Replays the log `reader` against `limits`; `progress` is called now and then with the
/// bytes read so far. Awaits only with [`LogOptions::redis`].
///
/// # Errors
/// What stops a replay before its first line: an unknown field, a limit keyed by a part no
/// mapping fills, no limit ([`ReplayError`]). Malformed lines do not: they are in the report.
pub async fn replay_log<R: BufRead>(
    reader: R,
    title: &str,
    limits: Vec<Limit>,
    options: &LogOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<Report, ReplayError> {
    replay(reader, title, limits, options, None, progress).await
}

/// Picks, for a request, the one limit that decides it and its key, where a rule set does
/// that rather than every limit deciding every request (an Envoy directory: a descriptor is
/// counted by the limit it matches). Given the event's values in the mapping's order: the
/// index of the limit (in the limits' order) and its key's `(part, value)`s in the limit's
/// key order, or `None` when no limit decides the request.
pub type Route<'a> = &'a dyn Fn(&[String]) -> Option<(usize, Vec<(String, String)>)>;

/// [`replay_log`] where `route` picks the one limit deciding each request (or none); the
/// report says how many requests no limit decided. Without [`LogOptions::redis`].
///
/// # Errors
/// As [`replay_log`]; [`ReplayError::Redis`] when [`LogOptions::redis`] is given.
pub async fn replay_log_routed<R: BufRead>(
    reader: R,
    title: &str,
    limits: Vec<Limit>,
    options: &LogOptions,
    route: Route<'_>,
    progress: &mut dyn FnMut(u64),
) -> Result<Report, ReplayError> {
    if options.redis.is_some() {
        return Err(ReplayError::Redis(
            "a routed replay (an Envoy directory) is not compared with Redis".into(),
        ));
    }
    replay(reader, title, limits, options, Some(route), progress).await
}

async fn replay<R: BufRead>(
    reader: R,
    title: &str,
    limits: Vec<Limit>,
    options: &LogOptions,
    route: Option<Route<'_>>,
    progress: &mut dyn FnMut(u64),
) -> Result<Report, ReplayError> {
    let mut replayer = match route {
        Some(_) => Replayer::routed(limits)?,
        None => Replayer::new(limits, &options.mapping, false)?,
    };
    let mut unrouted = 0_u64;
    let mut twin = options.redis.as_ref().map(RedisTwin::new);
    if let Some(twin) = &twin {
        replayer = replayer.namespace(twin.namespace.clone()).keep_keys();
    }
    let mut log = LogReader::new(
        reader,
        options.format,
        &options.mapping,
        options.time_field.as_deref(),
    )?;
    let mut report = Report {
        title: format!("{title} ({} format)", log.format()),
        ..Report::default()
    };
    let mut event = Event::default();
    while let Some(read) = log.next_event(&mut event) {
        report.lines += 1;
        match read {
            Ok(()) => {
                if let Some(route) = route {
                    let routed = route(&event.values);
                    let parts: Vec<(&str, &str)> = routed
                        .as_ref()
                        .map(|(_, key)| key.iter().map(|(p, v)| (&**p, &**v)).collect())
                        .unwrap_or_default();
                    let limit = routed.as_ref().map(|(i, _)| *i);
                    if replayer.step_one(event.time_us, limit, &parts).is_none() {
                        unrouted += 1;
                    }
                } else {
                    replayer.step(event.time_us, &event.values);
                    if let Some(twin) = &mut twin {
                        twin.compare(&replayer, event.line).await;
                    }
                }
            }
            Err(malformed) => {
                report.malformed += 1;
                if report.malformed_examples.len() < MALFORMED_SHOWN {
                    report.malformed_examples.push(malformed);
                }
            }
        }
        if report.lines.is_multiple_of(65_536) {
            progress(log.bytes_read());
        }
    }
    progress(log.bytes_read());
    report.span_us = replayer.start_us().map(|s| (s, replayer.now_us()));
    report.out_of_order = replayer.out_of_order();
    report.limits = replayer.into_stats();
    if route.is_some() {
        report.notes.push(format!(
            "{unrouted} requests matched no limit replayed (no rule or descriptor, or one that is \
             unlimited or allows 0 per unit); each other request was decided by the one limit \
             its descriptor matched"
        ));
    }
    if let Some(twin) = twin {
        twin.into_report(&mut report);
    }
    Ok(report)
}

/// The Redis side of a replay: the same requests, decided by the scripts on the log's time.
#[derive(Debug)]
struct RedisTwin<'a> {
    store: &'a RedisStore,
    namespace: Namespace,
    compared: u64,
    differ: u64,
    failed: u64,
    examples: Vec<String>,
}

impl<'a> RedisTwin<'a> {
    fn new(store: &'a RedisStore) -> RedisTwin<'a> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let prefix = format!("tollgate-replay-{}-{nanos}", std::process::id());
        RedisTwin {
            store,
            namespace: Namespace::new(prefix).expect("a valid prefix"),
            compared: 0,
            differ: 0,
            failed: 0,
            examples: Vec::new(),
        }
    }

    /// Decides the replayer's last step on Redis and compares, limit by limit.
    async fn compare(&mut self, replayer: &Replayer, line: u64) {
        let now = Timestamp::from_micros(replayer.now_us());
        for (limit, key, memory) in replayer.last_step() {
            let request = Request::new([Entry::new(limit, key.clone())], 1)
                .expect("a cost of one unit fits every limit");
            self.compared += 1;
            match self.store.decide(&request, Op::Check, Some(now)).await {
                Ok(d) => {
                    let redis = &d[0];
                    let same = redis.is_allowed() == memory.is_allowed()
                        && redis.remaining == memory.remaining
                        && redis.retry_after() == memory.retry_after();
                    if !same {
                        self.differ += 1;
                        if self.examples.len() < MALFORMED_SHOWN {
                            self.examples.push(format!(
                                "line {line}, {}: memory {memory:?}, Redis {redis:?}",
                                limit.name()
                            ));
                        }
                    }
                }
                Err(e) => {
                    self.failed += 1;
                    if self.examples.len() < MALFORMED_SHOWN {
                        self.examples
                            .push(format!("line {line}, {}: Redis failed: {e}", limit.name()));
                    }
                }
            }
        }
    }

    fn into_report(self, report: &mut Report) {
        report.expectations.push(Expectation {
            expected: "Redis's scripts, given the log's time, decide every request as the \
                       memory store does (admitted, remaining, retry_after)"
                .into(),
            measured: format!(
                "{} decisions compared: {} differ, {} failed on Redis",
                self.compared, self.differ, self.failed
            ),
            met: self.differ == 0 && self.failed == 0,
        });
        report.notes.extend(self.examples);
    }
}
