//! Everything that can go wrong building, loading or running a model, each naming what it is about.

use std::path::PathBuf;

use super::gguf::GgufError;

/// A model that cannot be configured, loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The GGUF file could not be read.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// A model file or folder that is missing, unreadable or malformed.
    #[error("{path}: {what}")]
    File {
        /// The file (or folder).
        path: PathBuf,
        /// What is wrong with it.
        what: String,
    },
    /// An error about the contents of one file (a tensor of a safetensors shard, a field of a
    /// `config.json`).
    #[error("{path}: {source}")]
    InFile {
        /// The file.
        path: PathBuf,
        /// What is wrong in it.
        source: Box<ModelError>,
    },
    /// A configuration field (of `config.json`, GGUF metadata or a chat template) that is
    /// missing or holds something unusable.
    #[error("{0}")]
    Config(String),
    /// A `config.json` whose `architectures` this model family does not implement.
    #[error("architecture {found} is not supported by {model} (expected {expected})")]
    UnsupportedArchitecture {
        /// The model family that was asked to load it.
        model: &'static str,
        /// The architectures the family implements.
        expected: &'static str,
        /// What `architectures` (or `model_type`) says.
        found: String,
    },
    /// A weight whose shape differs from the one the configuration implies.
    #[error("tensor {tensor}: expected shape {expected:?}, found {found:?}")]
    Shape {
        /// The Hugging Face tensor name.
        tensor: String,
        /// The shape the model allocated for it.
        expected: Vec<i64>,
        /// The shape in the checkpoint.
        found: Vec<usize>,
    },
    /// A weight whose value count does not match its declared shape.
    #[error("tensor {tensor}: shape {shape:?} needs {expected} values, found {found}")]
    DataLength {
        /// The Hugging Face tensor name.
        tensor: String,
        /// Its declared shape.
        shape: Vec<usize>,
        /// The product of the shape.
        expected: usize,
        /// The number of values given.
        found: usize,
    },
    /// A weight holding NaN or infinite values.
    #[error(
        "tensor {tensor} holds {count} NaN or infinite value(s); the file is corrupt or comes \
         from a diverged training run"
    )]
    NonFinite {
        /// The Hugging Face tensor name.
        tensor: String,
        /// How many of its values are not finite.
        count: i64,
    },
    /// A weight the model needs that the checkpoint does not have.
    #[error("tensor {0} is missing from the checkpoint")]
    MissingTensor(String),
    /// A checkpoint weight the model has no place for (a different architecture or size).
    #[error("tensor {0} in the checkpoint has no counterpart in the model")]
    UnexpectedTensor(String),
    /// A tensor stored in a dtype this crate cannot load.
    #[error("tensor {tensor}: dtype {dtype} is not supported (supported: F32, F16, BF16)")]
    Dtype {
        /// The Hugging Face tensor name.
        tensor: String,
        /// The dtype the checkpoint declares.
        dtype: String,
    },
    /// Inputs of inconsistent shapes, or a KV cache too small for them.
    #[error("{0}")]
    Input(String),
    /// libtorch reported an error.
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
}

impl ModelError {
    /// This error, said to be about `path`.
    pub fn in_file(self, path: impl Into<PathBuf>) -> Self {
        Self::InFile {
            path: path.into(),
            source: Box::new(self),
        }
    }

    /// A [`ModelError::File`] error about `path`.
    pub fn file(path: impl Into<PathBuf>, what: impl std::fmt::Display) -> Self {
        Self::File {
            path: path.into(),
            what: what.to_string(),
        }
    }
}
