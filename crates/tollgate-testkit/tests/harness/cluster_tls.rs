//! A TLS cluster forms over its TLS ports, redirects TLS clients to TLS ports and plaintext
//! ones to plaintext ports, and moves a slot (MIGRATE over TLS).

use std::time::Duration;

use tollgate_testkit::{RedisCluster, TlsFiles};

use crate::redis_cli;

#[test]
fn a_tls_cluster_serves_tls_clients_and_reshards() {
    let tls = TlsFiles::new();
    let cluster = RedisCluster::start_tls(&tls);
    let ca = tls.ca().to_string_lossy().into_owned();
    let first_tls = cluster.nodes()[0].tls_port().to_string();
    let tls_cli = |args: &[&str]| {
        let mut all = vec!["--tls", "--cacert", &ca, "-c", "-p", &first_tls];
        all.extend_from_slice(args);
        redis_cli(&all)
    };

    // Keys on every master: -c follows the redirects, which must name TLS ports.
    for key in ["a", "b", "c", "d", "e", "f"] {
        let (_, out) = tls_cli(&["SET", key, "v"]);
        assert_eq!(out.trim(), "OK", "SET {key}: {out}\n{}", cluster.logs());
        let (_, out) = tls_cli(&["GET", key]);
        assert_eq!(out.trim(), "v", "GET {key}: {out}");
    }
    let slot = cluster.slot_of("a");
    let owner = cluster.master_for_slot(slot);
    let other = cluster
        .nodes()
        .iter()
        .find(|n| n.port() != owner.port())
        .expect("another master");
    let (_, out) = redis_cli(&[
        "--tls",
        "--cacert",
        &ca,
        "-p",
        &other.tls_port().to_string(),
        "GET",
        "a",
    ]);
    assert!(
        out.contains(&format!("MOVED {slot} 127.0.0.1:{}", owner.tls_port())),
        "a TLS client is sent to the TLS port: {out}"
    );
    let plain = other.cmd(&["GET", "a"]);
    assert!(
        plain.starts_with(&format!("-MOVED {slot} 127.0.0.1:{}", owner.port())),
        "a plaintext client is sent to the plaintext port: {plain}"
    );

    let other_port = other.port();
    cluster.move_slot(slot, other_port);
    assert_eq!(cluster.master_for_slot(slot).port(), other_port);
    let (_, out) = tls_cli(&["GET", "a"]);
    assert_eq!(out.trim(), "v", "GET a after the move: {out}");
    assert_eq!(cluster.tls_urls().len(), 3);
}

#[test]
fn a_tls_cluster_with_replicas_fails_over() {
    let tls = TlsFiles::new();
    let mut cluster = RedisCluster::start_tls_with_replicas(&tls);
    let slot = cluster.slot_of("k");
    let master = cluster.master_for_slot(slot);
    let master_port = master.port();
    assert_eq!(master.cmd(&["SET", "k", "v"]), "+OK\r\n");
    assert_eq!(master.integer(&["WAIT", "1", "5000"]), 1);
    let replica_port = cluster.replicas_of(master_port)[0].port();

    cluster.kill_node(master_port);
    let new_master = cluster.wait_for_failover(master_port, Duration::from_secs(20));
    assert_eq!(new_master, replica_port);
    let promoted = cluster.node_by_port(new_master);
    let ca = tls.ca().to_string_lossy().into_owned();
    let (_, out) = redis_cli(&[
        "--tls",
        "--cacert",
        &ca,
        "-c",
        "-p",
        &promoted.tls_port().to_string(),
        "GET",
        "k",
    ]);
    assert_eq!(out.trim(), "v", "{out}");
}
