//! Per-token KL estimators between the policy and a frozen reference (Schulman's k1, k2, k3,
//! and the absolute difference), as verl's `kl_penalty` computes them.

use tch::Tensor;

use crate::config::KlType;

/// Per-token KL estimate from the policy's and the reference's log-probabilities of the sampled
/// tokens.
///
/// - `k1`: logp − ref_logp (unbiased, can be negative);
/// - `k2`: ½ (logp − ref_logp)²;
/// - `low_var_kl` (k3): exp(ref − logp) − (ref − logp) − 1, non-negative, clamped to [−10, 10];
/// - `abs`: |logp − ref_logp|.
pub fn kl_penalty(logprobs: &Tensor, ref_logprobs: &Tensor, kind: KlType) -> Tensor {
    match kind {
        KlType::K1 => logprobs - ref_logprobs,
        KlType::K2 => (logprobs - ref_logprobs).square() * 0.5,
        KlType::Abs => (logprobs - ref_logprobs).abs(),
        KlType::LowVarKl => {
            let log_ratio = ref_logprobs - logprobs;
            (log_ratio.exp() - &log_ratio - 1.0).clamp(-10.0, 10.0)
        }
    }
}
