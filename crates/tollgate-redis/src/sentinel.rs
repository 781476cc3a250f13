//! [`Sentinel`]: a connection to the master of a Redis Sentinel group that follows it through
//! a failover, without a restart.
//!
//! The `redis` crate finds a master through sentinels, but its reconnecting connection keeps
//! the address it was made with: after a failover it would reconnect to the old master (dead,
//! or back as a replica) forever. So this type keeps the current master's
//! [`ConnectionManager`] behind a lock and swaps it:
//!
//! - **When to look again.** A call that fails as a lost connection, a timeout or `READONLY`
//!   (the old master came back as a replica) makes the store call [`Sentinel::suspect`]. A
//!   background task then asks the sentinels (`SENTINEL get-master-addr-by-name`) every
//!   25–100 ms until the node they name answers as a master: the same one (a blip; nothing
//!   changes) or a new one, which then replaces the connection. Calls made meanwhile fail
//!   fast, and each limit's failure policy answers them.
//! - **Never a write to a replica.** A node is used only after it answered `ROLE` as
//!   `master`; a sentinel that still names a demoted master is not believed until the node
//!   agrees. A write that still reaches a replica (it was demoted after the check) is refused
//!   by Redis (`READONLY`), charges nothing, and starts a new look.
//! - Scripts are loaded on the new master by the store's `NOSCRIPT` path, on its first call.

use std::fmt;
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo as _, Value};
use tokio::sync::Notify;
use tollgate::StoreError;

use crate::breaker::Breaker;
use crate::error::classify;
use crate::node_options::{NodeOptions, describe_addr};

/// The first wait between two looks while a failover is suspected; each next one doubles,
/// up to [`MAX_LOOK_INTERVAL`].
const FIRST_LOOK_INTERVAL: Duration = Duration::from_millis(25);
/// The longest wait between two looks: how late, at most, the store follows a master that
/// the sentinels just named (one connection to a sentinel per look, only while calls fail).
pub(crate) const MAX_LOOK_INTERVAL: Duration = Duration::from_millis(100);

/// A Sentinel group's master, followed.
pub(crate) struct Sentinel {
    looker: Looker,
    current: RwLock<Current>,
    wake: Arc<Notify>,
    /// The store's breaker, closed when a new master is found.
    breaker: Arc<Breaker>,
}

