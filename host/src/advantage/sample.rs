//! One agent call of a rollout batch, as the estimators see it.

/// One agent call (one policy sample) of a batch.
///
/// Plain and `Copy` (40 bytes) so a batch of a million calls is one flat allocation. The
/// estimators only read it; the rewards they normalise are passed alongside (see
/// [`Penalty::apply`](super::Penalty::apply)) so the same batch can be scored with and without
/// the penalty.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Prompt group: every episode rolled out from the same prompt shares it.
    pub uid: u32,
    /// Episode id, unique across the batch: every call of one episode shares it.
    pub trajectory: u32,
    /// Index of the calling agent in the run's agent list.
    pub agent: u16,
    /// Index of the model worker group that generated the call.
    pub worker_group: u16,
    /// The episode's reward (the sum of its step rewards), before the invalid-action penalty.
    pub reward: f64,
    /// The environment step the call was made in (0 for the first), for step-level credit.
    pub step: u16,
    /// The reward of that environment step alone.
    pub step_reward: f64,
    /// A key of the environment state the step started from (equal keys: the same
    /// observation), for step-level groups (GiGPO's anchor states).
    pub state: u64,
    /// Whether the agent's output had a valid format (invalid calls are penalised).
    pub valid: bool,
    /// A copy added only to pad the batch to a size the trainer needs: it never enters any
    /// statistic and its advantage is always 0.
    pub padding: bool,
}
