//! One episode's state between rounds: its routing state machine, its environment episode and
//! the agent call it is waiting for.

use anyhow::Context;
use drmas_sdk::{
    AgentContext, AgentOutput, CallReward, Environment, Episode, Metric, Next, Orchestra,
    PluginError, Routing, Task,
};

use super::failure::BrokenEpisode;
use super::TeamMember;
use crate::plugins::{Hosted, HostedSession};

/// More agent calls than this in one episode means a routing that never submits.
const MAX_CALLS_PER_EPISODE: usize = 256;
/// More environment steps than this in one episode means an environment that never ends it.
const MAX_STEPS_PER_EPISODE: u32 = 256;

/// How an episode ended.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EpisodeOutcome {
    /// The environment's reward for each step, in order.
    pub step_rewards: Vec<f64>,
    /// A key of the state each step started from — a hash of the environment's state key when
    /// it gave one, else of the observation the team acted on (the reset observation for step
    /// 0) — so steps of different episodes that met the same state can be compared (GiGPO's
    /// anchor states). One per step begun.
    pub step_states: Vec<u64>,
    /// The text each step's state key was made from: the environment's state key, else the
    /// observation (GiGPO's similarity-based anchor states compare them). One per step begun.
    pub step_anchors: Vec<String>,
    /// The rewards the orchestra gave single calls, by the call's index in the episode
    /// (`None`: the call has only the episode reward).
    pub call_rewards: Vec<Option<f64>>,
    /// The environment's metrics, the latest value of each name.
    pub metrics: Vec<Metric>,
    /// Environment steps taken.
    pub steps: u32,
    /// Agent calls made.
    pub calls: usize,
    /// Why the episode failed, when a plugin call of it failed or it broke an episode rule (the
    /// error with its plugin, component, method and task); its steps are then not recorded and
    /// its return is 0.
    pub failure: Option<String>,
}

impl EpisodeOutcome {
    /// The outcome of an episode that failed with `message`.
    pub(super) fn failed(message: String) -> Self {
        Self {
            failure: Some(message),
            ..Self::default()
        }
    }

    /// Whether the episode failed (see [`Self::failure`]).
    pub fn is_failed(&self) -> bool {
        self.failure.is_some()
    }

    /// The episode's return: its step rewards summed in order.
    pub fn reward(&self) -> f64 {
        self.step_rewards
            .iter()
            .fold(0.0, |sum, reward| sum + reward)
    }

    /// The reward of step `step`; 0 for a step the episode never finished.
    pub fn step_reward(&self, step: usize) -> f64 {
        self.step_rewards.get(step).copied().unwrap_or(0.0)
    }

    /// The state key of step `step` (see [`Self::step_states`]); 0 for a step never begun.
    pub fn step_state(&self, step: usize) -> u64 {
        self.step_states.get(step).copied().unwrap_or(0)
    }

    /// The anchor text of step `step` (see [`Self::step_anchors`]); empty for a step never
    /// begun.
    pub fn step_anchor(&self, step: usize) -> &str {
        self.step_anchors.get(step).map_or("", String::as_str)
    }

    /// The reward the orchestra gave the episode's call `index` on its own, if any.
    pub fn call_reward(&self, index: usize) -> Option<f64> {
        self.call_rewards.get(index).copied().flatten()
    }

    /// Records the orchestra's rewards for single calls, checking each names a call made so
    /// far and is finite.
    fn record_call_rewards(&mut self, rewards: Vec<CallReward>) -> anyhow::Result<()> {
        for CallReward { call, reward } in rewards {
            let index = call as usize;
            if index >= self.calls {
                return Err(BrokenEpisode(format!(
                    "the orchestra gave call {call} its own reward, but the episode has made {} \
                     calls (calls count from 0 in the order `observe` received them)",
                    self.calls
                ))
                .into());
            }
            if !reward.is_finite() {
                return Err(BrokenEpisode(format!(
                    "the orchestra gave call {call} the reward {reward}; rewards must be finite"
                ))
                .into());
            }
            if self.call_rewards.len() <= index {
                self.call_rewards.resize(index + 1, None);
            }
            self.call_rewards[index] = Some(reward);
        }
        Ok(())
    }
}

/// The key of a state: the environment's own key when it gave one, else its observation text.
/// Equal inputs give equal keys within a run; a given key never equals an observation's.
fn state_key(key: Option<&str>, observation: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    match key {
        Some(key) => ("state key", key).hash(&mut hasher),
        None => observation.hash(&mut hasher),
    }
    hasher.finish()
}

/// The text a step's state is known by: the environment's state key, else the observation.
fn anchor(key: Option<&str>, observation: &str) -> String {
    key.unwrap_or(observation).to_owned()
}

/// A running episode.
pub(super) struct EpisodeState {
    routing: HostedSession<dyn Routing>,
    episode: HostedSession<dyn Episode>,
    /// The call the episode waits for: (team member index, what it sees).
    pending: Option<(usize, AgentContext)>,
    done: bool,
    outcome: EpisodeOutcome,
}

impl EpisodeState {
    /// Resets the environment on `task` and starts the orchestra's routing on its first
    /// observation.
    pub fn start(
        orchestra: &Hosted<dyn Orchestra>,
        environment: &Hosted<dyn Environment>,
        task: &Task,
    ) -> anyhow::Result<Self> {
        let owned = task.clone();
        let reset = environment
            .call("reset", move |environment| environment.reset(&owned))?
            .map_err(PluginError::from)
            .with_context(|| format!("resetting the environment on task `{}`", task.id))?;
        let owned = task.clone();
        let routing = orchestra
            .call("start", move |orchestra| orchestra.start(&owned))?
            .map_err(PluginError::from)
            .with_context(|| format!("starting the orchestra on task `{}`", task.id))?;
        let mut routing = orchestra.session(routing);
        let observation = reset.observation.clone();
        routing
            .call("on_observation", move |routing| {
                routing.on_observation(&observation)
            })?
            .map_err(PluginError::from)?;
        Ok(Self {
            routing,
            episode: environment.session(reset.episode),
            pending: None,
            done: false,
            outcome: EpisodeOutcome {
                step_states: vec![state_key(reset.state_key.as_deref(), &reset.observation)],
                step_anchors: vec![anchor(reset.state_key.as_deref(), &reset.observation)],
                ..EpisodeOutcome::default()
            },
        })
    }

