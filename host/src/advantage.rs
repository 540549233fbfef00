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
mod gae;
mod gigpo;
mod group_normalised;
mod grouping;
mod grpo_passk;
mod normalise;
mod overlong;
mod penalty;
mod per_token;
mod registry;
mod reinforce_pp;
mod reinforce_pp_baseline;
mod remax;
mod rloo;
mod similarity;
mod stats;
mod trajectory_mean;
mod whiten;

#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;

pub use diagnostics::{AgentDiagnostics, Diagnostics};
/// One agent call of a batch, as every estimator sees it, built-in or a plugin's: the SDK's plain
/// `Copy` record, so a batch of a million calls is one flat allocation and a plugin gets the same
/// data. The rewards an estimator normalises are passed alongside (see [`Penalty::apply`]) so the
/// same batch can be scored with and without the penalty.
pub use drmas_sdk::Sample;
pub use estimator::{Estimator, TokenEstimate, TokenInput};
pub use normalise::NormParams;
pub use overlong::OverlongPenalty;
pub use penalty::Penalty;
pub use per_token::PerToken;
pub use registry::{build, described, is_builtin, names, EstimatorError};
