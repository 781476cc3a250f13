//! An axum app with two rate-limited routes:
//! - `GET /public`: 5 requests per minute per client IP (remaining count hidden);
//! - `GET /me`: behind a toy `Authorization: Bearer <user>` auth, 3 per minute per user and 10
//!   per minute for everyone together, checked all or nothing.
//!
//! Run with `cargo run -p tollgate-tower --example axum` (port 3000, or `PORT`).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tollgate::{Algorithm, Limit, Limiter, MemoryStore, OnStoreError, Quota};
use tollgate_tower::{ClientIp, FromExtension, Global, RateLimitLayer, UserId};

/// Toy authentication: trusts `Authorization: Bearer <user>` and records the user for the
/// rate limit layer. A real one verifies a token.
async fn auth(mut req: Request, next: Next) -> Response {
    let user = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .filter(|u| !u.is_empty())
        .map(str::to_owned);
    let Some(user) = user else {
        return (
            StatusCode::UNAUTHORIZED,
            "missing Authorization: Bearer <user>\n",
        )
            .into_response();
    };
    req.extensions_mut().insert(UserId(user));
    next.run(req).await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let limiter = Arc::new(
        Limiter::builder(MemoryStore::new())
            .limit(
                Limit::new(
                    "public_ip",
                    Algorithm::SlidingWindow { buckets: 60 },
                    Quota::per_minute(5)?,
                )?
                .keyed_by(["ip"])?,
            )
            .limit(
                Limit::new("me_user", Algorithm::Gcra, Quota::per_minute(3)?)?
                    .keyed_by(["user"])?
                    .on_store_error(OnStoreError::Local),
            )
            .limit(
                Limit::new("me_global", Algorithm::FixedWindow, Quota::per_minute(10)?)?
                    .keyed_by(Vec::<String>::new())?
                    .on_store_error(OnStoreError::Allow),
            )
            .build()?,
    );

    let public =
        RateLimitLayer::new(limiter.clone(), ["public_ip"], ClientIp::new())?.hide_remaining(true);
    let me = RateLimitLayer::new(
        limiter,
        ["me_global", "me_user"],
        (Global, FromExtension::user()),
    )?;

    let app = Router::new()
        .route("/public", get(|| async { "hello, anyone\n" }).layer(public))
        .route(
            "/me",
            get(|user: axum::Extension<UserId>| async move { format!("hello, {}\n", user.0) })
                .layer(me)
                .layer(middleware::from_fn(auth)),
        );

    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3000);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    println!("listening on http://{addr}; try:");
    println!(
        "  for i in 1 2 3 4 5 6; do curl -si http://{addr}/public | grep -iE '^(HTTP|ratelimit|retry-after)'; done"
    );
    println!(
        "  for i in 1 2 3 4; do curl -si -H 'Authorization: Bearer alice' http://{addr}/me | grep -iE '^(HTTP|ratelimit|retry-after)'; done"
    );
    println!("  curl -si http://{addr}/me   # 401: no user");
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
