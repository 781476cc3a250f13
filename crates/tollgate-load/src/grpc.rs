//! The gRPC mode: `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`, one HTTP/2
//! channel per task, one descriptor whose last value varies over the keys; over TLS for an
//! `https://` URL (`GrpcTarget::tls`), the handshake made by the connector (tonic is built
//! without its own TLS, and is handed the encrypted stream as a plain one).
//!
//! Before the clock starts, one probe call says whether the service answers at all. It is a
//! **check-only** call (the descriptor's `hits_addend` 0: tollgate, as the reference, peeks
//! and charges nothing, docs/envoy.md), so it uses up nothing the run then measures, and it
//! is not counted in the report. Every connect and call is bounded by the timeout
//! ([`Clock`]); a connection that cannot be opened is counted as `other` and tried again
//! until the end of the run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_envoy::envoy_types::pb::google::protobuf::UInt64Value;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tollgate_envoy::DeferredWriteIo;
use tollgate_envoy::tonic;
use tollgate_envoy::tonic::codegen::http::Uri;
use tollgate_envoy::tonic::transport::{Channel, Endpoint};

use crate::clock::Clock;
use crate::drive::{first_key, load};
use crate::tally::{Outcome, Tally};
use crate::{BenchOptions, DEFAULT_TIMEOUT, GrpcTarget, LoadError, Report};

/// Runs the gRPC benchmark (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`)
/// and prints a summary, each call bounded by [`DEFAULT_TIMEOUT`]. [`BenchOptions::limit`]
/// is not used: the service's `[envoy]` rules pick the limit from `target`'s domain and
/// descriptor.
///
/// # Errors
/// [`LoadError`] when `target` has no descriptor entry or the service cannot be reached or
/// does not answer.
pub async fn run_grpc(options: BenchOptions, target: GrpcTarget) -> Result<Report, LoadError> {
    run_grpc_with_timeout(options, target, DEFAULT_TIMEOUT).await
}

/// [`run_grpc`], each connect and call bounded by `timeout` (a call past it counts as
/// `other`).
///
/// # Errors
/// As [`run_grpc`]; [`LoadError::ZeroTimeout`] for a `timeout` of 0.
pub async fn run_grpc_with_timeout(
    options: BenchOptions,
    target: GrpcTarget,
    timeout: Duration,
) -> Result<Report, LoadError> {
    if target.descriptor.is_empty() {
        return Err(LoadError::NoDescriptor);
    }
    if timeout.is_zero() {
        return Err(LoadError::ZeroTimeout);
    }
    let url = &options.url;
    let tls = match (url.strip_prefix("https://"), &target.tls) {
        (Some(_), Some(tls)) => Some(crate::tls::client_config(tls)?),
        (Some(_), None) => return Err(LoadError::NoCa),
        (None, _) => None,
    };
    let plain = url.replacen("https://", "http://", 1);
    let endpoint = Endpoint::from_shared(plain).map_err(|source| LoadError::Endpoint {
        url: url.clone(),
        source,
    })?;
    let endpoint = Dial { endpoint, tls };
    let no_answer = |what| LoadError::NoAnswer {
        url: url.clone(),
        what,
        after: timeout,
    };
    // One call before the clock starts: an unreachable service fails here, by name.
    let channel = tokio::time::timeout(timeout, connect(&endpoint))
        .await
        .map_err(|_| no_answer("connect"))?
        .map_err(|source| LoadError::Connect {
            url: url.clone(),
            source,
        })?;
    let keys = options.keys.max(1);
    tokio::time::timeout(
        timeout,
        RateLimitServiceClient::new(channel).should_rate_limit(probe(&target, keys)),
    )
    .await
    .map_err(|_| no_answer("ShouldRateLimit"))?
    .map_err(|status| LoadError::Probe {
        url: url.clone(),
        source: Box::new(status),
    })?;
    // Shared connections are opened before the clock starts; a task's own, by the task.
    let mut shared = Vec::with_capacity(target.channels);
    for _ in 0..target.channels {
        let channel = tokio::time::timeout(timeout, connect(&endpoint))
            .await
            .map_err(|_| no_answer("connect"))??;
        shared.push(channel);
    }
    let what = format!("ShouldRateLimit calls of domain {:?}", target.domain);
    let over = match target.channels {
        0 => format!("{} connections", options.concurrency),
        n => format!("{} clients sharing {n} connections", options.concurrency),
    };
    load(&options, timeout, &what, &over, move |worker, clock| {
        let target = target.clone();
        let channel = match usize::try_from(worker)
            .ok()
            .and_then(|w| shared.get(w % shared.len().max(1)))
        {
            Some(channel) => Connection::Shared(channel.clone()),
            None => Connection::Own(Box::new(endpoint.clone())),
        };
        async move { drive(channel, &target, keys, worker, clock).await }
    })
    .await
}

