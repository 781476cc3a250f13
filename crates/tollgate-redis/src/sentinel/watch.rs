//! [`watch`]: hears one sentinel announce a failover (`+switch-master`), so that the store
//! follows a new master as soon as the sentinels have promoted it, even while the old one
//! still accepts writes.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;

use super::rank::{Addr, plausible};
use super::sentinel_link::SentinelLink;
use super::signals::Signals;

/// The first wait before subscribing again after a lost or refused subscription; each next
/// one doubles, up to [`MAX_RESUBSCRIBE_WAIT`]. Announcements missed meanwhile are caught by
/// the follower's check every second.
const FIRST_RESUBSCRIBE_WAIT: Duration = Duration::from_millis(100);
const MAX_RESUBSCRIBE_WAIT: Duration = Duration::from_secs(5);

/// Subscribes to `+switch-master` on `link` and, for each announcement about `master_name`,
/// hands the new address to `signals`; subscribes again when the connection is lost. Runs
/// until aborted.
pub(super) async fn watch(
    link: Arc<SentinelLink>,
    connect_timeout: Duration,
    master_name: String,
    signals: Arc<Signals>,
) {
    let mut wait = FIRST_RESUBSCRIBE_WAIT;
    loop {
        let subscribed = tokio::time::timeout(connect_timeout, async {
            let mut pubsub = link.client().get_async_pubsub().await?;
            pubsub.subscribe("+switch-master").await?;
            Ok::<_, redis::RedisError>(pubsub)
        })
        .await;
        match subscribed {
            Ok(Ok(pubsub)) => {
                wait = FIRST_RESUBSCRIBE_WAIT;
                let mut messages = pubsub.into_on_message();
                while let Some(message) = messages.next().await {
                    let Ok(text) = message.get_payload::<String>() else {
                        continue;
                    };
                    if let Some(addr) = switched_to(&text, &master_name) {
                        tracing::info!(sentinel = %link.name(), master = %master_name, to = %super::describe(&addr), "sentinel: a sentinel announced a new master");
                        signals.announce(addr);
                    }
                }
                tracing::debug!(sentinel = %link.name(), "sentinel: lost the +switch-master subscription; subscribing again");
            }
            Ok(Err(e)) => {
                tracing::debug!(sentinel = %link.name(), cause = %e, "sentinel: cannot subscribe to +switch-master yet");
            }
            Err(_) => {
                tracing::debug!(sentinel = %link.name(), "sentinel: +switch-master subscription timed out");
            }
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(MAX_RESUBSCRIBE_WAIT);
    }
}

/// The new address in a `+switch-master` message (`<name> <old ip> <old port> <new ip>
/// <new port>`) about `master_name`.
fn switched_to(message: &str, master_name: &str) -> Option<Addr> {
    let parts: Vec<&str> = message.split_whitespace().collect();
    match parts.as_slice() {
        [name, _, _, host, port] if *name == master_name => {
            let addr = ((*host).to_owned(), port.parse().ok()?);
            plausible(&addr).then_some(addr)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::switched_to;

    #[test]
    fn reads_the_new_address_of_its_master_only() {
        assert_eq!(
            switched_to("mymaster 10.0.0.1 6379 10.0.0.2 6380", "mymaster"),
            Some(("10.0.0.2".to_owned(), 6380))
        );
        assert_eq!(
            switched_to("other 10.0.0.1 6379 10.0.0.2 6380", "mymaster"),
            None
        );
        assert_eq!(switched_to("mymaster 10.0.0.2 6380", "mymaster"), None);
        assert_eq!(
            switched_to("mymaster 10.0.0.1 6379 10.0.0.2 0", "mymaster"),
            None
        );
    }
}
