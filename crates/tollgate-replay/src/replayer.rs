//! The replay engine: every limit decided for each event on a virtual clock, with the real
//! rules of the memory store (the same code `tollgate serve` runs on its embedded store).
//!
//! Each limit is replayed on its own, as if it were the only one: the question is what *this*
//! limit would do to the traffic, so one limit's refusal does not hide a request from another
//! (a shadow limit is counted like the others; its refusals are would-be refusals). The clock
//! is the events' own time and never goes back: an event earlier than one before it is
//! decided at the latest time seen (and counted as out of order). Keys whose state is back to
//! a full quota are swept every minute of virtual time, so memory follows the live keys.

use std::time::Duration;

use tollgate::{
    Decision, FakeClock, Key, Limit, MemoryStore, Namespace, Op, SingleRequest, Timestamp,
};

use crate::key_mapping::KeyMapping;
use crate::limit_stats::LimitStats;
use crate::replay_error::ReplayError;

/// How often (virtual time) keys back to a full quota are dropped.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// The hash of an unkeyed limit's one key (of no parts).
const UNKEYED: u64 = 0;

/// One limit and where its key parts come from.
#[derive(Debug)]
struct Run {
    limit: Limit,
    /// (part name, index into the event's values), in the limit's key order.
    parts: Vec<(Box<str>, usize)>,
    stats: LimitStats,
}

/// Decides events against limits and keeps what each did.
#[derive(Debug)]
pub struct Replayer {
    runs: Vec<Run>,
    store: MemoryStore,
    clock: FakeClock,
    namespace: Namespace,
    start_us: Option<u64>,
    now_us: u64,
    next_sweep_us: u64,
    out_of_order: u64,
    decisions: Vec<Decision>,
    /// The keys of the last step, when kept ([`Replayer::keep_keys`]).
    keys: Option<Vec<Key>>,
    scratch: String,
}

/// Refuses no limit, and two limits of one name: a store key is built from the limit's name,
/// so two limits of one name in one store would share their counters, each deciding on the
/// other's requests too (`--candidates 5,5` admitted 27 and 19 where each should have
/// admitted 40).
fn check_names(limits: &[Limit]) -> Result<(), ReplayError> {
    if limits.is_empty() {
        return Err(ReplayError::NoLimits);
    }
    let mut names: Vec<&str> = limits.iter().map(Limit::name).collect();
    names.sort_unstable();
    match names.windows(2).find(|w| w[0] == w[1]) {
        Some(w) => Err(ReplayError::DuplicateLimit(w[0].to_owned())),
        None => Ok(()),
    }
}

impl Replayer {
    /// A replayer of `limits`, their key parts filled from `mapping`; with `track_admits`,
    /// every admission's time is kept ([`LimitStats::max_in_any_period`]).
    ///
    /// # Errors
    /// [`ReplayError::NoLimits`]; [`ReplayError::UnmappedPart`] for a limit keyed by a part
    /// `mapping` does not fill; [`ReplayError::DuplicateLimit`] for two limits of one name.
    pub fn new(
        limits: Vec<Limit>,
        mapping: &KeyMapping,
        track_admits: bool,
    ) -> Result<Replayer, ReplayError> {
        check_names(&limits)?;
        let runs = limits
            .into_iter()
            .map(|limit| {
                let parts = crate::key_mapping::key_indices(&limit, mapping)?;
                let stats = LimitStats::new(&limit, track_admits);
                Ok(Run {
                    limit,
                    parts,
                    stats,
                })
            })
            .collect::<Result<Vec<_>, ReplayError>>()?;
        Ok(Replayer::of_runs(runs))
    }

    /// A replayer of `limits` where each event is decided by one limit at most, chosen with
    /// its key by the caller ([`Replayer::step_one`]): an Envoy rule set, where a descriptor
    /// is counted by the one limit it matches, not by all.
    ///
    /// # Errors
    /// [`ReplayError::NoLimits`]; [`ReplayError::DuplicateLimit`] for two limits of one name.
    pub fn routed(limits: Vec<Limit>) -> Result<Replayer, ReplayError> {
        check_names(&limits)?;
        let runs = limits
            .into_iter()
            .map(|limit| Run {
                stats: LimitStats::new(&limit, false),
                limit,
                parts: Vec::new(),
            })
            .collect();
        Ok(Replayer::of_runs(runs))
    }

    fn of_runs(runs: Vec<Run>) -> Replayer {
        let clock = FakeClock::new(Timestamp::from_micros(0));
        let store = MemoryStore::builder()
            .clock(clock.clone())
            .sweep_interval(None)
            .max_keys(usize::MAX)
            .build();
        Replayer {
            decisions: Vec::with_capacity(runs.len()),
            runs,
            store,
            clock,
            namespace: Namespace::default(),
            start_us: None,
            now_us: 0,
            next_sweep_us: 0,
            out_of_order: 0,
            keys: None,
            scratch: String::new(),
        }
    }

    /// Keys built under `namespace` (default: tollgate's own prefix).
    #[must_use]
    pub fn namespace(mut self, namespace: Namespace) -> Replayer {
        self.namespace = namespace;
        self
    }

