//! [`Llama`]: the Llama-family decoder (Llama 2/3, SmolLM, Qwen2, Qwen3) on libtorch, with HF
//! parameter names.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use tch::nn::VarStore;
use tch::{Device, Kind, Tensor};

use super::backend::{self, Backend};
use super::config::LlamaConfig;
use super::error::ModelError;
use super::gguf::GgufModel;
use super::layers::{
    AdapterRows, AttentionConfig, AttentionContext, DecoderLayer, KvCache, LoraLinear, Past,
    Projection, PromptPrefix, RmsNorm, Rotary,
};
use super::lora::{variable_name, Adapters, LoraSettings};
use super::transfer::transfer;
use super::weights::load_into;
use crate::rng::SeededRng;

mod checkpointing;

pub use checkpointing::Checkpoints;

/// A Llama-family causal LM whose weights live in a [`VarStore`] under HF names
/// (`model.embed_tokens.weight`, `model.layers.N.self_attn.q_proj.weight`, …, `lm_head.weight`
/// unless tied to the embeddings), so HF checkpoints load by name and optimisers see them all.
///
/// One network implements the three supported architectures (see
/// [`super::architecture::Architecture`]): Qwen2 is Llama with q/k/v projection biases, Qwen3
/// is Llama with per-head q/k RMSNorm; [`LlamaConfig`] switches them on.
///
/// Its dense products and decode attention run on a [`Backend`] chosen when the model is built
/// ([`Self::set_backend`]; libtorch unless set), falling back to libtorch for whatever the
/// backend declines.
#[derive(Debug)]
pub struct Llama {
    vs: VarStore,
    config: LlamaConfig,
    embed_tokens: Tensor,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    lm_head: Tensor,
    rotary: Rotary,
    adapters: Option<Adapters>,
    backend: Arc<dyn Backend>,
}

