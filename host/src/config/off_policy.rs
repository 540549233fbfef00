//! `[rollout] one_step_off_policy`: what a rollout beside the update needs from the run file.

use super::{ConfigError, OldLogprobs, RunConfig, RunFile, Step};

/// A rollout can run beside the update only on servers (a group generating in this process
/// would wait for its own update), and its sampler is one update behind the weights the update
/// starts from, so the PPO ratio's old log-probabilities must be the trainer's.
pub(super) fn check(config: &RunConfig, file: &RunFile) -> Result<(), ConfigError> {
    if !config.rollout.one_step_off_policy {
        return Ok(());
    }
    let at = [Step::Key("rollout"), Step::Key("one_step_off_policy")];
    if let Some(name) = config
        .worker_groups
        .iter()
        .find(|(_, group)| !group.rollout.is_remote())
        .map(|(name, _)| name)
    {
        return Err(file.invalid_at(
            &at,
            format!(
                "[rollout] one_step_off_policy rolls out on servers while the worker groups \
                 update, but worker group `{name}` generates in this process; point it at \
                 servers ([worker_groups.{name}.rollout] backend and urls, see docs/scaling.md) \
                 or remove one_step_off_policy"
            ),
        ));
    }
    if config.algorithm.old_logprobs == Some(OldLogprobs::Sampler) {
        return Err(file.invalid_at(
            &[Step::Key("algorithm"), Step::Key("old_logprobs")],
            "[algorithm] old_logprobs = \"sampler\" takes the PPO ratio's old log-probabilities \
             from a sampler one update behind under [rollout] one_step_off_policy; set \
             old_logprobs = \"recompute\" (or leave it out)"
                .into(),
        ));
    }
    Ok(())
}
