//! [`XorShift`]: the simulations' random numbers, the same on every run from one seed.

/// xorshift64*: the jitter's random numbers, reproducible from a seed.
#[derive(Debug)]
pub(crate) struct XorShift(pub(crate) u64);

impl XorShift {
    pub(crate) fn next_f64(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1_u64 << 53) as f64
    }
}
