//! The least-privilege check: at connect time, every command tollgate will send is checked
//! against the Redis user's ACL (`lua/permissions.lua`, `redis.acl_check_cmd`), so that a
//! user missing one permission is refused at start-up with the command named, instead of the
//! first request of some algorithm failing hours later.
//!
//! [`COMMANDS`] is the one list of what tollgate sends and why; `docs/redis.md` prints it as
//! the ACL to create, and a test holds it to the Lua sources (every `redis.call` is listed).

use std::sync::LazyLock;

use redis::{Script, Value};
use tollgate::StoreError;

/// The permission check script, loaded with the others (`script::all_scripts`).
pub(crate) static PERMISSIONS_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/permissions.lua")));

/// Where a command is needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needed {
    /// On every Redis.
    Always,
    /// On a Redis Cluster only.
    Cluster,
    /// Behind Redis Sentinel only (on the data nodes).
    Sentinel,
}

/// Every command tollgate sends to a data node: the command line the check asks about (`K`
/// a key under the prefix, `C` the reset channel), where it is needed, and why.
pub const COMMANDS: &[(&str, Needed, &str)] = &[
    (
        "evalsha x 1 K",
        Needed::Always,
        "runs every decision's script",
    ),
    (
        "script load x",
        Needed::Always,
        "loads the scripts at connect time and after a restart or SCRIPT FLUSH",
    ),
    ("time", Needed::Always, "the scripts' clock (server time)"),
    ("get K", Needed::Always, "reads a counter or a GCRA state"),
    (
        "set K 1 PX 1",
        Needed::Always,
        "writes a counter or a GCRA state, with its expiry",
    ),
    (
        "pexpire K 1",
        Needed::Always,
        "sets or repairs a key's expiry",
    ),
    (
        "pttl K",
        Needed::Always,
        "GCRA on the server's clock keeps its state in the expiry",
    ),
    (
        "del K",
        Needed::Always,
        "POST /v1/reset, and a script clearing a stale key",
    ),
    (
        "hgetall K",
        Needed::Always,
        "reads a sliding window's buckets",
    ),
    ("hmget K f", Needed::Always, "reads a token bucket"),
    ("hset K f 1", Needed::Always, "writes a token bucket"),
    (
        "hincrby K f 1",
        Needed::Always,
        "counts in a sliding window's bucket",
    ),
    (
        "hdel K f",
        Needed::Always,
        "drops a sliding window's expired buckets",
    ),
    (
        "zadd K 1 m",
        Needed::Always,
        "records a request in a sliding log",
    ),
    ("zcount K 0 1", Needed::Always, "counts a sliding log"),
    (
        "zrange K 0 1",
        Needed::Always,
        "finds a sliding log's newest entry",
    ),
    (
        "zrangebyscore K 0 1",
        Needed::Always,
        "finds when a sliding log frees room (retry_after)",
    ),
    (
        "zrevrangebyscore K 1 0",
        Needed::Always,
        "finds a sliding log's newest entries (a refund)",
    ),
    (
        "zrem K m",
        Needed::Always,
        "gives back a sliding log's entries (a cross-slot undo)",
    ),
    (
        "zremrangebyscore K 0 1",
        Needed::Always,
        "trims a sliding log's old entries",
    ),
    (
        "publish C K",
        Needed::Always,
        "tells other instances a key was reset (their deny caches)",
    ),
    (
        "subscribe C",
        Needed::Always,
        "hears resets made by other instances",
    ),
    (
        "cluster slots",
        Needed::Cluster,
        "learns which node holds which slot",
    ),
    (
        "asking",
        Needed::Cluster,
        "follows an ASK redirection while a slot moves",
    ),
    (
        "role",
        Needed::Sentinel,
        "checks that a node named by the sentinels is a master before writing to it",
    ),
];

/// The least-privilege ACL rules for a tollgate user whose keys are under `prefix`, on a
/// Redis of this kind: its keys and reset channel only, and only the commands of [`COMMANDS`].
/// Put them after `ACL SETUSER <name> on ><password>`.
///
/// ```
/// let rules = tollgate_redis::least_privilege_acl("tollgate", false, false);
/// assert!(rules.starts_with("resetkeys ~tollgate:* resetchannels &tollgate:* -@all +evalsha"));
/// ```
pub fn least_privilege_acl(prefix: &str, cluster: bool, sentinel: bool) -> String {
    let mut rules = format!("resetkeys ~{prefix}:* resetchannels &{prefix}:* -@all");
    for line in lines(cluster, sentinel) {
        rules.push_str(" +");
        rules.push_str(&command_name(line));
    }
    rules
}

/// The ACL name of a command line: `script load x` → `script|load`, `hset K f 1` → `hset`.
fn command_name(line: &str) -> String {
    line.split_whitespace()
        .take_while(|w| w.chars().all(|c| c.is_ascii_lowercase()) && *w != "x")
        .collect::<Vec<_>>()
        .join("|")
}

/// The command lines to check on a store of this kind.
pub(crate) fn lines(cluster: bool, sentinel: bool) -> impl Iterator<Item = &'static str> {
    COMMANDS
        .iter()
        .filter(move |(_, needed, _)| match needed {
            Needed::Always => true,
            Needed::Cluster => cluster,
            Needed::Sentinel => sentinel,
        })
        .map(|(line, _, _)| *line)
}

