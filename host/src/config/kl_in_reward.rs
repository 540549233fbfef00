//! `[algorithm.kl_in_reward]`: a KL penalty against each worker group's reference subtracted
//! from the rewards before the estimator sees them (verl's `use_kl_in_reward`), its
//! coefficient fixed or steered towards a target KL (Ziegler et al. 2019's adaptive controller).

use serde::Deserialize;

use super::KlType;

/// How the KL coefficient β moves between iterations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KlController {
    /// β stays `coef`.
    #[default]
    Fixed,
    /// After each iteration β is multiplied by 1 + clip(KL / target − 1, ±0.2) · calls /
    /// horizon, KL the iteration's mean per-token KL (verl's `AdaptiveKLController`).
    Adaptive,
}

impl KlController {
    /// The name the run file uses.
    pub fn name(self) -> &'static str {
        match self {
            Self::Fixed => "fixed",
            Self::Adaptive => "adaptive",
        }
    }
}

/// `[algorithm.kl_in_reward]`: each response token's reward is reduced by β · KL(policy ‖
/// reference) of that token; outcome estimators see each call's reward less the sum over its
/// tokens. Off while `coef` is 0.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KlInRewardSection {
    /// β (the starting one under the adaptive controller); 0: no KL in the reward.
    pub coef: f64,
    /// The per-token KL estimate (verl's `kl_penalty`; its default `kl` is `k1`).
    pub kl_type: KlType,
    /// Whether β stays or steers towards `target`.
    pub controller: KlController,
    /// The adaptive controller's target: the mean per-token KL it steers towards.
    pub target: f64,
    /// The adaptive controller's horizon, in calls: how many calls it takes β to move by the
    /// (clipped) relative error.
    pub horizon: f64,
}

impl Default for KlInRewardSection {
    fn default() -> Self {
        Self {
            coef: 0.0,
            kl_type: KlType::K1,
            controller: KlController::Fixed,
            target: 0.1,
            horizon: 10_000.0,
        }
    }
}

impl KlInRewardSection {
    /// Whether the run puts a KL term in the reward.
    pub fn enabled(&self) -> bool {
        self.coef > 0.0
    }
}
