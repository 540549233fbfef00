//! Builds an estimator from its run-file name and `params` table.

use std::fmt;

use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::config::LossAggregation;
use crate::suggest::similar;

use super::gigpo::{Gigpo, GigpoParams};
use super::group_normalised::{GroupNormalised, Score};
use super::grouping::GroupBy;
use super::grpo_passk::GrpoPassk;
use super::reinforce_pp_baseline::ReinforcePpBaseline;
use super::rloo::Rloo;
use super::{Estimator, NormParams};

/// An estimator name or parameter table the registry cannot build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EstimatorError {
    /// No estimator has this name.
    Unknown {
        /// The name asked for.
        name: String,
        /// The registered name it is most likely a typo of, if any is close.
        suggestion: Option<&'static str>,
    },
    /// The estimator exists but its parameters do not fit its strict struct.
    Params {
        /// The estimator whose parameters are wrong.
        estimator: &'static str,
        /// What is wrong: the TOML deserialiser's text (naming the parameter) or the check that
        /// failed.
        message: String,
    },
}

impl fmt::Display for EstimatorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unknown { name, suggestion } => {
                write!(f, "unknown advantage estimator `{name}`")?;
                if let Some(suggestion) = suggestion {
                    write!(f, " (did you mean `{suggestion}`?)")?;
                }
                write!(
                    f,
                    "; valid names: {}",
                    names().collect::<Vec<_>>().join(", ")
                )
            }
            Self::Params { estimator, message } => {
                write!(
                    f,
                    "bad params for advantage estimator `{estimator}`: {message}"
                )
            }
        }
    }
}

impl std::error::Error for EstimatorError {}

/// Parses a params table into an estimator.
type Constructor = fn(&toml::Table) -> Result<Box<dyn Estimator>, String>;

/// Every built-in estimator, in the order [`names`] lists them.
const REGISTRY: &[(&str, Constructor)] = &[
    ("grpo", |t| {
        group_normalised("grpo", GroupBy::Prompt, Score::TrajectoryMean, t)
    }),
    ("grpo_step", |t| {
        group_normalised("grpo_step", GroupBy::Prompt, Score::EveryCall, t)
    }),
    ("drmas", |t| {
        group_normalised("drmas", GroupBy::PromptAgent, Score::EveryCall, t)
    }),
    ("drmas_traj", |t| {
        group_normalised("drmas_traj", GroupBy::PromptAgent, Score::TrajectoryMean, t)
    }),
    ("dr_grpo", |t| {
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
    }),
    ("grpo_first_call", |t| {
        group_normalised(
            "grpo_first_call",
            GroupBy::Prompt,
            Score::TrajectoryFirstCall,
            t,
        )
    }),
    ("drmas_traj_first_call", |t| {
        group_normalised(
            "drmas_traj_first_call",
            GroupBy::PromptAgent,
            Score::TrajectoryFirstCall,
            t,
        )
    }),
    ("rloo", |t| {
        parse::<NoParams>(t)?;
        Ok(Box::new(Rloo {
            by: GroupBy::Prompt,
        }))
    }),
    ("rloo_agent", |t| {
        parse::<NoParams>(t)?;
        Ok(Box::new(Rloo {
            by: GroupBy::PromptAgent,
        }))
    }),
    ("reinforce_pp_baseline", |t| {
        parse::<NoParams>(t)?;
        Ok(Box::new(ReinforcePpBaseline {
            by: GroupBy::Prompt,
        }))
    }),
    ("reinforce_pp_baseline_agent", |t| {
        parse::<NoParams>(t)?;
        Ok(Box::new(ReinforcePpBaseline {
            by: GroupBy::PromptAgent,
        }))
    }),
    ("grpo_passk", |t| {
        Ok(Box::new(GrpoPassk {
            by: GroupBy::Prompt,
            params: norm_params(t)?,
        }))
    }),
    ("grpo_passk_agent", |t| {
        Ok(Box::new(GrpoPassk {
            by: GroupBy::PromptAgent,
            params: norm_params(t)?,
        }))
    }),
    ("gigpo", |t| {
        Ok(Box::new(Gigpo {
            by: GroupBy::Prompt,
            params: gigpo_params(t)?,
        }))
    }),
    ("gigpo_drmas", |t| {
        Ok(Box::new(Gigpo {
            by: GroupBy::PromptAgent,
            params: gigpo_params(t)?,
        }))
    }),
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

/// The registered estimator names.
pub fn names() -> impl Iterator<Item = &'static str> {
    REGISTRY.iter().map(|(name, _)| *name)
}

/// Builds the estimator `name` with its `params` table (the run file's
/// `[algorithm.params]`; missing keys take their defaults, unknown keys are errors).
pub fn build(name: &str, params: &toml::Table) -> Result<Box<dyn Estimator>, EstimatorError> {
    let Some((estimator, construct)) = REGISTRY.iter().find(|(n, _)| *n == name) else {
        return Err(EstimatorError::Unknown {
            name: name.to_owned(),
            suggestion: similar(name, names()).first().copied(),
        });
    };
    construct(params).map_err(|message| EstimatorError::Params { estimator, message })
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
