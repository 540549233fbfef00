//! Stable-ABI twins of the data in `crate::data`, and conversions both ways. Each twin has the
//! fields of its std counterpart, where they are documented.

#![allow(missing_docs)]

use abi_stable::std_types::{ROption, RString, RVec};
use abi_stable::StableAbi;

use crate::{
    Actions, AgentContext, AgentOutput, CallReward, ChatMessage, ComponentInfo, ComponentKind,
    DatasetSpec, Metric, Next, Params, Parsed, Role, Sample, Step, Task, Turn,
};

/// How a call into a plugin failed.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub enum FfiErrorKind {
    /// The component returned an error.
    Failed,
    /// The component panicked; the panic was caught inside the plugin.
    Panicked,
}

/// An error crossing the boundary.
#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct FfiError {
    /// Returned or panicked.
    pub kind: FfiErrorKind,
    /// The message.
    pub message: RString,
}

impl FfiError {
    pub(crate) fn failed(message: &str) -> Self {
        Self {
            kind: FfiErrorKind::Failed,
            message: message.into(),
        }
    }
    pub(crate) fn panicked(message: &str) -> Self {
        Self {
            kind: FfiErrorKind::Panicked,
            message: message.into(),
        }
    }
}

#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub enum FfiKind {
    Agent,
    Orchestra,
    Environment,
    Estimator,
}

impl From<ComponentKind> for FfiKind {
    fn from(kind: ComponentKind) -> Self {
        match kind {
            ComponentKind::Agent => FfiKind::Agent,
            ComponentKind::Orchestra => FfiKind::Orchestra,
            ComponentKind::Environment => FfiKind::Environment,
            ComponentKind::Estimator => FfiKind::Estimator,
        }
    }
}

impl From<FfiKind> for ComponentKind {
    fn from(kind: FfiKind) -> Self {
        match kind {
            FfiKind::Agent => ComponentKind::Agent,
            FfiKind::Orchestra => ComponentKind::Orchestra,
            FfiKind::Environment => ComponentKind::Environment,
            FfiKind::Estimator => ComponentKind::Estimator,
        }
    }
}

#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct FfiComponentInfo {
    pub kind: FfiKind,
    pub name: RString,
    pub description: RString,
    pub version: RString,
}

impl From<&FfiComponentInfo> for ComponentInfo {
    fn from(info: &FfiComponentInfo) -> Self {
        Self {
            kind: info.kind.into(),
            name: info.name.to_string(),
            description: info.description.to_string(),
            version: info.version.to_string(),
        }
    }
}

#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct FfiPluginInfo {
    pub name: RString,
    pub version: RString,
    pub sdk_version: RString,
    pub components: RVec<FfiComponentInfo>,
}

#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct FfiChatMessage {
    pub role: RString,
    pub content: RString,
}

impl From<ChatMessage> for FfiChatMessage {
    fn from(m: ChatMessage) -> Self {
        Self {
            role: m.role.into(),
            content: m.content.into(),
        }
    }
}

impl From<FfiChatMessage> for ChatMessage {
    fn from(m: FfiChatMessage) -> Self {
        Self {
            role: m.role.into(),
            content: m.content.into(),
        }
    }
}

#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct FfiTask {
    pub id: RString,
    pub prompt: RString,
    pub data_source: RString,
    pub payload: RString,
}

impl From<&Task> for FfiTask {
    fn from(t: &Task) -> Self {
        Self {
            id: t.id.as_str().into(),
            prompt: t.prompt.as_str().into(),
            data_source: t.data_source.as_str().into(),
            payload: t.payload.as_str().into(),
        }
    }
}

impl From<FfiTask> for Task {
    fn from(t: FfiTask) -> Self {
        Self {
            id: t.id.into(),
            prompt: t.prompt.into(),
            data_source: t.data_source.into(),
            payload: t.payload.into(),
        }
    }
}

#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct FfiDatasetSpec {
    pub path: RString,
    pub split: RString,
    pub limit: ROption<u64>,
    pub base_dir: RString,
}

