//! The lesson's third experiment: a fixed window written the naive way — `INCR`, then
//! `EXPIRE` as a second command — with a crash between the two, next to tollgate's.
//!
//! **Never used by the limiter**: this module exists to show, on a real Redis, the failure
//! tollgate's design rules out. The naive key is left without a TTL (an immortal counter that
//! would refuse its client forever once it reaches the limit); tollgate's decision is one
//! script that sets the expiry in the same step as the count, so a client dying at any point
//! of a call leaves either no key or a key with a TTL. The naive key is deleted afterwards.

use std::time::Duration;

use tollgate::{Algorithm, Key, Limit, Limiter, Namespace, Quota};

use crate::replay_error::ReplayError;
use crate::report::{Expectation, Report};

fn redis_err(e: impl std::fmt::Display) -> ReplayError {
    ReplayError::Redis(e.to_string())
}

/// Runs both on the Redis at `url` and writes what it saw into `report`.
///
/// # Errors
/// [`ReplayError::Redis`] when Redis cannot be reached or a command fails.
pub async fn immortal_key(url: &str, report: &mut Report) -> Result<(), ReplayError> {
    let client = redis::Client::open(url).map_err(redis_err)?;
    let mut con = client
        .get_multiplexed_async_connection()
        .await
        .map_err(redis_err)?;
    let prefix = format!("tollgate-sim-{}-{}", std::process::id(), unique());
    naive(&mut con, &prefix, report).await?;
    one_script(url, &mut con, prefix, report).await
}

/// The naive way: `INCR`, then (the process dies here) `EXPIRE` never comes.
async fn naive(
    con: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
    report: &mut Report,
) -> Result<(), ReplayError> {
    let naive = format!("{prefix}:naive:{{client=c}}");
    let count: i64 = redis::cmd("INCR")
        .arg(&naive)
        .query_async(con)
        .await
        .map_err(redis_err)?;
    naive_crash_before_expire();
    let naive_ttl: i64 = redis::cmd("TTL")
        .arg(&naive)
        .query_async(con)
        .await
        .map_err(redis_err)?;
    let _: i64 = redis::cmd("DEL")
        .arg(&naive)
        .query_async(con)
        .await
        .map_err(redis_err)?;
    report.expectations.push(Expectation {
        expected: "naive INCR then EXPIRE, the client crashing between the two: \
                   the counter is left without expiry (TTL -1), immortal"
            .into(),
        measured: format!("count {count}, TTL {naive_ttl} (the key was then deleted)"),
        met: naive_ttl == -1,
    });
    Ok(())
}

/// tollgate's way: calls cut off at every stage (before sending, in flight, after the
/// reply), the key's TTL read after each.
async fn one_script(
    url: &str,
    con: &mut redis::aio::MultiplexedConnection,
    prefix: String,
    report: &mut Report,
) -> Result<(), ReplayError> {
    let store = tollgate_redis::RedisStore::builder(url)
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .map_err(redis_err)?;
    let namespace = Namespace::new(prefix)?;
    let limit = Limit::new(
        "naive-vs-tollgate",
        Algorithm::FixedWindow,
        Quota::per_minute(100)?,
    )?
    .keyed_by(["client"])?;
    let key = Key::new(&namespace, &limit, &[("client", "c")]);
    let limiter = Limiter::builder(store)
        .namespace(namespace)
        .limit(limit)
        .build()?;
    let (mut without_ttl, mut calls) = (0_u32, 0_u32);
    let mut ttls = Vec::new();
    for cut_after_us in (0..200).step_by(10) {
        calls += 1;
        // The "crash": the call is abandoned after `cut_after_us`, wherever it is.
        let _ = tokio::time::timeout(
            Duration::from_micros(cut_after_us),
            limiter.check("naive-vs-tollgate", &[("client", "c")]),
        )
        .await;
        let ttl: i64 = redis::cmd("PTTL")
            .arg(key.as_str())
            .query_async(con)
            .await
            .map_err(redis_err)?;
        if ttl == -1 {
            without_ttl += 1;
        }
        ttls.push(ttl);
    }
    let exists = ttls.iter().filter(|t| **t >= 0).count();
    report.expectations.push(Expectation {
        expected: "tollgate's fixed window (one script: count and expiry together), calls \
                   abandoned at every point: never a key without expiry"
            .into(),
        measured: format!(
            "{calls} abandoned calls: the key existed after {exists} of them, always with a \
             TTL ({without_ttl} without)"
        ),
        met: without_ttl == 0 && exists > 0,
    });
    Ok(())
}

/// Where the naive client would call `EXPIRE`, and crashes instead.
fn naive_crash_before_expire() {}

fn unique() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}