/// The error for the refused command `lines`, naming each command.
pub(crate) fn refused(lines: &[String], prefix: &str) -> StoreError {
    let names: Vec<String> = lines
        .iter()
        .map(|line| {
            let name = command_name(line);
            match COMMANDS.iter().find(|(l, _, _)| l == line) {
                Some((_, _, why)) => format!("{} ({why})", name.to_uppercase()),
                None => name.to_uppercase(),
            }
        })
        .collect();
    StoreError::Auth(
        format!(
            "the Redis user may not run {} on keys {prefix}:* (or channel {prefix}:resets); see docs/redis.md for the ACL tollgate needs",
            names.join(", ")
        )
        .into(),
    )
}

/// The permission check's answer.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Checked {
    /// The command lines the user may not run.
    pub(crate) refused: Vec<String>,
    /// The command lines Redis could not check (see `lua/permissions.lua`).
    pub(crate) unchecked: Vec<String>,
}

/// Reads the script's reply; `None` when Redis could not tell at all (before Redis 7).
pub(crate) fn decode(reply: Value) -> Result<Option<Checked>, StoreError> {
    let unexpected =
        |v: &Value| StoreError::Protocol(format!("permission check: unexpected {v:?}"));
    let lines = |v: Value| -> Result<Vec<String>, StoreError> {
        match v {
            Value::Array(items) => items
                .into_iter()
                .map(|v| match v {
                    Value::BulkString(b) => Ok(String::from_utf8_lossy(&b).into_owned()),
                    other => Err(unexpected(&other)),
                })
                .collect(),
            other => Err(unexpected(&other)),
        }
    };
    match reply {
        Value::Int(-1) => Ok(None),
        Value::Array(mut two) if two.len() == 2 => {
            let unchecked = lines(two.pop().unwrap_or(Value::Nil))?;
            let refused = lines(two.pop().unwrap_or(Value::Nil))?;
            Ok(Some(Checked { refused, unchecked }))
        }
        other => Err(unexpected(&other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command a Lua script calls is in the list (so the documented ACL cannot miss
    /// one), and every listed command is sent somewhere. Every file of `lua/` is read, so a
    /// script added later is held to the list too.
    #[test]
    fn every_scripted_command_is_listed() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("lua");
        let mut sources: Vec<(String, String)> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.expect("a directory entry").path())
            .filter(|path| path.extension().is_some_and(|e| e == "lua"))
            .map(|path| {
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                (path.display().to_string(), text)
            })
            .collect();
        sources.sort();
        // Those the store composes its scripts of, at least (a file moved away would
        // otherwise be skipped silently).
        for name in [
            "prelude.lua",
            "gcra.lua",
            "check.lua",
            "pace.lua",
            "lease.lua",
        ] {
            assert!(
                sources.iter().any(|(path, _)| path.ends_with(name)),
                "lua/{name} was not read"
            );
        }
        let listed: Vec<&str> = COMMANDS
            .iter()
            .filter_map(|(line, _, _)| line.split_whitespace().next())
            .collect();
        let mut called = Vec::new();
        for (path, source) in &sources {
            for call in source
                .split("redis.call(")
                .skip(1)
                .chain(source.split("redis.pcall(").skip(1))
            {
                let name = call
                    .trim_start_matches(['\'', '"'])
                    .split(['\'', '"'])
                    .next()
                    .unwrap_or_default()
                    .to_lowercase();
                assert!(
                    listed.contains(&name.as_str()),
                    "{path} calls {name}, which permissions::COMMANDS does not list"
                );
                called.push(name);
            }
        }
        for (line, needed, _) in COMMANDS {
            let name = line.split_whitespace().next().unwrap_or_default();
            let sent_by_rust = [
                "evalsha",
                "script",
                "publish",
                "subscribe",
                "del",
                "cluster",
                "asking",
                "role",
            ];
            assert!(
                *needed != Needed::Always
                    || called.iter().any(|c| c == name)
                    || sent_by_rust.contains(&name),
                "{name} is listed but nothing sends it"
            );
        }
    }

    /// docs/redis.md prints the ACL this module generates, for each kind of Redis: the
    /// documented ACL cannot drift from what the start-up check asks for.
    #[test]
    fn the_documented_acl_is_the_generated_one() {
        let doc = include_str!("../../../docs/redis.md");
        for (cluster, sentinel) in [(false, false), (false, true), (true, false)] {
            let line = format!(
                "ACL SETUSER tollgate on >PASSWORD {}\n",
                least_privilege_acl("tollgate", cluster, sentinel)
            );
            assert!(doc.contains(&line), "docs/redis.md lacks:\n{line}");
        }
    }

    /// The error names each refused command and why it is needed.
    #[test]
    fn a_refusal_names_the_command() {
        let e = refused(&["hset K f 1".to_owned(), "script load x".to_owned()], "tg");
        let text = std::error::Error::source(&e)
            .map(ToString::to_string)
            .unwrap_or_default();
        assert!(text.contains("HSET (writes a token bucket)"), "{text}");
        assert!(text.contains("SCRIPT|LOAD"), "{text}");
        assert!(text.contains("tg:*"), "{text}");
    }
}
