//! Host side: components built by a loaded plugin, wrapped so they implement the author-facing
//! traits. Errors name the component and the plugin; nothing outside this module sees ABI types.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use abi_stable::std_types::{RResult, RSlice, RStr};

use super::{
    FfiAgentBox, FfiAgentContext, FfiAgentOutput, FfiDatasetSpec, FfiEnvironmentBox, FfiEpisodeBox,
    FfiError, FfiErrorKind, FfiEstimatorBox, FfiOrchestraBox, FfiRoutingBox, FfiSample, FfiStep,
    FfiTask,
};
use crate::{
    Actions, Agent, AgentContext, AgentOutput, CallReward, ChatMessage, ComponentKind, DatasetSpec,
    Environment, Episode, Error, Estimator, Next, Orchestra, Parsed, Reset, Result, Role, Routing,
    Sample, Step, Task,
};

/// Which component of which plugin an object came from; every error it raises names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// Component kind.
    pub kind: ComponentKind,
    /// Component name.
    pub component: String,
    /// Plugin name.
    pub plugin: String,
    /// The library file.
    pub file: PathBuf,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} `{}` of plugin `{}` ({})",
            self.kind,
            self.component,
            self.plugin,
            self.file.display()
        )
    }
}

impl Origin {
    fn error(&self, call: &str, error: FfiError) -> Error {
        match error.kind {
            FfiErrorKind::Failed => Error::new(format!("{self}, {call}: {}", error.message)),
            FfiErrorKind::Panicked => {
                Error::new(format!("{self} panicked in {call}: {}", error.message))
            }
        }
    }

    fn check<T>(&self, call: &str, result: RResult<T, FfiError>) -> Result<T> {
        result.into_result().map_err(|e| self.error(call, e))
    }
}

/// An agent from a loaded plugin.
pub struct ForeignAgent {
    pub(crate) inner: FfiAgentBox,
    pub(crate) origin: Arc<Origin>,
}

impl ForeignAgent {
    /// Where it came from.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }
}

impl Agent for ForeignAgent {
    fn messages(&self, context: &AgentContext) -> Result<Vec<ChatMessage>> {
        let context = FfiAgentContext::from(context.clone());
        let messages = self
            .origin
            .check("messages", self.inner.messages(&context))?;
        Ok(messages.into_iter().map(ChatMessage::from).collect())
    }

    fn parse(&self, raw: &str) -> Result<Parsed> {
        self.origin
            .check("parse", self.inner.parse(RStr::from(raw)))
            .map(Parsed::from)
    }

    /// A plugin that fails to say is treated as declaring nothing; the error goes to the log.
    fn actions(&self) -> Actions {
        match self.origin.check("actions", self.inner.actions()) {
            Ok(actions) => actions.into(),
            Err(error) => {
                log::warn!("{error}");
                Actions::Text
            }
        }
    }
}

/// An orchestra from a loaded plugin.
pub struct ForeignOrchestra {
    pub(crate) inner: FfiOrchestraBox,
    pub(crate) origin: Arc<Origin>,
}

impl ForeignOrchestra {
    /// Where it came from.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }
}

impl Orchestra for ForeignOrchestra {
    fn roles(&self) -> Result<Vec<Role>> {
        let roles = self.origin.check("roles", self.inner.roles())?;
        Ok(roles.into_iter().map(Role::from).collect())
    }

    fn start(&self, task: &Task) -> Result<Box<dyn Routing>> {
        let inner = self
            .origin
            .check("start", self.inner.start(&FfiTask::from(task)))?;
        Ok(Box::new(ForeignRouting {
            inner,
            origin: self.origin.clone(),
        }))
    }
}

struct ForeignRouting {
    inner: FfiRoutingBox,
    origin: Arc<Origin>,
}

impl Routing for ForeignRouting {
    fn on_observation(&mut self, observation: &str) -> Result<()> {
        self.origin.check(
            "on_observation",
            self.inner.on_observation(RStr::from(observation)),
        )
    }

    fn next(&mut self) -> Result<Next> {
        self.origin.check("next", self.inner.next()).map(Next::from)
    }

    fn observe(&mut self, role: &str, output: &AgentOutput) -> Result<()> {
        self.origin.check(
            "observe",
            self.inner
                .observe(RStr::from(role), &FfiAgentOutput::from(output)),
        )
    }

    fn on_step(&mut self, step: &Step) -> Result<Vec<CallReward>> {
        let rewards = self
            .origin
            .check("on_step", self.inner.on_step(&FfiStep::from(step.clone())))?;
        Ok(rewards.into_iter().map(CallReward::from).collect())
    }
}

/// An environment from a loaded plugin.
pub struct ForeignEnvironment {
    pub(crate) inner: FfiEnvironmentBox,
    pub(crate) origin: Arc<Origin>,
}

impl ForeignEnvironment {
    /// Where it came from.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }
}

impl Environment for ForeignEnvironment {
    fn load_tasks(&self, spec: &DatasetSpec) -> Result<Vec<Task>> {
        let tasks = self.origin.check(
            "load_tasks",
            self.inner.load_tasks(&FfiDatasetSpec::from(spec)),
        )?;
        Ok(tasks.into_iter().map(Task::from).collect())
    }

    fn reset(&self, task: &Task) -> Result<Reset> {
        let reset = self
            .origin
            .check("reset", self.inner.reset(&FfiTask::from(task)))?;
        Ok(Reset {
            episode: Box::new(ForeignEpisode {
                inner: reset.episode,
                origin: self.origin.clone(),
            }),
            observation: reset.observation.into(),
            state_key: reset.state_key.into_option().map(String::from),
        })
    }
}

struct ForeignEpisode {
    inner: FfiEpisodeBox,
    origin: Arc<Origin>,
}

impl Episode for ForeignEpisode {
    fn step(&mut self, action: &str) -> Result<Step> {
        self.origin
            .check("step", self.inner.step(RStr::from(action)))
            .map(Step::from)
    }
}

/// An estimator from a loaded plugin.
pub struct ForeignEstimator {
    pub(crate) inner: FfiEstimatorBox,
    pub(crate) origin: Arc<Origin>,
}

impl ForeignEstimator {
    /// Where it came from.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }
}

impl Estimator for ForeignEstimator {
    fn advantages(&self, samples: &[Sample], rewards: &[f64]) -> Result<Vec<f64>> {
        let samples: Vec<FfiSample> = samples.iter().map(FfiSample::from).collect();
        let advantages = self.origin.check(
            "advantages",
            self.inner
                .advantages(RSlice::from_slice(&samples), RSlice::from_slice(rewards)),
        )?;
        Ok(advantages.into())
    }
}
