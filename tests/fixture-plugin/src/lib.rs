//! A plugin for the end-to-end tests of the plugin boundary: agents, orchestras, environments
//! and estimators that behave normally on ordinary input and fail on request, so tests can check
//! that errors and panics inside a loaded library come back as errors naming the component.

use std::collections::HashMap;

use drmas_sdk::{
    Actions, Agent, AgentContext, AgentOutput, CallReward, ChatMessage, Component, DatasetSpec,
    Environment, Episode, Error, Estimator, Next, Orchestra, Params, Parsed, Reset, Result, Role,
    Routing, Sample, Step, Task,
};
use serde::Deserialize;

/// Shouts the observation back; panics when asked to parse `panic`.
pub struct ShoutAgent {
    prefix: String,
    response_prefix: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShoutConfig {
    #[serde(default = "default_prefix")]
    prefix: String,
    /// A final assistant message the model continues.
    #[serde(default)]
    response_prefix: Option<String>,
}

fn default_prefix() -> String {
    "Shout:".into()
}

impl Component for ShoutAgent {
    const NAME: &'static str = "Shout Agent";
    const DESCRIPTION: &'static str = "upper-cases the observation (panics on `panic`)";
    fn from_config(params: &Params) -> Result<Self> {
        let config: ShoutConfig = params.parse()?;
        Ok(Self {
            prefix: config.prefix,
            response_prefix: config.response_prefix,
        })
    }
}

impl Agent for ShoutAgent {
    fn messages(&self, context: &AgentContext) -> Result<Vec<ChatMessage>> {
        drmas_sdk::log::info!("building messages for step {}", context.step);
        let mut messages = vec![
            ChatMessage::system("You shout."),
            ChatMessage::user(format!("{} {}", self.prefix, context.observation)),
        ];
        messages.extend(self.response_prefix.as_deref().map(ChatMessage::assistant));
        Ok(messages)
    }

    fn parse(&self, raw: &str) -> Result<Parsed> {
        match raw {
            "panic" => panic!("asked to panic"),
            "error" => Err(Error::new("asked to fail")),
            _ => Ok(Parsed {
                action: raw.to_uppercase(),
                valid: raw.chars().all(|c| !c.is_lowercase()),
            }),
        }
    }
}

/// One call to the `speaker` role per step, then submits its action.
pub struct RelayOrchestra;

impl Component for RelayOrchestra {
    const NAME: &'static str = "relay";
    const DESCRIPTION: &'static str = "calls `speaker` once per step and submits its action";
    fn from_config(_params: &Params) -> Result<Self> {
        Ok(Self)
    }
}

impl Orchestra for RelayOrchestra {
    fn roles(&self) -> Result<Vec<Role>> {
        Ok(vec![Role::text("speaker")])
    }

    fn start(&self, task: &Task) -> Result<Box<dyn Routing>> {
        Ok(Box::new(Relay {
            question: task.prompt.clone(),
            observation: String::new(),
            action: None,
        }))
    }
}

struct Relay {
    question: String,
    observation: String,
    action: Option<String>,
}

impl Routing for Relay {
    fn on_observation(&mut self, observation: &str) -> Result<()> {
        self.observation = observation.to_owned();
        self.action = None;
        Ok(())
    }

    fn next(&mut self) -> Result<Next> {
        Ok(match self.action.take() {
            Some(action) => Next::Submit { action },
            None => Next::Act {
                role: "speaker".into(),
                context: AgentContext {
                    question: self.question.clone(),
                    observation: self.observation.clone(),
                    ..AgentContext::default()
                },
            },
        })
    }

