//! Request modes beyond all or nothing: lease mode, any-of groups (`Need`), and counted
//! refusals (their checks and their peeks).

use std::time::Duration;

use tollgate::{Algorithm, CheckError, FakeClock, Lease, Need, Op, Outcome, Store, Verdict};

use super::harness::{Harness, from_store, limit_for, name};
use crate::Fixture;

/// Lease mode (fixed window, 20 a minute, k = 5): the store counts every unit taken (spent or
/// held), never more than the limit; a refusal takes nothing; held units go back on
/// `return_leases`; a lease never carries into the next window. After `return_leases` a
/// limiter holds no lease again: the rest runs on a new one, as a reload's next limit set.
pub async fn lease_mode_counts_every_unit_taken<S: Store>(clock: FakeClock, fixture: Fixture<S>) {
    let leased = limit_for("lease", Algorithm::FixedWindow, 20, Duration::from_secs(60))
        .lease(Lease::new().units(5))
        .expect("fixed window");
    let name = leased.name().to_owned();
    let mut reloads = super::algorithms::Reloads::new(clock, fixture);
    let first = reloads.harness(leased.clone());
    let h = &first;
    let counted = |v: Verdict| 20 - v.decision().remaining;
    for _ in 0..3 {
        let v = h.check(&name, "a", 1).await;
        from_store(&v, &name);
        assert_eq!(v.outcome(), Outcome::Allowed, "{name}");
    }
    let held = h.limiter.leased_units();
    assert!((1..=5).contains(&held), "{name}: {held} held");
    assert_eq!(counted(h.peek(&name, "a", 1).await), 3 + held, "{name}");
    assert_eq!(h.limiter.return_leases().await.expect("give back"), held);
    assert_eq!(counted(h.peek(&name, "a", 1).await), 3, "{name}");
    let next = reloads.harness(leased);
    let h = &next;
    for _ in 3..20 {
        assert_eq!(
            h.check(&name, "a", 1).await.outcome(),
            Outcome::Allowed,
            "{name}"
        );
    }
    let refused = h.check(&name, "a", 1).await;
    assert_eq!(
        refused.outcome(),
        Outcome::Limited {
            retry_after: Duration::from_secs(60)
        },
        "{name}"
    );
    assert_eq!(counted(h.peek(&name, "a", 1).await), 20, "{name}");
    h.advance(Duration::from_secs(60));
    for _ in 0..20 {
        assert_eq!(
            h.check(&name, "a", 1).await.outcome(),
            Outcome::Allowed,
            "{name}"
        );
    }
    assert_ne!(
        h.check(&name, "a", 1).await.outcome(),
        Outcome::Allowed,
        "{name}"
    );
}

