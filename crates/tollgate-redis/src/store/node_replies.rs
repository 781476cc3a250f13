//! [`NodeReplies`]: on a cluster, replies counted per master, so that a call to a silent
//! master fails after the store's timeout while the other masters answer.
//!
//! Why. A call given up on at its timeout must be one whose Redis answered nothing in that
//! time (`patience.rs`); while Redis keeps answering other calls, the silence is this
//! process's queue, and the call waits on, up to a second. On a cluster, counting every
//! node's replies together made a frozen master's calls wait that whole second whenever the
//! other masters answered (measured: 1.05 s a check, where a silent single Redis fails in
//! 51 ms), for as long as the cluster took to fail it over. Counted per master, a call whose
//! keys are all on one master waits on that master's replies only.
//!
//! Which master holds a slot is what `CLUSTER SLOTS` said when last asked: at start-up, every
//! [`REFRESH_EVERY`], and at once after a call on the cluster was given up on as silent. A
//! map that is a few seconds stale costs little: a reply counted for the wrong master can
//! only make a call wait as it did before (up to the second), and a busy new master's call
//! counted against a silent old one fails as it would on a silent Redis. A slot the last
//! answer did not name (or named with a master of unknown address), a master past
//! [`MAX_MASTERS`] at once (an index is freed when its master leaves the map), and a call
//! across masters count every node's replies, as before. A map that cannot be read (no node
//! answers `CLUSTER SLOTS`, an ACL without it) is logged, once until it can be again.
//!
//! The refresher is a task of its own, which holds the cluster connection; it holds the map
//! only while it writes it, and is stopped when the map is dropped (with the store), so the
//! connections close with the store.

use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use redis::cluster_async::ClusterConnection;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::slot_watch::{Range, cluster_slots};

/// How often the map of slots to masters is asked for again.
const REFRESH_EVERY: Duration = Duration::from_secs(5);
/// Masters counted apart; a cluster with more counts the others' replies together.
const MAX_MASTERS: usize = 1024;
/// A slot whose master is not known.
const UNKNOWN: u16 = u16::MAX;
/// Redis Cluster's hash slots.
const SLOTS: usize = 16_384;

/// Replies per master, and which master holds each slot.
pub(crate) struct NodeReplies {
    /// The index (into `replies`) of each slot's master; [`UNKNOWN`] until named.
    owner: Box<[AtomicU16]>,
    /// Replies heard from each master, by index.
    replies: Box<[AtomicU64]>,
    /// The masters' addresses, by index: an address keeps its index (and its count) across
    /// refreshes while it is a master; a freed index (`None`) is given to the next new one.
    masters: Mutex<Vec<Option<(String, u16)>>>,
    /// Wakes the refresher before its time.
    refresh: Arc<Notify>,
    /// The refresher, stopped with the map.
    refresher: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for NodeReplies {
    fn drop(&mut self) {
        if let Some(task) = self
            .refresher
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            task.abort();
        }
    }
}

impl NodeReplies {
    pub(crate) fn new() -> NodeReplies {
        NodeReplies {
            owner: (0..SLOTS).map(|_| AtomicU16::new(UNKNOWN)).collect(),
            replies: (0..MAX_MASTERS).map(|_| AtomicU64::new(0)).collect(),
            masters: Mutex::new(Vec::new()),
            refresh: Arc::new(Notify::new()),
            refresher: Mutex::new(None),
        }
    }

    /// The reply count of `slot`'s master, when known.
    #[inline]
    pub(crate) fn of_slot(&self, slot: u16) -> Option<&AtomicU64> {
        let owner = self.owner.get(usize::from(slot))?.load(Ordering::Relaxed);
        self.replies.get(usize::from(owner))
    }

    /// The reply count of the one master holding every slot of `slots`; `None` when they
    /// are on several masters or one is not known.
    pub(crate) fn of_slots(&self, slots: impl IntoIterator<Item = u16>) -> Option<&AtomicU64> {
        let mut owner = None;
        for slot in slots {
            let this = self.owner.get(usize::from(slot))?.load(Ordering::Relaxed);
            if this == UNKNOWN || owner.is_some_and(|o| o != this) {
                return None;
            }
            owner = Some(this);
        }
        self.replies.get(usize::from(owner?))
    }

