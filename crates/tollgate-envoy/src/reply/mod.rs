//! What an answer carries beside its statuses, as the reference service adds it: the limit
//! headers of one descriptor ([`limit_headers`]) and the response's dynamic metadata
//! ([`dynamic_metadata`]). Their settings are compiled into the snapshot with the rules, so
//! this folder depends on nothing else in the crate.

pub(crate) mod dynamic_metadata;
pub(crate) mod limit_headers;
