//! Pacing and settling: what a caller may ask of a limit besides "may I, now?".
//!
//! A check answers now or never; an outbound client in front of a paid API wants a *queue in
//! time* instead: its own slot in the limit's schedule, slept until, so that the upstream sees
//! a smooth, exact rate and nobody asks twice ([`Pace::Reserve`], [`Pace::Cancel`]; see
//! [`crate::rules::Schedule`]). A client whose cost is known only afterwards (tokens of an LLM
//! call) charges an estimate up front and settles the difference after ([`Pace::Adjust`]).
//! Each is one store call on one (limit, key) pair, atomic like a check: [`crate::Store::pace`].
//!
//! Beside it in `pacing/`: the ops and their answers, the library's
//! [`Reservation`](crate::Reservation) (a slot held until used or cancelled once; an
//! `acquire` dropped while it waits gives its slot back) and
//! [`SettleError`](crate::SettleError).

mod pace;
mod paced;
pub(crate) mod reservation;
pub(crate) mod settle_error;
mod slot;

pub use pace::Pace;
pub use paced::Paced;
pub use slot::Slot;
