//! `start_with` arguments reach the server and survive a restart (a password included, which
//! the harness's own commands then send), and a server that cannot start fails at once with
//! what it said.

use std::time::Instant;

use tollgate_testkit::{RedisServer, START_TIMEOUT};

use crate::redis_cli;

#[test]
fn start_with_arguments_survive_a_restart() {
    let mut server = RedisServer::start_with(&["--requirepass", "s3cret", "--maxmemory", "7mb"]);
    let port = server.port().to_string();
    let (_, out) = redis_cli(&["-p", &port, "GET", "k"]);
    assert!(out.contains("NOAUTH"), "{out}");
    assert_eq!(server.cmd(&["SET", "k", "v"]), "+OK\r\n");

    server.restart();
    assert_eq!(
        server.array(&["CONFIG", "GET", "maxmemory"]),
        ["maxmemory", "7340032"]
    );
    assert_eq!(
        server.array(&["CONFIG", "GET", "requirepass"]),
        ["requirepass", "s3cret"]
    );
    assert_eq!(
        server.cmd(&["GET", "k"]),
        "$-1\r\n",
        "data survived a restart"
    );
}

#[test]
fn a_bad_argument_fails_the_start_at_once_with_what_redis_said() {
    let started = Instant::now();
    let failure =
        std::panic::catch_unwind(|| RedisServer::start_with(&["--no-such-directive", "x"]))
            .expect_err("a server with a bad argument started");
    let message = failure
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        message.contains("exited at start") && message.contains("Bad directive"),
        "{message}"
    );
    assert!(
        started.elapsed() < START_TIMEOUT / 2,
        "took {:?} to notice",
        started.elapsed()
    );
}
