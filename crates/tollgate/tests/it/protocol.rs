//! The protocol of one check, as every face sees it: prepare once, decide with an `Op`, read
//! the `Outcome`; shadow limits; the one dynamic store type.

use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tollgate::{
    Algorithm, Ask, BoxStore, CheckError, FakeClock, Limit, Limiter, MAX_KEY_VALUE, MemoryStore,
    OnStoreError, Op, Outcome, Quota, Store, StoreErrorKind, Timestamp,
};
use tollgate_testkit::FailingStore;

fn clock() -> FakeClock {
    FakeClock::new(Timestamp::from_millis(1_900_000_000_000))
}

fn limit(name: &str, per_minute: u64) -> Limit {
    Limit::new(
        name,
        Algorithm::SlidingLog,
        Quota::per_minute(per_minute).expect("valid"),
    )
    .expect("valid")
    .keyed_by(["user"])
    .expect("valid")
}

fn limiter<S: Store>(store: S, limits: Vec<Limit>) -> Limiter<S> {
    Limiter::builder(store)
        .clock(clock())
        .limits(limits)
        .build()
        .expect("valid")
}

fn memory() -> MemoryStore {
    MemoryStore::builder().sweep_interval(None).build()
}

/// A quota refusal, a store failure under `deny`, and an admission are three outcomes that
/// cannot be mistaken for one another.
#[tokio::test]
async fn three_outcomes() {
    let key = [("user", "1")];
    let up = limiter(memory(), vec![limit("sms", 1)]);
    assert_eq!(
        up.check("sms", &key).await.expect("valid").outcome(),
        Outcome::Allowed
    );
    match up.check("sms", &key).await.expect("valid").outcome() {
        Outcome::Limited { retry_after } => assert_eq!(retry_after, Duration::from_secs(60)),
        other => panic!("a used-up quota is Limited, got {other:?}"),
    }
    let down = limiter(
        FailingStore::down(),
        vec![limit("sms", 1).on_store_error(OnStoreError::Deny)],
    );
    match down.check("sms", &key).await.expect("valid").outcome() {
        Outcome::Unavailable { error, retry_after } => {
            assert_eq!(error, StoreErrorKind::Connection);
            assert_eq!(retry_after, std::time::Duration::from_secs(1));
        }
        other => panic!("a store failure under deny is Unavailable, got {other:?}"),
    }
}

/// A prepared request is decided as a peek (nothing charged) or a check, as often as asked,
/// and reset through the same request.
#[tokio::test]
async fn prepare_once_decide_many() {
    let l = limiter(memory(), vec![limit("a", 3), limit("b", 5)]);
    let request = l.prepare(&["a", "b"], &[("user", "1")], 2).expect("valid");
    for _ in 0..3 {
        let v = l.decide(&request, Op::Peek).await;
        assert_eq!(v.outcome(), Outcome::Allowed);
        assert_eq!(v.decisions()[0].decision.remaining, 3, "a peek charged");
    }
    assert_eq!(
        l.decide(&request, Op::Check).await.outcome(),
        Outcome::Allowed
    );
    let v = l.decide(&request, Op::Check).await;
    assert!(matches!(v.outcome(), Outcome::Limited { .. }), "{v:?}");
    assert_eq!(
        v.decisions()[1].decision.remaining,
        3,
        "b charged by a refused check"
    );
    l.reset(&request).await.expect("reset");
    assert_eq!(l.decide(&request, Op::Peek).await.decision().remaining, 3);
}

/// Everything wrong with a request is found by `prepare`, before any store call.
#[tokio::test]
async fn prepare_refuses_bad_requests() {
    let l = limiter(FailingStore::down(), vec![limit("a", 3)]);
    let long = "x".repeat(MAX_KEY_VALUE + 1);
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], u64, &'a str);
    let cases: [Case<'_>; 6] = [
        (&["nope"], &[("user", "1")], 1, "unknown limit"),
        (&["a"], &[("ip", "1")], 1, "needs key part"),
        (&["a"], &[("user", &long)], 1, "longer than 1024 bytes"),
        (&["a", "a"], &[("user", "1")], 1, "named twice"),
        (&["a"], &[("user", "1")], 0, "at least 1"),
        (&["a"], &[("user", "1")], 4, "exceeds"),
    ];
    for (limits, key, cost, expected) in cases {
        let err = l.prepare(limits, key, cost).expect_err(expected);
        assert!(err.to_string().contains(expected), "{err} vs {expected}");
    }
    let ok = "x".repeat(MAX_KEY_VALUE);
    assert!(l.prepare(&["a"], &[("user", ok.as_str())], 1).is_ok());
    assert!(matches!(
        l.prepare(&["a"], &[("user", long.as_str())], 1),
        Err(CheckError::KeyPartTooLong {
            max: MAX_KEY_VALUE,
            ..
        })
    ));
}

