//! [`GgufModel`]: a GGUF file seen as a Hugging Face checkpoint.

use std::path::Path;

use serde_json::Value;
use tokenizers::Tokenizer;

use super::architecture::Architecture;
use super::metadata::Metadata;
use super::names::{hf_name, LayerPart, TensorName};
use super::reader::{GgufFile, TensorInfo};
use super::{config, permute, tokenizer, GgufError};

/// One weight under its Hugging Face name and row-major shape, as f32.
#[derive(Debug, Clone, PartialEq)]
pub struct HfTensor {
    /// The Hugging Face parameter name, e.g. `model.layers.0.self_attn.q_proj.weight`.
    pub name: String,
    /// Row-major shape, e.g. `[out_features, in_features]` for a linear weight.
    pub shape: Vec<usize>,
    /// The values, row-major.
    pub data: Vec<f32>,
}

/// An open GGUF model of a supported architecture whose tensors all have HF names.
#[derive(Debug)]
pub struct GgufModel {
    file: GgufFile,
    arch: Architecture,
    names: Vec<TensorName>,
}

impl GgufModel {
    /// Opens the model at `path`: parses and bounds-checks the file, checks the architecture
    /// is supported and that every tensor has a Hugging Face name.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, GgufError> {
        let file = GgufFile::open(path)?;
        let arch_name = file.metadata().str("general.architecture")?;
        let arch = Architecture::from_gguf(arch_name).ok_or_else(|| {
            GgufError::UnsupportedArchitecture {
                path: file.path().to_owned(),
                arch: arch_name.to_owned(),
            }
        })?;
        let names = file
            .tensors()
            .iter()
            .map(|t| {
                hf_name(&t.name).ok_or_else(|| GgufError::UnknownTensor {
                    path: file.path().to_owned(),
                    tensor: t.name.clone(),
                    arch: arch_name.to_owned(),
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { file, arch, names })
    }

    /// Fails naming the first tensor whose type this loader cannot dequantise; reads the header
    /// alone, so a file that could never load is refused before any weight is read.
    pub fn check_tensor_types(&self) -> Result<(), GgufError> {
        match self.file.tensors().iter().find(|t| t.ty.layout().is_none()) {
            Some(tensor) => Err(GgufError::UnsupportedType {
                path: self.file.path().to_owned(),
                tensor: tensor.name.clone(),
                ty: tensor.ty.name(),
            }),
            None => Ok(()),
        }
    }

    /// Every tensor's Hugging Face name and shape, from the header alone.
    pub fn hf_shapes(&self) -> crate::model::config_fit::Shapes {
        self.names
            .iter()
            .zip(self.file.tensors())
            .map(|(name, info)| {
                let declared = crate::model::config_fit::Declared {
                    shape: info.shape(),
                    file: self.file.path().to_owned(),
                };
                (name.hf.clone(), declared)
            })
            .collect()
    }

    /// The underlying file (raw tensor infos, bytes and GGUF-order dequantisation).
    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    /// The model architecture.
    pub fn architecture(&self) -> Architecture {
        self.arch
    }

    /// The GGUF metadata.
    pub fn metadata(&self) -> &Metadata {
        self.file.metadata()
    }

    /// A Hugging Face `config.json`.
    pub fn config_json(&self) -> Result<Value, GgufError> {
        config::hf_config(&self.file, self.arch)
    }

    /// A Hugging Face `tokenizer.json`.
    pub fn tokenizer_json(&self) -> Result<Value, GgufError> {
        tokenizer::hf_tokenizer_json(&self.file)
    }

    /// The tokenizer, loaded by the `tokenizers` crate from [`GgufModel::tokenizer_json`].
    pub fn tokenizer(&self) -> Result<Tokenizer, GgufError> {
        tokenizer::load(&self.file, &self.tokenizer_json()?)
    }

    /// The Jinja chat template, if the file has one.
    pub fn chat_template(&self) -> Result<Option<&str>, GgufError> {
        tokenizer::chat_template(&self.file)
    }

    /// Every weight, in file order, under its HF name and shape, dequantised and (for llama)
    /// with the Q/K rows back in HF order. Each item is computed when the iterator reaches it.
    pub fn tensors(&self) -> impl Iterator<Item = Result<HfTensor, GgufError>> + '_ {
        self.file
            .tensors()
            .iter()
            .zip(&self.names)
            .map(|(info, name)| self.load(info, name))
    }

    fn load(&self, info: &TensorInfo, name: &TensorName) -> Result<HfTensor, GgufError> {
        let shape = info.shape();
        let mut data = self.file.dequantize(info)?;
        if let Some(n_head) = self.permuted_heads(name)? {
            let rows = shape.first().copied().unwrap_or(1);
            let cols = data.len() / rows.max(1);
            data = permute::unpermute(&data, n_head, cols).ok_or_else(|| GgufError::BadTensor {
                path: self.file.path().to_owned(),
                tensor: info.name.clone(),
                what: format!("{rows} rows do not split into {n_head} heads of an even size"),
            })?;
        }
        Ok(HfTensor {
            name: name.hf.clone(),
            shape,
            data,
        })
    }

    /// The head count to un-permute `name` with, if llama.cpp permuted it.
    fn permuted_heads(&self, name: &TensorName) -> Result<Option<usize>, GgufError> {
        if !self.arch.permutes_qk() {
            return Ok(None);
        }
        let meta = self.file.metadata();
        let heads_key = format!("{}.attention.head_count", self.arch.gguf_name());
        match name.layer {
            Some((_, LayerPart::Query)) => meta.usize(&heads_key).map(Some),
            Some((_, LayerPart::Key)) => {
                let kv_key = format!("{heads_key}_kv");
                Ok(Some(
                    meta.opt_usize(&kv_key)?
                        .map_or_else(|| meta.usize(&heads_key), Ok)?,
                ))
            }
            _ => Ok(None),
        }
    }
}
