//! [`within_node_budget`]: a YAML file's nodes counted, its aliases expanded, before it is
//! parsed into a value.
//!
//! An alias (`*a`) stands for the whole node its anchor (`&a`) names, and a parsed value
//! holds a copy of it at every alias. So a small file can stand for a huge value: a 50 KB
//! file of one anchored list of 10 000 items, aliased 10 000 times, is 10⁸ values. An audit
//! dropped one into `config_dir`: the running service's reload grew by 100 MB a second and
//! died out of memory, and `check-config` took seconds and a gigabyte on a 15 KB one. The
//! file size cap and the nesting scan do not see it (one level deep, 50 KB).
//!
//! So the file is first walked without building anything, counting the nodes a parsed value
//! would hold, and refused past [`MAX_NODES`]: the walk stops there, having held nothing.
//! Anchors and aliases stay usable (a shared `rate_limit` written once), as in the reference,
//! whose YAML library refuses excessive aliasing too.

use std::cell::Cell;
use std::fmt;

use serde::Deserializer as _;
use serde::de::{self, DeserializeSeed, EnumAccess, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The most nodes (scalars, sequences, mappings, aliases expanded) one file may stand for:
/// far above any descriptor file (a 2 MiB file of descriptors is about 300 000), far below
/// what exhausts memory.
pub const MAX_NODES: usize = 1_000_000;

/// Whether `text`, its aliases expanded, holds at most [`MAX_NODES`] nodes: `Ok(true)` when
/// it does, `Ok(false)` when it holds more (the walk stopped there), and the parser's error
/// for text that does not parse (which parsing it again reports the same).
pub(super) fn within_node_budget(text: &str) -> Result<bool, serde_yaml_ng::Error> {
    let left = Cell::new(MAX_NODES);
    let over = Cell::new(false);
    let walk = Count {
        left: &left,
        over: &over,
    };
    match serde_yaml_ng::Deserializer::from_str(text).deserialize_any(walk) {
        Ok(()) => Ok(true),
        Err(_) if over.get() => Ok(false),
        Err(e) => Err(e),
    }
}

/// One node, and those under it, counted against `left`.
#[derive(Clone, Copy)]
struct Count<'c> {
    left: &'c Cell<usize>,
    /// Set when the budget ran out (the walk's error is then that, not the text's).
    over: &'c Cell<bool>,
}

impl Count<'_> {
    fn take<E: de::Error>(self) -> Result<(), E> {
        match self.left.get().checked_sub(1) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => {
                self.over.set(true);
                Err(E::custom("too many nodes"))
            }
        }
    }
}

impl<'de> DeserializeSeed<'de> for Count<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Count<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML node")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.take()
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.take()
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.take()
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.take()
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.take()
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.take()
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.take()
    }

    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        self.take()?;
        self.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.take()?;
        while seq.next_element_seed(self)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.take()?;
        while map.next_key_seed(self)?.is_some() {
            map.next_value_seed(self)?;
        }
        Ok(())
    }

    /// A tagged node (`!tag value`).
    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        self.take()?;
        let (IgnoredAny, value) = data.variant::<IgnoredAny>()?;
        de::VariantAccess::newtype_variant_seed(value, self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nodes are counted with their aliases expanded: a small file standing for more than
    /// [`MAX_NODES`] is over, however few its lines; one just under is not; text that does
    /// not parse is the parser's error.
    #[test]
    fn aliases_count_as_what_they_stand_for() {
        let bomb = |items: usize, aliases: usize| {
            format!(
                "domain: d\nx: &a [{}]\ny: [{}]\ndescriptors: []\n",
                vec!["0"; items].join(","),
                vec!["*a"; aliases].join(",")
            )
        };
        let big = bomb(10_000, 10_000);
        assert!(big.len() < 60_000, "{} bytes", big.len());
        assert!(!within_node_budget(&big).expect("parses"));
        // 900 aliases of a list of 1 001 nodes, about 902 000 nodes: under; 1 000, over.
        assert!(within_node_budget(&bomb(1_000, 900)).expect("parses"));
        assert!(!within_node_budget(&bomb(1_000, 1_000)).expect("parses"));
        let tagged = "domain: !custom d\ndescriptors: [!x {key: a}]\n";
        assert!(within_node_budget(tagged).expect("parses"));
        assert!(within_node_budget("domain: [").is_err());
    }
}
