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
//! counted against a silent old one fails as it would on a silent Redis. A slot no answer
//! named yet, a master past [`MAX_MASTERS`], and a call across masters count every node's
//! replies, as before.

use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use redis::cluster_async::ClusterConnection;
use tokio::sync::Notify;

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
    /// refreshes.
    masters: Mutex<Vec<(String, u16)>>,
    /// Wakes the refresher before its time.
    refresh: Notify,
}

impl NodeReplies {
    pub(crate) fn new() -> NodeReplies {
        NodeReplies {
            owner: (0..SLOTS).map(|_| AtomicU16::new(UNKNOWN)).collect(),
            replies: (0..MAX_MASTERS).map(|_| AtomicU64::new(0)).collect(),
            masters: Mutex::new(Vec::new()),
            refresh: Notify::new(),
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

    /// Takes `CLUSTER SLOTS`' answer as the map: each range's first node is its master.
    pub(crate) fn update(&self, ranges: &[Range]) {
        let mut masters = self.masters.lock().unwrap_or_else(PoisonError::into_inner);
        for (first, last, nodes) in ranges {
            let index = match nodes.first() {
                Some(master) => match masters.iter().position(|m| m == master) {
                    Some(i) => u16::try_from(i).unwrap_or(UNKNOWN),
                    None if masters.len() < MAX_MASTERS => {
                        masters.push(master.clone());
                        u16::try_from(masters.len() - 1).unwrap_or(UNKNOWN)
                    }
                    None => UNKNOWN,
                },
                None => UNKNOWN,
            };
            for slot in *first..=*last {
                if let Some(owner) = self.owner.get(usize::from(slot)) {
                    owner.store(index, Ordering::Relaxed);
                }
            }
        }
    }

    /// Keeps the map of `nodes` current from `cluster` (each answer waited for up to
    /// `wait`) until `nodes` is dropped: at once, then every [`REFRESH_EVERY`] or when
    /// asked to ([`NodeReplies::refresh_soon`]).
    pub(crate) fn follow(nodes: &Arc<NodeReplies>, cluster: ClusterConnection, wait: Duration) {
        let nodes: Weak<NodeReplies> = Arc::downgrade(nodes);
        tokio::spawn(async move {
            loop {
                let view = cluster_slots(&cluster, wait).await;
                let Some(held) = nodes.upgrade() else { return };
                if let Some(view) = view {
                    held.update(&view);
                }
                let asked = async { held.refresh.notified().await };
                // A refresh asked for right after one is taken after a pause: a burst of
                // silent calls asks once.
                let _ = tokio::time::timeout(REFRESH_EVERY, asked).await;
                drop(held);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
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
        assert_eq!(count(100), Some(0), "b2 is new");
        assert!(nodes.of_slots([100, 9000]).is_some(), "both on b2");
    }
}