/// A shadow limit never refuses; it is charged only when the enforced limits admit, and
/// each would-be refusal is counted, once per limit, in `tollgate_shadow_denied_total`.
#[test]
fn shadow_limits_report_but_never_refuse() {
    let counted = shadow_denials(async {
        let l = limiter(
            memory(),
            vec![limit("enforced", 2), limit("trial", 1).shadow(true)],
        );
        let key = [("user", "1")];
        let both = l.prepare(&["enforced", "trial"], &key, 1).expect("valid");
        // 1st: both admit. 2nd: trial would refuse, the request passes.
        for _ in 0..2 {
            let v = l.decide(&both, Op::Check).await;
            assert_eq!(v.outcome(), Outcome::Allowed, "{v:?}");
        }
        let v = l.decide(&both, Op::Peek).await;
        assert!(v.decisions()[1].shadow);
        assert!(!v.decisions()[1].decision.is_allowed(), "trial is used up");
        assert_eq!(v.decisive().limit.as_ref(), "enforced");
        // 3rd: enforced refuses; trial is peeked, not charged nor counted.
        let v = l.decide(&both, Op::Check).await;
        assert!(matches!(v.outcome(), Outcome::Limited { .. }));
        assert_eq!(v.decisive().limit.as_ref(), "enforced");
        // Only shadow limits named: never refused, the decisive one is the shadow one.
        let v = l.check("trial", &key).await.expect("valid");
        assert_eq!(v.outcome(), Outcome::Allowed);
        assert_eq!(v.decisive().limit.as_ref(), "trial");
        // Its decision as the verdict shows it admits (code answering 429 on
        // `!decision().is_allowed()` enforced the shadow limit); the limit's own refuses.
        assert!(v.decision().is_allowed(), "{v:?}");
        assert_eq!(v.decision().retry_after(), None);
        assert!(!v.decisive().decision.is_allowed());
    });
    assert_eq!(counted, [("trial".to_owned(), 2)]);
}

/// Runs `test` on a runtime of its own under a recorder of its own: the would-be refusals it
/// counted in `tollgate_shadow_denied_total`, by limit.
fn shadow_denials(test: impl Future<Output = ()>) -> Vec<(String, u64)> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(test);
    });
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(k, _, _, _)| k.key().name() == "tollgate_shadow_denied_total")
        .map(|(k, _, _, v)| {
            let limit = k
                .key()
                .labels()
                .find(|l| l.key() == "limit")
                .map(|l| l.value().to_owned())
                .unwrap_or_default();
            match v {
                DebugValue::Counter(n) => (limit, n),
                other => panic!("not a counter: {other:?}"),
            }
        })
        .collect()
}

/// An Envoy rule in shadow mode makes one entry of a request shadow.
#[tokio::test]
async fn one_entry_can_be_made_shadow() {
    let l = limiter(memory(), vec![limit("a", 1)]);
    let request = l
        .prepare_with([
            Ask::named("a", &[("user", "1")]),
            Ask::named("a", &[("user", "2")]).shadow(true),
        ])
        .expect("valid");
    assert_eq!(
        l.check("a", &[("user", "2")])
            .await
            .expect("valid")
            .outcome(),
        Outcome::Allowed
    );
    let v = l.decide(&request, Op::Check).await;
    assert_eq!(
        v.outcome(),
        Outcome::Allowed,
        "user 2 is a shadow entry: {v:?}"
    );
    assert!(!v.decisions()[1].decision.is_allowed());
}

/// The boxed store decides exactly as the store inside it, and gives it back.
#[tokio::test]
async fn box_store_is_transparent() {
    let inner = memory();
    let boxed = limiter(BoxStore::new(inner.clone()), vec![limit("a", 2)]);
    let plain = limiter(memory(), vec![limit("a", 2)]);
    for user in ["1", "1", "1", "2"] {
        let key = [("user", user)];
        let (b, p) = (
            boxed.check("a", &key).await.expect("valid"),
            plain.check("a", &key).await.expect("valid"),
        );
        assert_eq!(b, p);
    }
    assert_eq!(inner.len(), 2, "the boxed limiter wrote to the inner store");
    assert!(boxed.store().downcast_ref::<MemoryStore>().is_some());
    assert!(boxed.store().downcast_ref::<FailingStore>().is_none());
}

