//! [`Sentinel`]: a connection to the master of a Redis Sentinel group that follows it through
//! a failover, without a restart.
//!
//! The `redis` crate finds a master through sentinels, but its reconnecting connection keeps
//! the address it was made with: after a failover it would reconnect to the old master (dead,
//! or back as a replica) forever. So this type keeps the current master's
//! [`ConnectionManager`](redis::aio::ConnectionManager) behind a lock and swaps it, as Redis's
//! guidelines for Sentinel clients describe:
//!
//! - **When to look again.** Three things wake the follower task: a sentinel announcing a
//!   failover (`+switch-master`, subscribed to on every sentinel: `watch.rs`); its own check
//!   every [`CHECK_INTERVAL`], while calls succeed (a planned failover leaves the old master
//!   accepting writes until Sentinel demotes it, seconds later, and those writes are then
//!   discarded by its resync: nothing fails meanwhile, so nothing else would tell); and a call
//!   that fails as a lost connection, a timeout or `READONLY` ([`Sentinel::suspect`]), after
//!   which it looks every 25–100 ms until the master is found. Calls made meanwhile fail
//!   fast, and each limit's failure policy answers them.
//! - **Whom to believe.** Every sentinel is asked at once (`SENTINEL
//!   get-master-addr-by-name`), and the addresses named are tried best first (`rank.rs`: an
//!   announced one, then the one most sentinels name), so that one stale, wrong or frozen
//!   sentinel cannot pin the store to a dead or demoted master; the sentinel that named a
//!   verified master is asked first from then on.
//! - **Never a write to a replica.** A node is used only after it answered `ROLE` as
//!   `master`, within a bound (a node that freezes after being named does not hold the
//!   follower); a sentinel that still names a demoted master is not believed until the node
//!   agrees. A write that still reaches a replica (it was demoted after the check) is refused
//!   by Redis (`READONLY`), charges nothing, and starts a new look.
//! - **Never dead.** The follower and the subscriptions run under [`supervise`]: a panic is
//!   logged as an error and the task starts again.
//! - Scripts are loaded on the new master by the store's `NOSCRIPT` path, on its first call.

mod current;
mod looker;
mod rank;
mod sentinel_link;
mod signals;
mod supervise;
#[cfg(test)]
mod tests;
mod watch;

use std::fmt;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use redis::ConnectionAddr;
use redis::aio::ConnectionManager;
use tokio::task::AbortHandle;
use tollgate::StoreError;

use crate::breaker::Breaker;
use crate::node_options::NodeOptions;
pub(crate) use current::Current;
use looker::Looker;
use signals::Signals;
use supervise::supervise;

/// The first wait between two looks while a failover is suspected; each next one doubles,
/// up to [`MAX_LOOK_INTERVAL`].
const FIRST_LOOK_INTERVAL: Duration = Duration::from_millis(25);
/// The longest wait between two looks: how late, at most, the store follows a master that
/// the sentinels just named (one request to each sentinel per look, only while calls fail).
pub(crate) const MAX_LOOK_INTERVAL: Duration = Duration::from_millis(100);
/// How often the follower asks the sentinels while calls succeed: the bound on how long the
/// store keeps writing to a master the sentinels replaced, should it miss the announcement.
pub(crate) const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Set by a test: the follower's next look panics, as a bug would.
#[cfg(test)]
static PANIC_IN_NEXT_LOOK: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// A Sentinel group's master, followed.
pub(crate) struct Sentinel {
    looker: Looker,
    current: RwLock<Current>,
    signals: Arc<Signals>,
    /// The store's breaker, closed when a new master is found.
    breaker: Arc<Breaker>,
    /// The follower and the subscriptions, aborted with the store.
    tasks: Mutex<Vec<AbortHandle>>,
}

impl Sentinel {
    /// Asks `sentinel_urls` for `master_name`'s master, connects to it, and starts following
    /// it.
    ///
    /// # Errors
    /// A connection error when no sentinel answers or the master cannot be reached;
    /// [`StoreError::Protocol`] when no sentinel knows `master_name`.
    pub(crate) async fn connect(
        sentinel_urls: &[String],
        sentinel_options: NodeOptions,
        master_name: String,
        node_options: NodeOptions,
        node_tls: bool,
        breaker: Arc<Breaker>,
    ) -> Result<Arc<Sentinel>, StoreError> {
        let looker = Looker::new(
            sentinel_urls,
            sentinel_options,
            master_name,
            node_options,
            node_tls,
        )?;
        let current = looker
            .find(None, None)
            .await?
            .ok_or_else(|| StoreError::Protocol("no master found".to_owned()))?;
        tracing::info!(master = %looker.master_name, addr = %describe(&current.addr), "sentinel: using the master");
        let sentinel = Arc::new(Sentinel {
            looker,
            current: RwLock::new(current),
            signals: Arc::new(Signals::default()),
            breaker,
            tasks: Mutex::new(Vec::new()),
        });
        sentinel.start_tasks();
        Ok(sentinel)
    }