impl From<&DatasetSpec> for FfiDatasetSpec {
    fn from(s: &DatasetSpec) -> Self {
        Self {
            path: s.path.as_str().into(),
            split: s.split.as_str().into(),
            limit: s.limit.into(),
            base_dir: s.base_dir.as_str().into(),
        }
    }
}

impl From<&FfiDatasetSpec> for DatasetSpec {
    fn from(s: &FfiDatasetSpec) -> Self {
        Self {
            path: s.path.to_string(),
            split: s.split.to_string(),
            limit: s.limit.into_option(),
            base_dir: s.base_dir.to_string(),
        }
    }
}

#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct FfiMetric {
    pub name: RString,
    pub value: f64,
}

#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct FfiStep {
    pub observation: RString,
    pub reward: f64,
    pub done: bool,
    pub metrics: RVec<FfiMetric>,
    pub state_key: ROption<RString>,
}

impl From<Step> for FfiStep {
    fn from(s: Step) -> Self {
        Self {
            observation: s.observation.into(),
            reward: s.reward,
            done: s.done,
            metrics: s
                .metrics
                .into_iter()
                .map(|m| FfiMetric {
                    name: m.name.into(),
                    value: m.value,
                })
                .collect(),
            state_key: s.state_key.map(RString::from).into(),
        }
    }
}

impl From<FfiStep> for Step {
    fn from(s: FfiStep) -> Self {
        Self {
            observation: s.observation.into(),
            reward: s.reward,
            done: s.done,
            metrics: s
                .metrics
                .into_iter()
                .map(|m| Metric {
                    name: m.name.into(),
                    value: m.value,
                })
                .collect(),
            state_key: s.state_key.into_option().map(String::from),
        }
    }
}

#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct FfiTurn {
    pub role: RString,
    pub text: RString,
}

#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct FfiAgentContext {
    pub question: RString,
    pub observation: RString,
    pub history: RVec<FfiTurn>,
    pub step: u32,
    pub note: RString,
}

impl From<AgentContext> for FfiAgentContext {
    fn from(c: AgentContext) -> Self {
        Self {
            question: c.question.into(),
            observation: c.observation.into(),
            history: c
                .history
                .into_iter()
                .map(|t| FfiTurn {
                    role: t.role.into(),
                    text: t.text.into(),
                })
                .collect(),
            step: c.step,
            note: c.note.into(),
        }
    }
}

impl From<&FfiAgentContext> for AgentContext {
    fn from(c: &FfiAgentContext) -> Self {
        Self {
            question: c.question.to_string(),
            observation: c.observation.to_string(),
            history: c
                .history
                .iter()
                .map(|t| Turn {
                    role: t.role.to_string(),
                    text: t.text.to_string(),
                })
                .collect(),
            step: c.step,
            note: c.note.to_string(),
        }
    }
}

#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct FfiParsed {
    pub action: RString,
    pub valid: bool,
}

impl From<Parsed> for FfiParsed {
    fn from(p: Parsed) -> Self {
        Self {
            action: p.action.into(),
            valid: p.valid,
        }
    }
}

impl From<FfiParsed> for Parsed {
    fn from(p: FfiParsed) -> Self {
        Self {
            action: p.action.into(),
            valid: p.valid,
        }
    }
}

#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct FfiAgentOutput {
    pub raw: RString,
    pub action: RString,
    pub valid: bool,
}

impl From<&AgentOutput> for FfiAgentOutput {
    fn from(o: &AgentOutput) -> Self {
        Self {
            raw: o.raw.as_str().into(),
            action: o.action.as_str().into(),
            valid: o.valid,
        }
    }
}

impl From<&FfiAgentOutput> for AgentOutput {
    fn from(o: &FfiAgentOutput) -> Self {
        Self {
            raw: o.raw.to_string(),
            action: o.action.to_string(),
            valid: o.valid,
        }
    }
}

#[repr(u8)]
#[derive(StableAbi, Debug, Clone)]
pub enum FfiNext {
    Act {
        role: RString,
        context: FfiAgentContext,
    },
    Submit {
        action: RString,
    },
}

