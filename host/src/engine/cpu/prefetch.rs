//! [`PacedPrefetch`]: a kernel tile's software prefetch of the weights the next tiles need,
//! spread over the tile's `k` loop.
//!
//! The tiles of a product that read the same weights share their prefetch of the next weights,
//! each fetching its own part: memory is then drawn at about the rate the products consume
//! weights, rather than in a burst during the first tile while the others fetch nothing.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};

use super::pool;

/// Part `part` of `parts` of `weights`, cut at cache lines (16 floats) into near-equal parts:
/// what one of the tiles sharing a prefetch fetches.
pub fn share_of_lines(weights: &[f32], part: usize, parts: usize) -> &[f32] {
    let lines = pool::share(part, parts, weights.len().div_ceil(16));
    let end = (lines.end * 16).min(weights.len());
    &weights[(lines.start * 16).min(end)..end]
}

/// Fetches the cache lines of a slice into L2 over a loop's steps: one line every `2^n` steps,
/// `2^n` the largest that still fetches every line by the last step (every step when there
/// are more lines than steps; the rest are then left to the hardware). A power of two keeps
/// the per-step cost to one mask test: an exact fraction per step cost ~1.5 % of a decode
/// step that is bound by reading the weights.
#[cfg(target_arch = "x86_64")]
pub struct PacedPrefetch<'a> {
    lines: &'a [f32],
    next_line: usize,
    /// `2^n - 1`: step `i` fetches when `i & every == 0`.
    every: usize,
}

#[cfg(target_arch = "x86_64")]
impl<'a> PacedPrefetch<'a> {
    /// Paces the cache lines of `lines` over steps `0..steps`.
    pub fn new(lines: &'a [f32], steps: usize) -> Self {
        let steps_per_line = (steps / lines.len().div_ceil(16).max(1)).max(1);
        Self {
            lines,
            next_line: 0,
            every: (1 << steps_per_line.ilog2()) - 1,
        }
    }

    /// Fetches the line due at step `step`, if any.
    #[inline(always)]
    pub fn step(&mut self, step: usize) {
        if step & self.every == 0 && self.next_line < self.lines.len() {
            // SAFETY: `next_line` is inside `lines`.
            unsafe { _mm_prefetch::<_MM_HINT_T1>(self.lines.as_ptr().add(self.next_line).cast()) };
            self.next_line += 16;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parts cover the slice in order, at line boundaries, without overlap.
    #[test]
    fn shares_of_lines_cover_the_slice_in_order() {
        let weights: Vec<f32> = (0..1000).map(|i| i as f32).collect();
        for (len, parts) in [(0, 3), (12, 4), (16, 1), (1000, 4), (1000, 7), (33, 2)] {
            let shares: Vec<&[f32]> = (0..parts)
                .map(|part| share_of_lines(&weights[..len], part, parts))
                .collect();
            assert_eq!(shares.concat(), weights[..len], "{len} floats in {parts}");
            let mut start = 0;
            for share in &shares {
                assert!(
                    share.is_empty() || start % 16 == 0,
                    "{len} floats in {parts}"
                );
                assert!(share.len() <= 16 * len.div_ceil(16).div_ceil(parts));
                start += share.len();
            }
        }
    }

    /// Every line is fetched by the last step, whatever the ratio of lines to steps, and never
    /// more than one per step.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn paced_prefetch_fetches_every_line_within_the_steps() {
        let weights = vec![0.0f32; 16 * 600];
        for (floats, steps) in [
            (0, 5),
            (1, 1),
            (16, 1),
            (160, 576),
            (16 * 576, 576),
            (9000, 576),
        ] {
            let mut prefetch = PacedPrefetch::new(&weights[..floats], steps);
            let mut fetched = 0;
            for kk in 0..steps {
                let before = prefetch.next_line;
                prefetch.step(kk);
                assert!(prefetch.next_line - before <= 16);
                fetched = prefetch.next_line;
            }
            let lines = floats.div_ceil(16).min(steps);
            assert_eq!(fetched, 16 * lines, "{floats} floats over {steps} steps");
        }
    }
}
