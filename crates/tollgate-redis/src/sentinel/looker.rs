//! [`Looker`]: finds the master a Sentinel group names, and checks it is one.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::IntoConnectionInfo as _;
use redis::Value;
use redis::aio::ConnectionManager;
use tokio::task::JoinSet;
use tollgate::StoreError;

use super::current::Current;
use super::rank::{Addr, plausible, rank};
use super::sentinel_link::SentinelLink;
use super::{MAX_LOOK_INTERVAL, describe};
use crate::error::classify;
use crate::node_options::NodeOptions;

/// How to find the master and reach it.
pub(super) struct Looker {
    /// The sentinels, in the configured order.
    sentinels: Vec<Arc<SentinelLink>>,
    /// Indexes into `sentinels`, in preference order: the sentinel that last named a master
    /// that answered `ROLE` as one comes first (Redis's guidelines for Sentinel clients).
    order: Mutex<Vec<usize>>,
    sentinel_options: NodeOptions,
    pub(super) master_name: String,
    /// How to reach a data node, and whether over TLS.
    node_options: NodeOptions,
    node_tls: bool,
    /// When the current master was last connected to again after its connection was
    /// refused for its credentials: at most once a second ([`RECONNECT_INTERVAL`]).
    reconnected: Mutex<Option<std::time::Instant>>,
}

/// The least time between two new connections to the same master whose connection is
/// refused for its credentials (each one a failed `AUTH` in its ACL log while the user is
/// missing; looks come every 25–100 ms while calls fail).
const RECONNECT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

impl Looker {
    /// The sentinels at `urls`, reached with `sentinel_options`.
    ///
    /// # Errors
    /// An unparsable URL, or a TLS option on a plaintext one.
    pub(super) fn new(
        urls: &[String],
        sentinel_options: NodeOptions,
        master_name: String,
        node_options: NodeOptions,
        node_tls: bool,
    ) -> Result<Looker, StoreError> {
        let sentinels = urls
            .iter()
            .map(|url| SentinelLink::new(url, &sentinel_options).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Looker {
            order: Mutex::new((0..sentinels.len()).collect()),
            sentinels,
            sentinel_options,
            master_name,
            node_options,
            node_tls,
            reconnected: Mutex::new(None),
        })
    }

    /// Whether the current master may be connected to again now (and, if so, notes it).
    fn may_reconnect(&self) -> bool {
        let mut last = self
            .reconnected
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if last.is_some_and(|at| at.elapsed() < RECONNECT_INTERVAL) {
            return false;
        }
        *last = Some(std::time::Instant::now());
        true
    }

    /// The sentinels, in the configured order.
    pub(super) fn sentinels(&self) -> &[Arc<SentinelLink>] {
        &self.sentinels
    }

    /// How the sentinels are reached.
    pub(super) fn sentinel_options(&self) -> &NodeOptions {
        &self.sentinel_options
    }

    /// The master: `None` when `current` still is (named by the sentinels, or at least by the
    /// best-ranked of them that answers, and answering `ROLE` as a master), else a new
    /// connection to the node that is (the same node too, when `current`'s connection is
    /// refused for its credentials). Every sentinel is asked at once; the addresses they
    /// name are tried in [`rank`]'s order (`hint`, an announced new master, first) until one
    /// answers as a master, and the sentinel that named it goes to the front of the order.
    ///
    /// # Errors
    /// [`StoreError::Protocol`] when every sentinel answers that it knows no master by this
    /// name; else the best-ranked address's failure, or why no sentinel named one.
    pub(super) async fn find(
        &self,
        current: Option<&Current>,
        hint: Option<Addr>,
    ) -> Result<Option<Current>, StoreError> {
        let (named, failure) = self.ask_all().await;
        let ranked = rank(&named, hint.as_ref());
        if ranked.is_empty() {
            return Err(failure.unwrap_or_else(|| {
                StoreError::Protocol("no sentinel given (sentinel)".to_owned())
            }));
        }
        let mut first_error = None;
        for (addr, by) in ranked {
            let found = match current {
                Some(current) if current.addr == addr => {
                    // Briefly: a dead master's connection manager retries its reconnection
                    // for a while, and the look must not wait for it while the sentinels may
                    // be naming a new one.
                    let mut manager = current.manager.clone();
                    let answered =
                        tokio::time::timeout(MAX_LOOK_INTERVAL, is_master(&mut manager, &addr));
                    match answered.await {
                        // A reconnection refused for its credentials (the user deleted, then
                        // made again) stays the manager's connection for good: the `redis`
                        // crate connects again only after an I/O error
                        // (`store/single_node.rs`). A new connection to the same master.
                        // Tried once (it is tried again a second later).
                        Ok(Err(StoreError::Auth(_))) if self.may_reconnect() => {
                            self.connect_master(addr.clone(), 0).await.map(Some)
                        }
                        Ok(result) => result.map(|()| None),
                        Err(_) => Err(StoreError::Timeout(MAX_LOOK_INTERVAL)),
                    }
                }
                _ => self.connect_master(addr.clone(), 2).await.map(Some),
            };
            match found {
                Ok(found) => {
                    if let Some(sentinel) = by {
                        self.prefer(sentinel);
                    }
                    return Ok(found);
                }
                Err(e) => {
                    tracing::debug!(master = %self.master_name, addr = %describe(&addr), cause = %e, "sentinel: a named node is not a usable master");
                    first_error.get_or_insert(e);
                }
            }
        }
        Err(first_error.unwrap_or_else(|| StoreError::Protocol("no master".to_owned())))
    }