/// A limit keyed by whatever it is given is keyed by its parts in name order: the same parts
/// given in another order are the same key, so one caller shares one quota. They were two
/// keys, each with the whole quota.
#[tokio::test]
async fn parts_given_in_any_order_are_one_key() {
    let any = Limit::new(
        "any",
        Algorithm::SlidingLog,
        Quota::per_minute(2).expect("q"),
    )
    .expect("valid");
    let l = limiter(memory(), vec![any]);
    let ab = [("a", "1"), ("b", "2")];
    let ba = [("b", "2"), ("a", "1")];
    assert_eq!(
        l.key("any", &ab).expect("key"),
        l.key("any", &ba).expect("key")
    );
    assert_eq!(
        l.check("any", &ab).await.expect("known").outcome(),
        Outcome::Allowed
    );
    assert_eq!(
        l.check("any", &ba).await.expect("known").outcome(),
        Outcome::Allowed
    );
    assert_ne!(
        l.check("any", &ab).await.expect("known").outcome(),
        Outcome::Allowed
    );
    assert_ne!(
        l.check("any", &ba).await.expect("known").outcome(),
        Outcome::Allowed
    );
}

/// `prepare_with` validates and keys as `prepare` does: a limit made for the request is keyed
/// in the limiter's namespace, costs and shadow flags are per entry, and every check of
/// `prepare` applies (unknown limit, cost above capacity, duplicates, a part too long, and for
/// a limit keyed by whatever it is given, a part name too long).
#[tokio::test]
async fn prepare_with_validates_and_keys_every_entry() {
    let l = limiter(memory(), vec![limit("a", 5)]);
    let own = Limit::new(
        "own",
        Algorithm::FixedWindow,
        Quota::per_minute(3).expect("q"),
    )
    .expect("valid");
    let key = [("user", "1")];
    let request = l
        .prepare_with([
            Ask::named("a", &key).cost(2),
            Ask::limit(&own, &key).shadow(true),
        ])
        .expect("valid");
    let entries = request.entries();
    assert_eq!((entries[0].cost(), entries[0].is_shadow()), (2, false));
    assert_eq!((entries[1].cost(), entries[1].is_shadow()), (1, true));
    assert_eq!(entries[0].key(), &l.key("a", &key).expect("key"));
    assert!(
        entries[1]
            .key()
            .as_str()
            .starts_with(&format!("{}:own:", l.namespace().prefix())),
        "{:?}",
        entries[1].key()
    );
    let v = l.decide(&request, Op::Check).await;
    assert_eq!(v.outcome(), Outcome::Allowed);
    assert_eq!(v.decisions()[0].decision.remaining, 3);

    let long = "x".repeat(MAX_KEY_VALUE + 1);
    let bad: Vec<(Vec<Ask<'_, '_, &str>>, &str)> = vec![
        (vec![Ask::named("nope", &key)], "unknown"),
        (vec![Ask::named("a", &key).cost(6)], "capacity"),
        (vec![Ask::named("a", &key).cost(0)], "cost"),
        (vec![Ask::named("a", &key), Ask::named("a", &key)], "twice"),
        (vec![], "no limit"),
    ];
    for (asks, what) in bad {
        let err = l.prepare_with(asks).expect_err(what);
        let text = err.to_string();
        let expected = match what {
            "unknown" => matches!(err, CheckError::UnknownLimit(_)),
            "capacity" => matches!(err, CheckError::CostExceedsCapacity { .. }),
            "cost" => matches!(err, CheckError::ZeroCost),
            "twice" => matches!(err, CheckError::DuplicateLimit(_)),
            _ => matches!(err, CheckError::NoLimits),
        };
        assert!(expected, "{what}: {text}");
    }
    let long_value = [("user", long.as_str())];
    let long_name = [(long.as_str(), "1")];
    for key in [&long_value[..], &long_name[..]] {
        let err = l
            .prepare_with([Ask::limit(&own, key)])
            .expect_err("too long");
        assert!(matches!(err, CheckError::KeyPartTooLong { .. }), "{err}");
        assert!(
            err.to_string().len() < 200,
            "the message stays short: {err}"
        );
    }
}

