//! [`TimeSource`]: which clock a script decides on, as its argument says.

/// Which clock a script decides on (`ARGV[2]`, see `lua/prelude.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimeSource {
    /// The server's clock, read by the script.
    Server,
    /// The server's clock at this instant (µs), read by an earlier script of the same
    /// request: a give-back undoes at the instant it charged (GCRA's, whose reply tells no
    /// instant: at an instant before it charged, `Part::undo_clock`).
    ServerInstant(u64),
    /// The caller's clock at this instant (µs).
    Caller(u64),
}

impl TimeSource {
    pub(super) fn arg(self) -> String {
        match self {
            TimeSource::Server => String::new(),
            TimeSource::ServerInstant(now) => format!("s{now}"),
            TimeSource::Caller(now) => now.to_string(),
        }
    }
}
