//! [`Reply`]: what an algorithm's script answers for one entry, and how many integers that
//! takes in a reply.

/// How an algorithm's script answers for one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reply {
    /// The decision itself: verdict (1 admitted, −1 refused), remaining units, reset_after
    /// (µs), retry_after (µs).
    Decision,
    /// GCRA's one integer (`lua/gcra.lua`): the key's `tat − now` after an admitted call or,
    /// as −1 − it, before a refused one; the decision comes from the Rust rule.
    GcraUsed,
}

/// Integers one entry's answer takes in a general or batch reply.
pub(super) fn reply_width(reply: Reply) -> usize {
    match reply {
        Reply::Decision => 4,
        Reply::GcraUsed => 1,
    }
}
