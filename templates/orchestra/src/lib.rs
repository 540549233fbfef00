//! {{project-name}}: a drmas plugin with one orchestra, `{{orchestra_name}}`.
//!
//! A proposer writes an answer; a reviewer accepts it or asks for a revision, up to `max_rounds`
//! proposals per environment step; the last proposal is the team's action. Build it with
//! `cargo build --release`, put this folder (or the built library from `target/release/`) in the
//! plugins folder, and name it in a run file: `[orchestra] name = "{{orchestra_name}}"`, with
//! one `[[agents]]` for each role.

#![forbid(unsafe_code)]

use drmas_sdk::{
    AgentContext, AgentOutput, CallReward, Component, Error, Next, Orchestra, Params, Result, Role,
    Routing, Step, Task, Turn,
};
use serde::Deserialize;

/// The role that writes answers.
pub const PROPOSER: &str = "proposer";
/// The role that judges them.
pub const REVIEWER: &str = "reviewer";
/// The reviewer's actions: the host makes any other one an invalid call.
pub const VERDICTS: [&str; 2] = ["accept", "revise"];

/// Proposer → reviewer, until the reviewer accepts or the rounds run out.
pub struct ProposeReview {
    max_rounds: u32,
    pay_reviewer: bool,
}

/// The orchestra's parameters, from `[orchestra] params` in the run file. Strict, so typos are
/// errors.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    /// Proposals per environment step (at least 1); the last one is not reviewed.
    #[serde(default = "default_rounds")]
    max_rounds: u32,
    /// Give the reviewer call that accepted the submitted answer the step's reward as its own
    /// (paid for a correct acceptance, not for accepting a wrong answer).
    #[serde(default)]
    pay_reviewer: bool,
}

fn default_rounds() -> u32 {
    2
}

impl Component for ProposeReview {
    const NAME: &'static str = "{{orchestra_name}}";
    const DESCRIPTION: &'static str = "proposer -> reviewer (accept | revise), up to max_rounds";

    fn from_config(params: &Params) -> Result<Self> {
        let config: Config = params.parse()?;
        if config.max_rounds == 0 {
            return Err(Error::new("max_rounds must be at least 1"));
        }
        Ok(Self {
            max_rounds: config.max_rounds,
            pay_reviewer: config.pay_reviewer,
        })
    }
}

impl Orchestra for ProposeReview {
    fn roles(&self) -> Result<Vec<Role>> {
        Ok(vec![Role::text(PROPOSER), Role::one_of(REVIEWER, VERDICTS)])
    }

    fn start(&self, task: &Task) -> Result<Box<dyn Routing>> {
        Ok(Box::new(Rounds {
            question: task.prompt.clone(),
            observation: String::new(),
            max_rounds: self.max_rounds,
            pay_reviewer: self.pay_reviewer,
            round: 0,
            stage: Stage::Propose,
            history: Vec::new(),
            answer: String::new(),
            calls: 0,
            accepted_by: None,
        }))
    }
}

/// Who acts next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Propose,
    Review,
    Submit,
}

/// One episode's state. The host calls `on_observation` with the environment's first
/// observation, then `next` until it returns `Submit`, reporting every call to `observe`; then
/// `on_step` with the environment's answer and, unless the episode is done, `on_observation`
/// again.
struct Rounds {
    question: String,
    observation: String,
    max_rounds: u32,
    pay_reviewer: bool,
    /// Proposals made in this step.
    round: u32,
    stage: Stage,
    history: Vec<Turn>,
    answer: String,
    /// Agent calls observed so far in the episode: the index the next call gets.
    calls: u32,
    /// The reviewer call that accepted the answer submitted in this step.
    accepted_by: Option<u32>,
}

impl Routing for Rounds {
    fn on_observation(&mut self, observation: &str) -> Result<()> {
        if !self.history.is_empty() {
            self.history.push(Turn {
                role: "environment".into(),
                text: observation.to_owned(),
            });
        }
        self.observation = observation.to_owned();
        self.round = 0;
        self.stage = Stage::Propose;
        self.accepted_by = None;
        Ok(())
    }

