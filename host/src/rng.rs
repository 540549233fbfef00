//! [`SeededRng`]: the one random stream of a run — token sampling, LoRA initialisation, the
//! order of training tasks — deterministic for a seed and saved in checkpoints.

/// A seeded random stream (the same numbers for a seed on every machine): xoshiro256** seeded
/// through SplitMix64.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeededRng {
    state: [u64; 4],
}

impl SeededRng {
    /// The stream of `seed`.
    pub fn new(seed: u64) -> Self {
        let mut x = seed;
        let mut splitmix = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Self {
            state: [splitmix(), splitmix(), splitmix(), splitmix()],
        }
    }

    /// The generator's position, for a checkpoint.
    pub fn state(&self) -> Vec<u64> {
        self.state.to_vec()
    }

    /// The generator at a saved [`Self::state`]; `None` unless it holds four words.
    pub fn from_state(state: &[u64]) -> Option<Self> {
        Some(Self {
            state: state.try_into().ok()?,
        })
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.state;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// A uniform number in `[0, 1)` with 24 random bits (every value exact in f32).
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
    }
}
