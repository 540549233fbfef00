//! Prompt templates: plain text with `{question}` and `{team}` placeholders (`{team}` takes the
//! SDK's [`AgentContext::team_context`](drmas_sdk::AgentContext::team_context)), editable in the run
//! file.

use drmas_sdk::ChatMessage;

/// Fills `{question}` and `{team}` in `template`.
pub(crate) fn render(template: &str, question: &str, team: &str) -> String {
    template
        .replace("{question}", question)
        .replace("{team}", team)
}

/// The messages of one call: the optional system message, then the user prompt.
pub(crate) fn chat(system: Option<&str>, user: String) -> Vec<ChatMessage> {
    system
        .map(ChatMessage::system)
        .into_iter()
        .chain([ChatMessage::user(user)])
        .collect()
}
