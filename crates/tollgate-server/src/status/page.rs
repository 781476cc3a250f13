//! The status page, `GET /`: one HTML file, its script and its style sheet, embedded in the
//! binary (no build step, no CDN), polling `GET /v1/status` every second.
//!
//! Read-only: the page only reads `/v1/status` (which holds no secret) and offers no reset.
//! A strict Content-Security-Policy allows this origin's script, style and `fetch` only (no
//! inline script, no other origin, no framing), and the script writes text with
//! `textContent` only, so a limit name or key value cannot become markup.

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

const HTML: &str = include_str!("../../assets/status.html");
const SCRIPT: &str = include_str!("../../assets/status.js");
const STYLE: &str = include_str!("../../assets/status.css");

/// What the page may load: its own script, style and status endpoint, nothing else.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The page's routes (merged into the API's router, which holds the state).
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            "/",
            get(|| async { asset(HTML, "text/html; charset=utf-8") }),
        )
        .route(
            "/status.js",
            get(|| async { asset(SCRIPT, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/status.css",
            get(|| async { asset(STYLE, "text/css; charset=utf-8") }),
        )
        // The page links /favicon.svg; a browser asks /favicon.ico of any page it shows.
        .route(
            "/favicon.svg",
            get(|| async { asset(ICON, "image/svg+xml") }),
        )
        .route(
            "/favicon.ico",
            get(|| async { asset(ICON, "image/svg+xml") }),
        )
}

/// A gate, in the page's colours.
const ICON: &str = "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 16 16\">\
<rect width=\"16\" height=\"16\" rx=\"3\" fill=\"#1f6feb\"/>\
<path d=\"M4 4v9M12 4v9M4 7h8M4 10h8\" stroke=\"#fff\" stroke-width=\"1.6\"/></svg>";

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
