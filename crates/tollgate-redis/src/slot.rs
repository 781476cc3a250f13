//! Redis Cluster hash slots, computed here so that a request's entries can be grouped by slot
//! before any call: entries of one slot go into one atomic script, and no script ever
//! touches keys of two slots (which a cluster refuses with `CROSSSLOT`).

/// The Redis Cluster slot (0–16383) of `key`: CRC16 of its hash tag (the text between the
/// first `{` and the next `}`, when not empty), or of the whole key.
///
/// ```
/// assert_eq!(tollgate_redis::slot_of("tollgate:a:{user=1}:gcra"),
///            tollgate_redis::slot_of("tollgate:b:{user=1}:fw"));
/// assert_eq!(tollgate_redis::slot_of("foo"), 12182); // CLUSTER KEYSLOT foo
/// ```
pub fn slot_of(key: &str) -> u16 {
    slot_of_bytes(key.as_bytes())
}

/// [`slot_of`] for a key as bytes (as a command holds it).
pub(crate) fn slot_of_bytes(bytes: &[u8]) -> u16 {
    let hashed = match bytes.iter().position(|&b| b == b'{') {
        Some(open) => match bytes[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &bytes[open + 1..open + 1 + len],
            _ => bytes,
        },
        None => bytes,
    };
    crc16(hashed) % 16_384
}

/// CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum Redis Cluster uses.
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known slots from `CLUSTER KEYSLOT`, and Redis's hash tag rules.
    #[test]
    fn matches_redis_keyslot() {
        assert_eq!(slot_of("foo"), 12182);
        assert_eq!(slot_of("bar"), 5061);
        assert_eq!(slot_of("{foo}.x"), slot_of("foo"));
        // An empty tag hashes the whole key.
        assert_eq!(slot_of("a{}b"), crc16(b"a{}b") % 16_384);
        // Only the first tag counts.
        assert_eq!(slot_of("x{bar}{foo}"), slot_of("bar"));
    }
}
