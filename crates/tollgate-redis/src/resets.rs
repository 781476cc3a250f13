//! Reset notifications: how one instance's reset reaches the others' deny caches.
//!
//! An instance that remembers refusals ([`tollgate::LimiterBuilder::deny_cache`]) would keep
//! refusing a key that another instance reset. So [`crate::RedisStore`]'s reset publishes
//! every key it deletes on the channel of the key's prefix ([`reset_channel`]), in the same
//! round trip as the delete, and [`crate::RedisStore::listen_for_resets`] subscribes to it on a connection of its
//! own and hands each key to a callback (the service's: forget the key's cached refusal).
//!
//! Pub/sub is fire-and-forget: a notification published while a listener is disconnected is
//! lost, and the listener reconnects with backoff. What that costs is bounded and documented
//! with the deny cache (`docs/algorithms.md`): a cached refusal outlives a lost reset at most
//! until it would have ended anyway. On Redis Cluster, classic pub/sub is broadcast to every
//! node, so one subscription on any node hears every reset.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::task::JoinHandle;

use crate::subscriber::Subscriber;

/// The channel on which resets of keys under `prefix` are published.
pub fn reset_channel(prefix: &str) -> String {
    format!("{prefix}:resets")
}

/// Subscribes to the resets of keys under `prefix` through `subscriber` and calls `on_reset`
/// with each reset key's text, until the returned task is aborted. Reconnects with backoff
/// (100 ms doubling to 5 s) when the connection drops, logging at most one warning per drop;
/// each attempt asks `subscriber` for its node anew (behind Sentinel: the current master).
pub(crate) fn listen(
    subscriber: Subscriber,
    prefix: &str,
    on_reset: impl Fn(&str) + Send + Sync + 'static,
) -> JoinHandle<()> {
    let channel = reset_channel(prefix);
    tokio::spawn(async move {
        let mut wait = Duration::from_millis(100);
        loop {
            match subscribe(subscriber.client(), &channel).await {
                Ok(pubsub) => {
                    tracing::debug!(%channel, "listening for resets");
                    wait = Duration::from_millis(100);
                    let mut messages = pubsub.into_on_message();
                    while let Some(message) = messages.next().await {
                        match message.get_payload::<String>() {
                            // A callback that panics (a bug) loses this notification,
                            // not the ones after it.
                            Ok(key) => {
                                if catch_unwind(AssertUnwindSafe(|| on_reset(&key))).is_err() {
                                    tracing::error!(%channel, "a reset notification's callback panicked; listening on");
                                }
                            }
                            Err(e) => tracing::debug!(cause = %e, "unreadable reset message"),
                        }
                    }
                    tracing::warn!(%channel, "reset notifications lost their connection; reconnecting");
                }
                Err(e) => {
                    tracing::debug!(%channel, cause = %e, "cannot subscribe to resets yet");
                }
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(5));
        }
    })
}

/// A subscription to `channel`. The client carries the store's TCP settings: keep-alive ends
/// a subscription whose host vanished silently, and the loop above subscribes again.
async fn subscribe(client: redis::Client, channel: &str) -> redis::RedisResult<redis::aio::PubSub> {
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.subscribe(channel).await?;
    Ok(pubsub)
}
