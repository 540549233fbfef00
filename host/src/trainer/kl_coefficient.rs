//! [`KlCoefficient`]: β of the KL in the reward across iterations, fixed or steered towards a
//! target KL, saved in checkpoints so a resumed run steers as an uninterrupted one does.

use crate::advantage::PerToken;
use crate::config::{KlController, KlInRewardSection};

/// The coefficient of `[algorithm.kl_in_reward]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KlCoefficient {
    settings: KlInRewardSection,
    value: f64,
}

impl KlCoefficient {
    /// β at the start of a run: the section's `coef`.
    pub fn new(settings: KlInRewardSection) -> Self {
        Self {
            settings,
            value: settings.coef,
        }
    }

    /// β for the next iteration's rewards.
    pub fn value(&self) -> f64 {
        self.value
    }

    /// Continues from a checkpoint's β.
    pub fn restore(&mut self, value: f64) {
        self.value = value;
    }

    /// After an iteration of `calls` calls whose mean per-token KL was `kl` (see [`mean_kl`]):
    /// under the adaptive controller β ← β · (1 + clip(kl / target − 1, −0.2, 0.2) · calls /
    /// horizon), as verl's `AdaptiveKLController` (which counts a batch's responses); fixed, β
    /// stays.
    pub fn update(&mut self, kl: f64, calls: usize) {
        if self.settings.controller == KlController::Fixed || !kl.is_finite() {
            return;
        }
        let error = (kl / self.settings.target - 1.0).clamp(-0.2, 0.2);
        self.value *= 1.0 + error * calls as f64 / self.settings.horizon;
    }
}

/// A batch's KL as the controller reads it (verl's `current_kl`): each call's mean over its
/// response tokens (0 for an empty response), averaged over the calls.
pub fn mean_kl(kl: &PerToken) -> f64 {
    if kl.is_empty() {
        return 0.0;
    }
    kl.row_means().iter().sum::<f64>() / kl.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::KlType;

    fn settings(controller: KlController) -> KlInRewardSection {
        KlInRewardSection {
            coef: 0.05,
            kl_type: KlType::K1,
            controller,
            target: 0.1,
            horizon: 1000.0,
        }
    }

    #[test]
    fn a_fixed_coefficient_stays() {
        let mut beta = KlCoefficient::new(settings(KlController::Fixed));
        beta.update(3.0, 128);
        assert_eq!(beta.value(), 0.05);
    }

    #[test]
    fn the_adaptive_coefficient_moves_by_the_clipped_error_over_the_horizon() {
        let mut beta = KlCoefficient::new(settings(KlController::Adaptive));
        // KL 0.15 against 0.1: error 0.5, clipped to 0.2; 100 calls of a 1000 horizon.
        beta.update(0.15, 100);
        assert!((beta.value() - 0.05 * (1.0 + 0.2 * 0.1)).abs() < 1e-15);
        // KL 0.09: error −0.1, within the clip.
        let before = beta.value();
        beta.update(0.09, 500);
        assert!((beta.value() - before * (1.0 - 0.1 * 0.5)).abs() < 1e-15);
        // A non-finite KL leaves it.
        let before = beta.value();
        beta.update(f64::NAN, 500);
        assert_eq!(beta.value(), before);
        beta.restore(0.2);
        assert_eq!(beta.value(), 0.2);
    }

    #[test]
    fn the_batch_kl_is_the_mean_of_each_calls_token_mean() {
        let kl = PerToken::from_rows([vec![0.1, 0.3], vec![0.4], vec![]]);
        assert!((mean_kl(&kl) - (0.2 + 0.4 + 0.0) / 3.0).abs() < 1e-15);
        assert_eq!(mean_kl(&PerToken::from_rows(Vec::<Vec<f64>>::new())), 0.0);
    }
}
