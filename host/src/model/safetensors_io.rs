//! Safetensors checkpoints as HF writes them: `model.safetensors`, or shards listed by
//! `model.safetensors.index.json`; read into a [`VarStore`] by name and written from one.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensorError, SafeTensors};
use serde_json::{json, Map, Value};
use tch::nn::VarStore;
use tch::{Device, Kind, Tensor};

use super::config_fit::{Declared, Shapes};
use super::error::ModelError;
use super::weights::WeightSink;

/// The single-file checkpoint's name.
pub const SINGLE_FILE: &str = "model.safetensors";
/// The index of a sharded checkpoint.
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// The safetensors files of the checkpoint in `dir`: `model.safetensors`, or every shard the
/// index names (each once, in name order). The second item is the file that names the set,
/// for errors about tensors missing from all of them.
pub fn checkpoint_files(dir: &Path) -> Result<(Vec<PathBuf>, PathBuf), ModelError> {
    let single = dir.join(SINGLE_FILE);
    if single.is_file() {
        return Ok((vec![single.clone()], single));
    }
    let index = dir.join(INDEX_FILE);
    if !index.is_file() {
        return Err(ModelError::file(
            dir,
            format!("no weights: neither {SINGLE_FILE} nor {INDEX_FILE} is there"),
        ));
    }
    let text = std::fs::read_to_string(&index).map_err(|e| ModelError::file(&index, e))?;
    let json: Value = serde_json::from_str(&text).map_err(|e| ModelError::file(&index, e))?;
    let map = json
        .get("weight_map")
        .and_then(Value::as_object)
        .ok_or_else(|| ModelError::file(&index, "no weight_map object"))?;
    let mut shards = BTreeSet::new();
    for (tensor, shard) in map {
        let shard = shard.as_str().ok_or_else(|| {
            ModelError::file(&index, format!("weight_map[{tensor:?}] is not a file name"))
        })?;
        if shard.contains('/') || shard.contains('\\') || shard == ".." {
            return Err(ModelError::file(
                &index,
                format!("shard {shard:?} is not a file name in the folder"),
            ));
        }
        shards.insert(shard.to_owned());
    }
    let files = shards
        .into_iter()
        .map(|shard| {
            let path = dir.join(&shard);
            if path.is_file() {
                Ok(path)
            } else {
                Err(ModelError::file(
                    &path,
                    format!("missing: {INDEX_FILE} lists this shard"),
                ))
            }
        })
        .collect::<Result<_, _>>()?;
    Ok((files, index))
}

/// Every tensor's name and shape in the checkpoint in `dir`, from the files' headers alone (no
/// weight is read), and the file that names the checkpoint's tensors (see [`checkpoint_files`]).
pub fn checkpoint_shapes(dir: &Path) -> Result<(Shapes, PathBuf), ModelError> {
    let (files, names_file) = checkpoint_files(dir)?;
    let mut shapes = Shapes::new();
    for path in &files {
        let file = File::open(path).map_err(|e| ModelError::file(path, e))?;
        // SAFETY: as in `load_file`: read-only, dropped before returning, never rewritten in place.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| ModelError::file(path, e))?;
        let (_, metadata) = SafeTensors::read_metadata(&map).map_err(|e| {
            ModelError::file(
                path,
                format!(
                    "not a valid safetensors file (truncated or corrupt?): {}",
                    explain(&e)
                ),
            )
        })?;
        for (name, info) in metadata.tensors() {
            let declared = Declared {
                shape: info.shape.clone(),
                file: path.clone(),
            };
            shapes.insert(name, declared);
        }
    }
    Ok((shapes, names_file))
}

/// Loads the checkpoint in `dir` into the variables of `vs` (converting dtypes), skipping the
/// tensors `skip` accepts.
///
/// Every other tensor must be a variable of the same shape, and every variable must be in the
/// checkpoint; errors name the file and the tensor. F32, F16 and BF16 tensors are supported.
pub fn load_checkpoint(
    vs: &VarStore,
    dir: &Path,
    skip: impl Fn(&str) -> bool,
) -> Result<(), ModelError> {
    let (files, names_file) = checkpoint_files(dir)?;
    let mut sink = WeightSink::new(vs);
    for path in &files {
        load_file(&mut sink, path, &skip).map_err(|e| match e {
            e @ (ModelError::File { .. } | ModelError::InFile { .. }) => e,
            e => e.in_file(path),
        })?;
    }
    sink.finish().map_err(|e| e.in_file(names_file))
}

