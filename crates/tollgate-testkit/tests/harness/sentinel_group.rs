//! A Sentinel group settles, and a killed master is replaced by its replica, which kept the
//! data; with a password on the data nodes, and over TLS, too.

use std::time::{Duration, Instant};

use tollgate_testkit::{SentinelGroup, TlsFiles};

use crate::redis_cli;

/// Kills the master and checks the replica took over with the data.
fn fail_over(mut group: SentinelGroup) {
    let old = group.master_port();
    let master = group.node_by_port(old);
    assert_eq!(master.port(), group.data_nodes()[0].port());
    let replica = group.data_nodes()[1].port();
    assert_eq!(master.cmd(&["SET", "k", "v"]), "+OK\r\n");
    assert_eq!(master.integer(&["WAIT", "1", "5000"]), 1);

    let killed = Instant::now();
    assert_eq!(group.kill_master(), old);
    let new = group.wait_for_new_master(old, Duration::from_secs(20));
    eprintln!("new master in {:?}", killed.elapsed());
    let promoted = group.node_by_port(new);
    assert_eq!(promoted.port(), replica);
    assert_eq!(group.master_port(), new);
    assert_eq!(promoted.cmd(&["GET", "k"]), "$1\r\nv\r\n");
    for sentinel in group.sentinels() {
        let addr = sentinel.array(&["SENTINEL", "get-master-addr-by-name", group.master_name()]);
        assert_eq!(addr, ["127.0.0.1".to_owned(), new.to_string()]);
    }
}

#[test]
fn a_killed_master_is_replaced_by_its_replica() {
    let started = Instant::now();
    let group = SentinelGroup::start();
    eprintln!("sentinel group settled in {:?}", started.elapsed());
    assert_eq!(group.master_name(), "mymaster");
    assert_eq!(group.sentinel_urls().len(), 3);
    fail_over(group);
}

#[test]
fn a_group_with_a_password_fails_over() {
    let group = SentinelGroup::start_with(&["--requirepass", "s3cret"]);
    let port = group.master_port().to_string();
    let (_, out) = redis_cli(&["-p", &port, "GET", "k"]);
    assert!(out.contains("NOAUTH"), "{out}");
    fail_over(group);
}

#[test]
fn a_tls_group_names_tls_ports_and_fails_over() {
    let tls = TlsFiles::new();
    let group = SentinelGroup::start_tls(&tls);
    let port = group.master_port();
    assert_eq!(
        port,
        group.data_nodes()[0].tls_port(),
        "sentinels name the TLS port"
    );
    let ca = tls.ca().to_string_lossy().into_owned();
    let (_, out) = redis_cli(&["--tls", "--cacert", &ca, "-p", &port.to_string(), "PING"]);
    assert!(out.contains("PONG"), "{out}");
    fail_over(group);
}
