//! [`Rng`]: a seeded generator for randomized tests, so that a failure replays exactly from
//! its seed.

/// xorshift64* over its state (any non-zero seed).
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// The next number below `n` (not 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_and_stays_below() {
        let (mut a, mut b) = (Rng(42), Rng(42));
        let xs: Vec<u64> = (0..100).map(|_| a.below(7)).collect();
        let ys: Vec<u64> = (0..100).map(|_| b.below(7)).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().all(|&x| x < 7));
        assert!(
            (0..7).all(|v| xs.contains(&v)),
            "every value is drawn: {xs:?}"
        );
    }
}
