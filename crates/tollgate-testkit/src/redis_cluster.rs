//! A Redis Cluster spawned for tests: three masters, optionally a replica each, optionally
//! over TLS.
//!
//! `redis-server --cluster-enabled yes` processes on free ports (each with its bus port free
//! too), joined by `redis-cli --cluster create`, and ready once every node reports
//! `cluster_state:ok` (and, with replicas, every master has its replica online and every node
//! sees all the others healthy).
//!
//! [`RedisCluster::start`] is what the store's slot tests use (routing, cross-slot requests):
//! no replicas, the default-ish 5 s node timeout. The availability tests need more, so the
//! harness also drives what happens to a cluster in production, from outside, with the
//! server's own commands: a master killed and its replica promoted
//! ([`RedisCluster::start_with_replicas`], [`RedisCluster::kill_node`],
//! [`RedisCluster::wait_for_failover`], with a 1 s node timeout so that it takes seconds), and
//! a slot resharded live, keys and all, in steps a test can interleave traffic with
//! ([`RedisCluster::begin_slot_move`]), to a master that serves slots already or to one just
//! added, with none yet, as when scaling out ([`RedisCluster::add_master`]).
//!
//! A TLS cluster ([`RedisCluster::start_tls`], `--tls-cluster yes`) keeps each node's
//! plaintext port for the harness. Redis 7.0 answers each connection in its own kind:
//! `CLUSTER NODES`, `CLUSTER SLOTS` and `MOVED` name plaintext ports to a plaintext client
//! and TLS ports to a TLS one; the bus port is the TLS port + 10000, and `MIGRATE` must be
//! pointed at the TLS port.

use std::collections::HashMap;
use std::fmt;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::cluster_node::ClusterNode;
use crate::redis_server::{INSTALL_HINT, RedisServer, free_port};
use crate::resp::command;
use crate::{SlotMove, TlsFiles, TlsServer};

/// How long the cluster gets to report `cluster_state:ok` on every node.
pub const CLUSTER_TIMEOUT: Duration = Duration::from_secs(20);

/// The node timeout of a cluster with replicas: a killed master is marked failed after about
/// this long, and its replica promoted a second or two later.
const FAILOVER_NODE_TIMEOUT_MS: u32 = 1000;

/// Redis Cluster nodes owned by this process; dropped, they are killed.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    /// Replicas per master.
    replicas: usize,
    /// Whether the nodes talk TLS to each other (`--tls-cluster yes`).
    tls: bool,
    /// The first slot of each range a master served when [`RedisCluster::kill_node`] killed
    /// it, by its port: what [`RedisCluster::wait_for_failover`] watches change hands.
    killed_slots: HashMap<u16, Vec<u16>>,
    /// Every node's `cluster-node-timeout`, for [`RedisCluster::add_master`].
    node_timeout_ms: u32,
}

impl RedisCluster {
    /// Spawns three masters, creates the cluster over them and waits until it is usable.
    ///
    /// # Panics
    /// When a binary is missing (with how to install it), or the cluster does not form within
    /// [`CLUSTER_TIMEOUT`] (with every node's log).
    pub fn start() -> RedisCluster {
        RedisCluster::launch(3, 0, 5000, None)
    }

    /// Spawns three masters and three replicas (one each, `--cluster-replicas 1`) with a
    /// 1 s `cluster-node-timeout`, and waits until every node reports `cluster_state:ok`,
    /// every master has its replica online, and every node sees all six healthy. A killed
    /// master's replica takes over within a few seconds.
    ///
    /// # Panics
    /// As [`RedisCluster::start`].
    pub fn start_with_replicas() -> RedisCluster {
        RedisCluster::launch(3, 1, FAILOVER_NODE_TIMEOUT_MS, None)
    }

    /// Spawns three masters speaking TLS to clients (on [`RedisServer::tls_port`], no client
    /// certificate asked) and to each other (`--tls-cluster yes`, `--tls-replication yes`),
    /// created over their TLS ports. Each keeps its plaintext port for the harness.
    ///
    /// # Panics
    /// As [`RedisCluster::start`].
    pub fn start_tls(tls: &TlsFiles) -> RedisCluster {
        RedisCluster::launch(3, 0, 5000, Some(tls))
    }