/// Where to connect: the endpoint, and the TLS configuration for an `https://` URL.
#[derive(Clone)]
struct Dial {
    endpoint: Endpoint,
    tls: Option<Arc<rustls::ClientConfig>>,
}

/// A connection, in plaintext or through TLS.
enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

/// A channel to `dial`'s endpoint whose connection's writes take turns ([`DeferredWriteIo`]):
/// the calls of the tasks that ran in one turn of the scheduler leave in one write, where
/// tonic's own connector would send one `writev` per call (and so would cost the machine the
/// service shares more than the service does). The turn is taken above TLS, where h2 writes:
/// below it, TLS would take each write as a record at once (its own write answering `Ready`
/// while the socket's waited), and the flush that follows would send it before the next call's
/// frames were queued (two writes per call, measured).
async fn connect(dial: &Dial) -> Result<Channel, tonic::transport::Error> {
    let tls = dial.tls.clone();
    dial.endpoint
        .connect_with_connector(tower::service_fn(move |uri: Uri| {
            let tls = tls.clone();
            async move {
                let host = uri.host().unwrap_or("127.0.0.1").trim_matches(['[', ']']);
                // The scheme was made `http` for tonic: the port defaults by the real one.
                let port = uri
                    .port_u16()
                    .unwrap_or(if tls.is_some() { 443 } else { 80 });
                let stream = TcpStream::connect((host, port)).await?;
                stream.set_nodelay(true)?;
                let stream = match tls {
                    None => Stream::Plain(stream),
                    Some(config) => {
                        let name = rustls::pki_types::ServerName::try_from(host.to_owned())
                            .map_err(std::io::Error::other)?;
                        let connector = tokio_rustls::TlsConnector::from(config);
                        Stream::Tls(Box::new(connector.connect(name, stream).await?))
                    }
                };
                Ok::<_, std::io::Error>(TokioIo::new(DeferredWriteIo::new(stream)))
            }
        }))
        .await
}

impl tokio::io::AsyncRead for Stream {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(io) => std::pin::Pin::new(io).poll_read(cx, buf),
            Stream::Tls(io) => std::pin::Pin::new(io.as_mut()).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for Stream {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(io) => std::pin::Pin::new(io).poll_write(cx, buf),
            Stream::Tls(io) => std::pin::Pin::new(io.as_mut()).poll_write(cx, buf),
        }
    }

    // Forwarded so that h2 and TLS below it see what the stream can do (the default writes
    // the first slice alone: a system call per TLS record).
    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(io) => std::pin::Pin::new(io).poll_write_vectored(cx, bufs),
            Stream::Tls(io) => std::pin::Pin::new(io.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(io) => io.is_write_vectored(),
            Stream::Tls(io) => io.is_write_vectored(),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(io) => std::pin::Pin::new(io).poll_flush(cx),
            Stream::Tls(io) => std::pin::Pin::new(io.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(io) => std::pin::Pin::new(io).poll_shutdown(cx),
            Stream::Tls(io) => std::pin::Pin::new(io.as_mut()).poll_shutdown(cx),
        }
    }
}

