//! A Redis Sentinel deployment spawned for tests: one master, one replica, three sentinels.
//!
//! What the failover tests need is the real thing: sentinels that find each other through
//! the master, agree it is down, elect a leader and promote the replica, so that a client
//! following Sentinel sees what it would see in production. Three sentinels with quorum 2,
//! because that is the smallest group that survives losing one and the shape every guide
//! recommends; `down-after-milliseconds 1000` so that a killed master is replaced within
//! seconds rather than the default half-minute.
//!
//! [`SentinelGroup::start`] returns only once every sentinel knows the other two and the
//! replica (about 7 s on a 2-core machine: sentinels announce themselves on the master's
//! `__sentinel__:hello` channel every 2 s): a failover requested earlier would find no
//! quorum, and the test would be measuring the harness.
//!
//! The data nodes are [`RedisServer`]s, so the harness's commands (`cmd`, `integer`, the
//! logs) work on them as on any server. In a TLS group ([`SentinelGroup::start_tls`]) they
//! replicate over TLS, the sentinels reach them (and each other) over TLS, and the sentinels
//! name the TLS ports; every process keeps a plaintext port too.

use std::fmt;
use std::time::{Duration, Instant};

use crate::redis_server::free_port;
use crate::resp::Reply;
use crate::{RedisServer, Sentinel, TlsFiles, TlsServer};

/// How long [`SentinelGroup::start`] waits for the sentinels to know each other and the
/// replica.
pub const SENTINEL_TIMEOUT: Duration = Duration::from_secs(30);

/// The name the sentinels monitor the master under.
const MASTER_NAME: &str = "mymaster";

/// A master, its replica and three sentinels owned by this process; dropped, all are killed.
pub struct SentinelGroup {
    /// The master it started with, then the replica.
    data: Vec<RedisServer>,
    sentinels: Vec<Sentinel>,
    tls: bool,
}

impl SentinelGroup {
    /// Spawns the master, the replica and three sentinels, and waits (up to
    /// [`SENTINEL_TIMEOUT`]) until every sentinel reports the master with the two other
    /// sentinels and the replica, its link up.
    ///
    /// # Panics
    /// When a binary is missing (with how to install it), or the group does not settle in
    /// time (with every process's log).
    pub fn start() -> SentinelGroup {
        SentinelGroup::launch(&[], &[], None)
    }

    /// As [`SentinelGroup::start`], with `master_args` on the master it starts with only,
    /// after the arguments both data nodes get. With `["--rename-command", "SLAVEOF", "",
    /// "--rename-command", "REPLICAOF", ""]`, say, Sentinel can promote the replica but never
    /// demote the old master, which then accepts writes for as long as a test needs to see
    /// where a client sends them.
    ///
    /// # Panics
    /// As [`SentinelGroup::start`].
    pub fn start_with_master_args(master_args: &[&str]) -> SentinelGroup {
        SentinelGroup::launch(&[], master_args, None)
    }

    /// As [`SentinelGroup::start`], with `data_args` on both data nodes (`--user …`,
    /// `--requirepass pw`, …). With `--requirepass`, the data nodes also get `--masterauth`
    /// with it (unless given) and the sentinels `sentinel auth-pass`.
    ///
    /// # Panics
    /// As [`SentinelGroup::start`].
    pub fn start_with(data_args: &[&str]) -> SentinelGroup {
        SentinelGroup::launch(data_args, &[], None)
    }

    /// As [`SentinelGroup::start`], with TLS: the data nodes listen TLS (no client
    /// certificate asked) and replicate over it (`--tls-replication yes`), the sentinels
    /// monitor them, and announce themselves to each other, on their TLS ports. Every process
    /// keeps its plaintext port: [`SentinelGroup::sentinel_urls`] are plaintext, the
    /// addresses the sentinels name are the data nodes' TLS ports.
    ///
    /// # Panics
    /// As [`SentinelGroup::start`].
    pub fn start_tls(tls: &TlsFiles) -> SentinelGroup {
        SentinelGroup::launch(&[], &[], Some(tls))
    }

