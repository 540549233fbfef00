//! The built-in estimators: builds one from its run-file name and `params` table. Plugin
//! estimators join them in [`Registry::estimator`](crate::plugins::Registry::estimator).

use std::fmt;

use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::config::LossAggregation;
use crate::suggest::similar;

use super::gae::{Gae, GaeParams};
use super::gigpo::{Gigpo, GigpoParams};
use super::group_normalised::{GroupNormalised, Score};
use super::grouping::GroupBy;
use super::grpo_passk::GrpoPassk;
use super::reinforce_pp::{ReinforcePp, ReinforcePpParams};
use super::reinforce_pp_baseline::ReinforcePpBaseline;
use super::remax::Remax;
use super::rloo::Rloo;
use super::{Estimator, NormParams};

/// An estimator name or parameter table the registry cannot build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EstimatorError {
    /// No estimator has this name.
    Unknown {
        /// The name asked for.
        name: String,
        /// The built-in or plugin name it is most likely a typo of, if any is close.
        suggestion: Option<String>,
        /// The estimators the loaded plugins offer.
        plugin_names: Vec<String>,
    },
    /// The estimator exists but its parameters do not fit its strict struct.
    Params {
        /// The estimator whose parameters are wrong.
        estimator: &'static str,
        /// What is wrong: the TOML deserialiser's text (naming the parameter) or the check that
        /// failed.
        message: String,
    },
    /// A plugin's estimator could not be built (its config was refused, or it failed); the
    /// message names the estimator and its plugin.
    Plugin(String),
}

impl fmt::Display for EstimatorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unknown {
                name,
                suggestion,
                plugin_names,
            } => {
                write!(f, "unknown advantage estimator `{name}`")?;
                if let Some(suggestion) = suggestion {
                    write!(f, " (did you mean `{suggestion}`?)")?;
                }
                write!(f, "; built-in: {}", names().collect::<Vec<_>>().join(", "))?;
                if plugin_names.is_empty() {
                    write!(f, "; no loaded plugin offers an estimator")
                } else {
                    write!(f, "; from plugins: {}", plugin_names.join(", "))
                }
            }
            Self::Params { estimator, message } => {
                write!(
                    f,
                    "bad params for advantage estimator `{estimator}`: {message}"
                )
            }
            Self::Plugin(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for EstimatorError {}

/// Parses a params table into an estimator.
type Constructor = fn(&toml::Table) -> Result<Box<dyn Estimator>, String>;

/// Every built-in estimator: its name, a one-line description (for `drmas-host plugins`) and
/// its constructor, in the order [`names`] lists them.
const REGISTRY: &[(&str, &str, Constructor)] = &[
    (
        "grpo",
        "GRPO as Dr. MAS runs it: trajectory means normalised per prompt group",
        |t| group_normalised("grpo", GroupBy::Prompt, Score::TrajectoryMean, t),
    ),
    (
        "grpo_step",
        "GRPO over every call's reward, per prompt group",
        |t| group_normalised("grpo_step", GroupBy::Prompt, Score::EveryCall, t),
    ),
    (
        "drmas",
        "Dr. MAS: every call normalised per (prompt group, agent)",
        |t| group_normalised("drmas", GroupBy::PromptAgent, Score::EveryCall, t),
    ),
    (
        "drmas_traj",
        "Dr. MAS over the agent's trajectory means, per (prompt group, agent)",
        |t| group_normalised("drmas_traj", GroupBy::PromptAgent, Score::TrajectoryMean, t),
    ),
    (
        "dr_grpo",
        "Dr. GRPO: grpo without the σ division, seq-mean-token-sum-norm loss",
        |t| {
            let NormParams { epsilon, .. } = norm_params(t)?;
            if t.contains_key("norm_by_std") {
                return Err(
                    "`norm_by_std` is not a parameter of dr_grpo: Dr. GRPO never divides \
                     by σ (use `grpo` to choose)"
                        .to_owned(),
                );
            }
            Ok(Box::new(GroupNormalised {
                name: "dr_grpo",
                by: GroupBy::Prompt,
                score: Score::TrajectoryMean,
                params: NormParams {
                    norm_by_std: false,
                    epsilon,
                },
                loss_aggregation: Some(LossAggregation::SeqMeanTokenSumNorm),
            }))
        },
    ),
    (
        "grpo_first_call",
        "the earlier GRPO: first call's score, each call with its own reward",
        |t| {
            group_normalised(
                "grpo_first_call",
                GroupBy::Prompt,
                Score::TrajectoryFirstCall,
                t,
            )
        },
    ),
    (
        "drmas_traj_first_call",
        "drmas_traj scoring the agent's first call of a trajectory",
        |t| {
            group_normalised(
                "drmas_traj_first_call",
                GroupBy::PromptAgent,
                Score::TrajectoryFirstCall,
                t,
            )
        },
    ),
    (
        "rloo",
        "REINFORCE leave-one-out baseline, per prompt group",
        |t| {
            parse::<NoParams>(t)?;
            Ok(Box::new(Rloo {
                by: GroupBy::Prompt,
            }))
        },
    ),
    (
        "rloo_agent",
        "REINFORCE leave-one-out baseline, per (prompt group, agent)",
        |t| {
            parse::<NoParams>(t)?;
            Ok(Box::new(Rloo {
                by: GroupBy::PromptAgent,
            }))
        },
    ),
    (
        "reinforce_pp_baseline",
        "REINFORCE++: prompt-group baseline, whitened over the batch",
        |t| {
            parse::<NoParams>(t)?;
            Ok(Box::new(ReinforcePpBaseline {
                by: GroupBy::Prompt,
            }))
        },
    ),
    (
        "reinforce_pp_baseline_agent",
        "REINFORCE++: (prompt group, agent) baseline, whitened",
        |t| {
            parse::<NoParams>(t)?;
            Ok(Box::new(ReinforcePpBaseline {
                by: GroupBy::PromptAgent,
            }))
        },
    ),
    (
        "remax",
        "ReMax: each call's reward less its prompt's greedy episode's",
        |t| {
            parse::<NoParams>(t)?;
            Ok(Box::new(Remax))
        },
    ),
    (
        "grpo_passk",
        "pass@k: the best trajectory of a prompt group gets its margin",
        |t| {
            Ok(Box::new(GrpoPassk {
                by: GroupBy::Prompt,
                params: norm_params(t)?,
            }))
        },
    ),
    (
        "grpo_passk_agent",
        "pass@k per (prompt group, agent): the agent's best call",
        |t| {
            Ok(Box::new(GrpoPassk {
                by: GroupBy::PromptAgent,
                params: norm_params(t)?,
            }))
        },
    ),
    (
        "gigpo",
        "GiGPO: episode level plus anchor-state step level, per prompt group",
        |t| {
            Ok(Box::new(Gigpo {
                by: GroupBy::Prompt,
                params: gigpo_params(t)?,
            }))
        },
    ),
    (
        "gigpo_drmas",
        "GiGPO with both levels per (prompt group, agent)",
        |t| {
            Ok(Box::new(Gigpo {
                by: GroupBy::PromptAgent,
                params: gigpo_params(t)?,
            }))
        },
    ),
    (
        "reinforce_pp",
        "REINFORCE++: each token's discounted return, whitened (batch or agent)",
        |t| {
            let params: ReinforcePpParams = parse(t)?;
            params.validate()?;
            Ok(Box::new(ReinforcePp { params }))
        },
    ),
    (
        "ppo",
        "PPO: GAE over a critic's per-token values, whitened (batch or agent)",
        |t| {
            let params: GaeParams = parse(t)?;
            params.validate()?;
            Ok(Box::new(Gae { params }))
        },
    ),
];

/// Parses and checks [`GigpoParams`].
fn gigpo_params(table: &toml::Table) -> Result<GigpoParams, String> {
    let params: GigpoParams = parse(table)?;
    params.validate()?;
    Ok(params)
}

/// The params of an estimator that takes none (verl's unused `epsilon` arguments included):
/// the empty strict struct makes any key an error.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NoParams {}

/// A member of the group-normalising family with its [`NormParams`] read from `table`.
fn group_normalised(
    name: &'static str,
    by: GroupBy,
    score: Score,
    table: &toml::Table,
) -> Result<Box<dyn Estimator>, String> {
    Ok(Box::new(GroupNormalised {
        name,
        by,
        score,
        params: norm_params(table)?,
        loss_aggregation: None,
    }))
}

/// The built-in estimator names.
pub fn names() -> impl Iterator<Item = &'static str> {
    REGISTRY.iter().map(|(name, _, _)| *name)
}

