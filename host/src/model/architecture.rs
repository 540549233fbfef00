//! [`Architecture`]: the decoder families this crate implements, with their Hugging Face and
//! GGUF names.

/// A Llama-family decoder architecture. All three run on the same [`super::llama::Llama`]
/// network; they differ in attention options and defaults (see [`super::config::LlamaConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// Llama 2/3, SmolLM, Mistral-style models: `LlamaForCausalLM`, GGUF `llama`.
    Llama,
    /// Qwen2 and Qwen2.5 (q/k/v projection biases): `Qwen2ForCausalLM`, GGUF `qwen2`.
    Qwen2,
    /// Qwen3 (per-head q/k RMSNorm): `Qwen3ForCausalLM`, GGUF `qwen3`.
    Qwen3,
}

impl Architecture {
    /// Every supported architecture.
    pub const ALL: [Self; 3] = [Self::Llama, Self::Qwen2, Self::Qwen3];

    /// The architecture named `name` in `general.architecture`, if supported.
    pub fn from_gguf(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.gguf_name() == name)
    }

    /// The architecture of the Hugging Face model class `class` (`architectures` in
    /// `config.json`), if supported. The bare `*Model` classes count as their causal LMs.
    pub fn from_hf_class(class: &str) -> Option<Self> {
        match class {
            "LlamaForCausalLM" | "LlamaModel" => Some(Self::Llama),
            "Qwen2ForCausalLM" | "Qwen2Model" => Some(Self::Qwen2),
            "Qwen3ForCausalLM" | "Qwen3Model" => Some(Self::Qwen3),
            _ => None,
        }
    }

    /// The architecture of the Hugging Face `model_type`, if supported.
    pub fn from_model_type(model_type: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.model_type() == model_type)
    }

    /// The GGUF name, also the prefix of its metadata keys (`llama.block_count`).
    pub fn gguf_name(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
            Self::Qwen3 => "qwen3",
        }
    }

    /// The Hugging Face `model_type`.
    pub fn model_type(self) -> &'static str {
        self.gguf_name()
    }

    /// The Hugging Face model class, for `architectures` in `config.json`.
    pub fn hf_class(self) -> &'static str {
        match self {
            Self::Llama => "LlamaForCausalLM",
            Self::Qwen2 => "Qwen2ForCausalLM",
            Self::Qwen3 => "Qwen3ForCausalLM",
        }
    }

    /// Whether llama.cpp's converter permuted the Q/K projection rows (see
    /// [`super::gguf::permute`]).
    pub fn permutes_qk(self) -> bool {
        matches!(self, Self::Llama)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for arch in Architecture::ALL {
            assert_eq!(Architecture::from_gguf(arch.gguf_name()), Some(arch));
            assert_eq!(Architecture::from_hf_class(arch.hf_class()), Some(arch));
            assert_eq!(Architecture::from_model_type(arch.model_type()), Some(arch));
        }
        assert_eq!(Architecture::from_hf_class("MistralForCausalLM"), None);
    }
}
