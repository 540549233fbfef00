//! Whether a configuration fits its weight file, from the file's header alone: the shapes the
//! configuration implies for the embeddings, the first layer's projections and the final norm,
//! and its layer count, against the tensors' declared shapes. Checked before the model is
//! allocated, so a `config.json` that lies about a size fails in milliseconds, naming the field
//! and the tensor, instead of allocating what it says.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::config::LlamaConfig;
use super::error::ModelError;

/// A tensor's shape as a weight file's header declares it, and that file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    /// Row-major shape.
    pub shape: Vec<usize>,
    /// The file that holds it.
    pub file: PathBuf,
}

/// Every tensor of a checkpoint by its HF name.
pub type Shapes = BTreeMap<String, Declared>;

/// Fails when a tensor's declared shape differs from what `config` implies (naming the file,
/// the tensor, both shapes and the configuration fields involved), when a tensor the check needs
/// is missing from the checkpoint `names_file` stands for (its single file or its index), or
/// when the layers are not `0..num_hidden_layers`.
pub fn check_config_fits(
    config: &LlamaConfig,
    shapes: &Shapes,
    names_file: &Path,
) -> Result<(), ModelError> {
    let c = config;
    let queries = c.num_attention_heads * c.head_dim;
    let keys = c.num_key_value_heads * c.head_dim;
    let mut expected = vec![
        (
            "model.embed_tokens.weight",
            vec![c.vocab_size, c.hidden_size],
            "vocab_size, hidden_size",
        ),
        ("model.norm.weight", vec![c.hidden_size], "hidden_size"),
        (
            "model.layers.0.self_attn.q_proj.weight",
            vec![queries, c.hidden_size],
            "num_attention_heads × head_dim, hidden_size",
        ),
        (
            "model.layers.0.self_attn.k_proj.weight",
            vec![keys, c.hidden_size],
            "num_key_value_heads × head_dim, hidden_size",
        ),
        (
            "model.layers.0.mlp.down_proj.weight",
            vec![c.hidden_size, c.intermediate_size],
            "hidden_size, intermediate_size",
        ),
    ];
    if !c.tie_word_embeddings {
        expected.push((
            "lm_head.weight",
            vec![c.vocab_size, c.hidden_size],
            "vocab_size, hidden_size",
        ));
    }
    for (tensor, shape, fields) in expected {
        match shapes.get(tensor) {
            None => return Err(ModelError::MissingTensor(tensor.to_owned()).in_file(names_file)),
            Some(found) if found.shape != shape => {
                return Err(ModelError::file(
                    &found.file,
                    format!(
                        "tensor {tensor} has shape {:?}, but the model's configuration \
                         ({fields}) implies {shape:?}: configuration and weights do not belong \
                         together",
                        found.shape
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    let layers: BTreeSet<usize> = shapes
        .keys()
        .filter_map(|name| {
            name.strip_prefix("model.layers.")?
                .split('.')
                .next()?
                .parse()
                .ok()
        })
        .collect();
    let counted = layers.last().map_or(0, |last| last + 1);
    if counted != c.num_hidden_layers || layers.len() != counted {
        return Err(ModelError::file(
            names_file,
            format!(
                "the model's configuration says num_hidden_layers = {}, but the weights hold {} \
                 layers (numbered up to {})",
                c.num_hidden_layers,
                layers.len(),
                counted.saturating_sub(1)
            ),
        ));
    }
    Ok(())
}
