//! DAPO's overlong reward shaping (Yu et al. 2025, arXiv 2503.14476, "soft overlong
//! punishment"): a response that runs into the last `buffer` tokens of its budget loses reward
//! in proportion to how far it went, so truncated rambling is not rewarded like a finished answer.

use serde::Deserialize;

/// `[algorithm.overlong_penalty]`: the penalty for a response of L tokens under a budget of
/// L_max = the agent's `max_new_tokens`:
///
/// ```text
/// penalty = min(0, −(L − (L_max − buffer)) / buffer × factor)
/// ```
///
/// 0 up to L_max − buffer, falling linearly to −`factor` at L_max (verl's DAPO recipe:
/// `overlong_buffer.len`, `overlong_buffer.penalty_factor`). `buffer = 0` turns it off.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OverlongPenalty {
    /// Tokens before the budget's end where the penalty starts (0: off).
    pub buffer: usize,
    /// The penalty at the budget's end.
    pub factor: f64,
}

impl Default for OverlongPenalty {
    fn default() -> Self {
        Self {
            buffer: 0,
            factor: 1.0,
        }
    }
}

impl OverlongPenalty {
    /// The (non-positive) reward added to a call of `length` response tokens whose budget was
    /// `max_new_tokens`.
    pub fn penalty(&self, length: usize, max_new_tokens: usize) -> f64 {
        if self.buffer == 0 {
            return 0.0;
        }
        let expected = max_new_tokens.saturating_sub(self.buffer) as f64;
        let exceed = length as f64 - expected;
        (-exceed / self.buffer as f64 * self.factor).min(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_penalty_falls_linearly_over_the_buffer() {
        let shaping = OverlongPenalty {
            buffer: 4,
            factor: 0.5,
        };
        // Budget 10: no penalty up to 6 tokens, then −0.125 per token down to −0.5 at 10.
        let penalties: Vec<f64> = [0, 6, 7, 8, 10]
            .iter()
            .map(|&l| shaping.penalty(l, 10))
            .collect();
        assert_eq!(penalties, [0.0, 0.0, -0.125, -0.25, -0.5]);
        assert_eq!(OverlongPenalty::default().penalty(10, 10), 0.0, "off");
    }
}