/// What a task sends its calls on.
enum Connection {
    /// A channel other tasks send on too, each call an HTTP/2 stream of its own.
    Shared(Channel),
    /// A connection of the task's own, to open (boxed: an endpoint is large).
    Own(Box<Dial>),
}

/// One task sending `ShouldRateLimit`, one call in flight, until the end of the run.
async fn drive(
    channel: Connection,
    target: &GrpcTarget,
    keys: u64,
    worker: u64,
    clock: Clock,
) -> Result<Tally, LoadError> {
    let mut tally = Tally::new()?;
    let mut failures = 0;
    let channel = match channel {
        Connection::Shared(channel) => channel,
        Connection::Own(endpoint) => loop {
            if !clock.running() {
                return Ok(tally);
            }
            match clock.call(connect(&endpoint)).await {
                Ok(Ok(channel)) => break channel,
                Ok(Err(_)) => {
                    tally.failed();
                    failures += 1;
                    clock.back_off(failures).await;
                }
                Err(_) => tally.timed_out(),
            }
        },
    };
    let mut client = RateLimitServiceClient::new(channel);
    let mut n = first_key(worker);
    while clock.running() {
        n = n.wrapping_add(1);
        let request = request(target, keys, n % keys);
        let sent = Instant::now();
        match clock.call(client.should_rate_limit(request)).await {
            Ok(Ok(response)) => {
                let outcome = match Code::try_from(response.get_ref().overall_code) {
                    Ok(Code::Ok) => Outcome::Allowed,
                    Ok(Code::OverLimit) => Outcome::Denied,
                    _ => Outcome::Other,
                };
                tally.answered(sent, outcome);
                failures = 0;
            }
            // A status sent by the service (e.g. UNAVAILABLE from a deny policy) has no cause;
            // one made by the client from a transport failure carries it. The channel
            // reconnects by itself; a pause first, so a dead service is not spun on.
            Ok(Err(status)) if std::error::Error::source(&status).is_none() => {
                tally.answered(sent, Outcome::Other);
                failures = 0;
            }
            Ok(Err(_)) => {
                tally.failed();
                failures += 1;
                clock.back_off(failures).await;
            }
            Err(_) => tally.timed_out(),
        }
    }
    Ok(tally)
}

/// The probe made before the clock starts: the run's first request, check only (every
/// descriptor's `hits_addend` 0), so it charges nothing.
fn probe(target: &GrpcTarget, keys: u64) -> RateLimitRequest {
    let mut request = request(target, keys, 0);
    for descriptor in &mut request.descriptors {
        descriptor.hits_addend = Some(UInt64Value { value: 0 });
    }
    request
}

