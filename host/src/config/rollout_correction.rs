//! `[algorithm] old_logprobs` and `[algorithm.rollout_correction]`: where the PPO ratio's old
//! log-probabilities come from, and truncated importance sampling (TIS) for what still differs
//! between the engine that sampled and the trainer's forward.

use serde::Deserialize;

use super::{ConfigError, Dtype, RunConfig, RunFile, Step, WorkerGroupSection};

/// Where the PPO ratio's old log-probabilities come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OldLogprobs {
    /// The sampler's own, recorded during generation: exact while sampler and trainer compute
    /// the same model in f32 in this process.
    Sampler,
    /// A training forward (no dropout, no gradient) over each call before the update, as verl
    /// does: the ratio then measures only the update, whoever sampled.
    Recompute,
}

impl OldLogprobs {
    /// The source a worker group uses: the run file's `setting` when given, else `Recompute`
    /// where another engine or a reduced precision samples (a remote backend, a bf16 or f16
    /// group) and `Sampler` otherwise, so a local f32 run computes what it always did.
    pub fn for_group(setting: Option<Self>, group: &WorkerGroupSection) -> Self {
        setting.unwrap_or_else(|| {
            if group.rollout.is_remote() || group.dtype != Dtype::F32 {
                Self::Recompute
            } else {
                Self::Sampler
            }
        })
    }

    /// The name the run file uses.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sampler => "sampler",
            Self::Recompute => "recompute",
        }
    }
}

/// `[algorithm.rollout_correction]`: truncated importance sampling against the mismatch between
/// the sampler's and the trainer's log-probabilities.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RolloutCorrectionSection {
    /// Weights each response token's policy loss by min(π_old / π_rollout, tis_cap), π_old the
    /// recomputed probability; left out, no weighting.
    pub tis_cap: Option<f64>,
}

/// `tis_cap` weighs the recomputed against the sampler's log-probabilities, so it needs a group
/// that recomputes them.
pub(super) fn check(config: &RunConfig, file: &RunFile) -> Result<(), ConfigError> {
    let algorithm = &config.algorithm;
    if algorithm.rollout_correction.tis_cap.is_none() {
        return Ok(());
    }
    let recomputes = config.worker_groups.values().any(|group| {
        OldLogprobs::for_group(algorithm.old_logprobs, group) == OldLogprobs::Recompute
    });
    if recomputes {
        return Ok(());
    }
    let path = [
        Step::Key("algorithm"),
        Step::Key("rollout_correction"),
        Step::Key("tis_cap"),
    ];
    Err(file.invalid_at(
        &path,
        "[algorithm.rollout_correction] tis_cap weighs recomputed against sampled \
         log-probabilities, but no worker group recomputes them (old_logprobs = \"sampler\"); \
         set [algorithm] old_logprobs = \"recompute\", or remove tis_cap"
            .into(),
    ))
}