    fn observe(&mut self, _role: &str, output: &AgentOutput) -> Result<()> {
        self.action = Some(output.action.clone());
        Ok(())
    }
}

/// Tasks are words; the reward is 1 when the action is the word upper-cased. Refuses to build
/// with `fail = true` in its config.
pub struct WordsEnvironment;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WordsConfig {
    #[serde(default)]
    fail: bool,
}

impl Component for WordsEnvironment {
    const NAME: &'static str = "words";
    const DESCRIPTION: &'static str = "reward 1 for upper-casing the word";
    fn from_config(params: &Params) -> Result<Self> {
        let config: WordsConfig = params.parse()?;
        if config.fail {
            return Err(Error::new("configured to fail"));
        }
        Ok(Self)
    }
}

impl Environment for WordsEnvironment {
    fn load_tasks(&self, spec: &DatasetSpec) -> Result<Vec<Task>> {
        let words = spec
            .path
            .split(',')
            .map(str::trim)
            .filter(|w| !w.is_empty());
        Ok(words
            .enumerate()
            .map(|(i, w)| Task {
                id: i.to_string(),
                prompt: w.into(),
                data_source: "words".into(),
                payload: w.into(),
            })
            .collect())
    }

    fn reset(&self, task: &Task) -> Result<Reset> {
        Ok(Reset {
            episode: Box::new(WordEpisode {
                word: task.payload.clone(),
            }),
            observation: task.prompt.clone(),
            state_key: None,
        })
    }
}

struct WordEpisode {
    word: String,
}

impl Episode for WordEpisode {
    fn step(&mut self, action: &str) -> Result<Step> {
        let right = action == self.word.to_uppercase();
        Ok(Step {
            observation: String::new(),
            reward: if right { 1.0 } else { 0.0 },
            done: true,
            metrics: vec![drmas_sdk::Metric {
                name: "length".into(),
                value: action.len() as f64,
            }],
            state_key: None,
        })
    }
}

/// Two agents in a row: `first` answers the task, `second` sees that answer and its action is
/// submitted. The smallest workflow with two roles, for trainer tests. With `second_actions`,
/// the `second` role accepts only those actions; with `second_call_reward`, the `second` call
/// gets that reward of its own once the environment has answered.
pub struct PairOrchestra {
    second: Actions,
    second_call_reward: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PairConfig {
    #[serde(default)]
    second_actions: Option<Vec<String>>,
    #[serde(default)]
    second_call_reward: Option<f64>,
}

impl Component for PairOrchestra {
    const NAME: &'static str = "pair";
    const DESCRIPTION: &'static str =
        "calls `first`, then `second` on its answer, submits `second`'s action";
    fn from_config(params: &Params) -> Result<Self> {
        let config: PairConfig = params.parse()?;
        Ok(Self {
            second: config.second_actions.map_or(Actions::Text, Actions::OneOf),
            second_call_reward: config.second_call_reward,
        })
    }
}

impl Orchestra for PairOrchestra {
    fn roles(&self) -> Result<Vec<Role>> {
        Ok(vec![
            Role::text("first"),
            Role {
                name: "second".into(),
                actions: self.second.clone(),
            },
        ])
    }

    fn start(&self, task: &Task) -> Result<Box<dyn Routing>> {
        Ok(Box::new(Pair {
            question: task.prompt.clone(),
            first: None,
            second: None,
            second_call_reward: self.second_call_reward,
        }))
    }
}

struct Pair {
    question: String,
    first: Option<String>,
    second: Option<String>,
    second_call_reward: Option<f64>,
}

impl Routing for Pair {
    fn on_observation(&mut self, _observation: &str) -> Result<()> {
        Ok(())
    }

    fn next(&mut self) -> Result<Next> {
        let context = |observation: &str| AgentContext {
            question: self.question.clone(),
            observation: observation.to_owned(),
            ..AgentContext::default()
        };
        Ok(match (&self.first, self.second.take()) {
            (None, _) => Next::Act {
                role: "first".into(),
                context: context(&self.question),
            },
            (Some(first), None) => Next::Act {
                role: "second".into(),
                context: context(first),
            },
            (Some(_), Some(action)) => Next::Submit { action },
        })
    }

    fn observe(&mut self, role: &str, output: &AgentOutput) -> Result<()> {
        match role {
            "first" => self.first = Some(output.raw.clone()),
            _ => self.second = Some(output.action.clone()),
        }
        Ok(())
    }

