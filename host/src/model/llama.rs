//! [`Llama`]: the Llama-family decoder (Llama 2/3, SmolLM, Qwen2, Qwen3) on libtorch, with HF
//! parameter names.

use std::path::Path;

use tch::nn::VarStore;
use tch::{Device, Kind, Tensor};

use super::config::LlamaConfig;
use super::error::ModelError;
use super::gguf::GgufModel;
use super::kernels::DecodeMatmul;
use super::layers::{
    AdapterRows, AttentionConfig, AttentionContext, DecoderLayer, KvCache, Projection, RmsNorm,
    Rotary,
};
use super::lora::Adapters;
use super::weights::load_into;

/// A Llama-family causal LM whose weights live in a [`VarStore`] under HF names
/// (`model.embed_tokens.weight`, `model.layers.N.self_attn.q_proj.weight`, …, `lm_head.weight`
/// unless tied to the embeddings), so HF checkpoints load by name and optimisers see them all.
///
/// One network implements the three supported architectures (see
/// [`super::architecture::Architecture`]): Qwen2 is Llama with q/k/v projection biases, Qwen3
/// is Llama with per-head q/k RMSNorm; [`LlamaConfig`] switches them on.
#[derive(Debug)]
pub struct Llama {
    vs: VarStore,
    config: LlamaConfig,
    embed_tokens: Tensor,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    lm_head: Tensor,
    /// The decode kernel's copy of `lm_head` (see [`Llama::logits`]).
    lm_head_decode: DecodeMatmul,
    rotary: Rotary,
    adapters: Option<Adapters>,
}

impl Llama {
    /// A model of `config` on `device` with f32 placeholder weights (zeros, norms at one), to
    /// be overwritten by a checkpoint.
    pub fn new(config: LlamaConfig, device: Device) -> Self {
        Self::with_kind(config, device, Kind::Float)
    }

    /// Like [`Llama::new`], with weights of dtype `kind` (`Float`, `BFloat16`, `Half`).
    pub fn with_kind(config: LlamaConfig, device: Device, kind: Kind) -> Self {
        let mut vs = VarStore::new(device);
        vs.set_kind(kind);
        let root = vs.root();
        let model = &root / "model";
        let c = &config;
        let hidden = c.hidden_size as i64;
        let embed_tokens =
            (&model / "embed_tokens").zeros("weight", &[c.vocab_size as i64, hidden]);
        let attention = AttentionConfig {
            hidden,
            heads: c.num_attention_heads as i64,
            kv_heads: c.num_key_value_heads as i64,
            head_dim: c.head_dim as i64,
            qkv_bias: c.attention_bias,
            qk_norm: c.qk_norm.then_some(c.rms_norm_eps),
        };
        let layers_path = &model / "layers";
        let layers = (0..c.num_hidden_layers)
            .map(|i| {
                DecoderLayer::new(
                    &(&layers_path / i),
                    attention,
                    c.intermediate_size as i64,
                    c.rms_norm_eps,
                )
            })
            .collect();
        let norm = RmsNorm::new(&(&model / "norm"), hidden, c.rms_norm_eps);
        let lm_head = if c.tie_word_embeddings {
            embed_tokens.shallow_clone()
        } else {
            (&root / "lm_head").zeros("weight", &[c.vocab_size as i64, hidden])
        };
        let rotary = Rotary::new(
            c.head_dim,
            c.rope_theta,
            c.rope_scaling.as_ref(),
            c.max_position_embeddings,
            device,
        );
        Self {
            vs,
            config,
            embed_tokens,
            layers,
            norm,
            lm_head,
            lm_head_decode: DecodeMatmul::default(),
            rotary,
            adapters: None,
        }
    }

    /// Loads the GGUF model at `path` onto `device`, dequantised to f32.
    pub fn load_from_gguf(path: impl AsRef<Path>, device: Device) -> Result<Self, ModelError> {
        Self::from_gguf(&GgufModel::open(path)?, device)
    }

    /// Builds the model `gguf` describes and copies its weights in (see [`load_into`]).
    pub fn from_gguf(gguf: &GgufModel, device: Device) -> Result<Self, ModelError> {
        let config = LlamaConfig::from_json(&gguf.config_json()?)?;
        let model = Self::new(config, device);
        load_into(&model.vs, gguf.tensors())?;
        Ok(model)
    }

