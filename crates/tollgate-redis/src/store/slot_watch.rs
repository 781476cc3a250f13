//! [`SlotWatch`]: on a cluster, a slot whose master stays silent is looked up on the other
//! nodes, and once the cluster has given it a new master, the `redis` crate is made to refresh
//! its slot map.
//!
//! Why by hand. The `redis` crate (1.8) refreshes its slot map only when a node tells it to:
//! `MOVED`, `READONLY`, or a slot it has no node for; it has no periodic topology check. A
//! master that is silent, not gone, tells it nothing: frozen (`SIGSTOP`, a paused VM), its
//! kernel still acknowledges every byte, so `TCP_USER_TIMEOUT` never fires and the connection
//! stays up; each call ends on the crate's response timeout, an I/O error after which the
//! crate neither refreshes nor reconnects. The cluster fails the node over
//! (`cluster-node-timeout`, then an election), but the crate went on sending the node's slots
//! to it for as long as it stayed frozen, and every call on them failed (measured: a 25 s
//! freeze, all 25 s, until the thawed node answered `MOVED`).
//!
//! So a call whose reply the crate timed out makes the store check the call's slot, one check
//! at a time and at most one per [`CHECK_EVERY`] for as long as such timeouts go on:
//! 1. `CLUSTER SLOTS`, asked of a random node (up to [`ASK_NODES`] of them, for one that
//!    answers), names the slot's master as the cluster now sees it;
//! 2. that master, by its address, and the slot's master in the crate's map, by the slot, are
//!    each sent `PTTL <the call's key>`. Both silent: the failover has not happened yet, and
//!    refreshing would only wait on the silent node. The crate's route answering: nothing is
//!    stale (a slow moment). The cluster's master answering while the crate's route stays
//!    silent: the crate's map is stale;
//! 3. then another node of the cluster is sent the same `PTTL`, answers `MOVED`, and the crate
//!    refreshes its slot map as after any `MOVED` (a refresh that drops the failed node, absent
//!    from `CLUSTER SLOTS`). That is the one refresh the crate offers to its callers.
//!
//! `CLUSTER SLOTS` and `PTTL` on the prefix's keys are in the least-privilege ACL
//! (docs/redis.md); `PTTL` reads a key's expiry and changes nothing. A check costs a few
//! commands, and only while calls time out. Each answer is waited for up to the store's
//! timeout, at least [`MIN_PROBE_WAIT`] (a silence that short is not a failover).
//!
//! Measured with `tests/it/frozen_master.rs` (a master frozen, 1 s `cluster-node-timeout`):
//! checks are decided by the store again within about 1–2 s of the cluster's promotion,
//! while the old master is still frozen.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Arg, Cmd, ErrorKind, RedisResult, ServerErrorKind, Value};
use tokio::time::Instant;

/// The least time between the starts of two checks while calls keep timing out.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// The shortest wait for one node's answer to a check's command.
const MIN_PROBE_WAIT: Duration = Duration::from_millis(250);
/// How many random nodes a check asks for `CLUSTER SLOTS` before it gives up.
const ASK_NODES: usize = 3;

/// A slot range of `CLUSTER SLOTS`: first and last slot, its master's address then its
/// replicas'.
pub(super) type Range = (u16, u16, Vec<(String, u16)>);

/// Checks, on a cluster, whether a slot whose calls time out has a new master that the
/// `redis` crate does not know of (see the module docs).
pub(crate) struct SlotWatch {
    cluster: ClusterConnection,
    /// How long a check waits for each answer.
    wait: Duration,
    /// When the next check may start; `None` while one runs.
    next: Arc<Mutex<Option<Instant>>>,
}

impl SlotWatch {
    /// How long a check waits for one node's answer, for a store whose timeout is
    /// `timeout`.
    pub(super) fn probe_wait(timeout: Duration) -> Duration {
        timeout.max(MIN_PROBE_WAIT)
    }

    /// A watch over `cluster`, for a store whose timeout is `timeout`.
    pub(crate) fn new(cluster: ClusterConnection, timeout: Duration) -> SlotWatch {
        SlotWatch {
            cluster,
            wait: SlotWatch::probe_wait(timeout),
            next: Arc::new(Mutex::new(Some(Instant::now()))),
        }
    }

