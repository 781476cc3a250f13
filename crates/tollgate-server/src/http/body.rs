//! A request's body, read: its bytes, or the API's error for a body that could not be read
//! (over [`MAX_BODY`], not received in time, broken).

use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use bytes::Bytes;

use super::response::{ApiError, BodyTimedOut};

/// The largest request body accepted.
pub const MAX_BODY: usize = 16 * 1024;

/// The body's bytes, or the API's error for an unreadable, oversized or late body.
pub(super) fn body(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        if let Some(BodyTimedOut(after)) = cause::<BodyTimedOut>(&rejection) {
            return ApiError::BodyTimeout(*after);
        }
        match rejection.status() {
            StatusCode::PAYLOAD_TOO_LARGE => ApiError::TooLarge(MAX_BODY),
            _ => ApiError::BadRequest(rejection.body_text()),
        }
    })
}

/// The first `E` in `error`'s chain of causes.
fn cause<'a, E: std::error::Error + 'static>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a E> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(found) = e.downcast_ref::<E>() {
            return Some(found);
        }
        next = e.source();
    }
    None
}
