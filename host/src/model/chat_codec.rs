//! [`ChatCodec`]: a model's chat template and tokenizer, borrowed together — what turns an
//! agent's chat messages into prompt tokens and generated tokens back into text. It holds no
//! tensors, so the rollout's worker threads share it while the network is busy generating.

use tokenizers::Tokenizer;

use super::chat_template::{ChatTemplate, TemplateMessage};
use super::error::ModelError;

/// Bytes one token covers at most, as [`ChatCodec::encode_chat_tail`] assumes when it cuts a long
/// text before tokenising: wider than any token of the vocabularies this host loads.
pub const MAX_TOKEN_BYTES: usize = 256;

/// A model's chat template and tokenizer (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct ChatCodec<'a> {
    tokenizer: &'a Tokenizer,
    chat_template: &'a ChatTemplate,
}

impl<'a> ChatCodec<'a> {
    /// The codec of a model loaded with `tokenizer` and `chat_template`.
    pub fn new(tokenizer: &'a Tokenizer, chat_template: &'a ChatTemplate) -> Self {
        Self {
            tokenizer,
            chat_template,
        }
    }

    /// Renders `messages` with the chat template (ending with the assistant's turn opened, or
    /// continuing a final assistant message, see [`ChatTemplate::render_for_reply`]) and
    /// tokenises the text as HF `apply_chat_template(tokenize=True)` does: the template writes
    /// every special token itself, so none are added.
    pub fn encode_chat(&self, messages: &[TemplateMessage<'_>]) -> Result<Vec<i64>, ModelError> {
        self.encode_text(self.chat_template.render_for_reply(messages)?)
    }

    /// [`Self::encode_chat`] keeping only the last `max_tokens` tokens; says whether any were
    /// dropped. A rendered text far longer than `max_tokens` tokens can need is cut to its last
    /// `max_tokens × MAX_TOKEN_BYTES` bytes before tokenising, so a runaway 100 MB task costs
    /// what its kept tail costs, not a tokenisation of the whole text.
    pub fn encode_chat_tail(
        &self,
        messages: &[TemplateMessage<'_>],
        max_tokens: usize,
    ) -> Result<(Vec<i64>, bool), ModelError> {
        let mut text = self.chat_template.render_for_reply(messages)?;
        let keep = max_tokens.saturating_mul(MAX_TOKEN_BYTES);
        let cut = text.len() > keep;
        if cut {
            let mut start = text.len() - keep;
            while !text.is_char_boundary(start) {
                start += 1;
            }
            text.drain(..start);
        }
        let mut ids = self.encode_text(text)?;
        let truncated = cut || ids.len() > max_tokens;
        if ids.len() > max_tokens {
            ids.drain(..ids.len() - max_tokens);
        }
        Ok((ids, truncated))
    }

    fn encode_text(&self, text: String) -> Result<Vec<i64>, ModelError> {
        let encoding = self
            .tokenizer
            .encode(text, false)
            .map_err(|e| ModelError::Input(format!("tokenizer: {e}")))?;
        Ok(encoding.get_ids().iter().map(|&id| i64::from(id)).collect())
    }

    /// The text of generated `tokens`, special tokens (such as the final EOS) left out.
    pub fn decode(&self, tokens: &[i64]) -> Result<String, ModelError> {
        let ids: Vec<u32> = tokens.iter().map(|&t| t as u32).collect();
        self.tokenizer
            .decode(&ids, true)
            .map_err(|e| ModelError::Input(format!("tokenizer: {e}")))
    }
}
