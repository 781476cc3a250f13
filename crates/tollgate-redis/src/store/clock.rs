//! The server's clock as the store knows it: sampled with `TIME`, for the deadlines of calls
//! (`src/deadline.rs`).

use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use super::connection::Connection;
use super::redis_store::RedisStore;
use crate::deadline::{deadline, earliest_time, time_cmd};

/// When a call is sent, on the server's clock as this process knows it (`deadline.rs`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sent {
    /// A check's deadline ([`RedisStore::deadline_from`]).
    pub(crate) deadline: Option<u64>,
    /// The server's clock when the call was sent, at the latest: its script runs at this
    /// instant or after. A GCRA check's give-back on the server's clock needs it, its reply
    /// telling no instant (`lua/gcra.lua`, `at`). `None` before the clock's first sample.
    pub(crate) after: Option<u64>,
}

impl RedisStore {
    /// [`Sent`] for a call that starts at local instant `start`.
    pub(super) fn sent_at(&self, start: Instant) -> Sent {
        Sent {
            deadline: self.deadline_from(start),
            after: self.inner.clock.server_at(start),
        }
    }

    /// The deadline of a call that starts at local instant `start` (`deadline.rs`); `None`
    /// while Redis keeps answering (no reply for a millisecond before the call: it carries
    /// one), and until the server's clock was sampled once.
    pub(super) fn deadline_from(&self, start: Instant) -> Option<u64> {
        if !self.inner.clock.quiet_at(start) {
            return None;
        }
        let server_start = self.inner.clock.server_at(start)?;
        Some(deadline(server_start, self.inner.timeout))
    }

    /// A script ran after its deadline, at `server_now` on its node's clock, and charged
    /// nothing: counted, and the deadline of the call's next try (a timeout after that
    /// instant, by which the caller still waits: it heard Redis answer).
    pub(super) fn too_late(&self, server_now: u64) -> u64 {
        self.count_late();
        tracing::debug!(
            target_redis = %self.inner.target,
            "a script ran after its caller's deadline and charged nothing; sending it again"
        );
        deadline(server_now, self.inner.timeout)
    }

    /// Reads the server's clock once (`TIME`, every primary's on a cluster, bounded by a
    /// second); a failure keeps the last reading.
    pub(crate) async fn sample_clock(&self) {
        let cmd = time_cmd();
        let call = async {
            match &self.inner.connection {
                Connection::Cluster(c) => {
                    use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
                    let all = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                    c.routed().route_command(cmd, all).await
                }
                other => other.query::<Value>(&cmd).await,
            }
        };
        let reply = tokio::time::timeout(Duration::from_secs(1), call).await;
        let received = Instant::now();
        match reply {
            Ok(Ok(reply)) => match earliest_time(&reply) {
                Some(server_now) => self.inner.clock.observe(server_now, received),
                None => tracing::warn!(?reply, "unexpected reply to TIME"),
            },
            Ok(Err(cause)) => tracing::debug!(%cause, "could not read the server's clock"),
            Err(_) => tracing::debug!("no answer to TIME within a second"),
        }
    }

    /// Reads the server's clock now and then every second while the store lives.
    pub(crate) async fn keep_clock(&self) {
        self.sample_clock().await;
        let weak = Arc::downgrade(&self.inner);
        crate::deadline::keep_sampling(weak, |inner| async move {
            RedisStore { inner }.sample_clock().await;
        });
    }
}
