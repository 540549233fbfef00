//! [`Pretrained`]: everything a worker group needs from a model file: the network, its tokenizer
//! and its chat template, loaded together so they can never come from different models, from a
//! GGUF file or a Hugging Face folder (saving: [`super::save_hf`]).

use std::path::{Path, PathBuf};

use tch::{Device, Kind};
use tokenizers::Tokenizer;

use super::chat_codec::ChatCodec;
use super::chat_template::{ChatTemplate, TemplateMessage};
use super::config::LlamaConfig;
use super::config_fit::check_config_fits;
use super::error::ModelError;
use super::gguf::GgufModel;
use super::hf_folder::{HfFolder, TOKENIZER_CONFIG_FILE};
use super::llama::Llama;
use super::safetensors_io::{checkpoint_shapes, load_checkpoint};
use super::weights::load_into;

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
    /// Loads the model at `path` onto `device`, its weights in dtype `kind` (`Kind::Float`,
    /// `Kind::BFloat16` or `Kind::Half`).
    ///
    /// `path` is a `.gguf` file (dequantised to f32, then converted) or a Hugging Face model
    /// folder: `config.json` (Llama, Qwen2 or Qwen3), `model.safetensors` or a sharded
    /// `model.safetensors.index.json`, `tokenizer.json`, and `tokenizer_config.json` (or
    /// `chat_template.jinja`) with the chat template; `generation_config.json` may add EOS
    /// ids. Errors name the file, and the tensor when one is missing or misshapen.
    pub fn load(path: &Path, device: Device, kind: Kind) -> Result<Self, ModelError> {
        if !matches!(kind, Kind::Float | Kind::BFloat16 | Kind::Half) {
            return Err(ModelError::Input(format!(
                "dtype {kind:?}: models load as f32, bf16 or f16"
            )));
        }
        if path.is_dir() {
            return Self::from_hf_folder(path, device, kind);
        }
        if !path.exists() {
            return Err(ModelError::file(path, "no such file or folder"));
        }
        if path.extension().is_some_and(|e| e == "gguf") {
            return Self::from_gguf(path, device, kind);
        }
        Err(ModelError::file(
            path,
            "neither a .gguf file nor a Hugging Face model folder",
        ))
    }

    fn from_gguf(path: &Path, device: Device, kind: Kind) -> Result<Self, ModelError> {
        let gguf = GgufModel::open(path)?;
        gguf.check_tensor_types()?;
        let config = LlamaConfig::from_json(&gguf.config_json()?).map_err(|e| e.in_file(path))?;
        check_config_fits(&config, &gguf.hf_shapes(), path)?;
        let model = Llama::with_kind(config, device, kind);
        load_into(model.var_store(), gguf.tensors()).map_err(|e| match e {
            e @ ModelError::Gguf(_) => e,
            e => e.in_file(path),
        })?;
        let tokenizer = gguf.tokenizer()?;
        let source = gguf.chat_template()?.ok_or_else(|| {
            ModelError::file(
                path,
                "no chat template (tokenizer.chat_template); use an instruct model",
            )
        })?;
        let chat_template = template_for(source, &model, &tokenizer)?;
        Ok(Self {
            model,
            tokenizer,
            chat_template,
            source: path.to_owned(),
        })
    }

    fn from_hf_folder(dir: &Path, device: Device, kind: Kind) -> Result<Self, ModelError> {
        let folder = HfFolder::read(dir)?;
        let (shapes, names_file) = checkpoint_shapes(dir)?;
        check_config_fits(&folder.config, &shapes, &names_file)?;
        let tied = folder.config.tie_word_embeddings;
        let model = Llama::with_kind(folder.config, device, kind);
        // A tied checkpoint may still carry `lm_head.weight` (a copy of the embeddings), and
        // old ones the RoPE `inv_freq` buffers: neither is a weight here.
        load_checkpoint(model.var_store(), dir, |name| {
            (tied && name == "lm_head.weight") || name.ends_with(".rotary_emb.inv_freq")
        })?;
        let config_path = dir.join(TOKENIZER_CONFIG_FILE);
        let source = folder.chat_template.ok_or_else(|| {
            ModelError::file(
                &config_path,
                "no chat_template (nor a chat_template.jinja file); use an instruct model",
            )
        })?;
        let chat_template = ChatTemplate::new(source, folder.bos_token, folder.eos_token)
            .map_err(|e| e.in_file(&config_path))?;
        Ok(Self {
            model,
            tokenizer: folder.tokenizer,
            chat_template,
            source: dir.to_owned(),
        })
    }

    /// The chat template and tokenizer, to encode prompts and decode generations.
    pub fn codec(&self) -> ChatCodec<'_> {
        ChatCodec::new(&self.tokenizer, &self.chat_template)
    }

    /// [`ChatCodec::encode_chat`] with this model's template and tokenizer.
    pub fn encode_chat(&self, messages: &[TemplateMessage<'_>]) -> Result<Vec<i64>, ModelError> {
        self.codec().encode_chat(messages)
    }

    /// [`ChatCodec::decode`] with this model's tokenizer.
    pub fn decode(&self, tokens: &[i64]) -> Result<String, ModelError> {
        self.codec().decode(tokens)
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
