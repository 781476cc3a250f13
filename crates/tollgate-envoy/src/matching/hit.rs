//! [`Hit`]: everything the one match of a descriptor finds, so that nothing after it has to
//! match the descriptor again (the decision, the reference's statistics, the response's
//! dynamic metadata).

use envoy_types::pb::google::protobuf::Struct;

use super::Found;
use crate::metrics::Counted;

/// What matching one descriptor found.
pub(crate) struct Hit<'f, 'a> {
    /// What decides it.
    pub(crate) found: Found<'f>,
    /// How it counts in the reference's statistics (`None`: not counted).
    pub(crate) counted: Option<Counted<'a>>,
    /// The YAML `metadata` of the entry that decides it, as the reference attaches it to the
    /// matched limit: `None` for a `[[envoy.rules]]` rule, a limit override, an `unlimited`
    /// entry.
    pub(crate) metadata: Option<&'a Struct>,
}