/// A shadow entry's cost is clamped to its capacity + 1 before any store sees it: the
/// caller chooses the cost (a tower `cost` function, the HTTP API's `cost`, up to
/// `u64::MAX`), and the rules add it to counts (a sliding log's `count + cost` overflowed,
/// and wrapped in release, charging `u64::MAX` entries under its shard's lock) and multiply
/// it by intervals. Refused, counted, nothing charged; every algorithm, on a key already
/// charged once.
#[tokio::test]
async fn a_huge_shadow_cost_is_clamped_and_refused() {
    for algorithm in Algorithm::ALL {
        let trial = Limit::new("trial", algorithm, Quota::per_minute(10).expect("q"))
            .and_then(|l| l.keyed_by(["user"]))
            .expect("valid")
            .shadow(true);
        let l = limiter(memory(), vec![trial]);
        let fresh = l
            .prepare(&["trial"], &[("user", "fresh")], u64::MAX)
            .expect("no error");
        let v = l.decide(&fresh, Op::Check).await;
        assert!(
            v.decisions()[0].shadow_refused(),
            "{algorithm:?}: a key never seen: {v:?}"
        );
        let key = [("user", "1")];
        assert!(
            l.check("trial", &key).await.expect("known").decisions()[0]
                .decision
                .is_allowed()
        );
        let huge = l
            .prepare(&["trial"], &key, u64::MAX)
            .expect("a shadow cost is no error");
        assert_eq!(
            huge.entries()[0].cost(),
            11,
            "{algorithm:?}: clamped to capacity + 1"
        );
        let v = l.decide(&huge, Op::Check).await;
        assert_eq!(v.outcome(), Outcome::Allowed, "{algorithm:?}: {v:?}");
        assert!(v.decisions()[0].shadow_refused(), "{algorithm:?}: {v:?}");
        let peek = l.prepare(&["trial"], &key, 1).expect("valid");
        let left = l.decide(&peek, Op::Peek).await.decisions()[0]
            .decision
            .remaining;
        assert_eq!(left, 9, "{algorithm:?}: only the first check charged");
        // A settlement applies its delta itself: beyond the capacity it stays an error,
        // shadow or not.
        for delta in [11, -11, i64::MIN, i64::MAX] {
            let settled = l.adjust("trial", &key, delta).await;
            assert!(
                matches!(
                    settled,
                    Err(tollgate::SettleError::Check(
                        CheckError::CostExceedsCapacity { .. }
                    ))
                ),
                "{algorithm:?}, delta {delta}: {settled:?}"
            );
        }
    }
}

/// A cost above a shadow limit's capacity does not fail the request (it did: a
/// `CostExceedsCapacity` naming the shadow limit, a 413 from the tower layer): the shadow limit
/// is decided as refusing it, counted once per check in `tollgate_shadow_denied_total`, and
/// left uncharged, while the enforced limit decides and is charged; the same with the deny
/// cache on (a cached refusal answers only its own cost). An enforced limit's capacity is
/// still an error, and so is a shadow-only request's cost of 0. Every algorithm.
#[test]
fn a_cost_above_a_shadow_capacity_is_a_would_be_refusal() {
    let counted = shadow_denials(async {
        for algorithm in Algorithm::ALL {
            for deny_cache in [false, true] {
                let ctx = format!("{algorithm:?}, deny cache {deny_cache}");
                let of = |name: &str, n: u64| {
                    Limit::new(name, algorithm, Quota::per_minute(n).expect("valid"))
                        .and_then(|l| l.keyed_by(["user"]))
                        .expect("valid")
                };
                let mut builder = Limiter::builder(memory())
                    .clock(clock())
                    .limits(vec![of("wide", 1000), of("trial", 10).shadow(true)]);
                if deny_cache {
                    builder = builder.deny_cache(1000);
                }
                let l = builder.build().expect("valid");
                let key = [("user", "1")];
                let both = l
                    .prepare(&["wide", "trial"], &key, 50)
                    .unwrap_or_else(|e| panic!("{ctx}: {e}"));
                for _ in 0..2 {
                    let v = l.decide(&both, Op::Check).await;
                    assert_eq!(v.outcome(), Outcome::Allowed, "{ctx}: {v:?}");
                    assert_eq!(v.decisive().limit.as_ref(), "wide", "{ctx}");
                    assert!(v.decisions()[1].shadow_refused(), "{ctx}: {v:?}");
                }
                let alone = l
                    .prepare(&["trial"], &key, 50)
                    .unwrap_or_else(|e| panic!("{ctx}: {e}"));
                let v = l.decide(&alone, Op::Check).await;
                assert_eq!(v.outcome(), Outcome::Allowed, "{ctx}: shadow only: {v:?}");
                let peek = |name: &'static str| {
                    let request = l.prepare(&[name], &key, 1).expect("valid");
                    let l = &l;
                    async move { l.decide(&request, Op::Peek).await.decisions()[0].decision }
                };
                assert_eq!(peek("trial").await.remaining, 10, "{ctx}: trial charged");
                assert_eq!(peek("wide").await.remaining, 900, "{ctx}: 2 × 50 charged");
                assert!(
                    matches!(
                        l.prepare(&["wide", "trial"], &key, 1001),
                        Err(CheckError::CostExceedsCapacity { ref limit, .. }) if limit == "wide"
                    ),
                    "{ctx}"
                );
                assert!(
                    matches!(l.prepare(&["trial"], &key, 0), Err(CheckError::ZeroCost)),
                    "{ctx}"
                );
            }
        }
    });
    let counted: u64 = counted
        .iter()
        .filter(|(limit, _)| limit == "trial")
        .map(|(_, n)| n)
        .sum();
    assert_eq!(counted, 5 * 2 * 3, "three would-be refusals per run");
}