    /// The configuration.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// The base model's variables (for optimisers, saving, moving to another device); LoRA
    /// adapters have their own (see [`Self::adapters`]).
    pub fn var_store(&self) -> &VarStore {
        &self.vs
    }

    /// The LoRA adapters attached by [`Self::add_adapters`], if any.
    pub fn adapters(&self) -> Option<&Adapters> {
        self.adapters.as_ref()
    }

    /// Records the adapters [`Self::add_adapters`] attached to the projections.
    pub(crate) fn set_adapters(&mut self, adapters: Adapters) {
        self.adapters = Some(adapters);
    }

    /// Detaches every LoRA adapter: the model is the base model again.
    pub(crate) fn remove_adapters(&mut self) {
        for (_, projection) in self.projections_mut() {
            projection.detach();
        }
        self.adapters = None;
    }

    /// Every projection of every layer with its HF module name
    /// (`model.layers.N.self_attn.q_proj`, …, `model.layers.N.mlp.down_proj`).
    pub fn projections(&self) -> Vec<(String, &Projection)> {
        let layers = self.layers.iter().enumerate();
        layers
            .flat_map(|(i, layer)| {
                let named = layer.projections().into_iter();
                named.map(move |(name, p)| (format!("model.layers.{i}.{name}"), p))
            })
            .collect()
    }

    /// The projections as [`Self::projections`], to attach adapters to.
    pub(crate) fn projections_mut(&mut self) -> Vec<(String, &mut Projection)> {
        let layers = self.layers.iter_mut().enumerate();
        layers
            .flat_map(|(i, layer)| {
                let named = layer.projections_mut().into_iter();
                named.map(move |(name, p)| (format!("model.layers.{i}.{name}"), p))
            })
            .collect()
    }

    /// The dtype of the weights.
    pub fn kind(&self) -> Kind {
        self.embed_tokens.kind()
    }

    /// Casts every weight to `kind` (after merging an adapter in f32, say).
    pub fn set_kind(&mut self, kind: Kind) {
        self.vs.set_kind(kind);
    }

    /// Stops gradients to every weight (a frozen reference model).
    pub fn freeze(&mut self) {
        self.vs.freeze();
    }

    /// An empty KV cache for `batch` sequences of up to `max_len` tokens, in the model's
    /// dtype and device.
    pub fn new_cache(&self, batch: i64, max_len: i64) -> Result<KvCache, ModelError> {
        if max_len > self.rotary.max_positions() {
            return Err(ModelError::Input(format!(
                "a cache of {max_len} tokens is longer than the model's {} positions",
                self.rotary.max_positions()
            )));
        }
        let c = &self.config;
        Ok(KvCache::new(
            c.num_hidden_layers,
            batch,
            c.num_key_value_heads as i64,
            c.head_dim as i64,
            max_len,
            (self.embed_tokens.kind(), self.vs.device()),
        ))
    }