/// Where a forward pass's token ids come from, which decides whether their range is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ids {
    /// From the caller: checked against the vocabulary (an id past it would fault the
    /// embedding lookup, on a GPU fatally for the process).
    Given,
    /// Drawn by the sampler over the model's own logits: in range by construction.
    Sampled,
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
            rotary,
            adapters: None,
            backend: backend::libtorch(),
        }
    }

    /// Loads the GGUF model at `path` onto `device`, dequantised to f32.
    pub fn load_from_gguf(path: impl AsRef<Path>, device: Device) -> Result<Self, ModelError> {
        Self::from_gguf(&GgufModel::open(path)?, device)
    }

    /// Builds the model `gguf` describes and copies its weights in (see [`load_into`]).
    pub fn from_gguf(gguf: &GgufModel, device: Device) -> Result<Self, ModelError> {
        gguf.check_tensor_types()?;
        let config = LlamaConfig::from_json(&gguf.config_json()?)?;
        super::config_fit::check_config_fits(&config, &gguf.hf_shapes(), gguf.file().path())?;
        let model = Self::new(config, device);
        load_into(&model.vs, gguf.tensors())?;
        Ok(model)
    }

    /// Runs the model's products on `backend` from now on (see [`Backend`]).
    pub fn set_backend(&mut self, backend: Arc<dyn Backend>) {
        self.backend = backend;
    }

    /// The backend the model's products run on.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
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

    /// The device the weights are on.
    pub fn device(&self) -> Device {
        self.vs.device()
    }

    /// Moves every weight (LoRA adapters included), its gradient and the rotary tables to
    /// `device`, in place: each variable keeps its identity, so the layers and an optimizer
    /// holding it follow, and dtypes and values are unchanged. Used to offload a worker group
    /// and bring it back.
    pub fn to_device(&mut self, device: Device) {
        move_variables(&mut self.vs, device);
        if let Some(adapters) = &mut self.adapters {
            move_variables(adapters.var_store_mut(), device);
        }
        self.rotary.to_device(device);
    }

    /// A copy with weights of its own (same config, dtype, device and backend; LoRA adapters
    /// left out): a critic starts from the model whose calls it values.
    pub fn duplicate(&self) -> Result<Self, ModelError> {
        let mut copy = Self::with_kind(self.config.clone(), self.device(), self.kind());
        copy.vs.copy(&self.vs)?;
        copy.backend = self.backend.clone();
        Ok(copy)
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
    /// it to the response positions only, which saves most of the head's cost. Runs on the
    /// model's backend where it takes the product.
    pub fn logits(&self, hidden: &Tensor) -> Tensor {
        self.backend
            .linear(hidden, &self.lm_head, None)
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

    /// [`Self::forward_last_with`] for a decode step of [`crate::engine::generate`]: `tokens`
    /// `[B, 1]` are the sampler's draws over this model's vocabulary, in range by construction,
    /// so the range check on the ids (on a GPU, two reads back to the host per step) is skipped.
    pub(crate) fn forward_last_sampled(
        &self,
        tokens: &Tensor,
        cache: &mut KvCache,
        rows: &AdapterRows,
    ) -> Result<Tensor, ModelError> {
        let hidden = self.forward_cached(tokens, None, Some(cache), rows, Ids::Sampled)?;
        Ok(self.logits(&hidden.narrow(1, hidden.size()[1] - 1, 1)))
    }

    /// Final (normed) hidden states `[B, T, hidden]` for `input_ids` `[B, T]` (int64).
    ///
    /// `attention_mask` `[B, T]` (1 = token, 0 = left padding; all ones when `None`) keeps
    /// padding out of attention and RoPE positions. With a `cache` the tokens follow those
    /// already cached (prefill when it is empty, decode after) and are added to it; without
    /// one they are whole sequences (training runs [`Self::forward_prompts`] and
    /// [`Self::forward_continuations`] instead, to share prompts). LoRA adapters, if any, are left
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
        cache: Option<&mut KvCache>,
        rows: &AdapterRows,
    ) -> Result<Tensor, ModelError> {
        self.forward_cached(input_ids, attention_mask, cache, rows, Ids::Given)
    }

    /// [`Self::forward_hidden_with`], the ids' range checked unless they are the sampler's.
    fn forward_cached(
        &self,
        input_ids: &Tensor,
        attention_mask: Option<&Tensor>,
        cache: Option<&mut KvCache>,
        rows: &AdapterRows,
        ids: Ids,
    ) -> Result<Tensor, ModelError> {
        let valid = self.checked_valid(input_ids, attention_mask, rows, ids)?;
        let (b, t) = (valid.size()[0], valid.size()[1]);
        let Some(cache) = cache else {
            self.check_positions(t)?;
            let context = AttentionContext::full(&valid);
            return Ok(self.run(input_ids, &context, &mut Past::None, rows));
        };
        cache.check_room(b, t).map_err(ModelError::Input)?;
        let context = cache.reserve(&valid);
        let hidden = self.run(input_ids, &context, &mut Past::Cache(cache), rows);
        cache.advance(&valid);
        Ok(hidden)
    }

    /// The prompt pass of shared-prompt training: final hidden states `[G, P, hidden]` of
    /// `G` left-padded prompts `input_ids` `[G, P]` (`attention_mask` as in
    /// [`Self::forward_hidden`]) and their keys and values, with autograd, for
    /// [`Self::forward_continuations`].
    pub fn forward_prompts(
        &self,
        input_ids: &Tensor,
        attention_mask: Option<&Tensor>,
        rows: &AdapterRows,
    ) -> Result<(Tensor, PromptPrefix), ModelError> {
        let valid = self.checked_valid(input_ids, attention_mask, rows, Ids::Given)?;
        self.check_positions(valid.size()[1])?;
        let mut prefix = PromptPrefix::new(&valid);
        let context = AttentionContext::full(&valid);
        let hidden = self.run(input_ids, &context, &mut Past::Record(&mut prefix), rows);
        Ok((hidden, prefix))
    }

    /// The response pass of shared-prompt training: final hidden states `[B, T, hidden]` of
    /// `input_ids` `[B, T]`, row `i` continuing prompt `prompts[i]` (`[B]` int64) of `prefix`.
    /// The new tokens are right-padded (`attention_mask` 1 on each row's first tokens, then 0);
    /// padding positions give hidden states that mean nothing.
    pub fn forward_continuations(
        &self,
        prefix: &PromptPrefix,
        prompts: &Tensor,
        input_ids: &Tensor,
        attention_mask: Option<&Tensor>,
        rows: &AdapterRows,
    ) -> Result<Tensor, ModelError> {
        let valid = self.checked_valid(input_ids, attention_mask, rows, Ids::Given)?;
        let (b, t) = (valid.size()[0], valid.size()[1]);
        if prefix.layers() != self.layers.len() {
            return Err(ModelError::Input(format!(
                "the prompt prefix has {} layers, the model {}: it was made by another model",
                prefix.layers(),
                self.layers.len()
            )));
        }
        if prompts.size() != [b] {
            return Err(ModelError::Input(format!(
                "prompts: expected one prompt index per row, shape [{b}], found {:?}",
                prompts.size()
            )));
        }
        let (lo, hi) = (
            prompts.min().int64_value(&[]),
            prompts.max().int64_value(&[]),
        );
        if lo < 0 || hi >= prefix.prompts() {
            return Err(ModelError::Input(format!(
                "prompts: indices must be in 0..{}, found {lo}..={hi}",
                prefix.prompts()
            )));
        }
        self.check_positions(prefix.width() + t)?;
        let context = prefix.context(prompts, &valid);
        Ok(self.run(
            input_ids,
            &context,
            &mut Past::Prefix(prefix, prompts),
            rows,
        ))
    }

    /// Checks `input_ids`, `attention_mask` and `rows` against each other and the model, and
    /// returns the real tokens `[B, T]` (bool).
    fn checked_valid(
        &self,
        input_ids: &Tensor,
        attention_mask: Option<&Tensor>,
        rows: &AdapterRows,
        ids: Ids,
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
        if ids == Ids::Given {
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
        }
        match attention_mask {
            Some(mask) if mask.size() != size => Err(ModelError::Input(format!(
                "attention_mask: expected shape {size:?} like input_ids, found {:?}",
                mask.size()
            ))),
            Some(mask) => Ok(mask.to_kind(Kind::Bool)),
            None => Ok(Tensor::ones([b, t], (Kind::Bool, input_ids.device()))),
        }
    }

    /// Fails when `len` positions are more than the rotary tables cover.
    fn check_positions(&self, len: i64) -> Result<(), ModelError> {
        if len > self.rotary.max_positions() {
            return Err(ModelError::Input(format!(
                "{len} tokens are more than the model's {} positions",
                self.rotary.max_positions()
            )));
        }
        Ok(())
    }

    /// The network proper on checked inputs: embedding, the layers over `past`, final norm.
    fn run(
        &self,
        input_ids: &Tensor,
        context: &AttentionContext,
        past: &mut Past<'_>,
        rows: &AdapterRows,
    ) -> Tensor {
        let mut x = Tensor::embedding(&self.embed_tokens, input_ids, -1, false, false);
        let angles = self.rotary.angles(&context.positions, x.kind());
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(&x, &angles, context, (past, i), rows, &*self.backend);
        }
        self.norm.forward(&x, &*self.backend)
    }
}

