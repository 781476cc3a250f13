//! [`SingleNode`]: the connection to one Redis node, made again when the `redis` crate will
//! not make it again.
//!
//! The crate's `ConnectionManager` connects again after an I/O error only. When a
//! reconnection is refused for another reason, its credentials above all (the store's ACL
//! user deleted, which also closes its connections, then made again; a password rotated on
//! the server before the client), the manager keeps that refusal as its connection: every
//! later call gets it at once, without a round trip, and the store stays down until the
//! process restarts. An audit saw `/readyz` answer `store unavailable (auth)` for minutes
//! after the user was back.
//!
//! So a call that fails with what may be such a refusal (`refused_while_connecting`) has a
//! new manager made, in the background, at most once a second; the call itself is answered
//! by the limits' policies as any failure. The new manager takes the old one's place only
//! once it is connected. A command refused for its permissions (`NOPERM`) is not such a
//! refusal: its connection works.

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use redis::RedisError;
use redis::aio::ConnectionManager;

use crate::error::refused_while_connecting;
use crate::node_options::NodeOptions;

/// The least time between two new connections.
const RENEW_INTERVAL: Duration = Duration::from_secs(1);

/// One node's connection, and what it takes to make it again.
pub(crate) struct SingleNode {
    manager: RwLock<ConnectionManager>,
    client: redis::Client,
    options: NodeOptions,
    /// When a new connection was last begun.
    renewed: Mutex<Option<Instant>>,
}

impl SingleNode {
    pub(crate) fn new(
        manager: ConnectionManager,
        client: redis::Client,
        options: NodeOptions,
    ) -> Arc<SingleNode> {
        Arc::new(SingleNode {
            manager: RwLock::new(manager),
            client,
            options,
            renewed: Mutex::new(None),
        })
    }

    /// The connection to send a call on.
    pub(crate) fn manager(&self) -> ConnectionManager {
        self.manager
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// A call failed with `error`: when it may be a refusal the manager keeps, a new
    /// connection is made in the background (at most one a second).
    pub(crate) fn failed(self: &Arc<Self>, error: &RedisError) {
        if !refused_while_connecting(error) {
            return;
        }
        {
            let mut renewed = self
                .renewed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if renewed.is_some_and(|at| at.elapsed() < RENEW_INTERVAL) {
                return;
            }
            *renewed = Some(Instant::now());
        }
        let node = Arc::clone(self);
        tokio::spawn(async move {
            match node.options.manager(node.client.clone()).await {
                Ok(manager) => {
                    *node
                        .manager
                        .write()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = manager;
                    tracing::info!("redis: connected again after a refused connection");
                }
                Err(cause) => {
                    tracing::debug!(%cause, "redis: connecting again was refused; trying again after a later failure");
                }
            }
        });
    }
}
