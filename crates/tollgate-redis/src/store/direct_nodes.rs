//! [`DirectNodes`]: on a cluster, the store's own connections to the nodes an `ASK` names
//! that the `redis` crate has no connection to.
//!
//! Scaling out adds a master that owns no slot (`redis-cli --cluster add-node`), then moves
//! slots to it. While its first slot moves, the source answers `ASK <new master>` for the
//! keys already moved, but the crate connects only to the nodes `CLUSTER SLOTS` names, which
//! leaves out a master with no slot: a call routed there fails at once
//! (`ClusterConnectionNotFound`), and has the crate ask for the slot map again. An audit saw
//! every check on a moved key answered by its limit's failure policy for the whole move
//! (3.9 s for a slot of 300k keys), and the breaker open when that key carried the traffic.
//!
//! So the store connects to such a node itself, with the options of every other node (TLS,
//! credentials, timeouts: [`NodeOptions`]), and keeps a few of these connections by address
//! ([`MAX_NODES`]): a move sends its calls on one connection made once, and, once the
//! connection is kept, without asking the crate first (which would ask for the slot map
//! again on every call). A connection that fails is dropped; the next call makes a new one.
//! Such a node also lacks the scripts (the store loads them through the crate, on the nodes
//! it knows): on `NOSCRIPT` they are loaded on this connection and the call sent once more.
//!
//! A rare path: its callers box it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use redis::aio::{ConnectionLike as _, ConnectionManager};
use redis::{ErrorKind, IntoConnectionInfo as _, Pipeline, RedisError, ServerErrorKind, Value};
use tokio::sync::OnceCell;

use crate::node_options::NodeOptions;
use crate::script::all_scripts;

/// The most nodes a connection is kept to: a move has one target, and a reshard moves
/// slots to a new master one at a time.
pub(crate) const MAX_NODES: usize = 4;

/// One node's connection, made by the first call that needs it (the others wait for it).
type Node = Arc<OnceCell<ConnectionManager>>;

/// Connections to nodes outside the `redis` crate's map, by `host:port`, the newest last.
pub(crate) struct DirectNodes {
    options: NodeOptions,
    /// Whether the cluster's nodes are reached over TLS (its URLs are `rediss://`).
    tls: bool,
    nodes: Mutex<VecDeque<(String, Node)>>,
    /// Connections made, in all.
    made: std::sync::atomic::AtomicU64,
}

impl DirectNodes {
    pub(crate) fn new(options: NodeOptions, tls: bool) -> DirectNodes {
        DirectNodes {
            options,
            tls,
            nodes: Mutex::new(VecDeque::with_capacity(MAX_NODES)),
            made: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Whether a connection to `addr` (`host:port`) is kept, made or being made.
    pub(crate) fn has(&self, addr: &str) -> bool {
        self.lock().iter().any(|(a, _)| a == addr)
    }

    /// How many connections were made, in all (for the tests).
    pub(crate) fn made(&self) -> u64 {
        self.made.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The reply to `pipe`'s command at `offset` (server errors as errors), `pipe` sent to
    /// the node at `host:port` on the store's own connection, made when none is kept. On
    /// `NOSCRIPT`, every script is loaded there and `pipe` sent once more.
    pub(crate) async fn query(
        &self,
        host: &str,
        port: u16,
        pipe: &Pipeline,
        offset: usize,
    ) -> redis::RedisResult<Value> {
        let addr = format!("{host}:{port}");
        let node = self.node(&addr);
        let mut manager = match node.get_or_try_init(|| self.connect(host, port)).await {
            Ok(manager) => manager.clone(),
            Err(e) => {
                self.drop_node(&addr, &node);
                return Err(e);
            }
        };
        let mut reply = send(&mut manager, pipe, offset).await;
        if let Err(e) = &reply
            && e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
        {
            tracing::debug!(node = %addr, "loading the scripts on a node outside the cluster's map");
            reply = match load_scripts(&mut manager).await {
                Ok(()) => send(&mut manager, pipe, offset).await,
                Err(e) => Err(e),
            };
        }
        if let Err(e) = &reply
            && !matches!(e.kind(), ErrorKind::Server(_))
        {
            // The node is gone, or the connection is: the next call connects again.
            self.drop_node(&addr, &node);
        }
        reply
    }

    /// The connection kept to `addr`, or a new entry for it (the oldest dropped beyond
    /// [`MAX_NODES`]).
    fn node(&self, addr: &str) -> Node {
        let mut nodes = self.lock();
        if let Some((_, node)) = nodes.iter().find(|(a, _)| a == addr) {
            return Arc::clone(node);
        }
        if nodes.len() >= MAX_NODES {
            nodes.pop_front();
        }
        let node = Node::default();
        nodes.push_back((addr.to_owned(), Arc::clone(&node)));
        node
    }

    /// Forgets `node`, the connection to `addr`, unless another has taken its place.
    fn drop_node(&self, addr: &str, node: &Node) {
        self.lock()
            .retain(|(a, n)| !(a == addr && Arc::ptr_eq(n, node)));
    }

    /// A connection to `host:port` as to any node of the cluster.
    async fn connect(&self, host: &str, port: u16) -> redis::RedisResult<ConnectionManager> {
        let info = NodeOptions::addr(host, port, self.tls).into_connection_info()?;
        let connecting = async {
            let info = self.options.apply(info)?;
            let client = self.options.client(info)?;
            self.options.manager(client).await
        };
        let manager = connecting.await.map_err(|e| {
            let message = format!("cannot connect to {host}:{port}, named by ASK: {e}");
            RedisError::from((ErrorKind::Io, "cluster node", message))
        })?;
        self.made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(node = %format_args!("{host}:{port}"), "redis: connected to a cluster node named by ASK, outside the slot map");
        Ok(manager)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(String, Node)>> {
        self.nodes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `pipe` on `manager`: the reply at `offset`, a server error as an error.
async fn send(
    manager: &mut ConnectionManager,
    pipe: &Pipeline,
    offset: usize,
) -> redis::RedisResult<Value> {
    let values = manager.req_packed_commands(pipe, offset, 1).await?;
    match values.into_iter().next().unwrap_or(Value::Nil) {
        value @ Value::ServerError(_) => value.extract_error(),
        other => Ok(other),
    }
}

/// Loads every script on `manager`'s node.
async fn load_scripts(manager: &mut ConnectionManager) -> redis::RedisResult<()> {
    for script in all_scripts() {
        script.load_async(manager).await?;
    }
    metrics::counter!("tollgate_redis_script_loads_total").increment(1);
    Ok(())
}
