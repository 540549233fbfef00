//! [`Pretrained`]: everything a worker group needs from a model file: the network, its tokenizer
//! and its chat template, loaded together so they can never come from different models.

use std::path::{Path, PathBuf};

use tch::Device;
use tokenizers::Tokenizer;

use super::chat_template::{ChatTemplate, TemplateMessage};
use super::error::ModelError;
use super::gguf::GgufModel;
use super::llama::Llama;

/// A model with its tokenizer and chat template.
#[derive(Debug)]
pub struct Pretrained {
    /// The network (its weights are trainable variables).
    pub model: Llama,
    /// The tokenizer the model was trained with.
    pub tokenizer: Tokenizer,
    /// The model's own chat template.
    pub chat_template: ChatTemplate,
    /// Where it was loaded from.
    pub source: PathBuf,
}

impl Pretrained {
    /// Loads the model at `path` (a `.gguf` file, dequantised to f32) onto `device`.
    pub fn load(path: &Path, device: Device) -> Result<Self, ModelError> {
        if path.extension().is_some_and(|e| e == "gguf") {
            return Self::from_gguf(path, device);
        }
        Err(ModelError::Config(format!(
            "{}: not a .gguf file; this build loads GGUF models only",
            path.display()
        )))
    }

    fn from_gguf(path: &Path, device: Device) -> Result<Self, ModelError> {
        let gguf = GgufModel::open(path)?;
        let model = Llama::from_gguf(&gguf, device)?;
        let tokenizer = gguf.tokenizer()?;
        let source = gguf.chat_template()?.ok_or_else(|| {
            ModelError::Config(format!(
                "{} has no chat template (tokenizer.chat_template); use an instruct model",
                path.display()
            ))
        })?;
        let chat_template = template_for(source, &model, &tokenizer)?;
        Ok(Self {
            model,
            tokenizer,
            chat_template,
            source: path.to_owned(),
        })
    }

    /// Renders `messages` with the chat template (ending with the assistant's turn opened) and
    /// tokenises the text as HF `apply_chat_template(tokenize=True)` does: the template writes
    /// every special token itself, so none are added.
    pub fn encode_chat(&self, messages: &[TemplateMessage<'_>]) -> Result<Vec<i64>, ModelError> {
        let text = self.chat_template.render(messages, true)?;
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

/// Compiles `source` with the BOS/EOS token strings of `model`'s configuration.
pub(crate) fn template_for(
    source: &str,
    model: &Llama,
    tokenizer: &Tokenizer,
) -> Result<ChatTemplate, ModelError> {
    let token = |id: Option<i64>| {
        id.and_then(|id| tokenizer.id_to_token(id as u32))
            .unwrap_or_default()
    };
    let config = model.config();
    ChatTemplate::new(
        source,
        token(config.bos_token_id),
        token(config.eos_token_ids.first().copied()),
    )
}
