//! Integration tests of the tower layer: through `ServiceExt::oneshot` on a plain service, and
//! through a real axum server driven by an HTTP client. Time is a `FakeClock`.

mod headers;
mod keys;
mod lease;
mod limits;
mod pacing;
mod policy;
mod redis;
mod server;
mod support;
