//! The store conformance suite, unchanged, on a three-master Redis Cluster.

use crate::common::cluster_fixture;

tollgate_testkit::conformance_suite!(cluster_fixture);