/// The request for key index `i` of `keys`: the last entry's value gets `-<i>` unless `keys`
/// is 1.
fn request(target: &GrpcTarget, keys: u64, i: u64) -> RateLimitRequest {
    let last = target.descriptor.len().saturating_sub(1);
    let entries = target
        .descriptor
        .iter()
        .enumerate()
        .map(|(at, (key, value))| Entry {
            key: key.clone(),
            value: if at == last && keys > 1 {
                format!("{value}-{i}")
            } else {
                value.clone()
            },
        })
        .collect();
    RateLimitRequest {
        domain: target.domain.clone(),
        descriptors: vec![RateLimitDescriptor {
            entries,
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{OUTER, counts, options, serve_grpc, silent};

    const TIMEOUT: Duration = Duration::from_millis(200);

    fn target() -> GrpcTarget {
        GrpcTarget {
            domain: "edge".into(),
            descriptor: vec![("user".into(), "u".into())],
            channels: 0,
            tls: None,
        }
    }

    /// The probe is check only (`hits_addend` 0 on its descriptor, on a key the run uses):
    /// every call that charges is one the report counts.
    #[tokio::test]
    async fn the_probe_charges_nothing() {
        let (url, asked) = serve_grpc(None).await;
        let run = run_grpc_with_timeout(options(&url, 2, 200), target(), TIMEOUT);
        let report = tokio::time::timeout(OUTER, run)
            .await
            .expect("the run returns")
            .expect("a report");
        let asked = asked.lock().expect("asked");
        let probe = &asked[0].descriptors[0];
        assert_eq!(probe.hits_addend, Some(UInt64Value { value: 0 }));
        assert_eq!(probe.entries[0].value, "u-0");
        let charging = asked
            .iter()
            .filter(|r| r.descriptors[0].hits_addend != Some(UInt64Value { value: 0 }))
            .count();
        assert_eq!(
            u64::try_from(charging).ok(),
            Some(report.allowed),
            "{:?}",
            counts(&report)
        );
        assert_eq!(report.other, 0, "{:?}", counts(&report));
    }

    /// A service that accepts and never answers fails the run before the clock starts, by
    /// name, instead of holding it forever.
    #[tokio::test]
    async fn a_service_that_never_answers_is_named() {
        let url = silent().await;
        let run = run_grpc_with_timeout(options(&url, 1, 300), target(), TIMEOUT);
        let error = tokio::time::timeout(OUTER, run)
            .await
            .expect("the run returns")
            .expect_err("no answer");
        assert!(matches!(error, LoadError::NoAnswer { .. }), "{error:?}");
        assert!(
            error
                .to_string()
                .starts_with(&format!("no answer from {url} within 200ms (")),
            "{error}"
        );
    }

    /// Calls that stop being answered time out, count as `other`, and the run still ends
    /// with its report; on own connections and on shared ones.
    #[tokio::test]
    async fn unanswered_calls_time_out_and_the_report_comes() {
        for channels in [0, 1] {
            let (url, _) = serve_grpc(Some(3)).await;
            let target = GrpcTarget {
                channels,
                ..target()
            };
            let run = run_grpc_with_timeout(options(&url, 2, 300), target, TIMEOUT);
            let report = tokio::time::timeout(OUTER, run)
                .await
                .expect("the run returns")
                .expect("a report");
            assert!(
                report.timed_out >= 2,
                "channels {channels}: {:?}",
                counts(&report)
            );
            assert_eq!(
                report.other,
                report.timed_out,
                "channels {channels}: {:?}",
                counts(&report)
            );
            assert!(
                report.verdict().is_err(),
                "channels {channels}: {:?}",
                counts(&report)
            );
        }
    }

    /// Only the last entry's value varies, and only when there is more than one key.
    #[test]
    fn the_last_value_varies_over_the_keys() {
        let target = GrpcTarget {
            domain: "edge".into(),
            descriptor: vec![("route".into(), "/x".into()), ("user".into(), "u".into())],
            channels: 0,
            tls: None,
        };
        let values = |r: RateLimitRequest| -> Vec<String> {
            r.descriptors[0]
                .entries
                .iter()
                .map(|e| e.value.clone())
                .collect()
        };
        assert_eq!(values(request(&target, 4, 3)), ["/x", "u-3"]);
        assert_eq!(values(request(&target, 1, 0)), ["/x", "u"]);
        assert_eq!(request(&target, 4, 3).domain, "edge");
    }

    /// A service that cannot be reached fails before the clock starts, naming the URL (the
    /// connector is ours, so its errors must still surface as tonic's did).
    #[tokio::test]
    async fn an_unreachable_service_is_named() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", closed.local_addr().expect("addr"));
        drop(closed);
        let options = BenchOptions {
            url: url.clone(),
            concurrency: 1,
            duration: std::time::Duration::from_secs(1),
            limit: None,
            keys: 1,
        };
        let target = GrpcTarget {
            domain: "edge".into(),
            descriptor: vec![("user".into(), "u".into())],
            channels: 0,
            tls: None,
        };
        let error = run_grpc(options, target)
            .await
            .expect_err("nothing listens");
        assert!(matches!(error, LoadError::Connect { .. }), "{error:?}");
        assert_eq!(error.to_string(), format!("cannot connect to {url}"));
    }
}
