//! A busy but healthy Redis is not a failing one: 200 clients at once against a spawned
//! `tollgate serve` with a 50 ms store timeout get no store error and no 503. The wait they
//! see is queueing in this process (two cores shared by the clients, the service and Redis),
//! which the store timeout does not count (see docs/service.md, "What the store timeout
//! measures").

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tollgate_testkit::RedisServer;

use crate::binary::{Process, config_file};
use crate::support::request;

const CLIENTS: usize = 200;
const CHECKS_PER_CLIENT: usize = 100;

/// One client: a keep-alive connection sending `CHECKS_PER_CLIENT` checks in turn; the
/// statuses it was answered.
async fn client(addr: std::net::SocketAddr, id: usize) -> Vec<u16> {
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (mut sender, connection) = http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    let mut statuses = Vec::with_capacity(CHECKS_PER_CLIENT);
    for i in 0..CHECKS_PER_CLIENT {
        let body = format!(
            r#"{{"limit": "busy", "key": {{"user": "{id}-{}"}}}}"#,
            i % 4
        );
        let request = hyper::Request::post("/v1/check")
            .header("host", "t")
            .body(Full::new(Bytes::from(body)))
            .expect("request");
        let response = sender.send_request(request).await.expect("response");
        statuses.push(response.status().as_u16());
        response.into_body().collect().await.expect("body");
    }
    statuses
}

/// The sum of the samples of `metric` in a Prometheus text scrape.
fn total(scrape: &str, metric: &str) -> f64 {
    scrape
        .lines()
        .filter(|l| l.starts_with(metric) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_healthy_redis_produces_no_store_errors() {
    let redis = RedisServer::start();
    let (_dir, path) = config_file(&format!(
        r#"
[store]
redis = "{}"
timeout = "50ms"

[[limits]]
name = "busy"
algorithm = "gcra"
limit = 1000000
period = "1h"
key = ["user"]
on_store_error = "deny"
"#,
        redis.url()
    ));
    let process = Process::serve(&path);
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| tokio::spawn(client(process.addr, id)))
        .collect();
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for c in clients {
        for status in c.await.expect("client") {
            *statuses.entry(status).or_default() += 1;
        }
    }
    let scrape = request(process.addr, "GET", "/metrics", Bytes::new(), &[])
        .await
        .text;
    let errors = total(&scrape, "tollgate_store_errors_total");
    let allowed = total(
        &scrape,
        "tollgate_decisions_total{limit=\"busy\",outcome=\"allowed\"}",
    );
    assert_eq!(
        statuses.get(&200).copied().unwrap_or(0),
        CLIENTS * CHECKS_PER_CLIENT,
        "statuses {statuses:?}; store errors {errors}; log:\n{}",
        process.log()
    );
    assert_eq!(errors, 0.0, "{scrape}");
    assert_eq!(allowed, (CLIENTS * CHECKS_PER_CLIENT) as f64, "{scrape}");
}
