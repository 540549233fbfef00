//! The trait objects that cross the boundary (`#[sabi_trait]`), and the exporters that wrap an
//! author's component into them. Every exporter method runs under [`guard`].

#![allow(missing_docs, unused_qualifications, non_local_definitions)] // for the sabi_trait expansion

use abi_stable::sabi_trait;
use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{RBox, ROption, RResult, RSlice, RStr, RString, RVec};
use abi_stable::StableAbi;

use super::{
    guard, FfiActions, FfiAgentContext, FfiAgentOutput, FfiCallReward, FfiChatMessage,
    FfiDatasetSpec, FfiError, FfiNext, FfiParsed, FfiRole, FfiSample, FfiStep, FfiTask,
};
use crate::{Agent, Environment, Episode, Estimator, Orchestra, Routing, Sample};

#[sabi_trait]
pub trait FfiAgent: Send + Sync {
    fn messages(&self, context: &FfiAgentContext) -> RResult<RVec<FfiChatMessage>, FfiError>;

    fn parse(&self, raw: RStr<'_>) -> RResult<FfiParsed, FfiError>;

    #[sabi(last_prefix_field)]
    fn actions(&self) -> RResult<FfiActions, FfiError>;
}

#[sabi_trait]
pub trait FfiOrchestra: Send + Sync {
    fn roles(&self) -> RResult<RVec<FfiRole>, FfiError>;

    #[sabi(last_prefix_field)]
    fn start(&self, task: &FfiTask) -> RResult<FfiRoutingBox, FfiError>;
}

#[sabi_trait]
pub trait FfiRouting: Send {
    fn on_observation(&mut self, observation: RStr<'_>) -> RResult<(), FfiError>;

    fn next(&mut self) -> RResult<FfiNext, FfiError>;

    fn observe(&mut self, role: RStr<'_>, output: &FfiAgentOutput) -> RResult<(), FfiError>;

    #[sabi(last_prefix_field)]
    fn on_step(&mut self, step: &FfiStep) -> RResult<RVec<FfiCallReward>, FfiError>;
}

#[sabi_trait]
pub trait FfiEnvironment: Send + Sync {
    fn load_tasks(&self, spec: &FfiDatasetSpec) -> RResult<RVec<FfiTask>, FfiError>;

    #[sabi(last_prefix_field)]
    fn reset(&self, task: &FfiTask) -> RResult<FfiReset, FfiError>;
}

#[sabi_trait]
pub trait FfiEpisode: Send {
    #[sabi(last_prefix_field)]
    fn step(&mut self, action: RStr<'_>) -> RResult<FfiStep, FfiError>;
}

#[sabi_trait]
pub trait FfiEstimator: Send + Sync {
    #[sabi(last_prefix_field)]
    fn advantages(
        &self,
        samples: RSlice<'_, FfiSample>,
        rewards: RSlice<'_, f64>,
    ) -> RResult<RVec<f64>, FfiError>;
}

pub type FfiAgentBox = FfiAgent_TO<'static, RBox<()>>;
pub type FfiOrchestraBox = FfiOrchestra_TO<'static, RBox<()>>;
pub type FfiRoutingBox = FfiRouting_TO<'static, RBox<()>>;
pub type FfiEnvironmentBox = FfiEnvironment_TO<'static, RBox<()>>;
pub type FfiEpisodeBox = FfiEpisode_TO<'static, RBox<()>>;
pub type FfiEstimatorBox = FfiEstimator_TO<'static, RBox<()>>;

#[repr(C)]
#[derive(StableAbi)]
pub struct FfiReset {
    pub episode: FfiEpisodeBox,
    pub observation: RString,
    pub state_key: ROption<RString>,
}

/// A component built by a plugin, of any kind.
#[repr(u8)]
#[derive(StableAbi)]
pub enum FfiComponent {
    Agent(FfiAgentBox),
    Orchestra(FfiOrchestraBox),
    Environment(FfiEnvironmentBox),
    Estimator(FfiEstimatorBox),
}

/// Wraps an author's component so it can cross the boundary.
pub(crate) struct Exported<T>(pub(crate) T);

impl<T: Agent + 'static> Exported<T> {
    pub(crate) fn agent(value: T) -> FfiAgentBox {
        FfiAgent_TO::from_value(Exported(value), TD_Opaque)
    }
}

impl<T: Orchestra + 'static> Exported<T> {
    pub(crate) fn orchestra(value: T) -> FfiOrchestraBox {
        FfiOrchestra_TO::from_value(Exported(value), TD_Opaque)
    }
}

impl<T: Environment + 'static> Exported<T> {
    pub(crate) fn environment(value: T) -> FfiEnvironmentBox {
        FfiEnvironment_TO::from_value(Exported(value), TD_Opaque)
    }
}

impl<T: Estimator + 'static> Exported<T> {
    pub(crate) fn estimator(value: T) -> FfiEstimatorBox {
        FfiEstimator_TO::from_value(Exported(value), TD_Opaque)
    }
}