/// Moves `vs`'s variables and their gradients to `device` without replacing them (see
/// [`Llama::to_device`]); leaving a GPU, they go to pinned host memory ([`transfer`]).
pub(crate) fn move_variables(vs: &mut VarStore, device: Device) {
    tch::no_grad(|| {
        for mut variable in vs.variables().into_values() {
            let mut gradient = variable.grad();
            if gradient.defined() {
                gradient.set_data(&transfer(&gradient, device));
            }
            variable.set_data(&transfer(&variable, device));
        }
    });
    // Every variable is on `device` now: this only records it.
    vs.set_device(device);
}

/// LoRA: attaching adapters, their tensors by PEFT name, merging one into the base weights.
impl Llama {
    /// Freezes the base weights and attaches `slots` LoRA adapters of `settings` to every
    /// targeted projection, initialised as PEFT does: `A` Kaiming-uniform (`a = √5`, i.e.
    /// uniform in ±1/√in) from a stream seeded by `seed`, `B` zeros — so each adapter starts
    /// as the base model.
    pub fn add_adapters(
        &mut self,
        settings: &LoraSettings,
        slots: usize,
        seed: u64,
    ) -> Result<(), ModelError> {
        settings
            .check()
            .map_err(|e| ModelError::Config(format!("LoRA: {e}")))?;
        if self.adapters().is_some() {
            return Err(ModelError::Config(
                "the model already has LoRA adapters".to_owned(),
            ));
        }
        if slots == 0 {
            return Err(ModelError::Config("LoRA: no adapters asked for".to_owned()));
        }
        let (kind, device) = (self.kind(), self.var_store().device());
        let mut vs = VarStore::new(device);
        vs.set_kind(kind);
        let root = vs.root();
        let mut rng = SeededRng::new(seed);
        let rank = settings.rank;
        for (module, projection) in self.projections_mut() {
            let short = module.rsplit('.').next().unwrap_or_default();
            if !settings.targets(short) {
                continue;
            }
            let (in_dim, out_dim) = projection.dims();
            let bound = 1.0 / (in_dim as f32).sqrt();
            let path = module.split('.').fold(root.clone(), |p, part| &p / part);
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for slot in 0..slots {
                let values: Vec<f32> = (0..rank * in_dim)
                    .map(|_| (2.0 * rng.uniform() - 1.0) * bound)
                    .collect();
                let init = Tensor::from_slice(&values).view([rank, in_dim]);
                a.push((&path / "lora_A" / slot).var_copy("weight", &init));
                b.push((&path / "lora_B" / slot).zeros("weight", &[out_dim, rank]));
            }
            projection.attach(LoraLinear::new(a, b, settings.scaling(), settings.dropout));
        }
        self.freeze();
        self.set_adapters(Adapters::new(vs, settings.clone(), slots));
        Ok(())
    }