/// Entries that need less than all or nothing (`tollgate::Need`, Envoy's quota mode): the
/// request's any-of group refuses it only when every member refuses; when it passes, the
/// members that admit are charged and those that refuse are not; a refusal of an entry that
/// must admit charges nothing, the group included; an optional entry never refuses. Each
/// entry on its own key (different slots on a cluster), every algorithm.
pub async fn any_of_group_refuses_only_when_all_refuse<S: Store>(
    clock: FakeClock,
    fixture: Fixture<S>,
) {
    let minute = Duration::from_secs(60);
    let mut limits = Vec::new();
    for a in Algorithm::ALL {
        limits.push(limit_for("must", a, 5, minute));
        limits.push(limit_for("one", a, 1, minute));
        limits.push(limit_for("two", a, 2, minute));
        limits.push(limit_for("opt", a, 1, minute));
    }
    let h = Harness::new(clock, fixture, limits);
    for a in Algorithm::ALL {
        let (must, one, two, opt) = (
            name("must", a),
            name("one", a),
            name("two", a),
            name("opt", a),
        );
        let (u1, u2, u3, u4) = (
            [("user", "ua")],
            [("user", "ub")],
            [("user", "uc")],
            [("user", "ud")],
        );
        let items: [tollgate::CostedLimit<'_, &str>; 4] = [
            (&must, &u1, 1),
            (&one, &u2, 1),
            (&two, &u3, 1),
            (&opt, &u4, 1),
        ];
        let check = || {
            let h = &h;
            let items = &items;
            async move {
                let mut request = h.limiter.prepare_keyed_costs(items).expect("valid");
                request.set_need(1, Need::OneOf);
                request.set_need(2, Need::OneOf);
                request.set_need(3, Need::Optional);
                let v = h.limiter.decide(&request, Op::Check).await;
                from_store(&v, "any-of check");
                let allowed: Vec<bool> = v
                    .decisions()
                    .iter()
                    .map(|d| d.decision.is_allowed())
                    .collect();
                (v.outcome() == Outcome::Allowed, allowed)
            }
        };
        let remaining = |limit: &str, user: &'static str| {
            let h = &h;
            let limit = limit.to_owned();
            async move { h.peek(&limit, user, 1).await.decision().remaining }
        };
        let state = || async {
            [
                remaining(&must, "ua").await,
                remaining(&one, "ub").await,
                remaining(&two, "uc").await,
                remaining(&opt, "ud").await,
            ]
        };
        // Every entry admits: every one charged.
        assert_eq!(check().await, (true, vec![true; 4]), "{a:?}: first");
        assert_eq!(state().await, [4, 0, 1, 0], "{a:?}: after the first");
        // `one` and `opt` refuse, `two` admits: admitted, the refusals uncharged.
        assert_eq!(
            check().await,
            (true, vec![true, false, true, false]),
            "{a:?}: second"
        );
        assert_eq!(state().await, [3, 0, 0, 0], "{a:?}: after the second");
        // The whole group refuses: refused, and nothing charged (`must` included).
        assert_eq!(
            check().await,
            (false, vec![true, false, false, false]),
            "{a:?}: third"
        );
        assert_eq!(
            state().await,
            [3, 0, 0, 0],
            "{a:?}: a refused request charged"
        );
        // A refusal of an entry that must admit refuses whatever the group says.
        let fresh = [("user", "ue")];
        let exhausted: [tollgate::CostedLimit<'_, &str>; 2] = [(&one, &u2, 1), (&two, &fresh, 1)];
        let mut request = h.limiter.prepare_keyed_costs(&exhausted).expect("valid");
        request.set_need(1, Need::OneOf);
        let v = h.limiter.decide(&request, Op::Check).await;
        assert!(
            v.outcome() != Outcome::Allowed,
            "{a:?}: a must entry refused"
        );
        assert_eq!(
            remaining(&two, "ue").await,
            2,
            "{a:?}: group charged by a refusal"
        );
    }
}

/// A request that counts refusals (`Request::count_refusals`, envoyproxy/ratelimit's
/// counting, fixed windows only) charges every entry its cost, admitted or not, each on its
/// own, and decides each from its count after; by default a refused request charges nothing.
/// Limits of other algorithms refuse to count.
pub async fn counted_refusals_charge_every_entry<S: Store>(clock: FakeClock, fixture: Fixture<S>) {
    let minute = Duration::from_secs(60);
    let limits = vec![
        limit_for("count-small", Algorithm::FixedWindow, 2, minute),
        limit_for("count-large", Algorithm::FixedWindow, 5, minute),
        limit_for("count-gcra", Algorithm::Gcra, 5, minute),
    ];
    let h = Harness::new(clock, fixture, limits);
    let (small, large) = ("count-small-fw", "count-large-fw");
    let check = |counting: bool, user: &'static str| {
        let h = &h;
        async move {
            let (ka, kb) = ([("user", user)], [("user", "other")]);
            let items: [tollgate::CostedLimit<'_, &str>; 2] = [(small, &ka, 1), (large, &kb, 1)];
            let mut request = h.limiter.prepare_keyed_costs(&items).expect("valid");
            if counting {
                request.count_refusals().expect("fixed windows count");
            }
            let v = h.limiter.decide(&request, Op::Check).await;
            from_store(&v, "counting check");
            let d: Vec<(bool, u64)> = v
                .decisions()
                .iter()
                .map(|d| (d.decision.is_allowed(), d.decision.remaining))
                .collect();
            (v.outcome() == Outcome::Allowed, d)
        }
    };
    // Counted: the third request is over `small` (count 3 > 2), and `large` is charged too.
    assert_eq!(check(true, "a").await, (true, vec![(true, 1), (true, 4)]));
    assert_eq!(check(true, "a").await, (true, vec![(true, 0), (true, 3)]));
    assert_eq!(check(true, "a").await, (false, vec![(false, 0), (true, 2)]));
    assert_eq!(check(true, "a").await, (false, vec![(false, 0), (true, 1)]));
    assert_eq!(h.peek(large, "other", 1).await.decision().remaining, 1);
    // The count goes past the limit: each refusal pushes it further.
    let v = h.peek(small, "a", 1).await;
    assert!(!v.decision().is_allowed());
    assert_eq!(v.decision().retry_after(), Some(minute), "the window's end");
    // Not counted (the default): the refused request charges nothing.
    h.limiter
        .reset(
            &h.limiter
                .prepare(&[large], &[("user", "other")], 1)
                .expect("valid"),
        )
        .await
        .expect("reset");
    assert_eq!(check(false, "b").await, (true, vec![(true, 1), (true, 4)]));
    assert_eq!(check(false, "b").await, (true, vec![(true, 0), (true, 3)]));
    assert_eq!(
        check(false, "b").await,
        (false, vec![(false, 0), (true, 3)])
    );
    assert_eq!(h.peek(large, "other", 1).await.decision().remaining, 3);
    // A lone counted entry, and a window that ends: the count starts again.
    let lone = |user: &'static str| {
        let h = &h;
        async move {
            let mut request = h
                .limiter
                .prepare(&[small], &[("user", user)], 1)
                .expect("valid");
            request.count_refusals().expect("fixed window");
            h.limiter.decide(&request, Op::Check).await.decision()
        }
    };
    assert!(lone("c").await.is_allowed());
    assert!(lone("c").await.is_allowed());
    let over = lone("c").await;
    assert!(!over.is_allowed() && over.remaining == 0);
    h.advance(minute);
    assert!(lone("c").await.is_allowed(), "a new window");
    // Other algorithms do not count refusals.
    let mut request = h
        .limiter
        .prepare(&["count-gcra-gcra"], &[("user", "a")], 1)
        .expect("valid");
    let err = request.count_refusals().expect_err("gcra");
    assert!(
        matches!(err, CheckError::RefusalsNotCountable { .. }),
        "{err}"
    );
}

