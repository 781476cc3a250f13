//! [`Op`]: what a script does with its entries.

/// What the script does with the entries (`ARGV[1]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// Decide, write nothing.
    Peek = 0,
    /// Decide, and charge every entry if all admit.
    Check = 1,
    /// Give back `cost` charged at `now` (undo of a cross-slot check).
    GiveBack = 2,
}

impl From<tollgate::Op> for Op {
    fn from(op: tollgate::Op) -> Op {
        match op {
            tollgate::Op::Check => Op::Check,
            tollgate::Op::Peek => Op::Peek,
        }
    }
}
