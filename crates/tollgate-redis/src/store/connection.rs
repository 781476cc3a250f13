//! [`Connection`]: how the store reaches Redis (one node, the master behind Sentinel, or a
//! cluster), and the one command it runs there.

use std::sync::Arc;

use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ErrorKind, ServerErrorKind, Value};

use super::direct_nodes::DirectNodes;
use super::single_node::SingleNode;
use crate::node_options::NodeOptions;
use crate::sentinel::Sentinel;

#[derive(Clone)]
pub(crate) enum Connection {
    /// One node, its connection made again when the `redis` crate will not.
    Single(Arc<SingleNode>),
    /// The master a Sentinel group names, followed through failovers.
    Sentinel(Arc<Sentinel>),
    Cluster(Cluster),
}

/// A cluster: the `redis` crate's connection, routed by slot, and the store's own
/// connections to nodes outside the crate's map that an `ASK` names (`direct_nodes.rs`).
#[derive(Clone)]
pub(crate) struct Cluster {
    routed: ClusterConnection,
    direct: Arc<DirectNodes>,
}

impl Cluster {
    /// `routed`, the crate's connection, and what it takes to reach any other node as it
    /// reaches its own (`tls`: the nodes' URLs are `rediss://`).
    pub(crate) fn new(routed: ClusterConnection, options: NodeOptions, tls: bool) -> Cluster {
        Cluster {
            routed,
            direct: Arc::new(DirectNodes::new(options, tls)),
        }
    }

    /// The `redis` crate's connection, routed by slot.
    pub(crate) fn routed(&self) -> ClusterConnection {
        self.routed.clone()
    }

    /// How many connections the store made to nodes outside the crate's map (for the tests).
    pub(crate) fn direct_connections(&self) -> u64 {
        self.direct.made()
    }
}

impl Connection {
    /// Runs `cmd` on the node (the slot's node on a cluster; the current master behind
    /// Sentinel).
    ///
    /// On a cluster, an `ASK` redirection (the slot is being moved and the key is already on
    /// the new node) that the `redis` crate could not follow is followed here, with `ASKING`
    /// and the command sent as one pipeline: the crate sends `ASKING` and the command as two
    /// requests on the node's multiplexed connection, so under concurrency another call's
    /// command can take the one-command `ASKING` flag, and the call meets `MOVED`/`ASK` again
    /// until its retries run out (seen with 16 tasks on one moving key). A node the crate has
    /// no connection to (a new master that owns no slot yet, during its first slot move) is
    /// reached on the store's own connection (`direct_nodes.rs`).
    pub(super) async fn query<T: redis::FromRedisValue>(&self, cmd: &Cmd) -> redis::RedisResult<T> {
        match self {
            Connection::Single(c) => {
                let result = cmd.query_async(&mut c.manager()).await;
                if let Err(e) = &result {
                    c.failed(e);
                }
                result
            }
            Connection::Sentinel(s) => cmd.query_async(&mut s.manager()).await,
            Connection::Cluster(c) => match cmd.query_async(&mut c.routed()).await {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::Ask) => {
                    // Boxed: rare, and inline it would make every call's state larger.
                    Box::pin(asking(c, cmd, &e)).await.unwrap_or(Err(e))
                }
                other => other,
            },
        }
    }

    /// Runs `pipe` as [`Connection::query`] does `cmd`.
    pub(super) async fn query_pipe<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> redis::RedisResult<T> {
        match self {
            Connection::Single(c) => {
                let result = pipe.query_async(&mut c.manager()).await;
                if let Err(e) = &result {
                    c.failed(e);
                }
                result
            }
            Connection::Sentinel(s) => pipe.query_async(&mut s.manager()).await,
            Connection::Cluster(c) => pipe.query_async(&mut c.routed()).await,
        }
    }
}

/// `cmd` sent to the node an `ASK` error names, right after `ASKING`, in one pipeline;
/// `None` when the error names no node. Through the crate's connection to that node, or, when
/// the crate has none (the node owns no slot, so `CLUSTER SLOTS` leaves it out), through the
/// store's own, which is then used first (asking the crate in vain has it fetch the slot map
/// again each time).
async fn asking<T: redis::FromRedisValue>(
    cluster: &Cluster,
    cmd: &Cmd,
    ask: &redis::RedisError,
) -> Option<redis::RedisResult<T>> {
    let (addr, _slot) = ask.redirect_node()?;
    let (host, port) = addr.rsplit_once(':')?;
    let port = port.parse().ok()?;
    let mut pipe = redis::pipe();
    pipe.cmd("ASKING");
    pipe.add_command(cmd.clone());
    let reply = if cluster.direct.has(addr) {
        cluster.direct.query(host, port, &pipe, 1).await
    } else {
        let node = redis::cluster_routing::SingleNodeRoutingInfo::ByAddress {
            host: host.to_owned(),
            port,
        };
        match cluster
            .routed()
            .route_pipeline(pipe.clone(), 1, 1, node)
            .await
        {
            Err(e) if e.kind() == ErrorKind::ClusterConnectionNotFound => {
                tracing::debug!(node = %addr, "ASK names a node outside the cluster's map; connecting to it");
                cluster.direct.query(host, port, &pipe, 1).await
            }
            Err(e) => Err(e),
            Ok(values) => match values.into_iter().next().unwrap_or(Value::Nil) {
                value @ Value::ServerError(_) => value.extract_error(),
                other => Ok(other),
            },
        }
    };
    Some(reply.and_then(|value| T::from_redis_value(value).map_err(Into::into)))
}
