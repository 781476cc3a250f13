//! Who is counted: key parts taken from the request.
//!
//! A [`KeyExtractor`] reads the request head and pushes named parts ("ip", "user", "route", a
//! header's name …) into [`KeyParts`]; each limit then takes the parts it is keyed by
//! ([`tollgate::Limit::keyed_by`]). Extractors combine as tuples (`(ClientIp::new(),
//! FromExtension::user())`) or as a `Vec<Box<dyn KeyExtractor>>`, so a two-level check (a
//! global limit keyed by nothing, a per-user limit keyed by "user") takes one extractor.
//!
//! An extractor that cannot find its part fails with a [`KeyError`]; the layer answers with a
//! clear status and never passes such a request unchecked.

mod client_ip;
mod forwarded;
mod simple;

use std::sync::Arc;

use http::request::Parts;

use crate::KeyError;

pub use client_ip::{ClientIp, IpNet, PeerAddress, ProxyHeader};
pub use simple::{FromExtension, Global, Header, Route, UserId};

/// Named key parts taken from one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyParts {
    parts: Vec<(Arc<str>, Vec<u8>)>,
}

impl KeyParts {
    /// No parts.
    pub fn new() -> KeyParts {
        KeyParts::default()
    }

    /// Adds the part `name` = `value`.
    pub fn push(&mut self, name: Arc<str>, value: impl Into<Vec<u8>>) {
        self.parts.push((name, value.into()));
    }

    /// The value of the first part named `name`.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.parts
            .iter()
            .find(|(n, _)| &**n == name)
            .map(|(_, v)| v.as_slice())
    }

    /// Every part, in the order pushed.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.parts.iter().map(|(n, v)| (&**n, v.as_slice()))
    }

    /// The number of parts.
    pub fn len(&self) -> usize {
        self.parts.len()
    }

    /// Whether there are no parts.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }
}

/// Takes key parts from a request head.
pub trait KeyExtractor: Send + Sync + 'static {
    /// Pushes this extractor's parts into `key`, or says why it cannot.
    ///
    /// # Errors
    /// A [`KeyError`] saying what is missing.
    fn extract(&self, request: &Parts, key: &mut KeyParts) -> Result<(), KeyError>;

    /// The names of the parts [`KeyExtractor::extract`] pushes, so that the layer can check
    /// at build time that every limit finds the parts it is keyed by.
    fn part_names(&self) -> Vec<&str>;
}

impl<K: KeyExtractor + ?Sized> KeyExtractor for Box<K> {
    fn extract(&self, request: &Parts, key: &mut KeyParts) -> Result<(), KeyError> {
        (**self).extract(request, key)
    }

    fn part_names(&self) -> Vec<&str> {
        (**self).part_names()
    }
}

impl<K: KeyExtractor + ?Sized> KeyExtractor for Arc<K> {
    fn extract(&self, request: &Parts, key: &mut KeyParts) -> Result<(), KeyError> {
        (**self).extract(request, key)
    }

    fn part_names(&self) -> Vec<&str> {
        (**self).part_names()
    }
}

impl<K: KeyExtractor> KeyExtractor for Vec<K> {
    fn extract(&self, request: &Parts, key: &mut KeyParts) -> Result<(), KeyError> {
        self.iter().try_for_each(|k| k.extract(request, key))
    }

    fn part_names(&self) -> Vec<&str> {
        self.iter().flat_map(|k| k.part_names()).collect()
    }
}

macro_rules! tuple_extractor {
    ($($k:ident),+) => {
        impl<$($k: KeyExtractor),+> KeyExtractor for ($($k,)+) {
            #[allow(non_snake_case)]
            fn extract(&self, request: &Parts, key: &mut KeyParts) -> Result<(), KeyError> {
                let ($($k,)+) = self;
                $($k.extract(request, key)?;)+
                Ok(())
            }

            #[allow(non_snake_case)]
            fn part_names(&self) -> Vec<&str> {
                let ($($k,)+) = self;
                let mut names = Vec::new();
                $(names.extend($k.part_names());)+
                names
            }
        }
    };
}

tuple_extractor!(A);
tuple_extractor!(A, B);
tuple_extractor!(A, B, C);
tuple_extractor!(A, B, C, D);
tuple_extractor!(A, B, C, D, E);
