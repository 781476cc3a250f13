//! What a decision does to the store: the one mode flag of the protocol.
//!
//! A check and a peek run the same rule on the same state; they differ only in whether an
//! admitted cost is written. One enum, passed from the caller through the [`crate::Limiter`]
//! to the [`crate::Store`], says which, instead of a `charge: bool` threaded through every
//! layer (a `bool` at a call site does not say what `true` means).

/// Whether an admitted cost is charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Decide, and charge every entry when all admit (all or nothing).
    Check,
    /// Decide without charging anything: what a check would answer now.
    Peek,
}

impl Op {
    /// Whether an admitted cost is written.
    #[inline]
    pub const fn charges(self) -> bool {
        matches!(self, Op::Check)
    }
}
