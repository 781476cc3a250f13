//! `--suggest` on small generated logs: the suggestion's counts are the replay's own (every
//! candidate replayed again on its own by `replay_log` must refuse the same keys and
//! requests, so the keys the suggestion skips are provably never refused), the share picks
//! the abusers and spares the collateral, and memory follows the live keys.

use std::io::Cursor;
use std::time::Duration;

use tollgate::{Algorithm, Limit, Quota};
use tollgate_replay::{KeyMapping, LogOptions, SuggestOptions, replay_log, suggest};

/// A JSON line at `t` seconds for `user`.
fn line(t: f64, user: &str) -> String {
    format!(
        "{{\"time\":{:.3},\"user\":\"{user}\"}}\n",
        1_800_000_000.0 + t
    )
}

/// Ten minutes: 1 000 users each calling every 30 s; three of them (`load0`..`load2`) also
/// load a page once (12 calls in one second); two abusers call 10 times a second for five
/// minutes.
fn log() -> String {
    let mut lines: Vec<(f64, String)> = Vec::new();
    for u in 0..1_000 {
        let name = if u < 3 {
            format!("load{u}")
        } else {
            format!("u{u}")
        };
        for k in 0..20 {
            lines.push(((u * 7 % 30 + 30 * k) as f64 + 0.5, name.clone()));
        }
        if u < 3 {
            for i in 0..12 {
                lines.push((200.0 + 100.0 * u as f64 + 0.05 * i as f64, name.clone()));
            }
        }
    }
    for a in 0..2 {
        for i in 0..3_000 {
            lines.push((
                100.0 + 0.1 * i as f64 + 0.01 * a as f64,
                format!("abuser{a}"),
            ));
        }
    }
    lines.sort_by(|a, b| a.0.total_cmp(&b.0));
    lines.iter().map(|(t, u)| line(*t, u)).collect()
}

fn options() -> LogOptions {
    LogOptions {
        mapping: KeyMapping::parse(&["user=$user"]).expect("mapping"),
        ..LogOptions::default()
    }
}

fn per_user(algorithm: Algorithm, limit: u64, window: Duration) -> Limit {
    Limit::new("per_user", algorithm, Quota::new(limit, window).expect("q"))
        .expect("limit")
        .keyed_by(["user"])
        .expect("keyed")
}

/// The top 0.2 % of 1 002 keys is 2 keys: per 10 s the suggestion refuses the two abusers
/// and no one else, and every candidate's counts are what a replay of it alone counts.
#[tokio::test]
async fn suggests_the_limit_that_refuses_the_abusers_and_counts_exactly() {
    let log = log();
    let limit = per_user(Algorithm::Gcra, 100, Duration::from_secs(60));
    let s = suggest(
        &mut || Ok(Cursor::new(log.as_bytes())),
        &limit,
        &options(),
        &SuggestOptions {
            refuse_share: 0.002,
            ..SuggestOptions::default()
        },
    )
    .expect("suggest");
    assert_eq!(
        (s.keys, s.distinct.count(), s.target_keys),
        (1_002, 1_002, 2)
    );
    let windows: Vec<u64> = s.windows.iter().map(|w| w.window.as_secs()).collect();
    assert_eq!(windows, [1, 10, 60, 600], "no hour in a ten-minute log");
    // Only the five bursty keys could be refused by any candidate.
    assert_eq!(s.suspects, 5, "{s:?}");

    // Per 1 s the page loads (12 in a second) outdo the abusers (10): only a limit above 12
    // keeps the share, and it refuses no one.
    let w1 = &s.windows[0];
    assert_eq!(w1.base, 12);
    // Per 10 s the abusers (100) stand out: 13 per 10 s (a load and a call) refuses them and
    // spares the loads.
    let w10 = &s.windows[1];
    assert_eq!(w10.base, 13, "{w10:?}");
    for a in &w10.algorithms {
        let c = &a.candidates[a.chosen.expect("a suggestion")];
        assert_eq!(
            (c.limit, c.abusers, c.collateral),
            (13, 2, 0),
            "{}: {c:?}",
            a.algorithm
        );
        let keys: Vec<&str> = c.top.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["user=abuser0", "user=abuser1"]);
    }

    // Exact: each candidate replayed alone refuses the same keys and requests.
    for w in &s.windows[..2] {
        for a in &w.algorithms {
            for c in &a.candidates {
                let r = replay_log(
                    Cursor::new(log.as_bytes()),
                    "t",
                    vec![per_user(a.algorithm, c.limit, w.window)],
                    &options(),
                    &mut |_| {},
                )
                .await
                .expect("replay");
                let l = &r.limits[0];
                assert_eq!(
                    (c.refused_requests, c.refused_keys()),
                    (l.denied(), l.denied_key_count() as u64),
                    "{} {} per {:?}",
                    a.algorithm,
                    c.limit,
                    w.window
                );
                assert_eq!((c.abusers, c.collateral), l.refused_split(5));
            }
        }
    }
}

/// A limit under the page loads refuses each loader a few times (collateral) and the
/// abusers again and again; `keys_seen` counts every key.
#[tokio::test]
async fn collateral_against_abusers() {
    let log = log();
    let r = replay_log(
        Cursor::new(log.as_bytes()),
        "t",
        vec![per_user(Algorithm::FixedWindow, 8, Duration::from_secs(1))],
        &options(),
        &mut |_| {},
    )
    .await
    .expect("replay");
    let l = &r.limits[0];
    assert_eq!(l.refused_split(5), (2, 3));
    assert_eq!(l.keys_seen.count(), 1_002);
    assert!(l.keys_seen.is_exact());
}

/// Keys that each call for a minute and go: three hours of them, 10 800 keys, of which
/// pass 1 never holds more than those heard from in the last hour and ten minutes.
#[test]
fn memory_follows_the_live_keys() {
    let mut log = String::new();
    for minute in 0..180 {
        for k in 0..60 {
            for s in 0..3 {
                log.push_str(&line(
                    (minute * 60 + k + s * 20) as f64,
                    &format!("m{minute}k{k}"),
                ));
            }
        }
    }
    let s = suggest(
        &mut || Ok(Cursor::new(log.as_bytes())),
        &per_user(Algorithm::Gcra, 10, Duration::from_secs(60)),
        &options(),
        &SuggestOptions::default(),
    )
    .expect("suggest");
    assert_eq!(s.keys, 10_800);
    assert!(
        s.peak_live <= 60 * 71,
        "{} keys held at once out of {}",
        s.peak_live,
        s.keys
    );
    assert!(s.peak_live >= 60 * 60, "the last hour's keys are live");
}

/// A share outside (0, 1) is refused before reading.
#[test]
fn a_share_must_be_a_share() {
    for share in [0.0, 1.0, -0.5, f64::NAN] {
        let err = suggest(
            &mut || Ok(Cursor::new(&b""[..])),
            &per_user(Algorithm::Gcra, 10, Duration::from_secs(60)),
            &options(),
            &SuggestOptions {
                refuse_share: share,
                ..SuggestOptions::default()
            },
        )
        .expect_err("refused");
        assert!(err.to_string().contains("between 0 and 1"), "{err}");
    }
}