    fn next(&mut self) -> Result<Next> {
        let role = match self.stage {
            Stage::Propose => PROPOSER,
            Stage::Review => REVIEWER,
            Stage::Submit => {
                return Ok(Next::Submit {
                    action: self.answer.clone(),
                })
            }
        };
        Ok(Next::Act {
            role: role.into(),
            context: AgentContext {
                question: self.question.clone(),
                observation: self.observation.clone(),
                history: self.history.clone(),
                step: 0,
                note: format!("round {} of {}", self.round.max(1), self.max_rounds),
            },
        })
    }

    fn observe(&mut self, role: &str, output: &AgentOutput) -> Result<()> {
        let call = self.calls;
        self.calls += 1;
        self.history.push(Turn {
            role: role.to_owned(),
            text: output.raw.clone(),
        });
        match (self.stage, role) {
            (Stage::Propose, PROPOSER) => {
                self.answer = output.action.clone();
                self.round += 1;
                self.stage = if self.round >= self.max_rounds {
                    Stage::Submit
                } else {
                    Stage::Review
                };
            }
            (Stage::Review, REVIEWER) => {
                // The host has checked the contract: an action other than the two verdicts
                // arrives marked invalid (and is penalised); it ends the step like `accept`.
                if output.action == "revise" {
                    self.stage = Stage::Propose;
                } else {
                    self.accepted_by = Some(call);
                    self.stage = Stage::Submit;
                }
            }
            (stage, role) => {
                return Err(Error::new(format!(
                    "{{orchestra_name}} did not ask `{role}` to act (stage {stage:?})"
                )))
            }
        }
        Ok(())
    }

    fn on_step(&mut self, step: &Step) -> Result<Vec<CallReward>> {
        Ok(match self.accepted_by.filter(|_| self.pay_reviewer) {
            Some(call) => vec![CallReward {
                call,
                reward: step.reward,
            }],
            None => Vec::new(),
        })
    }
}

drmas_sdk::export_plugin! {
    name: "{{project-name}}",
    orchestras: [ProposeReview],
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(action: &str) -> AgentOutput {
        AgentOutput {
            raw: action.into(),
            action: action.into(),
            valid: true,
        }
    }

    fn act(routing: &mut dyn Routing) -> String {
        match routing.next().expect("next") {
            Next::Act { role, .. } => role,
            Next::Submit { action } => panic!("submitted {action} early"),
        }
    }

    #[test]
    fn a_revision_sends_the_proposer_back_and_an_acceptance_submits() {
        let orchestra = ProposeReview::from_config(&"max_rounds = 3".into()).expect("config");
        let mut routing = orchestra.start(&Task::default()).expect("start");
        routing
            .on_observation("What is 2 + 2?")
            .expect("observation");
        assert_eq!(act(&mut *routing), PROPOSER);
        routing.observe(PROPOSER, &output("5")).expect("observe");
        assert_eq!(act(&mut *routing), REVIEWER);
        routing
            .observe(REVIEWER, &output("revise"))
            .expect("observe");
        assert_eq!(act(&mut *routing), PROPOSER);
        routing.observe(PROPOSER, &output("4")).expect("observe");
        assert_eq!(act(&mut *routing), REVIEWER);
        routing
            .observe(REVIEWER, &output("accept"))
            .expect("observe");
        assert_eq!(
            routing.next().expect("next"),
            Next::Submit { action: "4".into() }
        );
    }

    #[test]
    fn the_accepting_reviewer_is_paid_the_steps_reward_when_asked() {
        let orchestra = ProposeReview::from_config(&"pay_reviewer = true".into()).expect("config");
        let mut routing = orchestra.start(&Task::default()).expect("start");
        routing.on_observation("q").expect("observation");
        act(&mut *routing);
        routing.observe(PROPOSER, &output("4")).expect("observe");
        act(&mut *routing);
        routing
            .observe(REVIEWER, &output("accept"))
            .expect("observe");
        let step = Step {
            reward: 1.0,
            done: true,
            ..Step::default()
        };
        assert_eq!(
            routing.on_step(&step).expect("on_step"),
            [CallReward {
                call: 1,
                reward: 1.0
            }]
        );
    }

    #[test]
    fn the_reviewer_role_accepts_only_the_two_verdicts() {
        let orchestra = ProposeReview::from_config(&"".into()).expect("config");
        let roles = orchestra.roles().expect("roles");
        assert!(roles[1].actions.allows("accept") && !roles[1].actions.allows("yes"));
        assert!(ProposeReview::from_config(&"max_round = 3".into()).is_err());
    }
}
