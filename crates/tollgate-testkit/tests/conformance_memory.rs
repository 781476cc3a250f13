//! The conformance suite on the memory store.

use tollgate::{FakeClock, MemoryStore};
use tollgate_testkit::Fixture;

async fn memory(clock: FakeClock) -> Fixture<MemoryStore> {
    Fixture::new(MemoryStore::builder().clock(clock).build())
}

tollgate_testkit::conformance_suite!(memory);
