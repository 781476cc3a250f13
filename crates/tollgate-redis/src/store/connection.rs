//! [`Connection`]: how the store reaches Redis (one node, the master behind Sentinel, or a
//! cluster), and the one command it runs there.

use std::sync::Arc;

use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ErrorKind, ServerErrorKind, Value};

use super::single_node::SingleNode;
use crate::sentinel::Sentinel;

#[derive(Clone)]
pub(crate) enum Connection {
    /// One node, its connection made again when the `redis` crate will not.
    Single(Arc<SingleNode>),
    /// The master a Sentinel group names, followed through failovers.
    Sentinel(Arc<Sentinel>),
    Cluster(ClusterConnection),
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
    /// until its retries run out (seen with 16 tasks on one moving key).
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
            Connection::Cluster(c) => match cmd.query_async(&mut c.clone()).await {
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
            Connection::Cluster(c) => pipe.query_async(&mut c.clone()).await,
        }
    }
}

/// `cmd` sent to the node an `ASK` error names, right after `ASKING`, in one pipeline;
/// `None` when the error names no node.
async fn asking<T: redis::FromRedisValue>(
    cluster: &ClusterConnection,
    cmd: &Cmd,
    ask: &redis::RedisError,
) -> Option<redis::RedisResult<T>> {
    let (addr, _slot) = ask.redirect_node()?;
    let (host, port) = addr.rsplit_once(':')?;
    let port = port.parse().ok()?;
    let mut pipe = redis::pipe();
    pipe.cmd("ASKING");
    pipe.add_command(cmd.clone());
    let node = redis::cluster_routing::SingleNodeRoutingInfo::ByAddress {
        host: host.to_owned(),
        port,
    };
    let replies = cluster.clone().route_pipeline(pipe, 1, 1, node).await;
    Some(replies.and_then(|values| {
        let value = values.into_iter().next().unwrap_or(Value::Nil);
        let value = match value {
            Value::ServerError(_) => value.extract_error()?,
            other => other,
        };
        T::from_redis_value(value).map_err(Into::into)
    }))
}
