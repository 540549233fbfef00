//! Batched multi-agent rollouts: many episodes advance together; every round, each episode's
//! pending agent call is collected, calls are grouped by worker group and generated in one
//! batch per group, and each output goes back to its episode's orchestra and environment.
//!
//! Every agent call becomes one [`AgentCall`]: the prompt and response tokens, the sampling
//! log-probabilities and the format verdict the trainer needs.

mod call;
mod episode;
mod runner;
mod team;

pub use call::AgentCall;
pub use episode::EpisodeOutcome;
pub use runner::{run, Crew, Rollout, RolloutLimits};
pub use team::TeamMember;