    /// [`RedisCluster::start_tls`] with a replica per master and the 1 s node timeout of
    /// [`RedisCluster::start_with_replicas`]: replication, the bus and failover over TLS.
    ///
    /// # Panics
    /// As [`RedisCluster::start`].
    pub fn start_tls_with_replicas(tls: &TlsFiles) -> RedisCluster {
        RedisCluster::launch(3, 1, FAILOVER_NODE_TIMEOUT_MS, Some(tls))
    }

    fn launch(
        masters: usize,
        replicas: usize,
        node_timeout_ms: u32,
        tls: Option<&TlsFiles>,
    ) -> RedisCluster {
        let count = masters * (1 + replicas);
        let mut nodes = Vec::with_capacity(count);
        for _ in 0..count {
            nodes.push(RedisCluster::spawn_node(node_timeout_ms, tls));
        }
        let cluster = RedisCluster {
            nodes,
            replicas,
            tls: tls.is_some(),
            killed_slots: HashMap::new(),
            node_timeout_ms,
        };
        cluster.create(tls);
        cluster.wait_ok();
        cluster
    }

    /// A `redis-server --cluster-enabled yes` on free ports, in no cluster yet.
    fn spawn_node(node_timeout_ms: u32, tls: Option<&TlsFiles>) -> RedisServer {
        RedisServer::start_on_free_ports("tollgate-cluster-", |dir| {
            let nodes_file = dir.join("nodes.conf").to_string_lossy().into_owned();
            let mut args = vec![
                "--cluster-enabled".to_owned(),
                "yes".to_owned(),
                "--cluster-config-file".to_owned(),
                nodes_file,
                "--cluster-node-timeout".to_owned(),
                node_timeout_ms.to_string(),
            ];
            // The bus listens on the client port + 10000: the TLS port's with
            // --tls-cluster.
            let (port, tls_port) = match tls {
                None => (free_port(true), None),
                Some(tls) => {
                    let port = free_port(false);
                    let tls_port = free_port(true);
                    args.extend(TlsServer::default().args(tls, tls_port));
                    args.extend(
                        ["--tls-cluster", "yes", "--tls-replication", "yes"].map(str::to_owned),
                    );
                    (port, Some(tls_port))
                }
            };
            (port, tls_port, args)
        })
    }