    /// Every sentinel's answer at once (each within the sentinels' connect timeout): the
    /// plausible addresses named, each with its sentinel, in preference order; and, for when
    /// none is, why: the first failure of a sentinel (no answer, or not an address), else
    /// [`StoreError::Protocol`] when every sentinel answered that it knows no master by this
    /// name (a configuration error, not a passing one).
    async fn ask_all(&self) -> (Vec<(usize, Addr)>, Option<StoreError>) {
        let order = self
            .order
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let within = self.sentinel_options.connect_timeout;
        let mut asks = JoinSet::new();
        for (rank, &sentinel) in order.iter().enumerate() {
            let link = Arc::clone(&self.sentinels[sentinel]);
            let name = self.master_name.clone();
            asks.spawn(async move { (rank, sentinel, link.ask(&name, within).await) });
        }
        let mut answers = Vec::with_capacity(order.len());
        while let Some(joined) = asks.join_next().await {
            match joined {
                Ok(answer) => answers.push(answer),
                Err(e) => tracing::error!(cause = %e, "sentinel: asking a sentinel failed"),
            }
        }
        answers.sort_by_key(|(rank, _, _)| *rank);
        let mut named = Vec::with_capacity(answers.len());
        let mut unknown = None;
        let mut failure = None;
        for (_, sentinel, answer) in answers {
            let link = &self.sentinels[sentinel];
            match answer {
                Ok(Some(addr)) if plausible(&addr) => named.push((sentinel, addr)),
                Ok(Some(addr)) => {
                    tracing::debug!(sentinel = %link.name(), answer = ?addr, "sentinel: not an address; ignored");
                    failure.get_or_insert(StoreError::Connection(
                        format!(
                            "sentinel {} named {:?}, which is not an address",
                            link.name(),
                            describe(&addr)
                        )
                        .into(),
                    ));
                }
                Ok(None) => {
                    unknown.get_or_insert(StoreError::Protocol(format!(
                        "sentinel {} knows no master named {:?} (sentinel_master)",
                        link.name(),
                        self.master_name
                    )));
                }
                Err(e) => {
                    tracing::debug!(sentinel = %link.name(), cause = %e, "sentinel: no answer");
                    failure.get_or_insert(e);
                }
            }
        }
        (named, failure.or(unknown))
    }

    /// Puts `sentinel` first in the preference order.
    fn prefer(&self, sentinel: usize) {
        let mut order = self
            .order
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(at) = order.iter().position(|&s| s == sentinel)
            && at > 0
        {
            let s = order.remove(at);
            order.insert(0, s);
            tracing::debug!(sentinel = %self.sentinels[sentinel].name(), "sentinel: asked first from now on");
        }
    }

    /// A connection to `addr`, checked to be a master, within [`Looker::verify_timeout`]: a
    /// node that accepts the connection and then answers nothing (frozen, overloaded) must
    /// not hold the follower, which has other addresses to try and calls failing meanwhile.
    /// The first connection is tried `1 + retries` times.
    async fn connect_master(&self, addr: Addr, retries: usize) -> Result<Current, StoreError> {
        let within = self.verify_timeout();
        let connected = async {
            let info = NodeOptions::addr(&addr.0, addr.1, self.node_tls).into_connection_info();
            let info = self.node_options.apply(info.map_err(classify)?)?;
            let client = self.node_options.client(info)?;
            let mut manager = self
                .node_options
                .manager_retrying(client.clone(), retries)
                .await?;
            is_master(&mut manager, &addr).await?;
            Ok(Current {
                addr: addr.clone(),
                client,
                manager,
            })
        };
        match tokio::time::timeout(within, connected).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Connection(
                format!(
                    "{} did not connect and answer ROLE within {within:?}",
                    describe(&addr)
                )
                .into(),
            )),
        }
    }

    /// How long a named node may take to connect and answer `ROLE`: twice the connect
    /// timeout (the connection, then one round trip).
    fn verify_timeout(&self) -> Duration {
        self.node_options.connect_timeout.saturating_mul(2)
    }
}

/// `Ok` when the node at `addr` answers `ROLE` as a master.
async fn is_master(manager: &mut ConnectionManager, addr: &Addr) -> Result<(), StoreError> {
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
