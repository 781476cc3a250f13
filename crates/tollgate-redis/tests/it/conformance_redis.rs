//! The store conformance suite, unchanged, on a single Redis.

use crate::common::redis_fixture;

tollgate_testkit::conformance_suite!(redis_fixture);
