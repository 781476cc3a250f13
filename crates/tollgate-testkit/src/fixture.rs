//! What a store's test factory hands to the conformance suite.

use std::any::Any;
use std::fmt;

use tollgate::{Namespace, Store};

/// A store under test, the namespace its tests must use, and whatever must live as long as
/// the test (a spawned Redis server, a cluster).
pub struct Fixture<S> {
    /// The store under test.
    pub store: S,
    /// Key prefix for this test, so tests sharing one server never see each other's keys.
    pub namespace: Namespace,
    /// Dropped at the end of the test (kills spawned servers).
    pub guard: Box<dyn Any + Send + Sync>,
}

impl<S: Store> Fixture<S> {
    /// A fixture with nothing to keep alive and the default namespace.
    pub fn new(store: S) -> Fixture<S> {
        Fixture {
            store,
            namespace: Namespace::default(),
            guard: Box::new(()),
        }
    }
}

impl<S> fmt::Debug for Fixture<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fixture")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}
