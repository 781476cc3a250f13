//! Tests of the harness itself, on real processes: the certificates it makes, the TLS
//! servers, clusters and Sentinel groups it spawns, and the failovers and slot moves it
//! drives. A harness that silently did less than it says (a TLS port nobody listens on, a
//! "failover" that returns before one happened) would make the store's tests pass for the
//! wrong reason.

mod cluster_failover;
mod cluster_slot_move;
mod cluster_tls;
mod sentinel_group;
mod server_start;
mod tls_files;
mod tls_server;

use std::process::Command;

/// Runs `redis-cli args…` and returns whether it exited 0 and what it printed (stdout, then
/// stderr).
fn redis_cli(args: &[&str]) -> (bool, String) {
    let out = Command::new("redis-cli")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run redis-cli (apt-get install redis-tools): {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The harness types cross threads: tests share a cluster or group with a blocking task that
/// kills a node while the load runs.
#[test]
fn the_harness_types_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<tollgate_testkit::RedisServer>();
    send_sync::<tollgate_testkit::RedisCluster>();
    send_sync::<tollgate_testkit::SentinelGroup>();
    send_sync::<tollgate_testkit::Sentinel>();
    send_sync::<tollgate_testkit::TlsFiles>();
    send_sync::<tollgate_testkit::SlotMove<'static>>();
}