/// The built-in estimators' names with their one-line descriptions.
pub fn described() -> impl Iterator<Item = (&'static str, &'static str)> {
    REGISTRY
        .iter()
        .map(|(name, description, _)| (*name, *description))
}

/// Whether `name` is a built-in estimator (plugins may not reuse it).
pub fn is_builtin(name: &str) -> bool {
    names().any(|builtin| builtin == name)
}

/// Builds the built-in estimator `name` with its `params` table (the run file's
/// `[algorithm.params]`; missing keys take their defaults, unknown keys are errors).
pub fn build(name: &str, params: &toml::Table) -> Result<Box<dyn Estimator>, EstimatorError> {
    let Some((estimator, _, construct)) = REGISTRY.iter().find(|(n, _, _)| *n == name) else {
        return Err(EstimatorError::unknown(name, &[]));
    };
    construct(params).map_err(|message| EstimatorError::Params { estimator, message })
}

impl EstimatorError {
    /// `name` is neither a built-in nor one of `plugin_names`; suggests the closest of both.
    pub fn unknown(name: &str, plugin_names: &[String]) -> Self {
        let mut candidates: Vec<&str> = names().collect();
        candidates.extend(plugin_names.iter().map(String::as_str));
        Self::Unknown {
            name: name.to_owned(),
            suggestion: similar(name, candidates).first().map(|s| (*s).to_owned()),
            plugin_names: plugin_names.to_vec(),
        }
    }
}

/// Deserialises a params table strictly; the error text names the offending key.
fn parse<P: DeserializeOwned>(table: &toml::Table) -> Result<P, String> {
    toml::Value::Table(table.clone())
        .try_into()
        .map_err(|e: toml::de::Error| e.to_string())
}

/// Parses and checks [`NormParams`].
fn norm_params(table: &toml::Table) -> Result<NormParams, String> {
    let params: NormParams = parse(table)?;
    params.validate()?;
    Ok(params)
}
