//! The `EVALSHA` of one request's own call: its algorithm's single-entry script, or the
//! general script.

use redis::Cmd;

use super::op::Op;
use super::part::Part;
use super::port::{PORTS, SCRIPT};
#[cfg(feature = "bench")]
use super::reply::Reply;
use super::time_source::TimeSource;

/// The `EVALSHA` of one request's share `part` (all in one slot on a cluster): its
/// algorithm's single-entry script for one entry, else the general script. A check with a
/// deadline (`deadline.rs`) sends the deadline where the op goes (a number above 2 is a
/// check with that deadline, `lua/check.lua`). Built here rather
/// than by `redis::Script::invoke_async`, which loads the script again on every `NOSCRIPT`: 64
/// calls in flight on a Redis that lost its scripts would send 64 loads. The store loads them
/// once per connection, and once per loss (`store/scripts.rs`).
pub(crate) fn invocation(part: &Part) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    if let ([key], [one]) = (&part.keys[..], &part.entries[..])
        && !part.needs_general()
    {
        let row = &PORTS[usize::from(one.port)];
        cmd.arg(row.single.get_hash()).arg(1).arg(key.as_str());
        for a in (row.single_args)(one.cost, one.params) {
            cmd.arg(a);
        }
        match (part.deadline, part.at) {
            (Some(deadline), TimeSource::Server) => {
                cmd.arg(deadline);
            }
            (Some(deadline), at) => {
                cmd.arg(deadline).arg(at.arg());
            }
            (None, TimeSource::Server) if part.op == Op::Check => {}
            (None, at) => {
                cmd.arg(part.op as u8).arg(at.arg());
            }
        }
        return cmd;
    }
    cmd.arg(SCRIPT.get_hash()).arg(part.keys.len());
    for k in &part.keys {
        cmd.arg(k.as_str());
    }
    match part.deadline {
        Some(deadline) => cmd.arg(deadline),
        None => cmd.arg(part.op as u8),
    };
    cmd.arg(part.at.arg());
    part.entry_args(&mut cmd);
    cmd
}

/// `part` as the single-entry GCRA script before the local tier took it (`sha`: key, inc,
/// tau; see `RedisStoreBuilder::old_gcra_script`), when `part` is one GCRA check on the
/// server's clock (a deadline is dropped: that script knows none); `None` otherwise.
#[cfg(feature = "bench")]
pub(crate) fn old_gcra_invocation(part: &Part, sha: &str) -> Option<Cmd> {
    let ([key], [one]) = (&part.keys[..], &part.entries[..]) else {
        return None;
    };
    if part.needs_general() {
        return None;
    }
    let row = &PORTS[usize::from(one.port)];
    if row.reply != Reply::GcraUsed || part.op != Op::Check || part.at != TimeSource::Server {
        return None;
    }
    let args = (row.single_args)(one.cost, one.params);
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha)
        .arg(1)
        .arg(key.as_str())
        .arg(args[0])
        .arg(args[1]);
    Some(cmd)
}

#[cfg(test)]
mod tests {
    /// The benchmark's old-script call (`RedisStoreBuilder::old_gcra_script`) is the old
    /// single-entry layout (key, inc, tau) and only ever stands for a one-key GCRA check on
    /// the server's clock.
    #[test]
    #[cfg(feature = "bench")]
    fn the_old_gcra_call_takes_only_what_the_old_script_took() {
        use tollgate::{Algorithm, Entry, Key, Limit, Namespace};

        use super::*;
        use crate::script::test_support::{cmd_args, limit};

        let gcra: &'static Limit = Box::leak(Box::new(limit(Algorithm::Gcra, 4)));
        let fw: &'static Limit = Box::leak(Box::new(limit(Algorithm::FixedWindow, 4)));
        let ns = Namespace::default();
        let g = Entry::new(gcra, Key::new(&ns, gcra, &[("u", "1")]));
        let f = Entry::new(fw, Key::new(&ns, fw, &[("u", "1")]));
        let args = |cmd: Cmd| cmd_args(&cmd);
        let check = Part::new(Op::Check, &[&g], TimeSource::Server, false);
        assert_eq!(
            old_gcra_invocation(&check, "abc").map(args),
            Some(vec![
                "EVALSHA".to_owned(),
                "abc".to_owned(),
                "1".to_owned(),
                g.key().as_str().to_owned(),
                "250000".to_owned(),
                "1000000".to_owned(),
            ])
        );
        for other in [
            Part::new(Op::Peek, &[&g], TimeSource::Server, false),
            Part::new(Op::Check, &[&g], TimeSource::Caller(7), false),
            Part::new(Op::Check, &[&f], TimeSource::Server, false),
            Part::new(Op::Check, &[&g, &f], TimeSource::Server, false),
        ] {
            assert!(old_gcra_invocation(&other, "abc").is_none(), "{other:?}");
        }
    }
}
