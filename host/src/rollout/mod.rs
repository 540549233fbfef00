//! Batched multi-agent rollouts: many episodes advance together; their pending agent calls are
//! grouped by worker group and generated in batches, and each output goes back to its episode's
//! orchestra and environment. Two schedules: `rounds` (lock-step, reproducible) and `async`
//! (each episode and each group moves as soon as it can).
//!
//! Every agent call becomes one [`AgentCall`]: the prompt and response tokens, the sampling
//! log-probabilities and the format verdict the trainer needs. An episode whose own plugin
//! calls fail is marked failed ([`EpisodeOutcome::failure`]) while the others go on, within
//! `[rollout] max_episode_failure_rate`.

mod agent_turn;
mod asynchronous;
mod call;
mod episode;
mod failure;
mod rounds;
mod runner;
mod team;

pub use agent_turn::BatchRecord;
pub use call::AgentCall;
pub use episode::EpisodeOutcome;
pub use failure::TooManyFailures;
pub use runner::{run, Crew, Rollout, RolloutLimits};
pub use team::TeamMember;