    /// Counts a reply from `slot`'s master.
    #[inline]
    pub(crate) fn heard(&self, slot: u16) {
        if let Some(count) = self.of_slot(slot) {
            count.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Asks for the map again now (a call on the cluster was given up on as silent: a master
    /// may have changed).
    pub(crate) fn refresh_soon(&self) {
        self.refresh.notify_one();
    }

    /// Takes `CLUSTER SLOTS`' answer as the map: each range's first node is its master; a
    /// slot it does not name has no known master.
    pub(crate) fn update(&self, ranges: &[Range]) {
        let mut masters = self.masters.lock().unwrap_or_else(PoisonError::into_inner);
        // Masters that are no longer: their indexes are free again.
        for held in masters.iter_mut() {
            if held
                .as_ref()
                .is_some_and(|m| !ranges.iter().any(|(_, _, nodes)| nodes.first() == Some(m)))
            {
                *held = None;
            }
        }
        let mut owner = vec![UNKNOWN; SLOTS];
        for (first, last, nodes) in ranges {
            let Some(master) = nodes.first() else {
                continue;
            };
            let index = match masters.iter().position(|m| m.as_ref() == Some(master)) {
                Some(i) => i,
                None => match masters.iter().position(Option::is_none) {
                    Some(free) => {
                        masters[free] = Some(master.clone());
                        free
                    }
                    None if masters.len() < MAX_MASTERS => {
                        masters.push(Some(master.clone()));
                        masters.len() - 1
                    }
                    None => continue,
                },
            };
            let index = u16::try_from(index).unwrap_or(UNKNOWN);
            for slot in *first..=*last {
                if let Some(o) = owner.get_mut(usize::from(slot)) {
                    *o = index;
                }
            }
        }
        for (slot, index) in self.owner.iter().zip(owner) {
            slot.store(index, Ordering::Relaxed);
        }
    }

    /// Keeps the map of `nodes` current from `cluster` (each answer waited for up to
    /// `wait`) until `nodes` is dropped: at once, then every [`REFRESH_EVERY`] or when
    /// asked to ([`NodeReplies::refresh_soon`]).
    pub(crate) fn follow(nodes: &Arc<NodeReplies>, cluster: ClusterConnection, wait: Duration) {
        let map: Weak<NodeReplies> = Arc::downgrade(nodes);
        let asked = Arc::clone(&nodes.refresh);
        let task = tokio::spawn(async move {
            let mut readable = true;
            loop {
                let view = cluster_slots(&cluster, wait).await;
                let Some(held) = map.upgrade() else { return };
                match view {
                    Some(view) => {
                        held.update(&view);
                        if !readable {
                            tracing::info!("the cluster's slot map can be read again");
                        }
                        readable = true;
                    }
                    None if readable => {
                        tracing::warn!(
                            "cannot read the cluster's slot map (CLUSTER SLOTS: no node answered, \
                             or the ACL refuses it): a call to a silent master waits on the \
                             other masters' answers, up to its timeout and a second"
                        );
                        readable = false;
                    }
                    None => {}
                }
                drop(held);
                // A refresh asked for right after one is taken after a pause: a burst of
                // silent calls asks once.
                let _ = tokio::time::timeout(REFRESH_EVERY, asked.notified()).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        *nodes
            .refresher
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(task);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: u16) -> (String, u16) {
        (host.to_owned(), port)
    }

    /// Slots are counted to their range's master; a master keeps its count across a refresh
    /// that moves slots to it, and slots on two masters, or not named, have no one count.
    #[test]
    fn replies_are_counted_to_each_slots_master() {
        let nodes = NodeReplies::new();
        assert!(nodes.of_slot(0).is_none(), "nothing known before an answer");
        nodes.update(&[
            (0, 8191, vec![node("a", 1), node("a2", 1)]),
            (8192, 16_383, vec![node("b", 1)]),
        ]);
        nodes.heard(10);
        nodes.heard(8191);
        nodes.heard(9000);
        let count = |slot| nodes.of_slot(slot).map(|c| c.load(Ordering::Relaxed));
        assert_eq!(count(0), Some(2));
        assert_eq!(count(16_383), Some(1));
        assert!(nodes.of_slots([1, 2, 8191]).is_some());
        assert!(nodes.of_slots([1, 9000]).is_none(), "two masters");
        assert!(nodes.of_slots([]).is_none());

        // `b` fails over to `b2`, which also takes slot 100 from `a`.
        nodes.update(&[
            (0, 99, vec![node("a", 1)]),
            (100, 100, vec![node("b2", 1)]),
            (101, 8191, vec![node("a", 1)]),
            (8192, 16_383, vec![node("b2", 1)]),
        ]);
        assert_eq!(count(0), Some(2), "a keeps its count");
        assert!(nodes.of_slots([100, 9000]).is_some(), "both on b2");
        assert!(nodes.of_slots([0, 100]).is_none(), "slot 100 left a");
        let masters = |nodes: &NodeReplies| {
            let held = nodes.masters.lock().expect("masters");
            held.iter()
                .flatten()
                .map(|(h, _)| h.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(masters(&nodes), ["a", "b2"], "b's index, freed, went to b2");

        // An answer that does not name slots 8192 and up: they have no master any more.
        nodes.update(&[(0, 8191, vec![node("a", 1)])]);
        assert!(nodes.of_slot(9000).is_none(), "not named: unknown");
        assert!(nodes.of_slots([0, 100]).is_some(), "100 is a's again");
        assert_eq!(masters(&nodes), ["a"]);
    }
}
