//! Keys by a 64-bit hash, and how many distinct keys a limit saw, in bounded memory.
//!
//! A replay says "N keys refused of M seen". Counting M exactly would hold every key ever
//! seen, which is the log's distinct keys, not its live ones; so keys are counted exactly up
//! to [`EXACT_UP_TO`] (4 096: 8 bytes each, a set that stays in cache) and estimated beyond (a HyperLogLog of 4 096 registers:
//! 4 KiB, a standard error of 1.6 %), and the report says which.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

/// How many distinct keys are counted exactly; past it, estimated.
pub const EXACT_UP_TO: usize = 1 << 12;

const REGISTERS_LOG2: u32 = 12;

/// A 64-bit hash of a key's values (each followed by a separator, so `("ab", "c")` and
/// `("a", "bc")` differ). Two distinct keys collide with a probability of 2⁻⁶⁴ per pair:
/// among ten million keys, about one chance in 370 000 that any two do.
pub fn hash_parts<'a>(parts: impl IntoIterator<Item = &'a str>) -> u64 {
    let mut h = 0x243f_6a88_85a3_08d3_u64;
    for part in parts {
        let bytes = part.as_bytes();
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let w = u64::from_le_bytes(c.try_into().expect("8 bytes"));
            h = (h.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
        let mut last = [0_u8; 8];
        let rest = chunks.remainder();
        last[..rest.len()].copy_from_slice(rest);
        let w = u64::from_le_bytes(last) ^ ((rest.len() as u64) << 56) ^ 0xff;
        h = (h.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fmix64(h)
}

/// MurmurHash3's finaliser: every bit of the input moves every bit of the output.
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

/// A hasher for keys that are already hashes ([`hash_parts`]): passes them through.
#[derive(Debug, Default, Clone, Copy)]
pub struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Maps and sets keyed by [`hash_parts`].
pub type BuildPrehashed = BuildHasherDefault<Prehashed>;

/// Distinct keys seen: exact up to [`EXACT_UP_TO`], estimated beyond.
#[derive(Debug, Clone, Default)]
pub struct KeyCount {
    exact: HashSet<u64, BuildPrehashed>,
    registers: Option<Box<[u8]>>,
}

impl KeyCount {
    /// Counts the key of hash `h` ([`hash_parts`]).
    #[inline]
    pub fn add(&mut self, h: u64) {
        match &mut self.registers {
            Some(r) => Self::register(r, h),
            None => {
                self.exact.insert(h);
                if self.exact.len() > EXACT_UP_TO {
                    let mut r = vec![0_u8; 1 << REGISTERS_LOG2].into_boxed_slice();
                    for &k in &self.exact {
                        Self::register(&mut r, k);
                    }
                    self.exact = HashSet::default();
                    self.registers = Some(r);
                }
            }
        }
    }

    fn register(r: &mut [u8], h: u64) {
        let i = (h >> (64 - REGISTERS_LOG2)) as usize;
        let rank = ((h << REGISTERS_LOG2) | (1 << (REGISTERS_LOG2 - 1))).leading_zeros() + 1;
        r[i] = r[i].max(rank as u8);
    }

    /// Distinct keys (estimated when [`KeyCount::is_exact`] is false).
    pub fn count(&self) -> u64 {
        let Some(r) = &self.registers else {
            return self.exact.len() as u64;
        };
        let m = r.len() as f64;
        let sum: f64 = r.iter().map(|&x| 2_f64.powi(-i32::from(x))).sum();
        let estimate = 0.7213 / (1.0 + 1.079 / m) * m * m / sum;
        let zeros = r.iter().filter(|&&x| x == 0).count();
        if estimate <= 2.5 * m && zeros > 0 {
            (m * (m / zeros as f64).ln()).round() as u64
        } else {
            estimate.round() as u64
        }
    }

    /// Whether [`KeyCount::count`] is exact.
    pub fn is_exact(&self) -> bool {
        self.registers.is_none()
    }

    /// "1 234" or "≈ 10 012 345".
    pub fn text(&self) -> String {
        if self.is_exact() {
            self.count().to_string()
        } else {
            format!("≈ {}", self.count())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_then_within_a_few_percent() {
        let mut c = KeyCount::default();
        for i in 0..1_000_u32 {
            c.add(hash_parts([i.to_string().as_str()]));
            c.add(hash_parts([i.to_string().as_str()]));
        }
        assert_eq!((c.count(), c.is_exact()), (1_000, true));
        for i in 0..300_000_u32 {
            c.add(hash_parts(["k", i.to_string().as_str()]));
        }
        assert!(!c.is_exact());
        let n = c.count() as f64;
        assert!((n / 301_000.0 - 1.0).abs() < 0.05, "{n}");
        assert_ne!(hash_parts(["ab", "c"]), hash_parts(["a", "bc"]));
        assert_ne!(hash_parts(["a"]), hash_parts(["a", ""]));
    }
}
