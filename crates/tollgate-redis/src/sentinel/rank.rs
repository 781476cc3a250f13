//! Which of the addresses the sentinels name to try first.
//!
//! The sentinels of a group can disagree for a while: one that has not heard of a failover
//! yet (they learn it from each other every 2 s), one cut off from the others, or one that
//! is simply wrong. Trusting whichever answers first would let a single stale sentinel pin
//! the store to a dead or demoted master. So every sentinel is asked, and the addresses are
//! tried in this order: the address a sentinel just announced (`+switch-master`), then the
//! address most sentinels name, ties going to the sentinel earlier in the preference order
//! (the one that last gave a master that answered `ROLE` as one comes first). An address is
//! used only once its node answers `ROLE` as a master, so a wrong one costs a connection
//! attempt, never a write.

/// A master's `host` and `port`.
pub(super) type Addr = (String, u16);

/// The distinct addresses of `named` (each with the sentinel that named it, in preference
/// order), best first, each with the first sentinel (in that order) that named it: `hint`
/// first (named by no sentinel, unless one did), then by how many sentinels name it.
pub(super) fn rank(named: &[(usize, Addr)], hint: Option<&Addr>) -> Vec<(Addr, Option<usize>)> {
    // (address, first sentinel naming it, how many name it), in order of first naming.
    let mut tally: Vec<(&Addr, usize, usize)> = Vec::new();
    for (sentinel, addr) in named {
        match tally.iter_mut().find(|(a, _, _)| *a == addr) {
            Some(entry) => entry.2 += 1,
            None => tally.push((addr, *sentinel, 1)),
        }
    }
    // Stable: equal counts keep the order of first naming.
    tally.sort_by_key(|t| std::cmp::Reverse(t.2));
    let mut ranked: Vec<(Addr, Option<usize>)> = Vec::with_capacity(tally.len() + 1);
    if let Some(hint) = hint {
        let by = tally
            .iter()
            .find(|(a, _, _)| *a == hint)
            .map(|(_, s, _)| *s);
        ranked.push((hint.clone(), by));
    }
    for (addr, sentinel, _) in tally {
        if Some(addr) != hint {
            ranked.push((addr.clone(), Some(sentinel)));
        }
    }
    ranked
}

/// Whether a sentinel's answer can be an address at all (a garbled or misconfigured sentinel
/// may answer an empty host or port 0).
pub(super) fn plausible(addr: &Addr) -> bool {
    !addr.0.trim().is_empty() && addr.1 != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(port: u16) -> Addr {
        ("10.0.0.1".to_owned(), port)
    }

    #[test]
    fn the_most_named_address_goes_first_whatever_the_first_sentinel_says() {
        let named = [(0, a(1)), (1, a(2)), (2, a(2))];
        assert_eq!(rank(&named, None), vec![(a(2), Some(1)), (a(1), Some(0))]);
    }

    #[test]
    fn ties_keep_the_preference_order() {
        let named = [(2, a(7)), (0, a(5))];
        assert_eq!(rank(&named, None), vec![(a(7), Some(2)), (a(5), Some(0))]);
    }

    #[test]
    fn an_announced_address_goes_first() {
        let named = [(0, a(1)), (1, a(1)), (2, a(2))];
        assert_eq!(
            rank(&named, Some(&a(2))),
            vec![(a(2), Some(2)), (a(1), Some(0))]
        );
        assert_eq!(rank(&[], Some(&a(3))), vec![(a(3), None)]);
    }

    #[test]
    fn garbage_is_not_an_address() {
        assert!(!plausible(&(String::new(), 0)));
        assert!(!plausible(&("10.0.0.1".to_owned(), 0)));
        assert!(!plausible(&(" ".to_owned(), 6379)));
        assert!(plausible(&a(6379)));
    }
}
