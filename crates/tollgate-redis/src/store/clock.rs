//! The server's clock as the store knows it: sampled with `TIME`, for the deadlines of calls
//! (`src/deadline.rs`).

use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use super::connection::Connection;
use super::redis_store::RedisStore;
use crate::deadline::{deadline, earliest_time, time_cmd};

impl RedisStore {
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
                    c.clone().route_command(cmd, all).await
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