    /// Starts the follower and one `+switch-master` subscription per sentinel, supervised.
    fn start_tasks(self: &Arc<Sentinel>) {
        let mut tasks = Vec::with_capacity(self.looker.sentinels().len() + 1);
        let (weak, signals) = (Arc::downgrade(self), Arc::clone(&self.signals));
        tasks.push(
            supervise("follower", move || {
                follow(weak.clone(), Arc::clone(&signals))
            })
            .abort_handle(),
        );
        let within = self.looker.sentinel_options().connect_timeout;
        for link in self.looker.sentinels() {
            let (link, signals) = (Arc::clone(link), Arc::clone(&self.signals));
            let name = self.looker.master_name.clone();
            tasks.push(
                supervise("+switch-master subscription", move || {
                    watch::watch(
                        Arc::clone(&link),
                        within,
                        name.clone(),
                        Arc::clone(&signals),
                    )
                })
                .abort_handle(),
            );
        }
        *self
            .tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = tasks;
    }

    /// The master in use now.
    pub(crate) fn current(&self) -> Current {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The current master's connection (for a call).
    pub(crate) fn manager(&self) -> ConnectionManager {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .manager
            .clone()
    }

    /// A call failed in a way a failover explains: look for the master again (once, however
    /// many calls say so).
    pub(crate) fn suspect(&self) {
        self.signals.wake.notify_one();
    }

    /// One look: the master the sentinels name (or one announced), used if it answers as
    /// one.
    async fn look(&self) -> Result<(), StoreError> {
        #[cfg(test)]
        if PANIC_IN_NEXT_LOOK.swap(false, std::sync::atomic::Ordering::SeqCst) {
            panic!("the follower panicked (a test asked for it)");
        }
        let hint = self.signals.take_hint();
        let current = self.current();
        let Some(next) = self.looker.find(Some(&current), hint).await? else {
            // Still the master: nothing changes.
            return Ok(());
        };
        if next.addr == current.addr {
            tracing::info!(
                master = %self.looker.master_name,
                addr = %describe(&next.addr),
                "sentinel: connected to the master again after a refused connection"
            );
        } else {
            tracing::warn!(
                master = %self.looker.master_name,
                from = %describe(&current.addr),
                to = %describe(&next.addr),
                "sentinel: the master moved; following it"
            );
            metrics::counter!("tollgate_redis_sentinel_switches_total").increment(1);
        }
        *self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = next;
        // The new master answered as one: calls need not wait for the breaker's probe.
        self.breaker.close();
        Ok(())
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        for task in self
            .tasks
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .drain(..)
        {
            task.abort();
        }
    }
}

/// Looks once every [`CHECK_INTERVAL`], or at once when woken (a failing call, an
/// announcement); when woken, looks again every 25–100 ms until the master is found. Ends
/// when the store is dropped.
async fn follow(sentinel: Weak<Sentinel>, signals: Arc<Signals>) {
    loop {
        let woken = tokio::select! {
            () = signals.wake.notified() => true,
            () = tokio::time::sleep(CHECK_INTERVAL) => false,
        };
        let mut wait = FIRST_LOOK_INTERVAL;
        loop {
            let Some(s) = sentinel.upgrade() else {
                return;
            };
            match s.look().await {
                Ok(()) => break,
                Err(e) if !woken => {
                    // A routine check: calls succeed (or they would have woken us), so the
                    // next check, or a failing call, looks again.
                    tracing::debug!(cause = %e, "sentinel: routine check failed");
                    break;
                }
                Err(e) => {
                    tracing::debug!(cause = %e, "sentinel: master not usable yet; looking again")
                }
            }
            drop(s);
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(MAX_LOOK_INTERVAL);
        }
    }
}

fn describe(addr: &(String, u16)) -> String {
    format!("{}:{}", addr.0, addr.1)
}

impl fmt::Debug for Sentinel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sentinel")
            .field("master_name", &self.looker.master_name)
            .field("master", &describe(&self.current().addr))
            .finish_non_exhaustive()
    }
}

/// Whether an address is TLS.
pub(crate) fn is_tls(addr: &ConnectionAddr) -> bool {
    matches!(addr, ConnectionAddr::TcpTls { .. })
}