    /// `slot`'s tensors under PEFT's names without the `base_model.model.` prefix
    /// (`model.layers.N.self_attn.q_proj.lora_A.weight`), sharing storage with the variables.
    pub fn adapter_tensors(&self, slot: usize) -> Result<BTreeMap<String, Tensor>, ModelError> {
        let adapters = self.checked_adapters(slot)?;
        let variables = adapters.var_store().variables();
        let mut tensors = BTreeMap::new();
        for (module, projection) in self.projections() {
            if projection.lora().is_none() {
                continue;
            }
            for matrix in ["lora_A", "lora_B"] {
                let name = variable_name(&module, matrix, slot);
                let tensor = variables
                    .get(&name)
                    .ok_or_else(|| ModelError::MissingTensor(name.clone()))?;
                tensors.insert(format!("{module}.{matrix}.weight"), tensor.shallow_clone());
            }
        }
        Ok(tensors)
    }

    /// Adds adapter `slot`'s update `(alpha / r) · B A` to the base weight of every adapted
    /// projection (computed in f32) and removes all adapters: the model then computes what the
    /// adapter computed, as a plain model that saves and loads without LoRA.
    pub fn merge_adapter(&mut self, slot: usize) -> Result<(), ModelError> {
        self.checked_adapters(slot)?;
        let weights = self.var_store().variables();
        for (module, projection) in self.projections() {
            let Some(lora) = projection.lora() else {
                continue;
            };
            let name = format!("{module}.weight");
            let weight = weights
                .get(&name)
                .ok_or_else(|| ModelError::MissingTensor(name.clone()))?;
            let merged = weight.to_kind(Kind::Float) + lora.delta_weight(slot);
            tch::no_grad(|| weight.shallow_clone().copy_(&merged.to_kind(weight.kind())));
        }
        self.remove_adapters();
        Ok(())
    }

    /// The adapters, failing unless there are some and `slot` is one of them.
    pub(crate) fn checked_adapters(&self, slot: usize) -> Result<&Adapters, ModelError> {
        let adapters = self
            .adapters()
            .ok_or_else(|| ModelError::Input("the model has no LoRA adapters".to_owned()))?;
        if slot >= adapters.slots() {
            return Err(ModelError::Input(format!(
                "LoRA adapter {slot} does not exist; the model has {}",
                adapters.slots()
            )));
        }
        Ok(adapters)
    }
}
