//! A slot moves between masters live, keys and all, and in between its keys answer ASK.

use tollgate_testkit::RedisCluster;

/// Keys sharing one hash tag, so one slot.
fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{{moving}}:{i}")).collect()
}

#[test]
fn move_slot_moves_the_keys_with_the_slot() {
    let cluster = RedisCluster::start();
    let slot = cluster.slot_of("{moving}");
    let source = cluster.master_for_slot(slot);
    let source_port = source.port();
    for key in keys(5) {
        assert_eq!(source.cmd(&["SET", &key, "v"]), "+OK\r\n");
    }
    let target_port = cluster
        .nodes()
        .iter()
        .map(|n| n.port())
        .find(|&p| p != source_port)
        .expect("another master");

    cluster.move_slot(slot, target_port);

    assert_eq!(cluster.master_for_slot(slot).port(), target_port);
    let target = cluster.node_by_port(target_port);
    for key in keys(5) {
        assert_eq!(target.cmd(&["GET", &key]), "$1\r\nv\r\n", "{key}");
        let moved = cluster.node_by_port(source_port).cmd(&["GET", &key]);
        assert!(
            moved.starts_with(&format!("-MOVED {slot} 127.0.0.1:{target_port}")),
            "{moved}"
        );
    }
    assert_eq!(
        cluster.node_by_port(source_port).integer(&[
            "CLUSTER",
            "COUNTKEYSINSLOT",
            &slot.to_string()
        ]),
        0
    );
}

#[test]
fn a_slot_move_in_steps_redirects_with_ask_in_between() {
    let cluster = RedisCluster::start();
    let slot = cluster.slot_of("{moving}");
    let source = cluster.master_for_slot(slot);
    for key in keys(5) {
        assert_eq!(source.cmd(&["SET", &key, "v"]), "+OK\r\n");
    }
    let target_port = cluster
        .nodes()
        .iter()
        .map(|n| n.port())
        .find(|&p| p != source.port())
        .expect("another master");

    let mut slot_move = cluster.begin_slot_move(slot, target_port);
    assert_eq!(slot_move.keys_left(), 5);
    assert_eq!(slot_move.migrate_some(2), 2);
    assert_eq!(slot_move.keys_left(), 3);

    // The source still serves the keys it has, and sends the others to the target with ASK.
    let on_source: Vec<String> = keys(5)
        .into_iter()
        .filter(|k| source.cmd(&["GET", k]) == "$1\r\nv\r\n")
        .collect();
    assert_eq!(on_source.len(), 3, "{on_source:?}");
    let moved = keys(5)
        .into_iter()
        .find(|k| !on_source.contains(k))
        .expect("a moved key");
    let reply = source.cmd(&["GET", &moved]);
    assert!(
        reply.starts_with(&format!("-ASK {slot} 127.0.0.1:{target_port}")),
        "{reply}"
    );
    // A new key goes to the target too.
    let reply = source.cmd(&["SET", "{moving}:new", "v"]);
    assert!(reply.starts_with("-ASK"), "{reply}");

    assert_eq!(slot_move.finish(), 5);
    assert_eq!(cluster.master_for_slot(slot).port(), target_port);
}