impl From<Next> for FfiNext {
    fn from(n: Next) -> Self {
        match n {
            Next::Act { role, context } => FfiNext::Act {
                role: role.into(),
                context: context.into(),
            },
            Next::Submit { action } => FfiNext::Submit {
                action: action.into(),
            },
        }
    }
}

impl From<FfiNext> for Next {
    fn from(n: FfiNext) -> Self {
        match n {
            FfiNext::Act { role, context } => Next::Act {
                role: role.into(),
                context: (&context).into(),
            },
            FfiNext::Submit { action } => Next::Submit {
                action: action.into(),
            },
        }
    }
}

#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy)]
pub struct FfiSample {
    pub uid: u32,
    pub trajectory: u32,
    pub agent: u16,
    pub worker_group: u16,
    pub reward: f64,
    pub step: u16,
    pub step_reward: f64,
    pub call_reward: ROption<f64>,
    pub state: u64,
    pub valid: bool,
    pub padding: bool,
}

impl From<&Sample> for FfiSample {
    fn from(s: &Sample) -> Self {
        Self {
            uid: s.uid,
            trajectory: s.trajectory,
            agent: s.agent,
            worker_group: s.worker_group,
            reward: s.reward,
            step: s.step,
            step_reward: s.step_reward,
            call_reward: s.call_reward.into(),
            state: s.state,
            valid: s.valid,
            padding: s.padding,
        }
    }
}

impl From<&FfiSample> for Sample {
    fn from(s: &FfiSample) -> Self {
        Self {
            uid: s.uid,
            trajectory: s.trajectory,
            agent: s.agent,
            worker_group: s.worker_group,
            reward: s.reward,
            step: s.step,
            step_reward: s.step_reward,
            call_reward: s.call_reward.into_option(),
            state: s.state,
            valid: s.valid,
            padding: s.padding,
        }
    }
}

#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct FfiParams {
    pub text: RString,
    pub base_dir: RString,
}

impl From<&Params> for FfiParams {
    fn from(p: &Params) -> Self {
        Self {
            text: p.text().into(),
            base_dir: p.base_dir().to_string_lossy().as_ref().into(),
        }
    }
}

impl From<&FfiParams> for Params {
    fn from(p: &FfiParams) -> Self {
        Params::new(p.text.as_str()).with_base_dir(p.base_dir.as_str())
    }
}

#[repr(u8)]
#[derive(StableAbi, Debug, Clone)]
pub enum FfiActions {
    Text,
    OneOf(RVec<RString>),
}

impl From<Actions> for FfiActions {
    fn from(a: Actions) -> Self {
        match a {
            Actions::Text => FfiActions::Text,
            Actions::OneOf(actions) => {
                FfiActions::OneOf(actions.into_iter().map(RString::from).collect())
            }
        }
    }
}

impl From<FfiActions> for Actions {
    fn from(a: FfiActions) -> Self {
        match a {
            FfiActions::Text => Actions::Text,
            FfiActions::OneOf(actions) => {
                Actions::OneOf(actions.into_iter().map(String::from).collect())
            }
        }
    }
}

#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct FfiRole {
    pub name: RString,
    pub actions: FfiActions,
}

impl From<Role> for FfiRole {
    fn from(r: Role) -> Self {
        Self {
            name: r.name.into(),
            actions: r.actions.into(),
        }
    }
}

impl From<FfiRole> for Role {
    fn from(r: FfiRole) -> Self {
        Self {
            name: r.name.into(),
            actions: r.actions.into(),
        }
    }
}

#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy)]
pub struct FfiCallReward {
    pub call: u32,
    pub reward: f64,
}

impl From<CallReward> for FfiCallReward {
    fn from(r: CallReward) -> Self {
        Self {
            call: r.call,
            reward: r.reward,
        }
    }
}

impl From<FfiCallReward> for CallReward {
    fn from(r: FfiCallReward) -> Self {
        Self {
            call: r.call,
            reward: r.reward,
        }
    }
}
