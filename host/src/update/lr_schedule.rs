//! [`LrSchedule`]: a worker group's learning rate at each optimizer step — a linear warmup to
//! the peak, then constant (the default) or a linear or cosine decay towards a floor at the
//! run's last step. Without a warmup the decays equal transformers'
//! `get_linear_schedule_with_warmup` and `get_cosine_with_min_lr_schedule_with_warmup` (TRL's
//! and verl's schedules) step for step; a warmup here starts at `peak / W` rather than 0, so it
//! reaches the peak, and the decay starts, one step earlier than theirs.

use crate::config::LrDecay;

/// The learning rate of each optimizer step of a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LrSchedule {
    /// The learning rate after the warmup, before any decay.
    pub peak: f64,
    /// Steps of the linear warmup (0: none).
    pub warmup_steps: u32,
    /// What follows the warmup.
    pub decay: LrDecay,
    /// The run's optimizer steps: the decay's end.
    pub total_steps: u64,
    /// The decay's floor, as a fraction of `peak`.
    pub min_lr_ratio: f64,
}

impl LrSchedule {
    /// The learning rate of optimizer step `step` (1 for the first). Step `s` of a warmup of
    /// `W` takes `peak · s / W`, so step `W` is the first at the peak. From there to
    /// `total_steps`, decay step `i` (0 at the peak) of those `D` steps takes
    /// `peak · (m + (1 − m) · f(i / D))`, `m` the floor's ratio and `f` falling from 1 as
    /// `1 − p` (linear) or `(1 + cos πp) / 2` (cosine): the last step is one short of the
    /// floor, and steps past `total_steps` stay at it.
    pub fn at(&self, step: u64) -> f64 {
        let warmup = u64::from(self.warmup_steps);
        if step < warmup {
            return self.peak * step as f64 / warmup as f64;
        }
        let first_at_peak = warmup.max(1);
        let decay_steps = (self.total_steps + 1).saturating_sub(first_at_peak).max(1);
        let progress = (step.saturating_sub(first_at_peak) as f64 / decay_steps as f64).min(1.0);
        let factor = match self.decay {
            LrDecay::Constant => return self.peak,
            LrDecay::Linear => 1.0 - progress,
            LrDecay::Cosine => 0.5 * (1.0 + (std::f64::consts::PI * progress).cos()),
        };
        self.peak * (self.min_lr_ratio + (1.0 - self.min_lr_ratio) * factor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(decay: LrDecay, warmup_steps: u32, total_steps: u64, min: f64) -> LrSchedule {
        LrSchedule {
            peak: 1.0,
            warmup_steps,
            decay,
            total_steps,
            min_lr_ratio: min,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn warmup_ramps_linearly_then_a_constant_schedule_holds_the_peak() {
        let constant = schedule(LrDecay::Constant, 4, 6, 0.0);
        let rates: Vec<f64> = (1..=6).map(|step| constant.at(step)).collect();
        assert_eq!(rates, [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]);
        assert_eq!(schedule(LrDecay::Constant, 0, 6, 0.0).at(9), 1.0);
    }

    #[test]
    fn a_linear_decay_falls_evenly_from_the_peak_and_stops_at_its_floor() {
        // 10 steps, no warmup: transformers' linear schedule gives step i (from 0) 1 − i/10.
        let linear = schedule(LrDecay::Linear, 0, 10, 0.0);
        for step in 1..=10u64 {
            let expected = 1.0 - (step - 1) as f64 / 10.0;
            assert!(close(linear.at(step), expected), "step {step}");
        }
        assert!(close(linear.at(11), 0.0) && close(linear.at(50), 0.0));
        // With a floor of 0.1 the line runs from 1 to 0.1 instead of 0.
        let floored = schedule(LrDecay::Linear, 0, 10, 0.1);
        assert!(close(floored.at(6), 0.55) && close(floored.at(11), 0.1));
    }

    #[test]
    fn a_cosine_decay_is_half_way_at_the_middle_and_at_the_floor_at_the_end() {
        // 2 warmup steps of 11: the 10 steps from the peak (step 2) pass the mean of peak and
        // floor half way, and end one step short of the floor.
        let cosine = schedule(LrDecay::Cosine, 2, 11, 0.2);
        assert!(close(cosine.at(1), 0.5));
        assert!(close(cosine.at(2), 1.0));
        assert!(close(
            cosine.at(3),
            1.0 - 0.8 * (1.0 - (0.1 * std::f64::consts::PI).cos()) / 2.0
        ));
        assert!(close(cosine.at(7), 0.6), "{}", cosine.at(7));
        assert!(close(
            cosine.at(11),
            0.2 + 0.8 * (1.0 + (0.9 * std::f64::consts::PI).cos()) / 2.0
        ));
        assert!(close(cosine.at(12), 0.2));
        // Each step's rate is below the one before it.
        let rates: Vec<f64> = (2..=12).map(|step| cosine.at(step)).collect();
        assert!(rates.windows(2).all(|pair| pair[1] < pair[0]), "{rates:?}");
    }
}