    fn launch(data_args: &[&str], master_args: &[&str], tls: Option<&TlsFiles>) -> SentinelGroup {
        let mut args: Vec<String> = data_args.iter().map(|a| (*a).to_owned()).collect();
        let password = data_args
            .iter()
            .position(|a| *a == "--requirepass")
            .and_then(|i| data_args.get(i + 1))
            .map(|p| (*p).to_owned());
        if let Some(password) = &password
            && !data_args.contains(&"--masterauth")
        {
            args.extend(["--masterauth".to_owned(), password.clone()]);
        }
        let start_node = |replica_of: Option<u16>| -> RedisServer {
            RedisServer::start_on_free_ports("tollgate-sentinel-data-", |_| {
                let mut all = Vec::new();
                let port = free_port(false);
                let tls_port = tls.map(|tls| {
                    let tls_port = free_port(false);
                    all.extend(TlsServer::default().args(tls, tls_port));
                    all.extend(["--tls-replication".to_owned(), "yes".to_owned()]);
                    tls_port
                });
                all.extend(args.iter().cloned());
                if replica_of.is_none() {
                    all.extend(master_args.iter().map(|a| (*a).to_owned()));
                }
                if let Some(master) = replica_of {
                    all.extend([
                        "--replicaof".to_owned(),
                        "127.0.0.1".to_owned(),
                        master.to_string(),
                    ]);
                }
                (port, tls_port, all)
            })
        };
        let master = start_node(None);
        // The port the replica and the sentinels reach the master on.
        let master_port = if tls.is_some() {
            master.tls_port()
        } else {
            master.port()
        };
        let replica = start_node(Some(master_port));
        let mut lines = vec![
            "sentinel resolve-hostnames no".to_owned(),
            format!("sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2"),
            format!("sentinel down-after-milliseconds {MASTER_NAME} 1000"),
            format!("sentinel failover-timeout {MASTER_NAME} 10000"),
            format!("sentinel parallel-syncs {MASTER_NAME} 1"),
        ];
        if let Some(password) = &password {
            lines.push(format!("sentinel auth-pass {MASTER_NAME} {password}"));
        }
        let mut group = SentinelGroup {
            data: vec![master, replica],
            sentinels: Vec::with_capacity(3),
            tls: tls.is_some(),
        };
        for _ in 0..3 {
            group.sentinels.push(Sentinel::start(&lines, tls));
        }
        group.wait_settled();
        group
    }

