//! Builds an estimator from its run-file name and `params` table.

use std::fmt;

use serde::de::DeserializeOwned;

use crate::suggest::similar;

use super::{
    Drmas, DrmasTraj, Estimator, Grpo, GrpoPassk, GrpoStep, NormParams, ReinforcePpBaseline,
    ReinforcePpBaselineParams, Rloo, RlooParams,
};

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
        Ok(Box::new(Grpo {
            params: norm_params(t)?,
        }))
    }),
    ("grpo_step", |t| {
        Ok(Box::new(GrpoStep {
            params: norm_params(t)?,
        }))
    }),
    ("drmas", |t| {
        Ok(Box::new(Drmas {
            params: norm_params(t)?,
        }))
    }),
    ("drmas_traj", |t| {
        Ok(Box::new(DrmasTraj {
            params: norm_params(t)?,
        }))
    }),
    ("rloo", |t| {
        Ok(Box::new(Rloo {
            params: parse::<RlooParams>(t)?,
        }))
    }),
    ("reinforce_pp_baseline", |t| {
        Ok(Box::new(ReinforcePpBaseline {
            params: parse::<ReinforcePpBaselineParams>(t)?,
        }))
    }),
    ("grpo_passk", |t| {
        Ok(Box::new(GrpoPassk {
            params: norm_params(t)?,
        }))
    }),
];

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