    /// Runs the routing until it asks for an agent call or the environment ends the episode.
    pub fn advance(&mut self, team: &[TeamMember]) -> anyhow::Result<()> {
        while !self.done && self.pending.is_none() {
            match self
                .routing
                .call("next", |routing| routing.next())?
                .map_err(PluginError::from)?
            {
                Next::Act { role, context } => {
                    let Some(member) = team.iter().position(|m| m.role == role) else {
                        let roles: Vec<&str> = team.iter().map(|m| m.role.as_str()).collect();
                        return Err(BrokenEpisode(format!(
                            "the orchestra asked for role `{role}`, which no agent fills (roles: [{}])",
                            roles.join(", ")
                        ))
                        .into());
                    };
                    if self.outcome.calls >= MAX_CALLS_PER_EPISODE {
                        return Err(BrokenEpisode(format!(
                            "the orchestra made {MAX_CALLS_PER_EPISODE} agent calls in one episode \
                             without ending it; does its routing ever submit?"
                        ))
                        .into());
                    }
                    self.pending = Some((member, context));
                }
                Next::Submit { action } => {
                    let step = self
                        .episode
                        .call("step", move |episode| episode.step(&action))?
                        .map_err(PluginError::from)?;
                    if !step.reward.is_finite() {
                        return Err(BrokenEpisode(format!(
                            "{} gave step {} the reward {}; rewards must be finite",
                            self.episode.origin(),
                            self.outcome.steps + 1,
                            step.reward
                        ))
                        .into());
                    }
                    self.outcome.steps += 1;
                    self.outcome.step_rewards.push(step.reward);
                    let seen = step.clone();
                    let rewards = self
                        .routing
                        .call("on_step", move |routing| routing.on_step(&seen))?
                        .map_err(PluginError::from)?;
                    self.outcome.record_call_rewards(rewards)?;
                    for metric in step.metrics {
                        match self
                            .outcome
                            .metrics
                            .iter_mut()
                            .find(|m| m.name == metric.name)
                        {
                            Some(known) => known.value = metric.value,
                            None => self.outcome.metrics.push(metric),
                        }
                    }
                    if step.done {
                        self.done = true;
                    } else if self.outcome.steps >= MAX_STEPS_PER_EPISODE {
                        return Err(BrokenEpisode(format!(
                            "the environment took {MAX_STEPS_PER_EPISODE} steps in one episode \
                             without ending it; does it ever return done = true?"
                        ))
                        .into());
                    } else {
                        self.outcome
                            .step_states
                            .push(state_key(step.state_key.as_deref(), &step.observation));
                        self.outcome
                            .step_anchors
                            .push(anchor(step.state_key.as_deref(), &step.observation));
                        let observation = step.observation;
                        self.routing
                            .call("on_observation", move |routing| {
                                routing.on_observation(&observation)
                            })?
                            .map_err(PluginError::from)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The environment step under way (0 before the first submission).
    pub fn step(&self) -> usize {
        self.outcome.steps as usize
    }

    /// The call the episode waits for, if any.
    pub fn pending(&self) -> Option<&(usize, AgentContext)> {
        self.pending.as_ref()
    }

    /// Agent calls delivered so far: the index the next call gets in the episode.
    pub fn calls(&self) -> usize {
        self.outcome.calls
    }

    /// Hands the pending call's output back to the routing.
    pub fn deliver(&mut self, team: &[TeamMember], output: &AgentOutput) -> anyhow::Result<()> {
        let (member, _) = self
            .pending
            .take()
            .context("an agent output was delivered to an episode that asked for none")?;
        self.outcome.calls += 1;
        let (role, output) = (team[member].role.clone(), output.clone());
        self.routing
            .call("observe", move |routing| routing.observe(&role, &output))?
            .map_err(PluginError::from)?;
        Ok(())
    }

    /// Whether the environment ended the episode.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The outcome so far (final once [`Self::is_done`]).
    pub fn into_outcome(self) -> EpisodeOutcome {
        self.outcome
    }
}

#[cfg(test)]
mod tests {
    use drmas_sdk::CallReward;

    use super::EpisodeOutcome;

    #[test]
    fn call_rewards_land_on_their_calls_and_bad_ones_are_refused() {
        let mut outcome = EpisodeOutcome {
            calls: 3,
            ..EpisodeOutcome::default()
        };
        outcome
            .record_call_rewards(vec![CallReward {
                call: 1,
                reward: 0.5,
            }])
            .expect("a call made so far");
        assert_eq!(
            [0, 1, 2, 3].map(|call| outcome.call_reward(call)),
            [None, Some(0.5), None, None]
        );
        let later = outcome
            .record_call_rewards(vec![CallReward {
                call: 3,
                reward: 1.0,
            }])
            .expect_err("call 3 is not made yet");
        assert!(
            later
                .to_string()
                .contains("gave call 3 its own reward, but the episode has made 3"),
            "{later}"
        );
        let nan = outcome
            .record_call_rewards(vec![CallReward {
                call: 0,
                reward: f64::NAN,
            }])
            .expect_err("not finite");
        assert!(nan.to_string().contains("rewards must be finite"), "{nan}");
    }
}
