//! `Solver Agent`: reasons step by step and ends with `\boxed{answer}`.

use drmas_sdk::{Agent, AgentContext, ChatMessage, Component, Params, Parsed, Result};
use serde::Deserialize;

use super::template::{chat, render};
use crate::answer::extract_answer;

/// First-attempt prompt, close to Dr.MAS's math solver prompt.
pub const DEFAULT_PROMPT: &str =
    "{question}\n\nPlease reason step by step, and put your final answer within \\boxed{}.";

/// Prompt when teammates have spoken (a rejected attempt): the team context comes first.
pub const DEFAULT_RETRY_PROMPT: &str = "{question}\n\nYour team has worked on this problem:\n\n{team}\
Check the earlier solution and the verifier's feedback, fix any mistake, and solve the problem again. \
Please reason step by step, and put your final answer within \\boxed{}.";

/// Solves the problem; valid when the output states a final answer.
pub struct SolverAgent {
    config: SolverConfig,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct SolverConfig {
    /// Optional system message.
    system: Option<String>,
    /// Prompt for the first attempt (`{question}`).
    prompt: String,
    /// Prompt when the team has spoken (`{question}`, `{team}`).
    retry_prompt: String,
}

impl Default for SolverConfig {
    fn default() -> Self {
        Self {
            system: None,
            prompt: DEFAULT_PROMPT.into(),
            retry_prompt: DEFAULT_RETRY_PROMPT.into(),
        }
    }
}

impl Component for SolverAgent {
    const NAME: &'static str = "Solver Agent";
    const DESCRIPTION: &'static str =
        "solves a math problem step by step, ending with \\boxed{answer}";

    fn from_config(params: &Params) -> Result<Self> {
        Ok(Self {
            config: params.parse()?,
        })
    }
}

impl Agent for SolverAgent {
    fn messages(&self, context: &AgentContext) -> Result<Vec<ChatMessage>> {
        let user = if context.history.is_empty() {
            render(&self.config.prompt, &context.question, "")
        } else {
            render(
                &self.config.retry_prompt,
                &context.question,
                &context.team_context(),
            )
        };
        Ok(chat(self.config.system.as_deref(), user))
    }

    /// The action is the whole solution (the environment extracts the answer itself); the format
    /// is valid when a final answer can be found in it.
    fn parse(&self, raw: &str) -> Result<Parsed> {
        Ok(Parsed {
            action: raw.to_owned(),
            valid: extract_answer(raw).is_some(),
        })
    }
}
