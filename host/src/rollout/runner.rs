//! [`run`]: rolls out a batch of episodes, batching generation per worker group under the run's
//! [`Schedule`].

use std::time::Duration;

use drmas_sdk::{Environment, Orchestra, Task};

use super::agent_turn::BatchRecord;
use super::{asynchronous, rounds, AgentCall, EpisodeOutcome, TeamMember};
use crate::config::Schedule;
use crate::engine::Generator;
use crate::model::chat_codec::ChatCodec;
use crate::plugins::Hosted;
use crate::rng::SeededRng;

/// Bounds and batching of one rollout.
#[derive(Debug, Clone, Copy)]
pub struct RolloutLimits {
    /// Prompts longer than this keep only their last `max_prompt_tokens` tokens.
    pub max_prompt_tokens: usize,
    /// The most sequences one generation batch holds (bounds KV-cache memory).
    pub max_batch: usize,
    /// How calls are batched.
    pub schedule: Schedule,
    /// Under [`Schedule::Async`], how long an idle group waits for more calls.
    pub batch_wait: Duration,
    /// The fraction of the episodes that may fail (see [`EpisodeOutcome::failure`]) before the
    /// rollout stops with [`super::TooManyFailures`]; 0: the first failure stops it.
    pub max_failure_rate: f64,
}

/// Everything a rollout produced.
#[derive(Debug, Clone, Default)]
pub struct Rollout {
    /// Every agent call: each episode's calls in order, episodes in the order of the tasks
    /// under `async`, in generation order under `rounds`.
    pub calls: Vec<AgentCall>,
    /// Each episode's outcome, in the order of the tasks given.
    pub episodes: Vec<EpisodeOutcome>,
    /// Prompts that were cut to `max_prompt_tokens`.
    pub truncated_prompts: usize,
    /// Tokens generated over all calls.
    pub generated_tokens: usize,
    /// Seconds spent generating, summed over batches (under `async`, batches of different
    /// groups may overlap).
    pub generation_seconds: f64,
    /// Every generation batch, in the order they finished.
    pub batches: Vec<BatchRecord>,
}

impl Rollout {
    /// The episodes that failed (see [`EpisodeOutcome::failure`]).
    pub fn failed_episodes(&self) -> usize {
        self.episodes.iter().filter(|e| e.is_failed()).count()
    }

    /// Adds a finished batch.
    pub(super) fn record_batch(&mut self, record: BatchRecord) {
        self.generation_seconds += record.seconds;
        self.batches.push(record);
    }
}

/// The parts of a run a rollout drives.
pub struct Crew<'a> {
    /// Routes each episode's agent calls.
    pub orchestra: &'a Hosted<dyn Orchestra>,
    /// Scores and steps episodes.
    pub environment: &'a Hosted<dyn Environment>,
    /// The agents, in run order.
    pub team: &'a [TeamMember],
    /// Each worker group's chat template and tokenizer, indexed by [`TeamMember::group`].
    pub codecs: &'a [ChatCodec<'a>],
    /// Each worker group's generator, indexed by [`TeamMember::group`].
    pub generators: &'a [&'a dyn Generator],
}

/// Runs one episode per entry of `tasks` to completion. Each agent call is rendered with its
/// worker group's chat template and generated in a batch with other calls of that group, as
/// `limits.schedule` decides; `on_progress(finished_episodes)` reports progress. An episode
/// whose own plugin calls fail is marked failed and the others go on, up to
/// `limits.max_failure_rate`.
pub fn run(
    crew: &Crew<'_>,
    tasks: &[&Task],
    limits: RolloutLimits,
    rng: &mut SeededRng,
    on_progress: &mut dyn FnMut(usize),
) -> anyhow::Result<Rollout> {
    match limits.schedule {
        Schedule::Rounds => rounds::run(crew, tasks, limits, rng, on_progress),
        Schedule::Async => {
            asynchronous::run(crew, tasks, limits, limits.batch_wait, rng, on_progress)
        }
    }
}