    /// Logits `[B, T, vocab]` for `input_ids` `[B, T]` (int64): [`Self::forward_hidden`]
    /// followed by [`Self::logits`].
    pub fn forward(
        &self,
        input_ids: &Tensor,
        attention_mask: Option<&Tensor>,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor, ModelError> {
        Ok(self.logits(&self.forward_hidden(input_ids, attention_mask, cache)?))
    }

    /// The LM head: logits `[…, vocab]` of final hidden states `[…, hidden]`. Training applies
    /// it to the response positions only, which saves most of the head's cost. Decode steps
    /// (few rows, no autograd) run it on the decode kernel.
    pub fn logits(&self, hidden: &Tensor) -> Tensor {
        self.lm_head_decode
            .forward(hidden, &self.lm_head, None)
            .unwrap_or_else(|| hidden.linear::<Tensor>(&self.lm_head, None))
    }

    /// Logits `[B, 1, vocab]` of the last position only, otherwise as [`Llama::forward`]: what
    /// generation needs (the next token), without the LM head over every prompt position.
    /// With left padding the last position is every sequence's last token.
    pub fn forward_last(
        &self,
        input_ids: &Tensor,
        attention_mask: Option<&Tensor>,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor, ModelError> {
        self.forward_last_with(input_ids, attention_mask, cache, &AdapterRows::base())
    }

    /// [`Self::forward_last`] with each row through the LoRA adapter `rows` gives it.
    pub fn forward_last_with(
        &self,
        input_ids: &Tensor,
        attention_mask: Option<&Tensor>,
        cache: Option<&mut KvCache>,
        rows: &AdapterRows,
    ) -> Result<Tensor, ModelError> {
        let hidden = self.forward_hidden_with(input_ids, attention_mask, cache, rows)?;
        Ok(self.logits(&hidden.narrow(1, hidden.size()[1] - 1, 1)))
    }

    /// Final (normed) hidden states `[B, T, hidden]` for `input_ids` `[B, T]` (int64).
    ///
    /// `attention_mask` `[B, T]` (1 = token, 0 = left padding; all ones when `None`) keeps
    /// padding out of attention and RoPE positions. With a `cache` the tokens follow those
    /// already cached (prefill when it is empty, decode after) and are added to it; without
    /// one they are a whole sequence (the training forward). LoRA adapters, if any, are left
    /// out: this is the base model.
    pub fn forward_hidden(
        &self,
        input_ids: &Tensor,
        attention_mask: Option<&Tensor>,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor, ModelError> {
        self.forward_hidden_with(input_ids, attention_mask, cache, &AdapterRows::base())
    }

    /// [`Self::forward_hidden`] with row `i` through the LoRA adapter `rows` gives it (the base
    /// model for rows without one).
    pub fn forward_hidden_with(
        &self,
        input_ids: &Tensor,
        attention_mask: Option<&Tensor>,
        mut cache: Option<&mut KvCache>,
        rows: &AdapterRows,
    ) -> Result<Tensor, ModelError> {
        let size = input_ids.size();
        let (&[b, t], true) = (&size[..], size.iter().all(|&d| d > 0)) else {
            return Err(ModelError::Input(format!(
                "input_ids: expected a non-empty shape [batch, tokens], found {size:?}"
            )));
        };
        if !rows.is_base() {
            let slots = self.adapters.as_ref().map_or(0, Adapters::slots);
            if rows.slots().len() as i64 != b {
                return Err(ModelError::Input(format!(
                    "adapter rows: {} for a batch of {b}",
                    rows.slots().len()
                )));
            }
            if let Some(slot) = rows.slots().iter().flatten().find(|&&s| s >= slots) {
                return Err(ModelError::Input(format!(
                    "LoRA adapter {slot} does not exist; the model has {slots}"
                )));
            }
        }
        let valid = match attention_mask {
            Some(mask) if mask.size() != size => {
                return Err(ModelError::Input(format!(
                    "attention_mask: expected shape {size:?} like input_ids, found {:?}",
                    mask.size()
                )))
            }
            Some(mask) => mask.to_kind(Kind::Bool),
            None => Tensor::ones([b, t], (Kind::Bool, input_ids.device())),
        };
        let context = match cache.as_deref_mut() {
            Some(cache) => {
                if cache.batch() != b || cache.len() + t > cache.max_len() {
                    return Err(ModelError::Input(format!(
                        "{b} sequences of {t} tokens do not fit a cache of {} sequences \
                         holding {} of {} tokens",
                        cache.batch(),
                        cache.len(),
                        cache.max_len()
                    )));
                }
                let offset = cache.len();
                let (key_valid, seen) = cache.reserve(&valid);
                AttentionContext::new(&key_valid, &seen, &valid, offset)
            }
            None if t > self.rotary.max_positions() => {
                return Err(ModelError::Input(format!(
                    "{t} tokens are more than the model's {} positions",
                    self.rotary.max_positions()
                )))
            }
            None => AttentionContext::full(&valid),
        };
        let vocab = self.config.vocab_size as i64;
        let (lo, hi) = (
            input_ids.min().int64_value(&[]),
            input_ids.max().int64_value(&[]),
        );
        if lo < 0 || hi >= vocab {
            return Err(ModelError::Input(format!(
                "input_ids: token ids must be in 0..{vocab}, found {lo}..={hi}"
            )));
        }
        let mut x = Tensor::embedding(&self.embed_tokens, input_ids, -1, false, false);
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(
                &x,
                &self.rotary,
                &context,
                cache.as_deref_mut().map(|c| (c, i)),
                rows,
            );
        }
        if let Some(cache) = cache {
            cache.advance(&valid);
        }
        Ok(self.norm.forward(&x))
    }
}
