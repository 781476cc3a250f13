//! What `INFO commandstats` says of one command: how the tests and benchmarks count the
//! scripts (and other commands) Redis ran, rather than trusting the client's own count.

/// One command's line of `INFO commandstats`: see
/// [`RedisServer::command_stats`](crate::RedisServer::command_stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommandStats {
    /// Times it ran.
    pub calls: u64,
    /// Microseconds it ran in all, as Redis measures its commands (scripts included).
    pub usec: u64,
}