/// The master in use.
#[derive(Clone)]
pub(crate) struct Current {
    pub(crate) addr: (String, u16),
    pub(crate) client: redis::Client,
    pub(crate) manager: ConnectionManager,
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
        let sentinels = sentinel_urls
            .iter()
            .map(|url| {
                let info = url.as_str().into_connection_info().map_err(classify)?;
                sentinel_options.apply(info)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let looker = Looker {
            sentinels,
            sentinel_options,
            master_name,
            node_options,
            node_tls,
        };
        let addr = looker.ask().await?;
        let current = looker.connect_master(addr).await?;
        tracing::info!(master = %looker.master_name, addr = %describe(&current.addr), "sentinel: using the master");
        let wake = Arc::new(Notify::new());
        let sentinel = Arc::new(Sentinel {
            looker,
            current: RwLock::new(current),
            wake: Arc::clone(&wake),
            breaker,
        });
        tokio::spawn(follow(Arc::downgrade(&sentinel), wake));
        Ok(sentinel)
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
        self.wake.notify_one();
    }

    /// One look: the master the sentinels name, used if it answers as one.
    async fn look(&self) -> Result<(), StoreError> {
        let addr = self.looker.ask().await?;
        let current = self.current();
        if addr == current.addr {
            // Still the master they name: in use again once it answers as one. Briefly: a
            // dead master's connection manager retries its reconnection for a while, and the
            // look must not wait for it while the sentinels may be naming a new one.
            let mut manager = current.manager.clone();
            let answered = tokio::time::timeout(MAX_LOOK_INTERVAL, is_master(&mut manager, &addr));
            return match answered.await {
                Ok(result) => result,
                Err(_) => Err(StoreError::Timeout(MAX_LOOK_INTERVAL)),
            };
        }
        let next = self.looker.connect_master(addr).await?;
        tracing::warn!(
            master = %self.looker.master_name,
            from = %describe(&current.addr),
            to = %describe(&next.addr),
            "sentinel: the master moved; following it"
        );
        metrics::counter!("tollgate_redis_sentinel_switches_total").increment(1);
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
        // Ends the follower task, which finds no store behind its weak reference.
        self.wake.notify_one();
    }
}

/// How to find the master and reach it.
struct Looker {
    /// The sentinels, with their own credentials and TLS applied.
    sentinels: Vec<ConnectionInfo>,
    sentinel_options: NodeOptions,
    master_name: String,
    /// How to reach a data node, and whether over TLS.
    node_options: NodeOptions,
    node_tls: bool,
}

impl Looker {
    /// The master's address, from the first sentinel that knows it.
    async fn ask(&self) -> Result<(String, u16), StoreError> {
        let mut last = None;
        for info in &self.sentinels {
            let asked = async {
                let client = self.sentinel_options.client(info.clone())?;
                let mut conn = client
                    .get_multiplexed_async_connection()
                    .await
                    .map_err(classify)?;
                let reply: Option<(String, u16)> = redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(&self.master_name)
                    .query_async(&mut conn)
                    .await
                    .map_err(classify)?;
                Ok::<_, StoreError>(reply)
            };
            match tokio::time::timeout(self.sentinel_options.connect_timeout, asked).await {
                Ok(Ok(Some(addr))) => return Ok(addr),
                Ok(Ok(None)) => {
                    last = Some(StoreError::Protocol(format!(
                        "sentinel {} knows no master named {:?} (sentinel_master)",
                        describe_addr(info.addr()),
                        self.master_name
                    )));
                }
                Ok(Err(e)) => last = Some(e),
                Err(_) => {
                    last = Some(StoreError::Connection(
                        format!(
                            "sentinel {} did not answer within {:?}",
                            describe_addr(info.addr()),
                            self.sentinel_options.connect_timeout
                        )
                        .into(),
                    ));
                }
            }
        }
        Err(last.unwrap_or_else(|| StoreError::Protocol("no sentinel given".to_owned())))
    }

    /// A connection to `addr`, checked to be a master.
    async fn connect_master(&self, addr: (String, u16)) -> Result<Current, StoreError> {
        let info = NodeOptions::addr(&addr.0, addr.1, self.node_tls).into_connection_info();
        let info = self.node_options.apply(info.map_err(classify)?)?;
        let client = self.node_options.client(info)?;
        let mut manager = self.node_options.manager(client.clone()).await?;
        is_master(&mut manager, &addr).await?;
        Ok(Current {
            addr,
            client,
            manager,
        })
    }
}

/// `Ok` when the node at `addr` answers `ROLE` as a master.
async fn is_master(
    manager: &mut ConnectionManager,
    addr: &(String, u16),
) -> Result<(), StoreError> {
    let role: Value = redis::cmd("ROLE")
        .query_async(manager)
        .await
        .map_err(classify)?;
    let first = match &role {
        Value::Array(items) => items.first(),
        _ => None,
    };
    match first {
        Some(Value::BulkString(b)) if b.as_slice() == b"master" => Ok(()),
        _ => Err(StoreError::ReadOnly(
            format!(
                "{} is not a master (yet): its ROLE is {role:?}",
                describe(addr)
            )
            .into(),
        )),
    }
}

/// Waits to be woken by [`Sentinel::suspect`], then looks until the master is found; ends
/// when the store is dropped.
async fn follow(sentinel: Weak<Sentinel>, wake: Arc<Notify>) {
    loop {
        wake.notified().await;
        let mut wait = FIRST_LOOK_INTERVAL;
        loop {
            let Some(s) = sentinel.upgrade() else {
                return;
            };
            match s.look().await {
                Ok(()) => break,
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
