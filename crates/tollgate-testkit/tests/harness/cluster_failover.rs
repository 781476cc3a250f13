//! A cluster with replicas forms, and a killed master's replica takes its slots over.

use std::time::{Duration, Instant};

use tollgate_testkit::RedisCluster;

#[test]
fn a_killed_master_fails_over_to_its_replica() {
    let started = Instant::now();
    let mut cluster = RedisCluster::start_with_replicas();
    eprintln!("cluster with replicas formed in {:?}", started.elapsed());
    assert_eq!(cluster.nodes().len(), 6);

    let slot = cluster.slot_of("failover-key");
    let master = cluster.master_for_slot(slot);
    let master_port = master.port();
    assert_eq!(master.cmd(&["SET", "failover-key", "v"]), "+OK\r\n");
    // Wait for the replica to have it, so that the promoted one must still serve it.
    assert_eq!(master.integer(&["WAIT", "1", "5000"]), 1);
    let replicas = cluster.replicas_of(master_port);
    assert_eq!(replicas.len(), 1, "{cluster:?}");
    let replica_port = replicas[0].port();

    cluster.kill_node(master_port);
    let killed = Instant::now();
    let new_master = cluster.wait_for_failover(master_port, Duration::from_secs(20));
    eprintln!("failed over in {:?}", killed.elapsed());
    assert_eq!(new_master, replica_port);
    assert_eq!(cluster.master_for_slot(slot).port(), replica_port);
    let promoted = cluster.node_by_port(replica_port);
    assert_eq!(promoted.cmd(&["GET", "failover-key"]), "$1\r\nv\r\n");
    assert_eq!(
        promoted.array(&["ROLE"]).first().map(String::as_str),
        Some("master")
    );
}
