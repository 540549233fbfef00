//! The policy loss: PPO's clipped surrogate (or GSPO's, whose ratio is each response's) with
//! separate lower and upper clip ratios (DAPO) and the dual clip for negative advantages, or
//! CISPO's clipped importance weight on the plain policy gradient; an optional entropy bonus
//! and an optional KL term.

use tch::{Kind, Tensor};

use super::{kl_penalty, Aggregation, BatchTotals};
use crate::config::{LossSection, PolicyLoss};

/// One micro-batch's inputs, all `[B, T]` over response positions except `advantages` (`[B, T]`,
/// or `[B]`: one per sample, broadcast over its tokens) and `totals`.
pub struct LossInputs<'a> {
    /// Log-probabilities of the sampled tokens under the current policy (with autograd).
    pub logprobs: &'a Tensor,
    /// Their log-probabilities when they were sampled.
    pub old_logprobs: &'a Tensor,
    /// One advantage per response token, or one per sample.
    pub advantages: &'a Tensor,
    /// 1.0 on response tokens, 0.0 on padding.
    pub mask: &'a Tensor,
    /// Per-token entropy of the current policy, when the entropy bonus is on.
    pub entropy: Option<&'a Tensor>,
    /// Reference log-probabilities, when the KL term is on.
    pub ref_logprobs: Option<&'a Tensor>,
    /// Truncated importance weights of the tokens (no gradient), when the rollout correction
    /// is on: each token's policy loss is multiplied by its weight.
    pub tis_weights: Option<&'a Tensor>,
    /// The sizes of the mini-batch this micro-batch belongs to (its own for a whole batch).
    pub totals: BatchTotals,
}

/// Numbers for the metrics, detached: this micro-batch's share of the mini-batch's values, so
/// the micro-batches' stats add up to the mini-batch's.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LossStats {
    /// The clipped surrogate alone (under `cispo`, its objective −ŵ·A·log π).
    pub policy_loss: f64,
    /// Fraction of response tokens whose ratio was clipped (under `cispo`: whose importance
    /// weight was, whatever the advantage's sign).
    pub clip_fraction: f64,
    /// Fraction of response tokens where the dual clip bound the loss.
    pub dual_clip_fraction: f64,
    /// Aggregated KL to the reference (0 without one).
    pub kl: f64,
    /// Aggregated entropy (0 when not given).
    pub entropy: f64,
}

/// This micro-batch's share of the scalar loss to back-propagate under `settings` (a worker
/// group's `[algorithm.loss]`, with an agent's overrides applied), and its parts for the metrics.
pub fn policy_loss(settings: &LossSection, inputs: &LossInputs<'_>) -> (Tensor, LossStats) {
    let mask = inputs.mask;
    let aggregation = Aggregation {
        mode: settings.aggregation,
        scale_factor: settings.loss_scale_factor,
        totals: inputs.totals,
    };
    let advantages = match inputs.advantages.dim() {
        1 => inputs.advantages.unsqueeze(1),
        _ => inputs.advantages.shallow_clone(),
    };
    let token_count = inputs.totals.tokens.max(1.0);
    let (token_losses, clipped, dual_clip_fraction) = match settings.policy_loss {
        PolicyLoss::Ppo | PolicyLoss::Gspo => clipped_surrogate(settings, inputs, &advantages),
        PolicyLoss::Cispo => {
            let (token_losses, clipped) = cispo(settings, inputs, &advantages);
            (token_losses, clipped, 0.0)
        }
    };
    let clip_fraction = clipped / token_count;
    let token_losses = match inputs.tis_weights {
        Some(weights) => token_losses * weights,
        None => token_losses,
    };
    let policy_loss = aggregation.reduce(&token_losses, mask);
    // The regularisers, added to the surrogate at the end.
    let mut terms = Vec::with_capacity(2);
    let mut stats = LossStats {
        policy_loss: policy_loss.double_value(&[]),
        clip_fraction: clip_fraction.double_value(&[]),
        dual_clip_fraction,
        ..LossStats::default()
    };
    if let Some(entropy) = inputs.entropy {
        let entropy = aggregation.reduce(entropy, mask);
        stats.entropy = entropy.double_value(&[]);
        if settings.entropy_coef != 0.0 {
            terms.push(entropy * -settings.entropy_coef);
        }
    }
    if let Some(reference) = inputs.ref_logprobs {
        let kl = aggregation.reduce(
            &kl_penalty(inputs.logprobs, reference, settings.kl_type),
            mask,
        );
        stats.kl = kl.double_value(&[]);
        if settings.kl_coef != 0.0 {
            terms.push(kl * settings.kl_coef);
        }
    }
    let loss = terms
        .into_iter()
        .fold(policy_loss, |total, term| total + term);
    (loss, stats)
}