impl<T: Agent> FfiAgent for Exported<T> {
    fn messages(&self, context: &FfiAgentContext) -> RResult<RVec<FfiChatMessage>, FfiError> {
        guard(|| {
            let messages = self.0.messages(&context.into())?;
            Ok(messages.into_iter().map(FfiChatMessage::from).collect())
        })
    }

    fn parse(&self, raw: RStr<'_>) -> RResult<FfiParsed, FfiError> {
        guard(|| self.0.parse(raw.as_str()).map(FfiParsed::from))
    }

    fn actions(&self) -> RResult<FfiActions, FfiError> {
        guard(|| Ok(self.0.actions().into()))
    }
}

impl<T: Orchestra> FfiOrchestra for Exported<T> {
    fn roles(&self) -> RResult<RVec<FfiRole>, FfiError> {
        guard(|| Ok(self.0.roles()?.into_iter().map(FfiRole::from).collect()))
    }

    fn start(&self, task: &FfiTask) -> RResult<FfiRoutingBox, FfiError> {
        guard(|| {
            let routing = self.0.start(&task.clone().into())?;
            Ok(FfiRouting_TO::from_value(Exported(routing), TD_Opaque))
        })
    }
}

impl FfiRouting for Exported<Box<dyn Routing>> {
    fn on_observation(&mut self, observation: RStr<'_>) -> RResult<(), FfiError> {
        guard(|| self.0.on_observation(observation.as_str()))
    }

    fn next(&mut self) -> RResult<FfiNext, FfiError> {
        guard(|| self.0.next().map(FfiNext::from))
    }

    fn observe(&mut self, role: RStr<'_>, output: &FfiAgentOutput) -> RResult<(), FfiError> {
        guard(|| self.0.observe(role.as_str(), &output.into()))
    }

    fn on_step(&mut self, step: &FfiStep) -> RResult<RVec<FfiCallReward>, FfiError> {
        guard(|| {
            let rewards = self.0.on_step(&step.clone().into())?;
            Ok(rewards.into_iter().map(FfiCallReward::from).collect())
        })
    }
}

impl<T: Environment> FfiEnvironment for Exported<T> {
    fn load_tasks(&self, spec: &FfiDatasetSpec) -> RResult<RVec<FfiTask>, FfiError> {
        guard(|| {
            let tasks = self.0.load_tasks(&spec.into())?;
            Ok(tasks.iter().map(FfiTask::from).collect())
        })
    }

    fn reset(&self, task: &FfiTask) -> RResult<FfiReset, FfiError> {
        guard(|| {
            let reset = self.0.reset(&task.clone().into())?;
            Ok(FfiReset {
                episode: FfiEpisode_TO::from_value(Exported(reset.episode), TD_Opaque),
                observation: reset.observation.into(),
                state_key: reset.state_key.map(RString::from).into(),
            })
        })
    }
}

impl FfiEpisode for Exported<Box<dyn Episode>> {
    fn step(&mut self, action: RStr<'_>) -> RResult<FfiStep, FfiError> {
        guard(|| self.0.step(action.as_str()).map(FfiStep::from))
    }
}

impl<T: Estimator> FfiEstimator for Exported<T> {
    fn advantages(
        &self,
        samples: RSlice<'_, FfiSample>,
        rewards: RSlice<'_, f64>,
    ) -> RResult<RVec<f64>, FfiError> {
        guard(|| {
            let samples: Vec<Sample> = samples.iter().map(Sample::from).collect();
            Ok(self.0.advantages(&samples, rewards.as_slice())?.into())
        })
    }
}
