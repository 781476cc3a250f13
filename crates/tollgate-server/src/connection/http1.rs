//! The HTTP API's accept loop: one hyper HTTP/1 connection per accepted socket, the axum
//! router as its service, and a drain with a deadline.
//!
//! Each request gets the client's address (`ConnectInfo<SocketAddr>`), a body bounded by
//! `body_timeout`, and marks its connection busy while the router answers it (see
//! [`super::GuardedIo`] for the phases). A request target over [`MAX_URI`] is answered 414
//! here, never routed.
//!
//! Shutdown: the loop stops accepting, then takes what the kernel has already queued (those
//! clients connected, and may have written their request, before the signal) and closes the
//! listener. Every connection then ends as soon as it has no request: an idle one at once, one
//! reading a head or in the service after answering it, one accepted that has sent nothing
//! after a second's grace (its request may be on its way). Past `shutdown_timeout`, whatever is
//! left is closed: a slow client cannot stall a deploy. A drain that ends in time answers
//! every request received before the signal.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::response::IntoResponse as _;
use hyper::body::Incoming;
use hyper::service::{Service as _, service_fn};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::auto_error::Rewriting;
use super::body::TimeoutBody;
use super::listener::{Slot, pause_after};
use super::phase::Phase;
use super::socket::Socket;
use super::{CappedListener, GuardedIo, Lifecycle, Mode, Settings, handshake};
use crate::http::ApiError;
use crate::tls::TlsAcceptors;

/// The largest request head (request line and headers) read; larger ones are answered 431.
pub(crate) const MAX_HEAD: usize = 32 * 1024;

/// The longest request target served (8 KiB, as nginx's and Apache's default request line);
/// a longer one is answered 414 before the router. hyper refuses only a target over 64 KiB,
/// and a head of up to [`MAX_HEAD`] would otherwise bring a 20 KB URI to the router, to be
/// answered 404 as if it were a route that merely does not exist. No route of the API comes
/// near the limit.
pub(crate) const MAX_URI: usize = 8 * 1024;

/// Serves `router` on `listener` until `shutdown` resolves, then drains (see the module docs);
/// through TLS when `tls` is given and the listener is TCP.
///
/// # Errors
/// None today: accept errors are logged and retried. The `Result` keeps the caller's shape.
pub(crate) async fn serve(
    listener: CappedListener,
    router: Router,
    settings: Settings,
    tls: Option<TlsAcceptors>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let tls = tls.filter(|_| listener.is_tcp());
    Mode::Http1.count_from_zero();
    let (lifecycle, watcher) = watch::channel(Lifecycle::Serving);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.max_header_size(MAX_HEAD).writev(false);
    let mut connections = JoinSet::new();
    let spawn = |connections: &mut JoinSet<()>, (stream, peer, permit)| {
        let io = GuardedIo::new(stream, permit, Mode::Http1, settings, watcher.clone());
        let peer = Peer {
            addr: peer,
            router: router.clone(),
            body_timeout: settings.body_timeout,
        };
        let builder = builder.clone();
        match &tls {
            None => connections.spawn(connection(builder, io, peer)),
            Some(tls) => {
                let acceptor = tls.http();
                connections.spawn(async move {
                    if let Ok(io) = handshake(acceptor, io, settings, "http").await {
                        let phase = io.get_ref().0.phase();
                        serve_one(builder, Rewriting::new(io), phase, peer).await;
                    }
                })
            }
        };
    };
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => spawn(&mut connections, accepted),
                Err(e) => pause_after(&e).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    let queued: Vec<(Socket, SocketAddr, Slot)> = listener.backlog();
    for accepted in queued {
        spawn(&mut connections, accepted);
    }
    lifecycle.send_replace(Lifecycle::Draining);
    drain(connections, &lifecycle, settings.shutdown_timeout).await;
    Ok(())
}

/// Waits for `connections` to end, `deadline` at most; then closes the rest.
pub(crate) async fn drain(
    mut connections: JoinSet<()>,
    lifecycle: &watch::Sender<Lifecycle>,
    deadline: Duration,
) {
    let open = connections.len();
    let ended = tokio::time::timeout(deadline, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if ended.is_err() {
        tracing::warn!(
            open = connections.len(),
            of = open,
            "connections still open at the shutdown deadline; closing them"
        );
        lifecycle.send_replace(Lifecycle::Closing);
        connections.abort_all();
        while connections.join_next().await.is_some() {}
    }
}

/// The length of `uri` as the request line carried it (origin form: path and query; absolute
/// form: scheme and authority too).
fn uri_len(uri: &hyper::Uri) -> usize {
    let scheme = uri.scheme_str().map_or(0, |s| s.len() + "://".len());
    let authority = uri.authority().map_or(0, |a| a.as_str().len());
    let path = uri.path_and_query().map_or(0, |p| p.as_str().len());
    scheme + authority + path
}

/// What serving one connection needs besides its socket.
struct Peer {
    addr: SocketAddr,
    router: Router,
    body_timeout: Duration,
}

/// Serves one plaintext connection to its end.
async fn connection(builder: hyper::server::conn::http1::Builder, io: GuardedIo, peer: Peer) {
    let phase = io.phase();
    serve_one(builder, io, phase, peer).await;
}

/// Serves one connection (`io`, plaintext or TLS, over the socket whose phase is `phase`) to
/// its end.
async fn serve_one(
    builder: hyper::server::conn::http1::Builder,
    io: impl AsyncRead + AsyncWrite + Unpin + Send + 'static,
    phase: Arc<Phase>,
    peer: Peer,
) {
    let Peer {
        addr: peer,
        router,
        body_timeout,
    } = peer;
    let router = TowerToHyperService::new(router);
    let service = service_fn(move |request: hyper::Request<Incoming>| {
        let busy = phase.begin();
        let answer = if uri_len(request.uri()) > MAX_URI {
            None
        } else {
            let mut request =
                request.map(|body| TimeoutBody::new(body, body_timeout, Arc::clone(&phase)));
            request.extensions_mut().insert(ConnectInfo(peer));
            Some(router.call(request))
        };
        async move {
            let response = match answer {
                Some(answer) => answer.await,
                // With `connection: close`: the body (if any) is left unread.
                None => {
                    let answer = ApiError::UriTooLong;
                    super::auto_error::count_refused_head(answer.status());
                    Ok(answer.into_response())
                }
            };
            drop(busy);
            response
        }
    });
    if let Err(e) = builder.serve_connection(TokioIo::new(io), service).await {
        tracing::debug!(%peer, cause = %e, "connection ended with an error");
    }
}