    /// Adds a master that owns no slot, as `redis-cli --cluster add-node` does before a
    /// reshard: a node started as the others were, met by the cluster (`CLUSTER MEET`), and
    /// ready once every node sees every other healthy, itself included, and it reports
    /// `cluster_state:ok`. Returns its port, for [`RedisCluster::begin_slot_move`].
    ///
    /// Until it owns a slot, `CLUSTER SLOTS` leaves it out: a client that learns the nodes
    /// from there (the `redis` crate) has no connection to it, yet the first slot moving to
    /// it has the source answer `ASK` naming it.
    ///
    /// # Panics
    /// On a TLS cluster (its nodes' TLS files are not kept), when a command fails, or when the
    /// node is not seen within [`CLUSTER_TIMEOUT`] (with every node's view and log).
    pub fn add_master(&mut self) -> u16 {
        assert!(!self.tls, "add_master: plaintext clusters only");
        let node = RedisCluster::spawn_node(self.node_timeout_ms, None);
        let port = node.port();
        let meet = self
            .any_live(None)
            .cmd(&["CLUSTER", "MEET", "127.0.0.1", &port.to_string()]);
        assert!(
            meet.starts_with("+OK"),
            "CLUSTER MEET 127.0.0.1 {port}: {meet:?}"
        );
        self.nodes.push(node);
        let deadline = Instant::now() + CLUSTER_TIMEOUT;
        while !self.all_see_all() {
            if Instant::now() > deadline {
                panic!(
                    "the new master on port {port} did not join within {CLUSTER_TIMEOUT:?}\n{}\n{}",
                    self.views(),
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        port
    }

    /// Whether every running node reports `cluster_state:ok` and sees every running node
    /// (itself included) healthy.
    fn all_see_all(&self) -> bool {
        let ports: Vec<u16> = self.live(None).map(RedisServer::port).collect();
        self.live(None).all(|n| {
            let ok = command(n.port(), &["CLUSTER", "INFO"])
                .is_ok_and(|info| info.contains("cluster_state:ok"));
            ok && self.nodes_text(n).is_ok_and(|text| {
                let view = ClusterNode::parse_all(&bulk_text(&text));
                ports
                    .iter()
                    .all(|&p| view.iter().any(|v| v.port == p && v.is_healthy()))
            })
        })
    }

    fn create(&self, tls: Option<&TlsFiles>) {
        let cli = std::env::var("REDIS_CLI_BIN").unwrap_or_else(|_| "redis-cli".to_owned());
        let mut cmd = Command::new(&cli);
        if let Some(tls) = tls {
            cmd.arg("--tls").arg("--cacert").arg(tls.ca());
        }
        cmd.arg("--cluster").arg("create");
        for n in &self.nodes {
            cmd.arg(format!("127.0.0.1:{}", self.cluster_port(n)));
        }
        cmd.args([
            "--cluster-replicas",
            &self.replicas.to_string(),
            "--cluster-yes",
        ]);
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
            if all_ok && (self.replicas == 0 || self.replicas_settled()) {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "cluster not ok within {CLUSTER_TIMEOUT:?}\n{}\n{}",
                    self.views(),
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether every node sees every node healthy, the right number of masters, and each
    /// master with its replicas (whose link to it is up).
    fn replicas_settled(&self) -> bool {
        let masters = self.nodes.len() / (1 + self.replicas);
        let views_agree = self.nodes.iter().all(|n| {
            let Ok(text) = self.nodes_text(n) else {
                return false;
            };
            let view = ClusterNode::parse_all(&bulk_text(&text));
            view.len() == self.nodes.len()
                && view.iter().all(ClusterNode::is_healthy)
                && view.iter().filter(|v| v.has("master")).count() == masters
                && view.iter().filter(|v| v.has("master")).all(|m| {
                    view.iter()
                        .filter(|r| r.master_id.as_deref() == Some(m.id.as_str()))
                        .count()
                        == self.replicas
                })
        });
        views_agree
            && self.nodes.iter().all(|n| {
                command(n.port(), &["INFO", "replication"]).is_ok_and(|info| {
                    if info.contains("role:master") {
                        info.contains(&format!("connected_slaves:{}", self.replicas))
                            && !info.contains("state=wait_bgsave")
                            && !info.contains("state=send_bulk")
                    } else {
                        info.contains("master_link_status:up")
                    }
                })
            })
    }

    /// Every node's URL, `redis://127.0.0.1:<port>/`.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Every node's TLS URL, `rediss://127.0.0.1:<tls_port>/`.
    ///
    /// # Panics
    /// When the cluster was started without TLS.
    pub fn tls_urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::tls_url).collect()
    }

    /// The nodes, to send commands to one of them or read its log.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The node listening on `port` (plaintext or TLS).
    ///
    /// # Panics
    /// When no node of this cluster has that port.
    pub fn node_by_port(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.listens_on(port))
            .unwrap_or_else(|| panic!("no node of this cluster listens on port {port}: {self:?}"))
    }

    /// A node's id (`CLUSTER MYID`).
    ///
    /// # Panics
    /// When the node cannot be reached.
    pub fn node_id(&self, node: &RedisServer) -> String {
        node.reply(&["CLUSTER", "MYID"])
            .text()
            .unwrap_or_else(|| panic!("CLUSTER MYID on port {}: no id", node.port()))
    }

    /// The slot of `key` (`CLUSTER KEYSLOT`, asked of a running node).
    ///
    /// # Panics
    /// When no node answers.
    pub fn slot_of(&self, key: &str) -> u16 {
        let reply = self.any_live(None).integer(&["CLUSTER", "KEYSLOT", key]);
        u16::try_from(reply).unwrap_or_else(|_| panic!("CLUSTER KEYSLOT {key}: {reply}"))
    }

    /// The master serving `slot`, as the first running node (other than a killed one) sees it
    /// in `CLUSTER NODES`.
    ///
    /// # Panics
    /// When no running node names a healthy master for the slot.
    pub fn master_for_slot(&self, slot: u16) -> &RedisServer {
        let asked = self.any_live(None);
        let text = asked.cmd(&["CLUSTER", "NODES"]);
        let owner = ClusterNode::parse_all(&bulk_text(&text))
            .into_iter()
            .find(|n| n.is_healthy_master() && n.serves(slot))
            .unwrap_or_else(|| {
                panic!(
                    "no healthy master serves slot {slot} in the view of port {}:\n{text}",
                    asked.port()
                )
            });
        self.node_by_port(owner.port)
    }

    /// The replicas of the master on `port`, as the first running node (other than that
    /// master) sees them in `CLUSTER NODES`.
    ///
    /// # Panics
    /// When no node has that port, or no other node is running.
    pub fn replicas_of(&self, port: u16) -> Vec<&RedisServer> {
        let master = self.node_by_port(port);
        let id = self.node_id(master);
        let text = self
            .any_live(Some(master.port()))
            .cmd(&["CLUSTER", "NODES"]);
        ClusterNode::parse_all(&bulk_text(&text))
            .into_iter()
            .filter(|n| n.master_id.as_deref() == Some(id.as_str()))
            .map(|n| self.node_by_port(n.port))
            .collect()
    }

    /// Kills the node on `port` (SIGKILL), as a crash would; a master's slots are remembered
    /// for [`RedisCluster::wait_for_failover`].
    ///
    /// # Panics
    /// When no node has that port, or the node's view cannot be read before the kill.
    pub fn kill_node(&mut self, port: u16) {
        let node = self.node_by_port(port);
        let port = node.port();
        if node.is_running() {
            let text = node.cmd(&["CLUSTER", "NODES"]);
            let slots = ClusterNode::parse_all(&bulk_text(&text))
                .into_iter()
                .find(|n| n.has("myself"))
                .map(|me| me.slots.iter().map(|&(first, _)| first).collect())
                .unwrap_or_default();
            self.killed_slots.insert(port, slots);
        }
        self.node_mut(port).kill();
    }

    /// Starts a killed node again on the same ports; it keeps its `nodes.conf` (so its id)
    /// but not its data, and rejoins the cluster (a failed-over master as a replica).
    ///
    /// # Panics
    /// When no node has that port, or it does not answer PING in time.
    pub fn restart_node(&mut self, port: u16) {
        self.node_mut(port).restart();
    }

    /// Waits until the slots the master on `killed_port` served (when
    /// [`RedisCluster::kill_node`] killed it, else as the running nodes still see them) are
    /// served by another master in the view of every running node, and every running node
    /// reports `cluster_state:ok`; returns the new master's port.
    ///
    /// # Panics
    /// When the killed node served no slots, or the failover does not happen `within` (with
    /// every node's view and log).
    pub fn wait_for_failover(&self, killed_port: u16, within: Duration) -> u16 {
        let killed_port = self.node_by_port(killed_port).port();
        let slots = match self.killed_slots.get(&killed_port) {
            Some(slots) => slots.clone(),
            None => {
                let text = self.any_live(Some(killed_port)).cmd(&["CLUSTER", "NODES"]);
                ClusterNode::parse_all(&bulk_text(&text))
                    .into_iter()
                    .find(|n| n.port == killed_port)
                    .map(|n| n.slots.iter().map(|&(first, _)| first).collect())
                    .unwrap_or_default()
            }
        };
        assert!(
            !slots.is_empty(),
            "the node on port {killed_port} served no slots: nothing to fail over"
        );
        let deadline = Instant::now() + within;
        loop {
            if let Some(port) = self.new_owner(killed_port, &slots) {
                return port;
            }
            if Instant::now() > deadline {
                panic!(
                    "no failover of the master on port {killed_port} (slots from {slots:?}) \
                     within {within:?}\n{}\n{}",
                    self.views(),
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The one master all running nodes (but `killed_port`) agree serves `slots`, when it is
    /// not `killed_port` and they all report `cluster_state:ok`.
    fn new_owner(&self, killed_port: u16, slots: &[u16]) -> Option<u16> {
        let mut owner = None;
        for n in self.live(Some(killed_port)) {
            let info = command(n.port(), &["CLUSTER", "INFO"]).ok()?;
            if !info.contains("cluster_state:ok") {
                return None;
            }
            let view = ClusterNode::parse_all(&bulk_text(&self.nodes_text(n).ok()?));
            for &slot in slots {
                let serving = view.iter().find(|v| v.has("master") && v.serves(slot))?;
                if serving.port == killed_port || owner.is_some_and(|o| o != serving.port) {
                    return None;
                }
                owner = Some(serving.port);
            }
        }
        owner
    }

    /// Moves `slot`, keys and all, to the master on `to_port`, live: the steps of
    /// [`RedisCluster::begin_slot_move`] without pausing in between.
    ///
    /// # Panics
    /// As [`RedisCluster::begin_slot_move`] and [`SlotMove::finish`].
    pub fn move_slot(&self, slot: u16, to_port: u16) {
        self.begin_slot_move(slot, to_port).finish();
    }

    /// Starts moving `slot` from its master to the master on `to_port`: `CLUSTER SETSLOT
    /// IMPORTING` on the target, then `MIGRATING` on the source. Keys move in batches
    /// ([`SlotMove::migrate_some`]) and the slot changes owner at [`SlotMove::finish`]; in
    /// between, clients get `ASK` redirects for keys already moved.
    ///
    /// # Panics
    /// When `to_port` is not a master, already serves the slot, or a command fails.
    pub fn begin_slot_move(&self, slot: u16, to_port: u16) -> SlotMove<'_> {
        let source = self.master_for_slot(slot);
        let target = self.node_by_port(to_port);
        assert!(
            source.port() != target.port(),
            "slot {slot} is already served by port {to_port}"
        );
        SlotMove::begin(self, slot, source, target)
    }

    /// The port `MIGRATE` and `redis-cli --cluster` reach `node` on: its TLS port in a TLS
    /// cluster.
    pub(crate) fn cluster_port(&self, node: &RedisServer) -> u16 {
        if self.tls {
            node.tls_port()
        } else {
            node.port()
        }
    }

    /// The ports of the masters every running node could be told about a new slot owner:
    /// the healthy masters in the view of a running node.
    pub(crate) fn master_ports(&self) -> Vec<u16> {
        let text = self.any_live(None).cmd(&["CLUSTER", "NODES"]);
        ClusterNode::parse_all(&bulk_text(&text))
            .into_iter()
            .filter(ClusterNode::is_healthy_master)
            .map(|n| n.port)
            .collect()
    }

    /// Whether every running node sees `slot` served by the node on `port`.
    pub(crate) fn all_see_owner(&self, slot: u16, port: u16) -> bool {
        self.live(None).all(|n| {
            self.nodes_text(n).is_ok_and(|text| {
                ClusterNode::parse_all(&bulk_text(&text))
                    .iter()
                    .any(|v| v.port == port && v.serves(slot))
            })
        })
    }

    /// Every running node's `CLUSTER NODES`, for failure messages.
    pub(crate) fn views(&self) -> String {
        self.live(None)
            .map(|n| {
                let view = self
                    .nodes_text(n)
                    .map_or_else(|e| format!("({e})"), |t| bulk_text(&t));
                format!("--- CLUSTER NODES of {} ---\n{view}", n.port())
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn nodes_text(&self, node: &RedisServer) -> std::io::Result<String> {
        command(node.port(), &["CLUSTER", "NODES"])
    }

    /// The running nodes, but the one on `except`.
    fn live(&self, except: Option<u16>) -> impl Iterator<Item = &RedisServer> {
        self.nodes
            .iter()
            .filter(move |n| n.is_running() && Some(n.port()) != except)
    }

    /// The first running node, but the one on `except`.
    fn any_live(&self, except: Option<u16>) -> &RedisServer {
        self.live(except)
            .next()
            .unwrap_or_else(|| panic!("no node of the cluster is running: {self:?}"))
    }

    fn node_mut(&mut self, port: u16) -> &mut RedisServer {
        let summary = format!("{self:?}");
        self.nodes
            .iter_mut()
            .find(|n| n.listens_on(port))
            .unwrap_or_else(|| panic!("no node of this cluster listens on port {port}: {summary}"))
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
            .field("replicas", &self.replicas)
            .field("tls", &self.tls)
            .finish()
    }
}

/// The text of a raw bulk-string reply (`$<len>\r\n<text>\r\n`), or the reply as it is.
pub(crate) fn bulk_text(raw: &str) -> String {
    match raw.strip_prefix('$').and_then(|r| r.split_once("\r\n")) {
        Some((_, rest)) => rest.strip_suffix("\r\n").unwrap_or(rest).to_owned(),
        None => raw.to_owned(),
    }
}
