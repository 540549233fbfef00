//! [`ChatTemplate`]: a model's own Jinja chat template (from `tokenizer_config.json` or GGUF
//! metadata), rendered with minijinja the way HF `apply_chat_template` renders it.

use minijinja::{context, Environment, Error, ErrorKind};
use serde::Serialize;

use super::error::ModelError;

/// The name the template is registered under in its minijinja environment.
const TEMPLATE_NAME: &str = "chat_template";
/// The most template instructions one render may run. ChatML runs under 200 per message (a
/// conversation of 100,000 messages fits); a template that loops without end (a corrupt or
/// hostile model file: minijinja bounds each `range` to 100,000 items, not loops inside loops)
/// fails within about a second instead of hanging every call.
const RENDER_FUEL: u64 = 20_000_000;

/// One message as the template sees it (`message['role']`, `message['content']`).
#[derive(Debug, Clone, Serialize)]
pub struct TemplateMessage<'a> {
    /// `system`, `user` or `assistant`.
    pub role: &'a str,
    /// The text.
    pub content: &'a str,
}

/// A compiled chat template plus the special tokens templates refer to.
#[derive(Clone)]
pub struct ChatTemplate {
    source: String,
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles `source`. `bos_token` / `eos_token` are the strings templates print as
    /// `{{ bos_token }}` / `{{ eos_token }}` (empty when the model has none).
    pub fn new(
        source: impl Into<String>,
        bos_token: impl Into<String>,
        eos_token: impl Into<String>,
    ) -> Result<Self, ModelError> {
        let source = source.into();
        let mut env = Environment::new();
        // HF renders with Jinja's defaults plus these: Python string methods, trim_blocks and
        // lstrip_blocks, `raise_exception` and `strftime_now`.
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_fuel(Some(RENDER_FUEL));
        env.add_function(
            "raise_exception",
            |message: String| -> Result<String, Error> {
                Err(Error::new(ErrorKind::InvalidOperation, message))
            },
        );
        env.add_function("strftime_now", |_format: String| -> String {
            // Deterministic rollouts: templates that print today's date get a fixed one.
            "26 Jul 2024".to_owned()
        });
        env.add_template_owned(TEMPLATE_NAME, source.clone())
            .map_err(|e| ModelError::Config(format!("chat template does not compile: {e:#}")))?;
        Ok(Self {
            source,
            env,
            bos_token: bos_token.into(),
            eos_token: eos_token.into(),
        })
    }

