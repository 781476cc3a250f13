//! A three-master Redis Cluster spawned for tests, without replicas.
//!
//! Three `redis-server --cluster-enabled yes` processes on free ports (each with its bus port
//! free too), joined by `redis-cli --cluster create`, and ready once every node reports
//! `cluster_state:ok`. Replicas and failover are out of scope: the store's cluster tests are
//! about slots (routing, cross-slot requests), not about availability.

use std::fmt;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::redis_server::{INSTALL_HINT, RedisServer, command, free_port};

/// How long the cluster gets to report `cluster_state:ok` on every node.
pub const CLUSTER_TIMEOUT: Duration = Duration::from_secs(20);

/// Three Redis Cluster masters owned by this process; dropped, they are killed.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Spawns three masters, creates the cluster over them and waits until it is usable.
    ///
    /// # Panics
    /// When a binary is missing (with how to install it), or the cluster does not form within
    /// [`CLUSTER_TIMEOUT`] (with every node's log).
    pub fn start() -> RedisCluster {
        let mut nodes = Vec::with_capacity(3);
        for _ in 0..3 {
            let dir = tempfile::Builder::new()
                .prefix("tollgate-cluster-")
                .tempdir()
                .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
            let nodes_file = dir.path().join("nodes.conf");
            let nodes_file = nodes_file.to_string_lossy().into_owned();
            let port = free_port(true);
            nodes.push(RedisServer::start_in(
                dir,
                port,
                &[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    &nodes_file,
                    "--cluster-node-timeout",
                    "5000",
                ],
            ));
        }
        let cluster = RedisCluster { nodes };
        cluster.create();
        cluster.wait_ok();
        cluster
    }

    fn create(&self) {
        let cli = std::env::var("REDIS_CLI_BIN").unwrap_or_else(|_| "redis-cli".to_owned());
        let mut cmd = Command::new(&cli);
        cmd.arg("--cluster").arg("create");
        for n in &self.nodes {
            cmd.arg(format!("127.0.0.1:{}", n.port()));
        }
        cmd.args(["--cluster-replicas", "0", "--cluster-yes"]);
        let out = match cmd.output() {
            Ok(o) => o,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                panic!("{cli} not found: {INSTALL_HINT} (or set REDIS_CLI_BIN)")
            }
            Err(e) => panic!("cannot run {cli}: {e}"),
        };
        if !out.status.success() {
            panic!(
                "{cli} --cluster create failed ({}):\n{}\n{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                self.logs()
            );
        }
    }

    fn wait_ok(&self) {
        let deadline = Instant::now() + CLUSTER_TIMEOUT;
        loop {
            let all_ok = self.nodes.iter().all(|n| {
                command(n.port(), &["CLUSTER", "INFO"])
                    .is_ok_and(|info| info.contains("cluster_state:ok"))
            });
            if all_ok {
                return;
            }
            if Instant::now() > deadline {
                panic!("cluster not ok within {CLUSTER_TIMEOUT:?}\n{}", self.logs());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Every node's URL, `redis://127.0.0.1:<port>/`.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The nodes, to send commands to one of them or read its log.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Every node's log, for failure messages.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("--- node {} ---\n{}", n.port(), n.log()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl fmt::Debug for RedisCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisCluster")
            .field("nodes", &self.nodes)
            .finish()
    }
}
