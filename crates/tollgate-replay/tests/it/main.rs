//! tollgate-replay's integration tests: reading logs, replaying them with counts computed by
//! hand, the simulator's scenarios on the virtual clock, and its Redis experiments on a
//! spawned `redis-server`.

mod audit;
mod csv_records;
mod hostile;
mod odd_input;
mod reading;
mod redis;
mod replay;
mod simulate;
mod suggest;
