//! The small extractors: a header, a value set by an earlier layer (the authenticated user),
//! the route, and the global key.

use std::any::type_name;
use std::fmt::{self, Display};
use std::marker::PhantomData;
use std::sync::Arc;

use http::HeaderName;
use http::request::Parts;

use super::{KeyExtractor, KeyParts};
use crate::KeyError;

/// The value of a request header (an API key, a tenant id), as the part named after the
/// header unless renamed.
///
/// A missing or empty header is a [`KeyError::MissingHeader`] (400 by default). Of a header
/// sent on several lines the first counts, as `HeaderMap::get` reads it: where the request is
/// authenticated, read that same line (else a client varying the first line of a key its
/// authentication reads elsewhere gets a key per request). The value is
/// counted as sent; the core's key builder escapes it and replaces values longer than 64
/// bytes by a digest. Secrets shorter than that appear as such in the store's keys.
#[derive(Debug, Clone)]
pub struct Header {
    header: HeaderName,
    name: Arc<str>,
}

impl Header {
    /// Reads `header`, as the part of the same (lower-case) name.
    pub fn new(header: HeaderName) -> Header {
        let name = Arc::from(header.as_str());
        Header { header, name }
    }

    /// Names the part `name` instead.
    pub fn part_name(mut self, name: impl Into<Arc<str>>) -> Header {
        self.name = name.into();
        self
    }
}

impl KeyExtractor for Header {
    fn extract(&self, request: &Parts, key: &mut KeyParts) -> Result<(), KeyError> {
        match request.headers.get(&self.header) {
            Some(v) if !v.is_empty() => {
                key.push(self.name.clone(), v.as_bytes());
                Ok(())
            }
            _ => Err(KeyError::MissingHeader(self.header.as_str().to_owned())),
        }
    }

    fn part_names(&self) -> Vec<&str> {
        vec![&self.name]
    }
}

/// The authenticated user, as an authentication layer placed before the rate limit layer
/// puts it in the request extensions.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UserId(pub String);

impl Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A value of type `T` from the request extensions, formatted with `Display`.
///
/// Its absence means the layer that sets it did not run before this one:
/// [`KeyError::MissingExtension`] (500 by default), never an unchecked pass.
pub struct FromExtension<T> {
    name: Arc<str>,
    _type: PhantomData<fn() -> T>,
}

impl<T: Display + Send + Sync + 'static> FromExtension<T> {
    /// Reads `T` as the part `name`.
    pub fn new(name: impl Into<Arc<str>>) -> FromExtension<T> {
        FromExtension {
            name: name.into(),
            _type: PhantomData,
        }
    }
}

impl FromExtension<UserId> {
    /// Reads [`UserId`] as the part `user`.
    pub fn user() -> FromExtension<UserId> {
        FromExtension::new("user")
    }
}

impl<T> Clone for FromExtension<T> {
    fn clone(&self) -> Self {
        FromExtension {
            name: self.name.clone(),
            _type: PhantomData,
        }
    }
}

impl<T> fmt::Debug for FromExtension<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FromExtension")
            .field("name", &self.name)
            .field("type", &type_name::<T>())
            .finish()
    }
}

impl<T: Display + Send + Sync + 'static> KeyExtractor for FromExtension<T> {
    fn extract(&self, request: &Parts, key: &mut KeyParts) -> Result<(), KeyError> {
        let value = request
            .extensions
            .get::<T>()
            .ok_or(KeyError::MissingExtension(type_name::<T>()))?;
        key.push(self.name.clone(), value.to_string());
        Ok(())
    }

    fn part_names(&self) -> Vec<&str> {
        vec![&self.name]
    }
}

/// The route, as the part `route`: axum's matched path (`/users/{id}`) when present (feature
/// `axum`), else the URI path.
///
/// The URI path is whatever the client sent. A layer on a whole router sees requests that
/// matched no route (axum's fallback, the 404s) with no matched path, so by default each
/// distinct path is its own key: a client can make a key per request, which escapes the
/// limit and fills the store (the memory store up to its key cap,
/// `MemoryStoreBuilder::max_keys`, evicting the keys that replenish soonest; Redis until the
/// keys expire, one window after). [`Route::unmatched_as`] keys them all by one value; or put
/// the layer on the routes themselves (`.route(.., get(h).layer(layer))`, or axum's
/// `Router::route_layer`), which unmatched requests never reach. A layer around the router
/// as a service, routes under `Router::nest_service`, and hyper or tonic servers have no
/// matched path at all: there every request is keyed by its raw path (not decoded, not
/// normalized) unless [`Route::unmatched_as`] is set.
#[derive(Debug, Clone, Default)]
pub struct Route {
    /// The key of a request with no matched path; `None`: its URI path.
    unmatched: Option<Arc<str>>,
}

impl Route {
    /// The route extractor.
    pub fn new() -> Route {
        Route::default()
    }

    /// Keys every request with no matched path (axum's fallback: paths no route matches) by
    /// `value` instead of its URI path, so that they share one key and a client cannot make
    /// one per path. Without the `axum` feature no request has a matched path: every request
    /// is then keyed by `value`.
    pub fn unmatched_as(mut self, value: impl Into<Arc<str>>) -> Route {
        self.unmatched = Some(value.into());
        self
    }
}

impl KeyExtractor for Route {
    fn extract(&self, request: &Parts, key: &mut KeyParts) -> Result<(), KeyError> {
        #[cfg(feature = "axum")]
        if let Some(matched) = request.extensions.get::<axum::extract::MatchedPath>() {
            key.push(Arc::from("route"), matched.as_str());
            return Ok(());
        }
        match &self.unmatched {
            Some(value) => key.push(Arc::from("route"), &**value),
            None => key.push(Arc::from("route"), request.uri.path()),
        }
        Ok(())
    }

    fn part_names(&self) -> Vec<&str> {
        vec!["route"]
    }
}

/// No part at all: every request shares one key (for limits keyed by nothing, e.g. a global
/// limit on an endpoint).
#[derive(Debug, Clone, Copy, Default)]
pub struct Global;

impl KeyExtractor for Global {
    fn extract(&self, _request: &Parts, _key: &mut KeyParts) -> Result<(), KeyError> {
        Ok(())
    }

    fn part_names(&self) -> Vec<&str> {
        Vec::new()
    }
}
