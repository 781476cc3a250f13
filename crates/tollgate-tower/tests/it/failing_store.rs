//! A store that always fails, to exercise the failure policies.

use std::io;

use tollgate::{Decisions, Request, Store, StoreError, Timestamp};

/// Every call fails with a connection error.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FailingStore;

fn down() -> StoreError {
    StoreError::Connection(Box::new(io::Error::new(
        io::ErrorKind::ConnectionRefused,
        "store is down (test)",
    )))
}

impl Store for FailingStore {
    async fn check(
        &self,
        _request: &Request<'_>,
        _now: Option<Timestamp>,
    ) -> Result<Decisions, StoreError> {
        Err(down())
    }

    async fn peek(
        &self,
        _request: &Request<'_>,
        _now: Option<Timestamp>,
    ) -> Result<Decisions, StoreError> {
        Err(down())
    }

    async fn reset(&self, _request: &Request<'_>) -> Result<(), StoreError> {
        Err(down())
    }
}