    /// `cmd` (a script's `EVALSHA`) got no reply within the `redis` crate's timeout: checks
    /// its slot in a task of its own, unless a check runs or one started less than
    /// [`CHECK_EVERY`] ago.
    pub(crate) fn timed_out(&self, cmd: &Cmd) {
        let Some(key) = first_key(cmd) else {
            return;
        };
        let now = Instant::now();
        {
            let mut next = self.next.lock().unwrap_or_else(PoisonError::into_inner);
            match *next {
                Some(at) if at <= now => *next = None,
                _ => return,
            }
        }
        let done = Done {
            next: Arc::clone(&self.next),
            at: now + CHECK_EVERY,
        };
        let (cluster, wait) = (self.cluster.clone(), self.wait);
        tokio::spawn(async move {
            check(cluster, &key, wait).await;
            drop(done);
        });
    }
}

/// Allows the next check when a check ends (or its task is dropped).
struct Done {
    next: Arc<Mutex<Option<Instant>>>,
    at: Instant,
}

impl Drop for Done {
    fn drop(&mut self) {
        *self.next.lock().unwrap_or_else(PoisonError::into_inner) = Some(self.at);
    }
}

/// The check of the slot of `key` (the module docs, steps 1 to 3).
async fn check(cluster: ClusterConnection, key: &str, wait: Duration) {
    let slot = crate::slot_of(key);
    let Some(view) = cluster_slots(&cluster, wait).await else {
        tracing::debug!(slot, "slot check: no node answered CLUSTER SLOTS");
        return;
    };
    let Some((_, _, nodes)) = view
        .iter()
        .find(|(first, last, _)| (*first..=*last).contains(&slot))
    else {
        return;
    };
    let Some((host, port)) = nodes.first().cloned() else {
        return;
    };
    let pttl = || redis::cmd("PTTL").arg(key).clone();
    let (by_owner, by_route) = tokio::join!(
        ask(&cluster, pttl(), by_address(&host, port), wait),
        ask(
            &cluster,
            pttl(),
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(
                slot,
                SlotAddr::Master
            ))),
            wait
        ),
    );
    let stale = match (&by_owner, &by_route) {
        // The crate's route answers (or was told `MOVED`, and refreshes): nothing to do.
        (_, Some(_)) => false,
        // The cluster's master answers; the crate's route is silent.
        (Some(Ok(_)), None) => true,
        // The cluster's master said `MOVED` (the crate refreshes), or is silent too.
        _ => false,
    };
    if !stale {
        return;
    }
    // Another node of the cluster, which answers the key with `MOVED`.
    let Some((other_host, other_port)) = view
        .iter()
        .flat_map(|(_, _, nodes)| nodes)
        .find(|(h, p)| (h.as_str(), *p) != (host.as_str(), port))
        .cloned()
    else {
        return;
    };
    tracing::warn!(
        slot,
        master = %format!("{host}:{port}"),
        "slot check: the cluster gave the slot a master that answers while the slot map's \
         is silent; refreshing the slot map"
    );
    match ask(&cluster, pttl(), by_address(&other_host, other_port), wait).await {
        Some(Err(e)) if e.kind() == ErrorKind::Server(ServerErrorKind::Moved) => {}
        other => tracing::debug!(
            slot,
            answer = ?other,
            "slot check: the node asked for MOVED did not answer it"
        ),
    }
}

/// The slot ranges of `CLUSTER SLOTS`, from the first of [`ASK_NODES`] random nodes that
/// answers.
pub(super) async fn cluster_slots(
    cluster: &ClusterConnection,
    wait: Duration,
) -> Option<Vec<Range>> {
    for _ in 0..ASK_NODES {
        let random = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
        let cmd = redis::cmd("CLUSTER").arg("SLOTS").clone();
        if let Some(Ok(Value::Array(ranges))) = ask(cluster, cmd, random, wait).await {
            let view: Vec<Range> = ranges.iter().filter_map(range).collect();
            if !view.is_empty() {
                return Some(view);
            }
        }
    }
    None
}