    /// Keeps each step's keys, for [`Replayer::last_step`] (to decide the same requests
    /// elsewhere: the Redis twin of a replay).
    #[must_use]
    pub fn keep_keys(mut self) -> Replayer {
        self.keys = Some(Vec::new());
        self
    }

    /// The last step's (limit, key, decision) per limit, when keys are kept.
    pub fn last_step(&self) -> impl Iterator<Item = (&Limit, &Key, &Decision)> {
        self.keys
            .iter()
            .flatten()
            .zip(&self.runs)
            .zip(&self.decisions)
            .map(|((key, run), d)| (&run.limit, key, d))
    }

    /// Decides one request at `time_us` (µs since the epoch) for every limit, its key parts
    /// taken from `values` (in the mapping's order): each limit's decision, in the limits'
    /// order.
    pub fn step<V: AsRef<str>>(&mut self, time_us: u64, values: &[V]) -> &[Decision] {
        let (now, second) = self.begin(time_us);
        // The runs are taken out while deciding, so that a run's key parts and the rest of the
        // replayer can be borrowed at once (taking a Vec is free).
        let mut runs = std::mem::take(&mut self.runs);
        let mut key_parts: Vec<(&str, &str)> = Vec::with_capacity(4);
        for run in &mut runs {
            key_parts.clear();
            key_parts.extend(
                run.parts
                    .iter()
                    .map(|(name, v)| (&**name, values[*v].as_ref())),
            );
            self.decide(&run.limit, &mut run.stats, now, second, &key_parts);
        }
        self.runs = runs;
        &self.decisions
    }

    /// Decides one request at `time_us` for the limit at `limit` (in the limits' order) alone,
    /// keyed by `key_parts` (`(part, value)` in the limit's key order); every other limit
    /// sees nothing. `None` (the clock still moves) for `limit = None`: a request no limit
    /// decides.
    pub fn step_one(
        &mut self,
        time_us: u64,
        limit: Option<usize>,
        key_parts: &[(&str, &str)],
    ) -> Option<Decision> {
        let (now, second) = self.begin(time_us);
        let i = limit.filter(|&i| i < self.runs.len())?;
        let mut runs = std::mem::take(&mut self.runs);
        let run = &mut runs[i];
        self.decide(&run.limit, &mut run.stats, now, second, key_parts);
        self.runs = runs;
        self.decisions.last().copied()
    }

    /// Starts an event at `time_us`: forgets the last event's decisions and keys, moves the
    /// virtual clock (never back; counted when the log goes back) and sweeps when a minute
    /// has passed. The instant to decide at, and its second in the log.
    fn begin(&mut self, time_us: u64) -> (u64, usize) {
        self.decisions.clear();
        if let Some(keys) = &mut self.keys {
            keys.clear();
        }
        let start = *self.start_us.get_or_insert(time_us - time_us % 1_000_000);
        if time_us < self.now_us {
            self.out_of_order += 1;
        } else {
            self.now_us = time_us;
        }
        let now = self.now_us;
        if now >= self.next_sweep_us {
            self.clock.set(Timestamp::from_micros(now));
            self.store.sweep();
            self.next_sweep_us = now.saturating_add(SWEEP_EVERY.as_micros() as u64);
        }
        (now, ((now - start) / 1_000_000) as usize)
    }

    /// Decides `limit` for the key `key_parts` at `now`, and records it in `stats`.
    fn decide(
        &mut self,
        limit: &Limit,
        stats: &mut LimitStats,
        now: u64,
        second: usize,
        key_parts: &[(&str, &str)],
    ) {
        // An unkeyed limit has one key: counted once, not hashed for every request.
        let key_hash = if key_parts.is_empty() {
            UNKEYED
        } else {
            crate::key_count::hash_parts(key_parts.iter().map(|(_, v)| *v))
        };
        if !key_parts.is_empty() || stats.requests == 0 {
            stats.keys_seen.add(key_hash);
        }
        let key = Key::new(&self.namespace, limit, key_parts);
        let request =
            SingleRequest::new(limit, &key, 1).expect("a cost of one unit fits every limit");
        let decision = self
            .store
            .decide_single_at(&request, Op::Check, Timestamp::from_micros(now))
            .expect("a store without a key cap always has room");
        stats.record(
            second,
            now,
            &decision,
            key_hash,
            |out| crate::key_mapping::push_key_text(out, key_parts.iter().copied()),
            &mut self.scratch,
        );
        self.decisions.push(decision);
        if let Some(keys) = &mut self.keys {
            keys.push(key);
        }
    }

    /// The first event's second (µs since the epoch), once an event was decided.
    pub fn start_us(&self) -> Option<u64> {
        self.start_us
    }

    /// The latest event time seen.
    pub fn now_us(&self) -> u64 {
        self.now_us
    }

    /// Events decided at a later time than their own (the log went back in time).
    pub fn out_of_order(&self) -> u64 {
        self.out_of_order
    }

    /// Keys held now (after the last sweep).
    pub fn keys(&self) -> usize {
        self.store.len()
    }

    /// Each limit's results, in the limits' order.
    pub fn into_stats(self) -> Vec<LimitStats> {
        let start_us = self.start_us.unwrap_or(0);
        self.runs
            .into_iter()
            .map(|mut r| {
                r.stats.start_us = start_us;
                r.stats
            })
            .collect()
    }
}
