//! The math orchestras: Dr.MAS's Solver ↔ Verifier refinement loop, and Solver alone for
//! single-agent baselines.
//!
//! `math`, per task, up to `max_loops` loops: Solver → Verifier (skipped on the last loop);
//! an approval ends the loop, a rejection sends the Solver back with the team's context. The
//! last Solver output is the action.
//!
//! Contracts: the solver writes free text; the verifier's action is `approve` or `reject`. The
//! host marks any other verifier action invalid (penalised, counted in `invalid_rate/verifier`);
//! such a verdict ends the loop like an approval, as Dr. MAS treats a verdict it cannot read.

use drmas_sdk::{
    AgentContext, AgentOutput, Component, Error, Next, Orchestra, Params, Result, Role, Routing,
    Task, Turn,
};
use serde::Deserialize;

use super::Verdict;

/// The Solver role's name in run files.
pub const SOLVER: &str = "solver";
/// The Verifier role's name in run files.
pub const VERIFIER: &str = "verifier";
/// The Verifier role's actions.
pub const VERDICTS: [&str; 2] = [Verdict::Approve.as_str(), Verdict::Reject.as_str()];

/// Solver ↔ Verifier refinement.
pub struct MathOrchestra {
    max_loops: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MathOrchestraConfig {
    #[serde(default = "default_loops")]
    max_loops: u32,
}

fn default_loops() -> u32 {
    2
}

impl Component for MathOrchestra {
    const NAME: &'static str = "math";
    const DESCRIPTION: &'static str =
        "Solver -> Verifier loop: a rejection sends the Solver back, up to max_loops";

    fn from_config(params: &Params) -> Result<Self> {
        let config: MathOrchestraConfig = params.parse()?;
        if config.max_loops == 0 {
            return Err(Error::new("max_loops must be at least 1"));
        }
        Ok(Self {
            max_loops: config.max_loops,
        })
    }
}

impl Orchestra for MathOrchestra {
    fn roles(&self) -> Result<Vec<Role>> {
        Ok(vec![Role::text(SOLVER), Role::one_of(VERIFIER, VERDICTS)])
    }

    fn start(&self, task: &Task) -> Result<Box<dyn Routing>> {
        Ok(Box::new(Refinement::new(task, self.max_loops)))
    }
}

/// Solver only: one call, its output is the action.
pub struct SolverOnlyOrchestra;

impl Component for SolverOnlyOrchestra {
    const NAME: &'static str = "solver-only";
    const DESCRIPTION: &'static str = "a single Solver call per task (single-agent baseline)";

    fn from_config(params: &Params) -> Result<Self> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Empty {}
        let _: Empty = params.parse()?;
        Ok(Self)
    }
}

impl Orchestra for SolverOnlyOrchestra {
    fn roles(&self) -> Result<Vec<Role>> {
        Ok(vec![Role::text(SOLVER)])
    }

    fn start(&self, task: &Task) -> Result<Box<dyn Routing>> {
        Ok(Box::new(Refinement::new(task, 1)))
    }
}

/// Who acts next in one episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Solve,
    Verify,
    Done,
}

/// One episode's state: the loop count, the team's history and the latest solution.
struct Refinement {
    question: String,
    max_loops: u32,
    loops_done: u32,
    stage: Stage,
    history: Vec<Turn>,
    solution: String,
}

impl Refinement {
    fn new(task: &Task, max_loops: u32) -> Self {
        Self {
            question: task.prompt.clone(),
            max_loops,
            loops_done: 0,
            stage: Stage::Solve,
            history: Vec::new(),
            solution: String::new(),
        }
    }

    fn context(&self) -> AgentContext {
        AgentContext {
            question: self.question.clone(),
            observation: self.question.clone(),
            history: self.history.clone(),
            step: 0,
            note: format!("loop {} of {}", self.loops_done + 1, self.max_loops),
        }
    }
}

impl Routing for Refinement {
    fn on_observation(&mut self, observation: &str) -> Result<()> {
        if !observation.is_empty() {
            self.question = observation.to_owned();
        }
        Ok(())
    }

    fn next(&mut self) -> Result<Next> {
        Ok(match self.stage {
            Stage::Solve => Next::Act {
                role: SOLVER.into(),
                context: self.context(),
            },
            Stage::Verify => Next::Act {
                role: VERIFIER.into(),
                context: self.context(),
            },
            Stage::Done => Next::Submit {
                action: self.solution.clone(),
            },
        })
    }

    fn observe(&mut self, role: &str, output: &AgentOutput) -> Result<()> {
        match (self.stage, role) {
            (Stage::Solve, SOLVER) => {
                self.solution = output.raw.clone();
                self.history.push(Turn {
                    role: "Solver Agent".into(),
                    text: output.raw.clone(),
                });
                let last_loop = self.loops_done + 1 >= self.max_loops;
                self.stage = if last_loop {
                    Stage::Done
                } else {
                    Stage::Verify
                };
            }
            (Stage::Verify, VERIFIER) => {
                self.history.push(Turn {
                    role: "Verifier Agent".into(),
                    text: output.raw.clone(),
                });
                self.loops_done += 1;
                self.stage = match Verdict::from_action(&output.action) {
                    Some(Verdict::Reject) => Stage::Solve,
                    Some(Verdict::Approve) => Stage::Done,
                    // Outside the contract: the host marked the call invalid and penalises it.
                    None if !output.valid => Stage::Done,
                    None => {
                        return Err(Error::new(format!(
                            "the verifier's action `{}` is neither `approve` nor `reject`, yet \
                             valid: the host must check the verifier role's contract",
                            output.action
                        )))
                    }
                };
            }
            (stage, role) => {
                return Err(Error::new(format!(
                    "the math orchestra did not ask `{role}` to act (stage {stage:?})"
                )))
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