/// One range of `CLUSTER SLOTS`, its master first; `None` when malformed, or when its master's
/// host is not named (an empty host stands for the node that answered, which a random route
/// does not tell; `?` for one whose address is unknown). A replica so unnamed is left out:
/// the range and its master still count (a whole range was dropped for one such replica,
/// and its master's slots were then never mapped).
fn range(value: &Value) -> Option<Range> {
    let Value::Array(items) = value else {
        return None;
    };
    let (Some(Value::Int(first)), Some(Value::Int(last))) = (items.first(), items.get(1)) else {
        return None;
    };
    let node = |node: &Value| match node {
        Value::Array(n) => match (n.first(), n.get(1)) {
            (Some(Value::BulkString(h)), Some(Value::Int(p))) => {
                let host = String::from_utf8(h.clone()).ok()?;
                (!host.is_empty() && host != "?").then_some((host, u16::try_from(*p).ok()?))
            }
            _ => None,
        },
        _ => None,
    };
    let master = node(items.get(2)?)?;
    let nodes = std::iter::once(master)
        .chain(items.get(3..).unwrap_or_default().iter().filter_map(node))
        .collect();
    Some((
        u16::try_from(*first).ok()?,
        u16::try_from(*last).ok()?,
        nodes,
    ))
}

/// `cmd` sent where `routing` says; `None` when no answer came within `wait` (or the crate
/// timed it out first).
async fn ask(
    cluster: &ClusterConnection,
    cmd: Cmd,
    routing: RoutingInfo,
    wait: Duration,
) -> Option<RedisResult<Value>> {
    let mut cluster = cluster.clone();
    match tokio::time::timeout(wait, cluster.route_command(cmd, routing)).await {
        Ok(Err(e)) if e.is_timeout() => None,
        Ok(answer) => Some(answer),
        Err(_) => None,
    }
}

fn by_address(host: &str, port: u16) -> RoutingInfo {
    RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
        host: host.to_owned(),
        port,
    })
}

/// The first key of an `EVALSHA` (or `EVAL`) command, when it has one.
fn first_key(cmd: &Cmd) -> Option<String> {
    String::from_utf8(first_key_bytes(cmd)?.to_vec()).ok()
}

/// The slot of the first key of an `EVALSHA` (or `EVAL`) command, when it has one.
pub(super) fn slot_of_script(cmd: &Cmd) -> Option<u16> {
    first_key_bytes(cmd).map(crate::slot::slot_of_bytes)
}

/// [`first_key`], as the command holds it.
fn first_key_bytes(cmd: &Cmd) -> Option<&[u8]> {
    let mut args = cmd.args_iter().map(|a| match a {
        Arg::Simple(bytes) => Some(bytes),
        _ => None,
    });
    let name = args.next()??;
    if !(name.eq_ignore_ascii_case(b"EVALSHA") || name.eq_ignore_ascii_case(b"EVAL")) {
        return None;
    }
    let _script = args.next()??;
    let keys: u64 = std::str::from_utf8(args.next()??).ok()?.parse().ok()?;
    if keys == 0 {
        return None;
    }
    args.next()?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_key_of_a_script_call() {
        let cmd = redis::cmd("EVALSHA")
            .arg("abc")
            .arg(2)
            .arg("tollgate:k1")
            .arg("tollgate:k2")
            .arg(5)
            .clone();
        assert_eq!(first_key(&cmd).as_deref(), Some("tollgate:k1"));
        assert_eq!(slot_of_script(&cmd), Some(crate::slot_of("tollgate:k1")));
        let none = redis::cmd("EVALSHA").arg("abc").arg(0).arg(5).clone();
        assert_eq!(first_key(&none), None);
        assert_eq!(first_key(&redis::cmd("TIME")), None);
    }

    #[test]
    fn cluster_slots_ranges_are_read_with_their_master_first() {
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let reply = Value::Array(vec![
            Value::Int(0),
            Value::Int(5460),
            node("10.0.0.1", 7000),
            node("10.0.0.2", 7001),
        ]);
        assert_eq!(
            range(&reply),
            Some((
                0,
                5460,
                vec![("10.0.0.1".to_owned(), 7000), ("10.0.0.2".to_owned(), 7001)]
            ))
        );
        let unnamed = Value::Array(vec![Value::Int(0), Value::Int(1), node("", 7000)]);
        assert_eq!(range(&unnamed), None);
        // An unnamed replica is left out; the range and its master stay.
        let replica_unknown = Value::Array(vec![
            Value::Int(0),
            Value::Int(1),
            node("10.0.0.1", 7000),
            node("?", 7001),
        ]);
        assert_eq!(
            range(&replica_unknown),
            Some((0, 1, vec![("10.0.0.1".to_owned(), 7000)]))
        );
    }
}
