//! The author-facing traits: plain Rust, no ABI types. The host talks to every component
//! through these same traits, whether it was loaded from a library or linked in.

use crate::{
    Actions, AgentContext, AgentOutput, CallReward, ChatMessage, DatasetSpec, Next, Params, Parsed,
    Reset, Result, Role, Sample, Step, Task,
};

/// Construction of an exported component from its run-file config (TOML text).
pub trait Component: Sized + Send + Sync + 'static {
    /// Registered name, as run files write it (e.g. `Solver Agent`).
    const NAME: &'static str;
    /// One line saying what it does, shown by `drmas-host plugins`.
    const DESCRIPTION: &'static str;
    /// Builds the component from its run-file `params`: parse them with [`Params::parse`] into
    /// a strict struct, and resolve relative paths with [`Params::resolve`]. An `Err` stops the
    /// run before any work, naming the component and the run file.
    fn from_config(params: &Params) -> Result<Self>;
}

/// A role in a team: turns the team's context into chat messages and parses the model's answer.
pub trait Agent: Send + Sync {
    /// The chat messages for one call, rendered by the host with the model's chat template.
    /// A final `assistant` message is a response prefix: the model continues it (HF
    /// `continue_final_message`), e.g. `<verify>` so a small model only picks the verdict.
    fn messages(&self, context: &AgentContext) -> Result<Vec<ChatMessage>>;
    /// Extracts the action from the model's raw output (after the response prefix, if the
    /// messages ended with one) and says whether its format was valid.
    fn parse(&self, raw: &str) -> Result<Parsed>;
    /// The actions [`Agent::parse`] can return, declared so that `drmas-host check` warns when
    /// they cannot meet the contract of the role the run file puts the agent in. Optional: the
    /// default, [`Actions::Text`], declares nothing.
    fn actions(&self) -> Actions {
        Actions::Text
    }
}

/// A multi-agent workflow: creates one [`Routing`] state machine per episode.
pub trait Orchestra: Send + Sync {
    /// The roles it calls, each with its contract: the run file must fill each with an agent,
    /// and an action outside a role's [`Role::actions`] makes that call invalid (penalised and
    /// counted as `invalid_rate/ROLE`); the routing still receives it, marked invalid.
    fn roles(&self) -> Result<Vec<Role>>;
    /// Starts routing one episode of `task`.
    fn start(&self, task: &Task) -> Result<Box<dyn Routing>>;
}

/// One episode's routing. Per environment step the host calls [`Routing::on_observation`], then
/// [`Routing::next`] until it returns [`Next::Submit`], reporting each agent's output with
/// [`Routing::observe`]. Sequential, hierarchical and conditional workflows are all this loop.
pub trait Routing: Send {
    /// The environment's observation at the start of a step (the question on the first step).
    fn on_observation(&mut self, observation: &str) -> Result<()>;
    /// The next agent call, or the action that ends the step.
    fn next(&mut self) -> Result<Next>;
    /// The output of the agent that was just called for `role`.
    fn observe(&mut self, role: &str, output: &AgentOutput) -> Result<()>;
    /// The environment's answer to the action just submitted (its reward, metrics, and whether
    /// the episode is done), before the next [`Routing::on_observation`]. Returns rewards for
    /// single calls of the episode so far (see [`CallReward`]); the default gives none, so every
    /// call is scored by the episode reward alone.
    fn on_step(&mut self, step: &Step) -> Result<Vec<CallReward>> {
        let _ = step;
        Ok(Vec::new())
    }
}

/// A task source and scorer with gym-like episodes.
pub trait Environment: Send + Sync {
    /// Loads the tasks a dataset spec names (a file, or a built-in source).
    fn load_tasks(&self, spec: &DatasetSpec) -> Result<Vec<Task>>;
    /// Starts an episode of `task`.
    fn reset(&self, task: &Task) -> Result<Reset>;
}

/// One running episode of an environment.
pub trait Episode: Send {
    /// Applies the team's action; returns the next observation, the reward and whether it is done.
    fn step(&mut self, action: &str) -> Result<Step>;
}

/// An advantage estimator: turns the rewards of a training batch into one advantage per agent
/// call. The run file names it as `[algorithm] estimator = "NAME"` and its `[algorithm.params]`
/// table is the config text of [`Component::from_config`].
///
/// The host calls it once per training iteration, from any thread; keep it a pure function of
/// its input. The host checks the answer: one finite advantage per sample, 0 for padding
/// samples; anything else stops the run with a message naming the estimator and its plugin.
pub trait Estimator: Send + Sync {
    /// One advantage per sample, in the order of `samples`. `rewards[i]` is the reward of
    /// `samples[i]` after the invalid-action penalty and any reward shaping; it has the same
    /// length as `samples`.
    fn advantages(&self, samples: &[Sample], rewards: &[f64]) -> Result<Vec<f64>>;
}
