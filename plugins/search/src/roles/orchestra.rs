//! Orchestra `search`: each turn the Verifier routes to the Search Agent (while turns remain) or
//! to the Answer Agent. The team context carries earlier outputs and retrieved documents.
//!
//! Contracts: the verifier's action is `yes` (the information suffices: answer) or `no`
//! (search); the search and answer roles write free text (a query, an answer). The host marks
//! any other verifier action invalid (penalised, counted in `invalid_rate/verifier`); the turn
//! then goes to the Answer Agent, as for `yes`.

use drmas_sdk::{
    AgentContext, AgentOutput, Component, Error, Next, Orchestra, Params, Result, Role, Routing,
    Task, Turn,
};
use serde::Deserialize;

/// Role names in run files.
pub const VERIFIER: &str = "verifier";
/// The Search Agent's role.
pub const SEARCH: &str = "search";
/// The Answer Agent's role.
pub const ANSWER: &str = "answer";
/// The verifier's actions: `yes`, enough is known to answer; `no`, search.
pub const ROUTES: [&str; 2] = ["yes", "no"];

/// Verifier → Search | Answer, per environment turn.
pub struct SearchOrchestra {
    max_turns: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    /// Environment turns per episode; set it to the environment's `max_turns`.
    #[serde(default = "default_turns")]
    max_turns: u32,
}

fn default_turns() -> u32 {
    4
}

impl Component for SearchOrchestra {
    const NAME: &'static str = "search";
    const DESCRIPTION: &'static str =
        "Verifier routes to Search (while turns remain) or Answer, each turn";

    fn from_config(params: &Params) -> Result<Self> {
        let config: Config = params.parse()?;
        if config.max_turns == 0 {
            return Err(Error::new("max_turns must be at least 1"));
        }
        Ok(Self {
            max_turns: config.max_turns,
        })
    }
}

impl Orchestra for SearchOrchestra {
    fn roles(&self) -> Result<Vec<Role>> {
        Ok(vec![
            Role::one_of(VERIFIER, ROUTES),
            Role::text(SEARCH),
            Role::text(ANSWER),
        ])
    }

    fn start(&self, task: &Task) -> Result<Box<dyn Routing>> {
        Ok(Box::new(Hierarchy {
            question: task.prompt.clone(),
            max_turns: self.max_turns,
            turn: 0,
            stage: Stage::Verify,
            history: Vec::new(),
            action: String::new(),
        }))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Verify,
    Search,
    Answer,
    Submit,
}

struct Hierarchy {
    question: String,
    max_turns: u32,
    /// Environment turns started so far (1 during the first).
    turn: u32,
    stage: Stage,
    history: Vec<Turn>,
    action: String,
}

impl Hierarchy {
    fn last_turn(&self) -> bool {
        self.turn >= self.max_turns
    }

    fn context(&self) -> AgentContext {
        AgentContext {
            question: self.question.clone(),
            observation: self
                .history
                .last()
                .map(|t| t.text.clone())
                .unwrap_or_default(),
            history: self.history.clone(),
            step: self.turn.saturating_sub(1),
            note: format!("turn {} of {}", self.turn, self.max_turns),
        }
    }
}

impl Routing for Hierarchy {
    fn on_observation(&mut self, observation: &str) -> Result<()> {
        if self.turn > 0 && !observation.is_empty() {
            self.history.push(Turn {
                role: "Search Engine".into(),
                text: observation.to_owned(),
            });
        }
        self.turn += 1;
        // On the last turn there is nothing left to search: answer directly.
        self.stage = if self.last_turn() {
            Stage::Answer
        } else {
            Stage::Verify
        };
        Ok(())
    }

    fn next(&mut self) -> Result<Next> {
        let role = match self.stage {
            Stage::Verify => VERIFIER,
            Stage::Search => SEARCH,
            Stage::Answer => ANSWER,
            Stage::Submit => {
                return Ok(Next::Submit {
                    action: self.action.clone(),
                })
            }
        };
        Ok(Next::Act {
            role: role.into(),
            context: self.context(),
        })
    }

    fn observe(&mut self, role: &str, output: &AgentOutput) -> Result<()> {
        match (self.stage, role) {
            (Stage::Verify, VERIFIER) => {
                self.history.push(Turn {
                    role: "Verifier Agent".into(),
                    text: output.raw.clone(),
                });
                self.stage = match output.action.as_str() {
                    "no" => Stage::Search,
                    "yes" => Stage::Answer,
                    // Outside the contract: the host marked the call invalid and penalises it.
                    _ if !output.valid => Stage::Answer,
                    other => {
                        return Err(Error::new(format!(
                            "the verifier's action `{other}` is neither `yes` nor `no`, yet valid: \
                             the host must check the verifier role's contract"
                        )))
                    }
                };
            }
            (Stage::Search, SEARCH) => {
                self.history.push(Turn {
                    role: "Search Agent".into(),
                    text: output.raw.clone(),
                });
                self.action = format!("<search>{}</search>", output.action);
                self.stage = Stage::Submit;
            }
            (Stage::Answer, ANSWER) => {
                self.history.push(Turn {
                    role: "Answer Agent".into(),
                    text: output.raw.clone(),
                });
                self.action = format!("<answer>{}</answer>", output.action);
                self.stage = Stage::Submit;
            }
            (stage, role) => {
                return Err(Error::new(format!(
                    "the search orchestra did not ask `{role}` to act (stage {stage:?})"
                )))
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