    fn wait_settled(&self) {
        let deadline = Instant::now() + SENTINEL_TIMEOUT;
        loop {
            let unsettled: Vec<String> = self
                .sentinels
                .iter()
                .filter_map(|s| self.unsettled(s))
                .collect();
            if unsettled.is_empty() {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "sentinels not settled within {SENTINEL_TIMEOUT:?}: {}\n{}",
                    unsettled.join("; "),
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Why `sentinel` is not ready for a failover yet, or `None` when it is.
    fn unsettled(&self, sentinel: &Sentinel) -> Option<String> {
        let port = sentinel.port();
        let master = match sentinel.request(&["SENTINEL", "MASTER", MASTER_NAME]) {
            Ok(reply @ Reply::Array(_)) => pairs(&reply.strings()),
            other => return Some(format!("sentinel {port}: SENTINEL MASTER gave {other:?}")),
        };
        let field = |name: &str| {
            master
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        if field("flags") != Some("master")
            || field("num-other-sentinels") != Some("2")
            || field("num-slaves") != Some("1")
        {
            return Some(format!("sentinel {port} sees the master as {master:?}"));
        }
        let replicas = match sentinel.request(&["SENTINEL", "REPLICAS", MASTER_NAME]) {
            Ok(reply) => reply
                .items()
                .iter()
                .map(|r| pairs(&r.strings()))
                .collect::<Vec<_>>(),
            Err(e) => return Some(format!("sentinel {port}: SENTINEL REPLICAS failed: {e}")),
        };
        let ok = replicas.len() == 1
            && replicas.iter().all(|r| {
                let field = |name: &str| r.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
                field("flags") == Some("slave") && field("master-link-status") == Some("ok")
            });
        (!ok).then(|| format!("sentinel {port} sees the replicas as {replicas:?}"))
    }

    /// The name the sentinels know the master by: `mymaster`.
    pub fn master_name(&self) -> &str {
        MASTER_NAME
    }

    /// Every sentinel's URL, `redis://127.0.0.1:<port>/` (plaintext, also in a TLS group).
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(Sentinel::url).collect()
    }

    /// The sentinels, to ask one directly, kill one or read its log.
    pub fn sentinels(&self) -> &[Sentinel] {
        &self.sentinels
    }

    /// The sentinels, to kill or restart one.
    pub fn sentinels_mut(&mut self) -> &mut [Sentinel] {
        &mut self.sentinels
    }

    /// The data nodes: the master the group started with, then the replica (whichever is
    /// master now).
    pub fn data_nodes(&self) -> &[RedisServer] {
        &self.data
    }

    /// The data node listening on `port` (plaintext or TLS).
    ///
    /// # Panics
    /// When no data node has that port.
    pub fn node_by_port(&self, port: u16) -> &RedisServer {
        self.data
            .iter()
            .find(|n| n.listens_on(port))
            .unwrap_or_else(|| panic!("no data node listens on port {port}: {:?}", self.data))
    }

    /// The data node listening on `port`, to kill, pause or restart it.
    ///
    /// # Panics
    /// When no data node has that port.
    pub fn node_by_port_mut(&mut self, port: u16) -> &mut RedisServer {
        let summary = format!("{:?}", self.data);
        self.data
            .iter_mut()
            .find(|n| n.listens_on(port))
            .unwrap_or_else(|| panic!("no data node listens on port {port}: {summary}"))
    }

    /// The master's port as the first running sentinel names it (`SENTINEL
    /// get-master-addr-by-name`): its TLS port in a TLS group.
    ///
    /// # Panics
    /// When no sentinel answers with an address.
    pub fn master_port(&self) -> u16 {
        self.sentinels
            .iter()
            .filter(|s| s.is_running())
            .find_map(master_addr)
            .unwrap_or_else(|| panic!("no sentinel names a master\n{}", self.logs()))
    }

    /// The data node the sentinels name master now.
    ///
    /// # Panics
    /// As [`SentinelGroup::master_port`].
    pub fn master(&self) -> &RedisServer {
        self.node_by_port(self.master_port())
    }

    /// Kills the current master (SIGKILL), as a crash would, and returns its port as the
    /// sentinels named it.
    ///
    /// # Panics
    /// As [`SentinelGroup::master_port`].
    pub fn kill_master(&mut self) -> u16 {
        let port = self.master_port();
        self.node_by_port_mut(port).kill();
        port
    }

    /// Waits until every running sentinel names the same master, on a port other than
    /// `old_port`, and that node answers `ROLE` as a master; returns its port as the
    /// sentinels name it (the old replica's, after one failover).
    ///
    /// # Panics
    /// When that does not happen `within` (with every process's log).
    pub fn wait_for_new_master(&self, old_port: u16, within: Duration) -> u16 {
        let deadline = Instant::now() + within;
        loop {
            let named: Vec<Option<u16>> = self
                .sentinels
                .iter()
                .filter(|s| s.is_running())
                .map(master_addr)
                .collect();
            if let Some(&Some(port)) = named.first()
                && port != old_port
                && named.iter().all(|n| *n == Some(port))
                && self.is_master(port)
            {
                return port;
            }
            if Instant::now() > deadline {
                panic!(
                    "no new master instead of port {old_port} within {within:?}: the sentinels \
                     name {named:?}\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Whether the data node on `port` is running and says it is a master.
    fn is_master(&self, port: u16) -> bool {
        self.data
            .iter()
            .find(|n| n.listens_on(port))
            .is_some_and(|n| {
                n.is_running()
                    && n.try_reply(&["ROLE"])
                        .is_ok_and(|role| role.strings().first().is_some_and(|r| r == "master"))
            })
    }

    /// Every process's log (data nodes, then sentinels with their config files), for failure
    /// messages.
    pub fn logs(&self) -> String {
        let data = self
            .data
            .iter()
            .map(|n| format!("--- data node {} ---\n{}", n.port(), n.log()));
        let sentinels = self
            .sentinels
            .iter()
            .map(|s| format!("--- sentinel {} ---\n{}", s.port(), s.log()));
        data.chain(sentinels).collect::<Vec<_>>().join("\n")
    }
}

impl fmt::Debug for SentinelGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelGroup")
            .field("data", &self.data)
            .field("sentinels", &self.sentinels)
            .field("tls", &self.tls)
            .finish()
    }
}

/// The master port `sentinel` names, if it answers with one.
fn master_addr(sentinel: &Sentinel) -> Option<u16> {
    let reply = sentinel
        .request(&["SENTINEL", "get-master-addr-by-name", MASTER_NAME])
        .ok()?;
    reply.strings().get(1)?.parse().ok()
}

/// A flat field/value array as pairs.
fn pairs(flat: &[String]) -> Vec<(String, String)> {
    flat.chunks_exact(2)
        .map(|kv| (kv[0].clone(), kv[1].clone()))
        .collect()
}