    fn on_step(&mut self, _step: &Step) -> Result<Vec<CallReward>> {
        // Calls count from 0 in the order they were made: `first` is 0, `second` is 1.
        Ok(self
            .second_call_reward
            .map(|reward| CallReward { call: 1, reward })
            .into_iter()
            .collect())
    }
}

/// Tasks are words; the reward is 1 when the action has an even number of characters. Any
/// model, even an untrained random one, earns it about half of the time, so rewards vary
/// within every group and the trainer always has a signal to follow. With `start_state`, every
/// episode starts in the state of that key, whatever its word; with `steps`, an episode ends
/// after that many steps (default 1), each rewarded alike. Episodes of the words in `fail_words`
/// fail as `fault` says (`error`, `panic` or `hang`) in their `reset` or, with
/// `fail_in = "step"`, in their first `step` (there also `nanreward`: a reward of NaN) — with
/// `fail_once = true`, only the first episode of each such word — for the tests of failed
/// episodes.
pub struct ParityEnvironment {
    start_state: Option<String>,
    steps: u32,
    fail_words: Vec<String>,
    fail_in: FailIn,
    fault: EnvironmentFault,
    /// With `fail_once`, the words whose one failing episode has begun.
    failed_once: Option<std::sync::Mutex<Vec<String>>>,
}

impl Default for ParityEnvironment {
    fn default() -> Self {
        Self {
            start_state: None,
            steps: 1,
            fail_words: Vec::new(),
            fail_in: FailIn::Reset,
            fault: EnvironmentFault::Error,
            failed_once: None,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ParityConfig {
    #[serde(default)]
    start_state: Option<String>,
    #[serde(default = "one_step")]
    steps: u32,
    #[serde(default)]
    fail_words: Vec<String>,
    #[serde(default)]
    fail_in: FailIn,
    #[serde(default)]
    fault: EnvironmentFault,
    #[serde(default)]
    fail_once: bool,
}

/// Which call of a `fail_words` episode fails.
#[derive(Clone, Copy, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
enum FailIn {
    #[default]
    Reset,
    Step,
}

fn one_step() -> u32 {
    1
}

impl Component for ParityEnvironment {
    const NAME: &'static str = "parity";
    const DESCRIPTION: &'static str = "reward 1 for an action of even length";
    fn from_config(params: &Params) -> Result<Self> {
        let config: ParityConfig = params.parse()?;
        if config.steps == 0 {
            return Err(Error::new("steps must be at least 1"));
        }
        Ok(Self {
            start_state: config.start_state,
            steps: config.steps,
            fail_words: config.fail_words,
            fail_in: config.fail_in,
            fault: config.fault,
            failed_once: config.fail_once.then(Default::default),
        })
    }
}

impl Environment for ParityEnvironment {
    fn load_tasks(&self, spec: &DatasetSpec) -> Result<Vec<Task>> {
        WordsEnvironment.load_tasks(spec)
    }

    fn reset(&self, task: &Task) -> Result<Reset> {
        let fails = self.fail_words.contains(&task.payload)
            && self.failed_once.as_ref().is_none_or(|failed| {
                let mut failed = failed.lock().unwrap_or_else(|e| e.into_inner());
                let first = !failed.contains(&task.payload);
                failed.push(task.payload.clone());
                first
            });
        if fails && matches!(self.fail_in, FailIn::Reset) {
            return self.fault.strike(&format!("reset on `{}`", task.payload));
        }
        Ok(Reset {
            episode: Box::new(ParityEpisode {
                steps_left: self.steps,
                fault: fails.then_some(self.fault),
            }),
            observation: task.prompt.clone(),
            state_key: self.start_state.clone(),
        })
    }
}

struct ParityEpisode {
    steps_left: u32,
    /// How the first step fails, if it does.
    fault: Option<EnvironmentFault>,
}

impl Episode for ParityEpisode {
    fn step(&mut self, action: &str) -> Result<Step> {
        if let Some(fault) = self.fault.take() {
            if !matches!(fault, EnvironmentFault::NanReward) {
                return fault.strike("step");
            }
            return Ok(Step {
                observation: String::new(),
                reward: f64::NAN,
                done: true,
                metrics: Vec::new(),
                state_key: None,
            });
        }
        self.steps_left -= 1;
        Ok(Step {
            observation: format!("{} steps left", self.steps_left),
            reward: if action.chars().count().is_multiple_of(2) {
                1.0
            } else {
                0.0
            },
            done: self.steps_left == 0,
            metrics: Vec::new(),
            state_key: None,
        })
    }
}

/// The `parity` environment whose resets of words starting with `s` take `sleep_ms`: a slow
/// environment (think of a remote retriever) for the rollout-schedule tests.
pub struct SlowParityEnvironment {
    sleep: std::time::Duration,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SlowConfig {
    sleep_ms: u64,
}

impl Component for SlowParityEnvironment {
    const NAME: &'static str = "slow-parity";
    const DESCRIPTION: &'static str =
        "`parity`, with resets of words starting with `s` sleeping `sleep_ms`";
    fn from_config(params: &Params) -> Result<Self> {
        let config: SlowConfig = params.parse()?;
        Ok(Self {
            sleep: std::time::Duration::from_millis(config.sleep_ms),
        })
    }
}

impl Environment for SlowParityEnvironment {
    fn load_tasks(&self, spec: &DatasetSpec) -> Result<Vec<Task>> {
        WordsEnvironment.load_tasks(spec)
    }

    fn reset(&self, task: &Task) -> Result<Reset> {
        if task.payload.starts_with('s') {
            std::thread::sleep(self.sleep);
        }
        ParityEnvironment::default().reset(task)
    }
}

/// The `parity` environment until `after_resets` resets have been made; every later reset fails
/// as `fault` says: `error` (an error), `panic`, `hang` (never returns), `abort` (the process
/// aborts) or `null` (writes through a null pointer). For the tests of what the host does when a
/// plugin fails mid-run.
pub struct FaultyParityEnvironment {
    after_resets: u64,
    fault: EnvironmentFault,
    resets: std::sync::atomic::AtomicU64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FaultyParityConfig {
    after_resets: u64,
    fault: EnvironmentFault,
}

#[derive(Clone, Copy, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
enum EnvironmentFault {
    #[default]
    Error,
    Panic,
    Hang,
    Abort,
    Null,
    /// A step whose reward is NaN (a step's fault only).
    NanReward,
}

impl EnvironmentFault {
    /// Fails `what` this way (an error, a panic, a call that never returns, a crash).
    fn strike<T>(self, what: &str) -> Result<T> {
        match self {
            EnvironmentFault::Error => Err(Error::new(format!("{what}: asked to fail"))),
            EnvironmentFault::Panic => panic!("{what}: asked to panic"),
            EnvironmentFault::Hang => loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            },
            EnvironmentFault::Abort => std::process::abort(),
            EnvironmentFault::Null => {
                // SAFETY: none; this is the fault the test asks for (SIGSEGV).
                unsafe { std::ptr::null_mut::<u8>().write_volatile(1) };
                Err(Error::new("wrote through a null pointer and lived"))
            }
            EnvironmentFault::NanReward => Err(Error::new(format!(
                "{what}: a NaN reward is a step's fault"
            ))),
        }
    }
}

impl Component for FaultyParityEnvironment {
    const NAME: &'static str = "faulty-parity";
    const DESCRIPTION: &'static str =
        "`parity` until `after_resets` resets, then fails as `fault` says (error, hang, abort, null)";
    fn from_config(params: &Params) -> Result<Self> {
        let config: FaultyParityConfig = params.parse()?;
        Ok(Self {
            after_resets: config.after_resets,
            fault: config.fault,
            resets: std::sync::atomic::AtomicU64::new(0),
        })
    }
}

impl Environment for FaultyParityEnvironment {
    fn load_tasks(&self, spec: &DatasetSpec) -> Result<Vec<Task>> {
        WordsEnvironment.load_tasks(spec)
    }

    fn reset(&self, task: &Task) -> Result<Reset> {
        let made = self
            .resets
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if made < self.after_resets {
            return ParityEnvironment::default().reset(task);
        }
        self.fault.strike(&format!("reset after {made} resets"))
    }
}

/// +1 for a call whose reward is above its prompt group's mean reward by more than `margin`,
/// −1 below it by more than `margin`, 0 otherwise (and for padding): numbers a test can check by
/// hand.
pub struct SignEstimator {
    margin: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SignConfig {
    #[serde(default)]
    margin: f64,
}

impl Component for SignEstimator {
    const NAME: &'static str = "sign";
    const DESCRIPTION: &'static str =
        "±1 by reward against the prompt group's mean (0 within margin)";
    fn from_config(params: &Params) -> Result<Self> {
        let config: SignConfig = params.parse()?;
        if !(config.margin.is_finite() && config.margin >= 0.0) {
            return Err(Error::new(format!(
                "margin must be a finite number ≥ 0, got {}",
                config.margin
            )));
        }
        Ok(Self {
            margin: config.margin,
        })
    }
}

impl Estimator for SignEstimator {
    fn advantages(&self, samples: &[Sample], rewards: &[f64]) -> Result<Vec<f64>> {
        let mut sums: HashMap<u32, (f64, u32)> = HashMap::new();
        for (sample, reward) in samples.iter().zip(rewards) {
            if !sample.padding {
                let sum = sums.entry(sample.uid).or_default();
                sum.0 += reward;
                sum.1 += 1;
            }
        }
        Ok(samples
            .iter()
            .zip(rewards)
            .map(|(sample, reward)| match sums.get(&sample.uid) {
                Some(&(sum, count)) if !sample.padding => {
                    let gap = reward - sum / f64::from(count);
                    if gap > self.margin {
                        1.0
                    } else if gap < -self.margin {
                        -1.0
                    } else {
                        0.0
                    }
                }
                _ => 0.0,
            })
            .collect())
    }
}

/// Answers wrongly in the way its `fault` says: `short` (one advantage too few), `nan`,
/// `padding` (1 for every sample, padding included), `error` or `panic`.
pub struct FaultyEstimator {
    fault: Fault,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FaultyConfig {
    fault: Fault,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum Fault {
    Short,
    Nan,
    Padding,
    Error,
    Panic,
}

impl Component for FaultyEstimator {
    const NAME: &'static str = "faulty";
    const DESCRIPTION: &'static str =
        "answers wrongly as `fault` says (short, nan, padding, error, panic)";
    fn from_config(params: &Params) -> Result<Self> {
        let config: FaultyConfig = params.parse()?;
        Ok(Self {
            fault: config.fault,
        })
    }
}

impl Estimator for FaultyEstimator {
    fn advantages(&self, samples: &[Sample], _rewards: &[f64]) -> Result<Vec<f64>> {
        match self.fault {
            Fault::Short => Ok(vec![0.0; samples.len().saturating_sub(1)]),
            Fault::Nan => Ok(samples
                .iter()
                .enumerate()
                .map(|(i, _)| {
                    if i + 1 == samples.len() {
                        f64::NAN
                    } else {
                        0.0
                    }
                })
                .collect()),
            Fault::Padding => Ok(vec![1.0; samples.len()]),
            Fault::Error => Err(Error::new("asked to fail")),
            Fault::Panic => panic!("asked to panic"),
        }
    }
}

drmas_sdk::export_plugin! {
    name: "fixture",
    agents: [ShoutAgent],
    orchestras: [RelayOrchestra, PairOrchestra],
    environments: [
        WordsEnvironment,
        ParityEnvironment,
        SlowParityEnvironment,
        FaultyParityEnvironment
    ],
    estimators: [SignEstimator, FaultyEstimator],
}