    /// The template text, as it would be written to `tokenizer_config.json`.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The string `{{ bos_token }}` prints (empty when the model has none).
    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }

    /// The string `{{ eos_token }}` prints (empty when the model has none).
    pub fn eos_token(&self) -> &str {
        &self.eos_token
    }

    /// Renders `messages`; with `add_generation_prompt` the text ends where the assistant's
    /// reply begins.
    pub fn render(
        &self,
        messages: &[TemplateMessage<'_>],
        add_generation_prompt: bool,
    ) -> Result<String, ModelError> {
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| ModelError::Config(format!("chat template: {e:#}")))?;
        template
            .render(context! {
                messages => messages,
                add_generation_prompt => add_generation_prompt,
                bos_token => &self.bos_token,
                eos_token => &self.eos_token,
            })
            .map_err(|e| match e.kind() {
                ErrorKind::OutOfFuel => ModelError::Config(format!(
                    "the chat template ran more than {RENDER_FUEL} instructions in one render, \
                     which no chat template needs: the model's chat_template (in \
                     tokenizer_config.json or the GGUF metadata) loops without end; replace it"
                )),
                _ => ModelError::Input(format!("chat template failed to render: {e:#}")),
            })
    }

    /// Renders `messages` for the model to answer: with the assistant's turn opened after
    /// them, or, when the last message is the assistant's, with that message left open so the
    /// model continues it (HF `continue_final_message`: a response prefix such as `<verify>`).
    pub fn render_for_reply(&self, messages: &[TemplateMessage<'_>]) -> Result<String, ModelError> {
        let Some(last) = messages.last().filter(|m| m.role == "assistant") else {
            return self.render(messages, true);
        };
        if last.content.trim().is_empty() {
            // Nothing to continue: the reply starts in a freshly opened turn.
            return self.render(&messages[..messages.len() - 1], true);
        }
        let text = self.render(messages, false)?;
        // The template closes the final turn (`<|im_end|>` …): cut the text where the final
        // message's content ends. Templates may strip it, so look for the stripped content
        // and keep its leading/trailing whitespace only where the template kept it.
        let content = last.content.trim();
        let start = text.rfind(content).ok_or_else(|| {
            ModelError::Input(
                "the chat template does not write the final assistant message verbatim, so \
                 it cannot be continued; drop the response prefix"
                    .into(),
            )
        })?;
        let kept_tail = &last.content[last.content.trim_end().len()..];
        let end = start + content.len();
        let end = if text[end..].starts_with(kept_tail) {
            end + kept_tail.len()
        } else {
            end
        };
        Ok(text[..end].to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ChatML as Qwen2.5 and SmolLM2 write it.
    const CHATML: &str =
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + \
        message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}\
        {{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn renders_chatml_with_generation_prompt() {
        let template = ChatTemplate::new(CHATML, "", "<|im_end|>").expect("compiles");
        let text = template
            .render(
                &[
                    TemplateMessage {
                        role: "system",
                        content: "Be brief.",
                    },
                    TemplateMessage {
                        role: "user",
                        content: "2+2?",
                    },
                ],
                true,
            )
            .expect("renders");
        assert_eq!(
            text,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n\
             <|im_start|>assistant\n"
        );
    }

    /// "Is 2+2=4?" as the user's message, then `reply` as an assistant message if given.
    fn render_question_then(template: &ChatTemplate, reply: Option<&str>) -> String {
        let mut messages = vec![TemplateMessage {
            role: "user",
            content: "Is 2+2=4?",
        }];
        messages.extend(reply.map(|content| TemplateMessage {
            role: "assistant",
            content,
        }));
        template.render_for_reply(&messages).expect("renders")
    }

    #[test]
    fn a_final_assistant_message_is_continued() {
        let template = ChatTemplate::new(CHATML, "", "<|im_end|>").expect("compiles");
        assert_eq!(
            render_question_then(&template, Some("<verify>")),
            "<|im_start|>user\nIs 2+2=4?<|im_end|>\n<|im_start|>assistant\n<verify>"
        );
        let opened = render_question_then(&template, None);
        assert_eq!(
            opened,
            "<|im_start|>user\nIs 2+2=4?<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(
            render_question_then(&template, Some("")),
            opened,
            "an empty prefix opens the turn as usual"
        );
    }

    #[test]
    fn python_methods_and_raise_exception_work() {
        let source =
            "{% if messages[0]['role'] != 'user' %}{{ raise_exception('first must be user') }}\
            {% endif %}{{ bos_token }}{{ messages[0]['content'].strip().upper() }}";
        let template = ChatTemplate::new(source, "<s>", "</s>").expect("compiles");
        let ok = template
            .render(
                &[TemplateMessage {
                    role: "user",
                    content: "  hi ",
                }],
                false,
            )
            .expect("renders");
        assert_eq!(ok, "<s>HI");
        let err = template
            .render(
                &[TemplateMessage {
                    role: "system",
                    content: "x",
                }],
                false,
            )
            .expect_err("raises");
        assert!(err.to_string().contains("first must be user"), "{err}");
    }

    #[test]
    fn a_template_that_loops_without_end_fails_and_a_long_conversation_renders() {
        let endless = "{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}\
                       {% endfor %}{% endfor %}";
        let template = ChatTemplate::new(endless, "", "").expect("compiles");
        let started = std::time::Instant::now();
        let err = template.render(&[], true).expect_err("out of fuel");
        assert!(err.to_string().contains("loops without end"), "{err}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        // Far more turns than any rollout has, well within the bound.
        let chatml = ChatTemplate::new(CHATML, "", "<|im_end|>").expect("compiles");
        let messages: Vec<TemplateMessage<'_>> = (0..10_000)
            .map(|i| TemplateMessage {
                role: if i % 2 == 0 { "user" } else { "assistant" },
                content: "a turn",
            })
            .collect();
        let text = chatml.render(&messages, true).expect("renders");
        assert_eq!(text.matches("<|im_start|>").count(), 10_001);
    }

    #[test]
    fn a_broken_template_is_a_config_error() {
        let err = ChatTemplate::new("{% for %}", "", "").expect_err("does not compile");
        assert!(err.to_string().contains("chat template"), "{err}");
    }
}
