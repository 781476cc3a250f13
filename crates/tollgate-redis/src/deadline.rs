//! Deadlines: a check that Redis runs after its caller gave up charges nothing.
//!
//! A call that times out has not necessarily failed: when Redis is frozen (a long command, a
//! fork, a stalled host, `SIGSTOP`), the call's bytes wait in its socket and Redis runs the
//! script when it resumes. The caller meanwhile answered by its failure policy (a 503 under
//! `deny`), so the script charged a request that was refused — or, in lease mode, took units
//! no instance will ever hand out (measured before this: a 2 s freeze at the start of a
//! 2000/min window left nothing admitted for the rest of the minute; and the Redis count
//! minus the admitted requests equalled the timeouts, 1 203 = 1 203).
//!
//! So a charging call carries a **deadline on the server's clock**: the instant after which
//! its caller may have stopped waiting. A script that starts after it writes nothing and
//! answers `late <now>` (`lua/prelude.lua`). The caller that is still waiting (Redis
//! answered, so the call goes on, see `patience.rs`) sends it again with a deadline a timeout
//! after that `now`; one that gave up was charged nothing.
//!
//! **Only calls sent after Redis answered nothing for a millisecond carry one** ([`QUIET_US`]):
//! checking a deadline costs a script a `TIME`, and GCRA's single-entry script reads no clock
//! otherwise — with a deadline it cost Redis 3.9 µs a call instead of 2.9 (0.78× the
//! `EVALSHA`/s, docs/benchmarks.md). While replies keep coming, a call has every chance of
//! being answered; when Redis stops (a freeze), every call sent after its first millisecond
//! of silence carries a deadline — the calls that pile up for the rest of the freeze, which
//! are the ones Redis runs after their callers gave up. The few sent in that first
//! millisecond are settled by `store/unanswered.rs`, like any charge whose reply came too late.
//! (Scripts that read the server's clock anyway, every algorithm but GCRA's single-entry
//! one, pay nothing more for a deadline: they read `TIME` once.)
//!
//! How the deadline is chosen, and why it holds:
//! - A call gives up only after Redis was silent for a whole timeout from its start
//!   (`patience.rs`; never earlier). The deadline is that start on the server's clock, plus
//!   the timeout, less an eighth of it: so any instant after the caller gave up is past the
//!   deadline on the server's clock, and a reply sent just before it has that eighth (6 ms at
//!   the default 50 ms) and the millisecond of `patience.rs`'s second look to arrive.
//! - The server's clock is known here as an offset from this process's monotonic clock,
//!   sampled with `TIME` once a second ([`ServerClock`]). A sample is taken when its reply is
//!   *received*, so it reads the server's clock as it was at some instant before: the offset
//!   is a lower bound, which only makes deadlines earlier (a call refused as late is sent
//!   again; it is never wrongly charged). On a cluster, the smallest offset of all primaries.
//! - A late answer carries the server's `now`: the next try's deadline is taken from it, on
//!   that very node's clock, so a node whose clock runs ahead of the others costs one extra
//!   try, not a failure.
//!
//! What remains (docs/redis.md): a caller that drops its call before the store's timeout
//! (its client went away) may still be charged; a primary whose clock is behind the sampled
//! one by more than the margin can charge a call that started after its caller gave up (clocks
//! kept by NTP are within a few ms); until the first sample (the store connects with one, so
//! only after a start without Redis) calls carry no deadline; nor do calls sent while Redis
//! answers (above), should their process die before their late reply. Give-backs and peeks carry none:
//! an undo must land whenever it runs, and a peek writes nothing.

use std::sync::Arc;
use std::sync::Weak;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use redis::{Cmd, Value};
use tokio::time::Instant;

/// How often the server's clock is sampled.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// No offset known yet.
const UNKNOWN: i64 = i64::MIN;

/// How long Redis must have answered nothing before a call carries a deadline, in µs.
const QUIET_US: i64 = 1_000;

/// This process's estimate of Redis's clock: `server µs − local µs` (local: µs since
/// `epoch`), a lower bound (see the module docs).
#[derive(Debug)]
pub(crate) struct ServerClock {
    epoch: Instant,
    offset: AtomicI64,
    /// Local µs of the last reply heard from Redis.
    heard: AtomicI64,
}

impl Default for ServerClock {
    fn default() -> Self {
        ServerClock {
            epoch: Instant::now(),
            offset: AtomicI64::new(UNKNOWN),
            heard: AtomicI64::new(0),
        }
    }
}

impl ServerClock {
    fn local(&self, at: Instant) -> i64 {
        i64::try_from(at.saturating_duration_since(self.epoch).as_micros()).unwrap_or(i64::MAX)
    }

    /// Records that the server's clock read `server_us` before `received`.
    pub(crate) fn observe(&self, server_us: u64, received: Instant) {
        let server = i64::try_from(server_us).unwrap_or(i64::MAX);
        self.offset
            .store(server - self.local(received), Ordering::Relaxed);
    }

    /// Records that Redis answered a call just now.
    #[inline]
    pub(crate) fn heard(&self) {
        self.heard
            .store(self.local(Instant::now()), Ordering::Relaxed);
    }