fn load_file(
    sink: &mut WeightSink,
    path: &Path,
    skip: &impl Fn(&str) -> bool,
) -> Result<(), ModelError> {
    let file = File::open(path).map_err(|e| ModelError::file(path, e))?;
    // SAFETY: the map is read-only and dropped before this function returns; checkpoint files
    // are not rewritten in place (see `atomic_dir`), so nothing changes it while it is mapped.
    let map = unsafe { Mmap::map(&file) }.map_err(|e| ModelError::file(path, e))?;
    let tensors = SafeTensors::deserialize(&map).map_err(|e| {
        ModelError::file(
            path,
            format!(
                "not a valid safetensors file (truncated or corrupt?): {}",
                explain(&e)
            ),
        )
    })?;
    let mut views = tensors.tensors();
    views.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, view) in views {
        if skip(&name) {
            continue;
        }
        sink.check(&name, view.shape())?;
        sink.copy(&name, &tensor_from_view(&name, &view)?)?;
    }
    Ok(())
}

/// What a safetensors parse error means for someone holding the file.
fn explain(error: &SafeTensorError) -> String {
    match error {
        SafeTensorError::HeaderTooSmall => "shorter than the 8-byte header length".to_owned(),
        SafeTensorError::InvalidHeaderLength => {
            "the header runs past the end of the file".to_owned()
        }
        SafeTensorError::MetadataIncompleteBuffer => {
            "the tensor data is shorter or longer than the header says".to_owned()
        }
        SafeTensorError::InvalidHeader
        | SafeTensorError::InvalidHeaderStart
        | SafeTensorError::InvalidHeaderDeserialization => "the header is not JSON".to_owned(),
        other => other.to_string(),
    }
}

/// The safetensors name of `kind`, if it is a dtype checkpoints are saved in.
pub fn dtype_name(kind: Kind) -> Option<&'static str> {
    match kind {
        Kind::Float => Some("F32"),
        Kind::Half => Some("F16"),
        Kind::BFloat16 => Some("BF16"),
        _ => None,
    }
}

/// Writes `tensors` to the safetensors file `path` (in name order, with the
/// `{"format": "pt"}` metadata HF transformers checks for), one tensor in memory at a time.
/// Flushing it to disk is its folder's writer's choice ([`super::atomic_dir::Durability`]).
pub fn write_safetensors(
    path: &Path,
    tensors: &BTreeMap<String, Tensor>,
) -> Result<(), ModelError> {
    let mut header = Map::new();
    header.insert("__metadata__".to_owned(), json!({"format": "pt"}));
    let mut offset = 0usize;
    for (name, tensor) in tensors {
        let kind = tensor.kind();
        let dtype = dtype_name(kind).ok_or_else(|| ModelError::Dtype {
            tensor: name.clone(),
            dtype: format!("{kind:?}"),
        })?;
        let bytes = tensor.numel() * kind.elt_size_in_bytes();
        header.insert(
            name.clone(),
            json!({
                "dtype": dtype,
                "shape": tensor.size(),
                "data_offsets": [offset, offset + bytes],
            }),
        );
        offset += bytes;
    }
    let mut header = serde_json::to_vec(&Value::Object(header))
        .map_err(|e| ModelError::file(path, format!("header: {e}")))?;
    // Pad the header so the data starts 8-byte aligned, as the reference writer does.
    header.resize(header.len().next_multiple_of(8), b' ');
    let io = |e: std::io::Error| ModelError::file(path, e);
    let file = File::create(path).map_err(io)?;
    let mut out = BufWriter::new(file);
    out.write_all(&(header.len() as u64).to_le_bytes())
        .map_err(io)?;
    out.write_all(&header).map_err(io)?;
    let mut buffer = Vec::new();
    for (name, tensor) in tensors {
        let tensor = tensor.to_device(Device::Cpu).contiguous();
        let numel = tensor.numel();
        buffer.resize(numel * tensor.kind().elt_size_in_bytes(), 0);
        tensor
            .f_copy_data_u8(&mut buffer, numel)
            .map_err(|e| ModelError::file(path, format!("tensor {name}: {e}")))?;
        out.write_all(&buffer).map_err(io)?;
    }
    out.into_inner().map_err(|e| io(e.into_error()))?;
    Ok(())
}

/// The tensor a safetensors `view` named `name` holds (F32, F16 or BF16; other dtypes are an
/// error naming the tensor).
pub(crate) fn tensor_from_view(name: &str, view: &TensorView<'_>) -> Result<Tensor, ModelError> {
    let kind = match view.dtype() {
        Dtype::F32 => Kind::Float,
        Dtype::F16 => Kind::Half,
        Dtype::BF16 => Kind::BFloat16,
        other => {
            return Err(ModelError::Dtype {
                tensor: name.to_owned(),
                dtype: format!("{other:?}"),
            })
        }
    };
    let shape: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
    Ok(Tensor::f_from_data_size(view.data(), &shape, kind)?)
}
