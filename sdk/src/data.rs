//! The plain data that crosses the plugin boundary, in author-facing (std) form.
//! `ffi` mirrors each type with a stable-ABI twin and converts between them.

use std::path::{Path, PathBuf};

/// One chat message; the host renders a list of them with the model's own chat template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

impl ChatMessage {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self {
            role: "system".into(),
            content: content.into(),
        }
    }
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self {
            role: "user".into(),
            content: content.into(),
        }
    }
    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self {
            role: "assistant".into(),
            content: content.into(),
        }
    }
}

/// One task from a dataset. `payload` is the environment's own data (e.g. the ground truth as
/// JSON); the host never reads it, only hands the task back to the environment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Task {
    /// Stable id, unique within the dataset.
    pub id: String,
    /// The question or instruction shown to the team.
    pub prompt: String,
    /// Where the task comes from (e.g. `gsm8k`); evaluation reports per source.
    pub data_source: String,
    /// Environment-defined data, opaque to the host.
    pub payload: String,
}

/// Which tasks to load: a path (or an environment-defined source such as `builtin:arithmetic`)
/// and a split.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DatasetSpec {
    /// As written in the run file.
    pub path: String,
    /// Split name, e.g. `train` or `test` (empty when not given).
    pub split: String,
    /// Read at most this many tasks (`None`: all).
    pub limit: Option<u64>,
    /// The run file's folder, against which relative paths resolve.
    pub base_dir: String,
}

impl DatasetSpec {
    /// The path as a file path: absolute as is, relative against the run file's folder.
    pub fn resolved_path(&self) -> PathBuf {
        let path = Path::new(&self.path);
        if path.is_absolute() || self.base_dir.is_empty() {
            path.to_owned()
        } else {
            Path::new(&self.base_dir).join(path)
        }
    }
}

/// The result of starting an episode: the first observation.
pub struct Reset {
    /// The per-episode state machine the host steps.
    pub episode: Box<dyn crate::Episode>,
    /// What the team sees first (usually the task's question).
    pub observation: String,
    /// A key of the state the episode starts in, for step-level grouping (GiGPO's anchor
    /// states): steps with equal keys count as the same state. `None`: the host uses the
    /// observation text as the key.
    pub state_key: Option<String>,
}

/// The result of one environment step.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Step {
    /// What the team sees next (e.g. retrieved documents); empty when done.
    pub observation: String,
    /// Reward for this step; the episode's reward is the sum over its steps. Finite: the host
    /// fails an episode whose step reward is NaN or infinite.
    pub reward: f64,
    /// Whether the episode has ended.
    pub done: bool,
    /// Named numbers for metrics (e.g. `exact_match`, `f1`); the trainer logs each one's batch
    /// mean as `env/NAME`.
    pub metrics: Vec<Metric>,
    /// A key of the state the next step starts in, for step-level grouping (GiGPO's anchor
    /// states): steps with equal keys count as the same state. `None`: the host uses the
    /// observation text as the key. Ignored when `done`.
    pub state_key: Option<String>,
}

/// A named number reported by an environment.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Metric {
    /// Metric name.
    pub name: String,
    /// Its value.
    pub value: f64,
}

/// One earlier contribution in the team's context.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Turn {
    /// Who produced it: an orchestra role, or `environment` for observations.
    pub role: String,
    /// The text (an agent's raw output or an observation).
    pub text: String,
}

/// What an agent sees when it is asked to act.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AgentContext {
    /// The task's question (or instruction).
    pub question: String,
    /// The latest observation of the environment.
    pub observation: String,
    /// Earlier outputs of the team and observations, oldest first.
    pub history: Vec<Turn>,
    /// Index of the environment step (0-based).
    pub step: u32,
    /// Orchestra-defined extra text (e.g. a hint on how many turns remain).
    pub note: String,
}

