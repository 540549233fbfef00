//! [`AgentCall`]: one agent call of a rollout, as the trainer consumes it.

use crate::engine::FinishReason;

/// One agent call: what the model saw, what it wrote, and how likely each token was.
#[derive(Debug, Clone)]
pub struct AgentCall {
    /// Index of the episode (in the rollout's episode list) the call belongs to.
    pub episode: usize,
    /// The call's index among its episode's calls, in the order they were made: what the
    /// orchestra's rewards for single calls name (its own reward is
    /// [`EpisodeOutcome::call_reward`](super::EpisodeOutcome::call_reward)`(index)`).
    pub index: usize,
    /// Index of the calling agent in the run's agent list.
    pub agent: usize,
    /// The environment step the call was made in (0 for the first): its reward is
    /// [`EpisodeOutcome::step_rewards`](super::EpisodeOutcome::step_rewards)`[step]`.
    pub step: usize,
    /// The chat-templated prompt tokens (after any truncation).
    pub prompt: Vec<i64>,
    /// How many of the prompt's first tokens the generator reused the keys and values of (a
    /// prefix cache) instead of computing them.
    pub cached_prompt_tokens: usize,
    /// The generated tokens (the final EOS included when the model wrote one).
    pub response: Vec<i64>,
    /// The response as text (what the agent parsed).
    pub text: String,
    /// Log-probability of each response token under the sampling distribution at `temperature`.
    pub logprobs: Vec<f32>,
    /// The temperature the response was sampled at (the training forward divides by it too).
    pub temperature: f64,
    /// Whether the output counts as valid: the agent judged its format valid and its action
    /// meets the role's contract.
    pub valid: bool,
    /// Whether the action fell outside the role's contract (which also makes it invalid).
    pub breaks_contract: bool,
    /// Why generation stopped.
    pub finish: FinishReason,
}

impl AgentCall {
    /// A valid call of `agent` in the first step of episode `episode` — `prompt` continued by
    /// `response` at temperature 1 until its length ran out, every log-probability 0 — for
    /// building training batches outside a rollout (tests, device checks); set the other fields
    /// as needed.
    pub fn synthetic(episode: usize, agent: usize, prompt: Vec<i64>, response: Vec<i64>) -> Self {
        Self {
            episode,
            index: 0,
            agent,
            step: 0,
            prompt,
            cached_prompt_tokens: 0,
            logprobs: vec![0.0; response.len()],
            response,
            text: String::new(),
            temperature: 1.0,
            valid: true,
            breaks_contract: false,
            finish: FinishReason::Length,
        }
    }
}
