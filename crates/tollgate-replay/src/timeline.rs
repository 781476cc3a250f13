//! The most refused keys over time: a second pass over the log that decides only the
//! requests of a few keys, second by second.
//!
//! Which keys are the most refused is known only at the end of a replay, and keeping a
//! timeline for every key would hold the log's keys × its seconds. So the report's per-key
//! timelines come from reading the log again: the same lines on the same clock
//! ([`crate::replay_log()`]'s rules), and each chosen key's requests decided by its limit's
//! rule from a fresh state. A key's decisions depend only on its own requests and the
//! clock, so they are the replay's own, exactly; memory is the chosen keys' series.

use std::collections::HashMap;
use std::io::BufRead;

use tollgate::Limit;
use tollgate::rules::AnyState;

use crate::key_mapping::{key_indices, push_key_text};
pub use crate::key_timeline::KeyTimeline;
use crate::limit_stats::MAX_SERIES_SECONDS;
use crate::replay_error::ReplayError;
use crate::replay_log::{LogOptions, each_decided};

/// The timelines of `keys[i]` under `limits[i]` (keys as reports show them), over the log
/// `reader`, read with `options`.
///
/// # Errors
/// As [`crate::replay_log()`] before its first line.
pub fn key_timelines<R: BufRead>(
    reader: R,
    limits: &[Limit],
    options: &LogOptions,
    keys: &[Vec<String>],
) -> Result<Vec<Vec<KeyTimeline>>, ReplayError> {
    struct Watch<'a> {
        limit: &'a Limit,
        parts: Vec<(Box<str>, usize)>,
        keys: HashMap<String, (usize, AnyState)>,
        out: Vec<KeyTimeline>,
    }
    let mut watches = limits
        .iter()
        .zip(keys)
        .map(|(limit, keys)| {
            Ok(Watch {
                limit,
                parts: key_indices(limit, &options.mapping)?,
                keys: keys
                    .iter()
                    .enumerate()
                    .map(|(i, k)| (k.clone(), (i, limit.rule().empty_state())))
                    .collect(),
                out: keys
                    .iter()
                    .map(|k| KeyTimeline {
                        key: k.clone(),
                        ..KeyTimeline::default()
                    })
                    .collect(),
            })
        })
        .collect::<Result<Vec<_>, ReplayError>>()?;
    watches.retain(|w| !w.keys.is_empty());
    let mut text = String::new();
    each_decided(reader, options, &mut |now, start, event| {
        let second = ((now - start) / 1_000_000) as usize;
        for w in &mut watches {
            text.clear();
            push_key_text(
                &mut text,
                w.parts
                    .iter()
                    .map(|(name, v)| (&**name, event.values[*v].as_str())),
            );
            let Some((i, state)) = w.keys.get_mut(text.as_str()) else {
                continue;
            };
            let rule = w.limit.rule();
            let refused = match rule.admits(state, now, 1) {
                Ok(()) => {
                    rule.charge(state, now, 1);
                    false
                }
                Err(_) => true,
            };
            if second < MAX_SERIES_SECONDS {
                let t = &mut w.out[*i];
                if t.requests.len() <= second {
                    t.requests.resize(second + 1, 0);
                    t.refused.resize(second + 1, 0);
                }
                t.requests[second] += 1;
                t.refused[second] += u32::from(refused);
            }
        }
    })?;
    let mut by_limit: Vec<Vec<KeyTimeline>> = keys.iter().map(|_| Vec::new()).collect();
    let mut watched = watches.into_iter();
    for (i, k) in keys.iter().enumerate() {
        if !k.is_empty() {
            by_limit[i] = watched.next().expect("one watch per limit with keys").out;
        }
    }
    Ok(by_limit)
}
