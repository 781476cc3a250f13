//! One slot of a [`RedisCluster`] resharded live, step by step, the way `redis-cli --cluster
//! reshard` does it, so that a test can send traffic between the steps.
//!
//! The steps (the Redis Cluster specification's): `CLUSTER SETSLOT <slot> IMPORTING <source>`
//! on the target and `MIGRATING <target>` on the source; then batches of `CLUSTER
//! GETKEYSINSLOT` + `MIGRATE … KEYS …` from source to target, during which a client asking
//! the source for a key already moved (or a new one) gets `ASK`; and at last `CLUSTER SETSLOT
//! <slot> NODE <target>` on the target, the source and the other masters, after which every
//! client asking the source gets `MOVED`.

use std::fmt;
use std::time::{Duration, Instant};

use crate::{CLUSTER_TIMEOUT, RedisCluster, RedisServer};

/// How many keys one `MIGRATE` of [`SlotMove::finish`] moves.
const BATCH: usize = 100;

/// A slot being moved from one master to another (from
/// [`RedisCluster::begin_slot_move`]); [`SlotMove::finish`] completes it.
pub struct SlotMove<'a> {
    cluster: &'a RedisCluster,
    slot: u16,
    source: &'a RedisServer,
    target: &'a RedisServer,
    source_id: String,
    target_id: String,
    moved: usize,
}

impl<'a> SlotMove<'a> {
    /// Marks the slot importing on `target`, then migrating on `source`.
    pub(crate) fn begin(
        cluster: &'a RedisCluster,
        slot: u16,
        source: &'a RedisServer,
        target: &'a RedisServer,
    ) -> SlotMove<'a> {
        let slot_move = SlotMove {
            cluster,
            slot,
            source,
            target,
            source_id: cluster.node_id(source),
            target_id: cluster.node_id(target),
            moved: 0,
        };
        let slot = slot.to_string();
        slot_move.ok(
            target,
            &[
                "CLUSTER",
                "SETSLOT",
                &slot,
                "IMPORTING",
                &slot_move.source_id,
            ],
        );
        slot_move.ok(
            source,
            &[
                "CLUSTER",
                "SETSLOT",
                &slot,
                "MIGRATING",
                &slot_move.target_id,
            ],
        );
        slot_move
    }

    /// The slot being moved.
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// The master the slot moves from.
    pub fn source(&self) -> &RedisServer {
        self.source
    }

    /// The master the slot moves to.
    pub fn target(&self) -> &RedisServer {
        self.target
    }

    /// Keys moved so far.
    pub fn moved(&self) -> usize {
        self.moved
    }

    /// Keys of the slot still on the source (`CLUSTER COUNTKEYSINSLOT`).
    ///
    /// # Panics
    /// When the source cannot be reached.
    pub fn keys_left(&self) -> usize {
        let slot = self.slot.to_string();
        let left = self.source.integer(&["CLUSTER", "COUNTKEYSINSLOT", &slot]);
        usize::try_from(left).unwrap_or_else(|_| panic!("COUNTKEYSINSLOT {slot}: {left}"))
    }

    /// Moves up to `n` of the slot's keys still on the source to the target (one `MIGRATE`
    /// with `KEYS`) and returns how many it asked to move (0 once none are left).
    ///
    /// # Panics
    /// When `MIGRATE` fails (with both nodes' logs).
    pub fn migrate_some(&mut self, n: usize) -> usize {
        let slot = self.slot.to_string();
        let count = n.to_string();
        let keys = self
            .source
            .array(&["CLUSTER", "GETKEYSINSLOT", &slot, &count]);
        if keys.is_empty() {
            return 0;
        }
        let port = self.cluster.cluster_port(self.target).to_string();
        let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
        args.extend(keys.iter().map(String::as_str));
        let reply = self.source.cmd(&args);
        // NOKEY: every key expired or was deleted between GETKEYSINSLOT and MIGRATE.
        if !(reply.starts_with("+OK") || reply.starts_with("+NOKEY")) {
            panic!(
                "MIGRATE of {} keys of slot {slot} from port {} to {}: {reply:?}\n{}",
                keys.len(),
                self.source.port(),
                self.target.port(),
                self.cluster.logs()
            );
        }
        self.moved += keys.len();
        keys.len()
    }

    /// Moves the keys left, then hands the slot to the target (`CLUSTER SETSLOT <slot> NODE`
    /// on the target, the source and every other master) and waits until every running node
    /// sees the target serve it. Returns the keys moved in all.
    ///
    /// # Panics
    /// When keys keep coming for longer than [`CLUSTER_TIMEOUT`], a command fails, or the
    /// nodes do not agree on the new owner within [`CLUSTER_TIMEOUT`] (with every node's log).
    pub fn finish(mut self) -> usize {
        let deadline = Instant::now() + CLUSTER_TIMEOUT;
        while self.migrate_some(BATCH) > 0 {
            if Instant::now() > deadline {
                panic!(
                    "slot {} still has keys on port {} after {CLUSTER_TIMEOUT:?} of MIGRATE",
                    self.slot,
                    self.source.port()
                );
            }
        }
        let slot = self.slot.to_string();
        let assign = ["CLUSTER", "SETSLOT", &slot, "NODE", &self.target_id];
        self.ok(self.target, &assign);
        self.ok(self.source, &assign);
        for port in self.cluster.master_ports() {
            if port != self.source.port() && port != self.target.port() {
                self.ok(self.cluster.node_by_port(port), &assign);
            }
        }
        let deadline = Instant::now() + CLUSTER_TIMEOUT;
        while !self.cluster.all_see_owner(self.slot, self.target.port()) {
            if Instant::now() > deadline {
                panic!(
                    "the nodes do not all see slot {slot} on port {} within {CLUSTER_TIMEOUT:?}\n{}\n{}",
                    self.target.port(),
                    self.cluster.views(),
                    self.cluster.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.moved
    }

    /// Sends `args` to `node`, panicking with the logs unless it answers `+OK`.
    fn ok(&self, node: &RedisServer, args: &[&str]) {
        let reply = node.cmd(args);
        if !reply.starts_with("+OK") {
            panic!(
                "{args:?} on port {}: {reply:?}\n{}",
                node.port(),
                self.cluster.logs()
            );
        }
    }
}

impl fmt::Debug for SlotMove<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlotMove")
            .field("slot", &self.slot)
            .field("source", &self.source.port())
            .field("target", &self.target.port())
            .field("moved", &self.moved)
            .finish()
    }
}