impl AgentContext {
    /// The team's earlier outputs as Dr. MAS shows them to an agent: for each turn of `history`,
    /// oldest first, `The output of "<role>": <text>` (the text trimmed) and a blank line.
    ///
    /// ```
    /// use drmas_sdk::{AgentContext, Turn};
    ///
    /// let context = AgentContext {
    ///     history: vec![Turn { role: "Solver".into(), text: " 4\n".into() }],
    ///     ..AgentContext::default()
    /// };
    /// assert_eq!(context.team_context(), "The output of \"Solver\": 4\n\n");
    /// ```
    pub fn team_context(&self) -> String {
        self.history
            .iter()
            .map(|turn| format!("The output of \"{}\": {}\n\n", turn.role, turn.text.trim()))
            .collect()
    }
}

/// An agent's parsed output.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Parsed {
    /// The action extracted from the raw text (e.g. a search query, a verdict, a solution).
    pub action: String,
    /// Whether the raw text had the required format; invalid calls can be penalised.
    pub valid: bool,
}

/// An agent call's outcome, as the orchestra is told it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AgentOutput {
    /// What the model wrote.
    pub raw: String,
    /// The agent's parse of it.
    pub action: String,
    /// Whether it had the required format.
    pub valid: bool,
}

/// The orchestra's next move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Ask the agent filling `role` to act on `context`.
    Act {
        /// The orchestra role to call.
        role: String,
        /// What the agent sees.
        context: AgentContext,
    },
    /// End this environment step by sending `action` to the environment.
    Submit {
        /// The team's action.
        action: String,
    },
}

/// A reward for one agent call of an episode, given by its orchestra
/// ([`crate::Routing::on_step`]) next to the episode reward every call gets.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CallReward {
    /// Which call: its index among the episode's agent calls, counted from 0 in the order
    /// [`crate::Routing::observe`] received them.
    pub call: u32,
    /// The reward (finite).
    pub reward: f64,
}

/// One agent call of a training batch, as an [`crate::Estimator`] sees it (the host's built-in
/// estimators read the same record).
///
/// Every episode of a batch is one of `group_size` rollouts of its prompt; each agent call in it
/// is one sample. An estimator groups samples by these keys and turns their rewards into
/// advantages.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Sample {
    /// Prompt group: every episode rolled out from the same prompt shares it.
    pub uid: u32,
    /// Episode id, unique across the batch: every call of one episode shares it.
    pub trajectory: u32,
    /// Index of the calling agent in the run file's `[[agents]]` list.
    pub agent: u16,
    /// Index of the model worker group that generated the call.
    pub worker_group: u16,
    /// The episode's reward (the sum of its step rewards), before the invalid-action penalty.
    pub reward: f64,
    /// The environment step the call was made in (0 for the first).
    pub step: u16,
    /// The reward of that environment step alone.
    pub step_reward: f64,
    /// The call's own reward, when its orchestra gave it one ([`crate::Routing::on_step`]): a
    /// verifier paid for a correct verdict, a search call for finding the gold passage. When
    /// given, the host's penalised reward of the call (`rewards[i]`) starts from it instead of
    /// `reward`.
    pub call_reward: Option<f64>,
    /// A key of the environment state the step started from: a hash of the environment's state
    /// key when it gave one, else of the observation. Equal keys mean the same state, for
    /// step-level groups.
    pub state: u64,
    /// Whether the agent's output had a valid format (invalid calls are penalised).
    pub valid: bool,
    /// A copy that only pads the batch to a size the trainer needs: it must not enter any
    /// statistic, and its advantage must be 0.
    pub padding: bool,
}

/// The four kinds of component a plugin can offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ComponentKind {
    /// An [`crate::Agent`].
    Agent,
    /// An [`crate::Orchestra`].
    Orchestra,
    /// An [`crate::Environment`].
    Environment,
    /// An [`crate::Estimator`].
    Estimator,
}

impl ComponentKind {
    /// Lower-case name, as used in messages and listings.
    pub fn as_str(self) -> &'static str {
        match self {
            ComponentKind::Agent => "agent",
            ComponentKind::Orchestra => "orchestra",
            ComponentKind::Environment => "environment",
            ComponentKind::Estimator => "estimator",
        }
    }
}

impl std::fmt::Display for ComponentKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a plugin lists about one component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentInfo {
    /// Kind of component.
    pub kind: ComponentKind,
    /// Registered name (what run files say).
    pub name: String,
    /// One-line description.
    pub description: String,
    /// The plugin crate's version.
    pub version: String,
}
