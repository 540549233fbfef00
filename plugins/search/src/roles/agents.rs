//! The three agents of Dr.MAS's search workflow. Each checks its own output format: a valid
//! call is what the orchestra and environment can act on; an invalid one can be penalised.

use drmas_sdk::{Actions, Agent, AgentContext, ChatMessage, Component, Params, Parsed, Result};
use serde::Deserialize;

use crate::tags::{extract_answer, extract_last, extract_search};

/// Verifier prompt (`{question}`, `{team}`).
pub const VERIFIER_PROMPT: &str =
    "You are the verifier of a question-answering team. Question: {question}\n\n\
{team}Is the information gathered so far enough to answer the question? Think briefly, then reply \
<verify>yes</verify> if it is enough or <verify>no</verify> if more searching is needed.";

/// Search agent prompt (`{question}`, `{team}`).
pub const SEARCH_PROMPT: &str =
    "You are the search agent of a question-answering team. Question: {question}\n\n\
{team}Write one short reasoning inside <think> and </think>, then one search query for the missing \
information inside <search> and </search>.";

/// Answer agent prompt (`{question}`, `{team}`).
pub const ANSWER_PROMPT: &str = "You are the answer agent of a question-answering team. Question: {question}\n\n\
{team}Write one short reasoning inside <think> and </think>, then the final answer, a few words only, \
inside <answer> and </answer>.";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PromptConfig {
    /// An optional system message.
    #[serde(default)]
    system: Option<String>,
    /// The user template (`{question}`, `{team}`); the role's default when absent.
    prompt: Option<String>,
    /// Text the reply starts with, which the model continues (e.g. `<think>`).
    #[serde(default)]
    response_prefix: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VerifierConfig {
    /// An optional system message.
    #[serde(default)]
    system: Option<String>,
    /// The user template (`{question}`, `{team}`); the role's default when absent.
    prompt: Option<String>,
    /// What an unparseable verdict counts as: `yes` (default, as in Dr.MAS) or `no`.
    #[serde(default = "yes")]
    unparseable: String,
    /// Text the reply starts with, which the model continues (e.g. `<verify>`: a small model then
    /// only has to choose the verdict). None by default, as in Dr.MAS.
    #[serde(default)]
    response_prefix: Option<String>,
}

fn yes() -> String {
    "yes".into()
}

/// What a role shows the model: an optional system message, the user template and a reply prefix.
struct Prompt {
    system: Option<String>,
    template: String,
    /// Ends the messages as an assistant message the model continues (the host's response prefix).
    response_prefix: Option<String>,
}

impl Prompt {
    /// The run file's prompt parameters, with `default_template` when it sets no `prompt`.
    fn new(
        system: Option<String>,
        template: Option<String>,
        response_prefix: Option<String>,
        default_template: &str,
    ) -> Self {
        Self {
            system,
            template: template.unwrap_or_else(|| default_template.into()),
            response_prefix,
        }
    }

    /// The chat for one call: system, the filled template, then the reply prefix if any.
    fn messages(&self, context: &AgentContext) -> Vec<ChatMessage> {
        let user = self
            .template
            .replace("{question}", &context.question)
            .replace("{team}", &context.team_context());
        self.system
            .iter()
            .map(|s| ChatMessage::system(s.clone()))
            .chain([ChatMessage::user(user)])
            .chain(
                self.response_prefix
                    .iter()
                    .map(|p| ChatMessage::assistant(p.clone())),
            )
            .collect()
    }
}

/// Exactly one `<think>…</think>` block.
fn one_think_block(raw: &str) -> bool {
    raw.matches("<think>").count() == 1 && raw.matches("</think>").count() == 1
}

/// Decides whether the team knows enough: `yes` routes to the Answer Agent, `no` to the Search Agent.
pub struct SearchVerifierAgent {
    prompt: Prompt,
    unparseable: String,
}

impl Component for SearchVerifierAgent {
    const NAME: &'static str = "Search Verifier Agent";
    const DESCRIPTION: &'static str =
        "says whether the gathered information answers the question (<verify>yes|no</verify>)";

    fn from_config(params: &Params) -> Result<Self> {
        let config: VerifierConfig = params.parse()?;
        if config.unparseable != "yes" && config.unparseable != "no" {
            return Err(drmas_sdk::Error::new(format!(
                "unparseable must be \"yes\" or \"no\", not {:?}",
                config.unparseable
            )));
        }
        Ok(Self {
            prompt: Prompt::new(
                config.system,
                config.prompt,
                config.response_prefix,
                VERIFIER_PROMPT,
            ),
            unparseable: config.unparseable,
        })
    }
}

impl Agent for SearchVerifierAgent {
    fn messages(&self, context: &AgentContext) -> Result<Vec<ChatMessage>> {
        Ok(self.prompt.messages(context))
    }

    fn parse(&self, raw: &str) -> Result<Parsed> {
        let verdict = extract_last(&raw.to_lowercase(), "verify");
        Ok(match verdict.as_deref() {
            Some(v @ ("yes" | "no")) => Parsed {
                action: v.into(),
                valid: true,
            },
            _ => Parsed {
                action: self.unparseable.clone(),
                valid: false,
            },
        })
    }

    fn actions(&self) -> Actions {
        Actions::one_of(["yes", "no"])
    }
}

/// Writes a search query.
pub struct SearchAgent {
    prompt: Prompt,
}

impl Component for SearchAgent {
    const NAME: &'static str = "Search Agent";
    const DESCRIPTION: &'static str = "writes one <think> block, then <search>query</search>";

    fn from_config(params: &Params) -> Result<Self> {
        let config: PromptConfig = params.parse()?;
        Ok(Self {
            prompt: Prompt::new(
                config.system,
                config.prompt,
                config.response_prefix,
                SEARCH_PROMPT,
            ),
        })
    }
}

impl Agent for SearchAgent {
    fn messages(&self, context: &AgentContext) -> Result<Vec<ChatMessage>> {
        Ok(self.prompt.messages(context))
    }

    /// The action is the query; without a `<search>` tag the whole output is used as the query.
    fn parse(&self, raw: &str) -> Result<Parsed> {
        Ok(match extract_search(raw) {
            Some(query) if !query.is_empty() => Parsed {
                valid: one_think_block(raw),
                action: query,
            },
            _ => Parsed {
                action: raw.trim().to_owned(),
                valid: false,
            },
        })
    }
}

/// Writes the final answer.
pub struct AnswerAgent {
    prompt: Prompt,
}

impl Component for AnswerAgent {
    const NAME: &'static str = "Answer Agent";
    const DESCRIPTION: &'static str =
        "writes one <think> block, then <answer>final answer</answer>";

    fn from_config(params: &Params) -> Result<Self> {
        let config: PromptConfig = params.parse()?;
        Ok(Self {
            prompt: Prompt::new(
                config.system,
                config.prompt,
                config.response_prefix,
                ANSWER_PROMPT,
            ),
        })
    }
}

impl Agent for AnswerAgent {
    fn messages(&self, context: &AgentContext) -> Result<Vec<ChatMessage>> {
        Ok(self.prompt.messages(context))
    }

    /// The action is the answer; without an `<answer>` tag the whole output is the answer.
    fn parse(&self, raw: &str) -> Result<Parsed> {
        Ok(match extract_answer(raw) {
            Some(answer) => Parsed {
                valid: one_think_block(raw),
                action: answer,
            },
            None => Parsed {
                action: raw.trim().to_owned(),
                valid: false,
            },
        })
    }
}
