//! {{project-name}}: a drmas plugin with an agent and an advantage estimator.
//!
//! Build it with `cargo build --release`, then put this folder (or the built library from
//! `target/release/`) in the plugins folder that `drmas-host --plugins` points at, and name the
//! agent in a run file: `agent = "{{agent_name}}"`; and the estimator (src/estimator.rs):
//! `[algorithm] estimator = "{{estimator_name}}"`. Delete the one you do not need, here and in
//! `export_plugin!` below.

#![forbid(unsafe_code)]

mod estimator;

use drmas_sdk::{Agent, AgentContext, ChatMessage, Component, Params, Parsed, Result};
use serde::Deserialize;

pub use estimator::MyEstimator;

/// Answers the team's question, ending with `<answer>…</answer>`.
pub struct MyAgent {
    instruction: String,
}

/// The agent's parameters, from `[agents.params]` in the run file. Strict, so typos are errors.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default = "default_instruction")]
    instruction: String,
}

fn default_instruction() -> String {
    "Think step by step, then give your final answer inside <answer> and </answer>.".to_owned()
}

impl Component for MyAgent {
    const NAME: &'static str = "{{agent_name}}";
    const DESCRIPTION: &'static str = "answers the question, ending with <answer>...</answer>";

    fn from_config(params: &Params) -> Result<Self> {
        let config: Config = params.parse()?;
        Ok(Self { instruction: config.instruction })
    }
}

impl Agent for MyAgent {
    fn messages(&self, context: &AgentContext) -> Result<Vec<ChatMessage>> {
        // The question, then the team's earlier outputs (`The output of "<role>": …`, oldest first).
        let user = format!("Question: {}\n\n{}", context.question, context.team_context());
        Ok(vec![ChatMessage::system(self.instruction.clone()), ChatMessage::user(user)])
    }

    fn parse(&self, raw: &str) -> Result<Parsed> {
        let answer = raw
            .rfind("<answer>")
            .and_then(|start| {
                let rest = &raw[start + "<answer>".len()..];
                rest.find("</answer>").map(|end| rest[..end].trim().to_owned())
            });
        Ok(match answer {
            Some(action) => Parsed { action, valid: true },
            None => Parsed { action: raw.trim().to_owned(), valid: false },
        })
    }
}

drmas_sdk::export_plugin! {
    name: "{{project-name}}",
    agents: [MyAgent],
    estimators: [MyEstimator],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_answer_tag_and_flags_its_absence() {
        let agent = MyAgent::from_config(&"".into()).expect("default config");
        let parsed = agent.parse("Because 2 + 2 = 4. <answer>4</answer>").expect("parse");
        assert_eq!((parsed.action.as_str(), parsed.valid), ("4", true));
        assert!(!agent.parse("four").expect("parse").valid);
    }

    #[test]
    fn messages_carry_the_question_and_the_team() {
        let agent = MyAgent::from_config(&"instruction = \"Be brief.\"".into()).expect("config");
        let context = AgentContext {
            question: "What is 2 + 2?".into(),
            history: vec![drmas_sdk::Turn { role: "Solver".into(), text: "5".into() }],
            ..AgentContext::default()
        };
        let messages = agent.messages(&context).expect("messages");
        assert_eq!(messages[0].content, "Be brief.");
        assert!(messages[1].content.contains("What is 2 + 2?"));
        assert!(messages[1].content.contains("The output of \"Solver\": 5"));
    }
}