/// PPO's (or GSPO's) clipped surrogate per token, max(−A·r, −A·clip(r)), the dual clip bounding
/// it for negative advantages; with the number of clipped tokens (a tensor) and the fraction of
/// the mini-batch's tokens the dual clip bound.
fn clipped_surrogate(
    settings: &LossSection,
    inputs: &LossInputs<'_>,
    advantages: &Tensor,
) -> (Tensor, Tensor, f64) {
    let mask = inputs.mask;
    let log_ratio = inputs.logprobs - inputs.old_logprobs;
    let log_ratio = match settings.policy_loss {
        // Each token takes its response's mean log-ratio as its value and its own
        // log-probability's gradient: the response's ratio s, whose gradient is s times the mean
        // of its tokens' (GSPO-token; with one advantage per response, GSPO itself).
        PolicyLoss::Gspo => {
            let kind = log_ratio.kind();
            let tokens = mask.sum_dim_intlist(-1, true, kind).clamp_min(1.0);
            let mean = ((&log_ratio * mask).sum_dim_intlist(-1, true, kind) / tokens).detach();
            inputs.logprobs - inputs.logprobs.detach() + mean
        }
        PolicyLoss::Ppo | PolicyLoss::Cispo => log_ratio,
    };
    let ratio = log_ratio.exp();

    let unclipped = -advantages * &ratio;
    let clipped = -advantages * ratio.clamp(1.0 - settings.clip_low, 1.0 + settings.clip_high);
    let mut token_losses = unclipped.maximum(&clipped);
    let clipped_tokens =
        (clipped.gt_tensor(&unclipped).to_kind(Kind::Double) * mask).sum(Kind::Double);

    let mut dual_clip_fraction = 0.0;
    if settings.dual_clip > 1.0 {
        let bound = -advantages * settings.dual_clip;
        let negative = advantages.lt(0.0).expand_as(&token_losses);
        let bounded = token_losses.minimum(&bound);
        let hit = negative
            .logical_and(&token_losses.gt_tensor(&bound))
            .to_kind(Kind::Double)
            * mask;
        dual_clip_fraction =
            (hit.sum(Kind::Double) / inputs.totals.tokens.max(1.0)).double_value(&[]);
        token_losses = bounded.where_self(&negative, &token_losses);
    }
    (token_losses, clipped_tokens, dual_clip_fraction)
}

/// CISPO's token losses (MiniMax-M1, arXiv 2506.13585), −sg(ŵ)·A·log π with ŵ the token's ratio
/// clipped to [1 − clip_low, 1 + clip_high]: a clipped token keeps its gradient, at the clipped
/// weight (PPO's clip drops it); with the number of tokens whose weight was clipped (a tensor).
fn cispo(settings: &LossSection, inputs: &LossInputs<'_>, advantages: &Tensor) -> (Tensor, Tensor) {
    let ratio = (inputs.logprobs - inputs.old_logprobs).detach().exp();
    let weight = ratio.clamp(1.0 - settings.clip_low, 1.0 + settings.clip_high);
    let clipped_tokens =
        (weight.ne_tensor(&ratio).to_kind(Kind::Double) * inputs.mask).sum(Kind::Double);
    (-advantages * weight * inputs.logprobs, clipped_tokens)
}

#[cfg(test)]
mod tests;