/// A peek of a request that counts refusals answers as envoyproxy/ratelimit answers a
/// descriptor of `hits_addend` 0 (`limitAfterIncrease > limit` with nothing added): from the
/// count as it stands, charging nothing, admitted at the limit (0 remaining) and refused only
/// past it; a plain peek of the same key refuses once no unit is left.
pub async fn counted_peeks_answer_from_the_count<S: Store>(clock: FakeClock, fixture: Fixture<S>) {
    let minute = Duration::from_secs(60);
    let limits = vec![limit_for("peek-count", Algorithm::FixedWindow, 2, minute)];
    let h = Harness::new(clock, fixture, limits);
    let fw = name("peek-count", Algorithm::FixedWindow);
    let ask = |counting: bool, op: Op, users: &'static [&'static str]| {
        let h = &h;
        let fw = fw.as_str();
        async move {
            let keys: Vec<[(&str, &str); 1]> = users.iter().map(|u| [("user", *u)]).collect();
            let items: Vec<tollgate::CostedLimit<'_, &str>> =
                keys.iter().map(|k| (fw, &k[..], 1)).collect();
            let mut request = h.limiter.prepare_keyed_costs(&items).expect("valid");
            if counting {
                request.count_refusals().expect("a fixed window counts");
            }
            let v = h.limiter.decide(&request, op).await;
            from_store(&v, "counting");
            v.decisions()
                .iter()
                .map(|d| {
                    let d = d.decision;
                    (d.is_allowed(), d.remaining, d.retry_after())
                })
                .collect::<Vec<_>>()
        }
    };
    let peek = |users| ask(true, Op::Peek, users);
    // A key never charged: the whole limit, and the peek makes no counter.
    assert_eq!(peek(&["a"]).await, [(true, 2, None)]);
    assert_eq!(peek(&["a"]).await, [(true, 2, None)], "nothing charged");
    assert_eq!(ask(true, Op::Check, &["a"]).await, [(true, 1, None)]);
    assert_eq!(peek(&["a"]).await, [(true, 1, None)]);
    // At the limit: the reference's check-only answer is OK with 0 left; a plain peek (one
    // unit asked) refuses.
    assert_eq!(ask(true, Op::Check, &["a"]).await, [(true, 0, None)]);
    assert_eq!(peek(&["a"]).await, [(true, 0, None)], "count == limit");
    assert_eq!(
        ask(false, Op::Peek, &["a"]).await,
        [(false, 0, Some(minute))],
        "a plain peek"
    );
    // Past it (a counted refusal): refused until the window ends, and the peeks still
    // charge nothing.
    assert_eq!(
        ask(true, Op::Check, &["a"]).await,
        [(false, 0, Some(minute))]
    );
    for _ in 0..3 {
        assert_eq!(
            peek(&["a", "b"]).await,
            [(false, 0, Some(minute)), (true, 2, None)],
            "count > limit"
        );
    }
    assert_eq!(
        ask(true, Op::Check, &["b"]).await,
        [(true, 1, None)],
        "b never charged by a peek"
    );
    h.advance(minute);
    assert_eq!(peek(&["a"]).await, [(true, 2, None)], "a new window");
}
