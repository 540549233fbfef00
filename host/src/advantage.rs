//! Advantage estimation: turns the (penalised) rewards of a batch of agent calls into one
//! advantage per call.
//!
//! A batch is a slice of [`Sample`]s, one per agent call, in any order. The invalid-action
//! penalty ([`Penalty`]) turns each sample's episode reward into the reward the estimators see;
//! an [`Estimator`] (a built-in one built by name through [`build`], or a plugin's, both
//! resolved by [`Registry::estimator`](crate::plugins::Registry::estimator)) turns those rewards
//! into advantages; [`Diagnostics`] summarises the per-agent reward statistics that decide how much
//! a shared (global) normalisation distorts each agent's gradient (Dr. MAS, Lemma 4.2).
//!
//! The estimators follow the Dr. MAS code's `compute_*_outcome_advantage` family (verl's, with
//! multi-agent grouping); docs/estimators.md gives each formula, its grouping, its parameters
//! and its source.

mod diagnostics;
mod estimator;
mod gigpo;
mod group_normalised;
mod grouping;
mod grpo_passk;
mod normalise;
mod overlong;
mod penalty;
mod registry;
mod reinforce_pp_baseline;
mod rloo;
mod sample;
mod stats;
mod trajectory_mean;

#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;

pub use diagnostics::{AgentDiagnostics, Diagnostics};
pub use estimator::Estimator;
pub use normalise::NormParams;
pub use overlong::OverlongPenalty;
pub use penalty::Penalty;
pub use registry::{build, described, is_builtin, names, EstimatorError};
pub use sample::Sample;