    /// Whether a call starting at `at` needs a deadline: Redis has answered nothing for
    /// [`QUIET`] (see the module docs).
    pub(crate) fn quiet_at(&self, at: Instant) -> bool {
        self.local(at) - self.heard.load(Ordering::Relaxed) >= QUIET_US
    }

    /// The server's clock at local instant `at`, at the latest (a lower bound); `None` before
    /// the first sample.
    pub(crate) fn server_at(&self, at: Instant) -> Option<u64> {
        let offset = self.offset.load(Ordering::Relaxed);
        if offset == UNKNOWN {
            return None;
        }
        u64::try_from(self.local(at).saturating_add(offset)).ok()
    }
}

/// The deadline of a call that started at server instant `server_start` with timeout
/// `timeout`: the timeout less an eighth of it (see the module docs).
pub(crate) fn deadline(server_start: u64, timeout: Duration) -> u64 {
    let t = u64::try_from(timeout.as_micros()).unwrap_or(u64::MAX);
    server_start.saturating_add(t - t / 8)
}

/// The server's `now` of a script's `late <now>` answer; `None` for any other reply.
pub(crate) fn late(reply: &Value) -> Option<u64> {
    let text = match reply {
        Value::BulkString(b) => std::str::from_utf8(b).ok()?,
        Value::SimpleString(s) => s.as_str(),
        _ => return None,
    };
    text.strip_prefix("late ")?.parse().ok()
}

/// Whether a batch script's value for one request is the late marker.
pub(crate) fn is_late(reply: &Value) -> bool {
    late(reply).is_some()
}

/// `TIME`'s reply as µs.
fn time_reply(reply: &Value) -> Option<u64> {
    let Value::Array(parts) = reply else {
        return None;
    };
    let int = |v: &Value| -> Option<u64> {
        match v {
            Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
            Value::Int(i) => u64::try_from(*i).ok(),
            _ => None,
        }
    };
    match parts.as_slice() {
        [s, us] => Some(int(s)?.checked_mul(1_000_000)?.checked_add(int(us)?)?),
        _ => None,
    }
}

/// The smallest server time of a `TIME` reply: one node's, or (a cluster's map or array of
/// every primary's) the earliest.
pub(crate) fn earliest_time(reply: &Value) -> Option<u64> {
    match reply {
        Value::Map(pairs) => pairs.iter().filter_map(|(_, v)| time_reply(v)).min(),
        Value::Array(items) if items.iter().all(|v| matches!(v, Value::Array(_))) => {
            items.iter().filter_map(time_reply).min()
        }
        other => time_reply(other),
    }
}

/// The `TIME` command the sampler sends.
pub(crate) fn time_cmd() -> Cmd {
    redis::cmd("TIME")
}

/// Samples the server's clock of `store` now, then every [`SAMPLE_EVERY`] until the store is
/// dropped (`sample` runs one `TIME` and records it; a failure keeps the last offset).
pub(crate) fn keep_sampling<S, F, Fut>(store: Weak<S>, sample: F)
where
    S: Send + Sync + 'static,
    F: Fn(Arc<S>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let mut every = tokio::time::interval(SAMPLE_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let Some(store) = store.upgrade() else { return };
            sample(store).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_late_marker_and_nothing_else() {
        assert_eq!(
            late(&Value::BulkString(b"late 1700000000123456".to_vec())),
            Some(1_700_000_000_123_456)
        );
        assert_eq!(
            late(&Value::BulkString(b"tollgate: WRONGTYPE".to_vec())),
            None
        );
        assert_eq!(late(&Value::BulkString(b"late x".to_vec())), None);
        assert_eq!(late(&Value::Int(5)), None);
    }

    #[test]
    fn time_replies_single_and_cluster() {
        let t = |s: &str, us: &str| {
            Value::Array(vec![
                Value::BulkString(s.as_bytes().to_vec()),
                Value::BulkString(us.as_bytes().to_vec()),
            ])
        };
        assert_eq!(
            earliest_time(&t("1700000000", "000123")),
            Some(1_700_000_000_000_123)
        );
        let map = Value::Map(vec![
            (Value::SimpleString("a".into()), t("1700000002", "5")),
            (Value::SimpleString("b".into()), t("1700000001", "7")),
        ]);
        assert_eq!(earliest_time(&map), Some(1_700_000_001_000_007));
        assert_eq!(earliest_time(&Value::Nil), None);
    }

    /// The offset is the sample's lower bound, and deadlines follow it and the timeout.
    #[tokio::test(start_paused = true)]
    async fn the_server_clock_follows_its_sample() {
        let clock = ServerClock::default();
        assert_eq!(clock.server_at(Instant::now()), None);
        let received = Instant::now();
        clock.observe(5_000_000, received);
        tokio::time::advance(Duration::from_millis(30)).await;
        assert_eq!(clock.server_at(Instant::now()), Some(5_030_000));
        assert_eq!(
            deadline(5_030_000, Duration::from_millis(50)),
            5_030_000 + 50_000 - 6_250
        );
    }
}
