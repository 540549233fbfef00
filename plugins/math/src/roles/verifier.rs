//! `Verifier Agent`: judges the team's latest solution with `<verify>approve</verify>` or
//! `<verify>reject</verify>`.

use drmas_sdk::{Actions, Agent, AgentContext, ChatMessage, Component, Params, Parsed, Result};
use serde::Deserialize;

use super::template::{chat, render};

/// The verifier prompt, close to Dr.MAS's.
pub const DEFAULT_PROMPT: &str = "You are a careful math verifier. Here is a problem and your team's work on it.\n\n\
Problem: {question}\n\n{team}Check the latest solution step by step. If it is correct, end your reply with \
<verify>approve</verify>; if it has a mistake, explain it briefly and end with <verify>reject</verify>.";

/// A verifier's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// The solution stands.
    Approve,
    /// The solver must try again.
    Reject,
}

impl Verdict {
    /// The action text the orchestra reads.
    pub const fn as_str(self) -> &'static str {
        match self {
            Verdict::Approve => "approve",
            Verdict::Reject => "reject",
        }
    }

    /// The verdict an action names exactly (`approve` or `reject`), if any.
    pub fn from_action(action: &str) -> Option<Verdict> {
        [Verdict::Approve, Verdict::Reject]
            .into_iter()
            .find(|verdict| verdict.as_str() == action)
    }

    /// The last `<verify>…</verify>` verdict in `text`, if any.
    pub fn find(text: &str) -> Option<Verdict> {
        let lower = text.to_lowercase();
        let start = lower.rfind("<verify>")? + "<verify>".len();
        let end = start + lower[start..].find("</verify>")?;
        match lower[start..end].trim() {
            "approve" | "approved" | "yes" => Some(Verdict::Approve),
            "reject" | "rejected" | "no" => Some(Verdict::Reject),
            _ => None,
        }
    }
}

/// Judges the latest solution; valid when the verdict tag parses.
pub struct VerifierAgent {
    config: VerifierConfig,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct VerifierConfig {
    system: Option<String>,
    /// Prompt (`{question}`, `{team}`).
    prompt: String,
    /// What an unparseable verdict counts as (Dr.MAS: approve).
    unparseable: Verdict,
    /// Text the reply starts with, which the model continues (e.g. `<verify>`: small models
    /// then only have to pick the verdict). None by default, as in Dr.MAS.
    response_prefix: Option<String>,
}

impl Default for VerifierConfig {
    fn default() -> Self {
        Self {
            system: None,
            prompt: DEFAULT_PROMPT.into(),
            unparseable: Verdict::Approve,
            response_prefix: None,
        }
    }
}

impl Component for VerifierAgent {
    const NAME: &'static str = "Verifier Agent";
    const DESCRIPTION: &'static str = "approves or rejects the team's latest math solution";

    fn from_config(params: &Params) -> Result<Self> {
        Ok(Self {
            config: params.parse()?,
        })
    }
}

impl Agent for VerifierAgent {
    fn messages(&self, context: &AgentContext) -> Result<Vec<ChatMessage>> {
        let user = render(
            &self.config.prompt,
            &context.question,
            &context.team_context(),
        );
        let mut messages = chat(self.config.system.as_deref(), user);
        if let Some(prefix) = &self.config.response_prefix {
            messages.push(ChatMessage::assistant(prefix.as_str()));
        }
        Ok(messages)
    }

    fn parse(&self, raw: &str) -> Result<Parsed> {
        Ok(match Verdict::find(raw) {
            Some(verdict) => Parsed {
                action: verdict.as_str().into(),
                valid: true,
            },
            None => Parsed {
                action: self.config.unparseable.as_str().into(),
                valid: false,
            },
        })
    }

    fn actions(&self) -> Actions {
        Actions::one_of([Verdict::Approve.as_str(), Verdict::Reject.as_str()])
    }
}
