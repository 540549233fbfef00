//! The GGUF container: header, metadata, tensor infos and the memory-mapped tensor data.
//!
//! Layout (all little-endian): magic `GGUF`, version `u32`, tensor count `u64`, metadata count
//! `u64`, the metadata key–value pairs, the tensor infos (name, dims innermost-first, type,
//! offset into the data section), padding to `general.alignment` (default 32), then the data.
//! Versions 2 and 3 share this layout (3 only added big-endian files, which we reject).

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::dequant;
use super::ggml_type::GgmlType;
use super::metadata::{Metadata, MetadataValue};
use super::GgufError;

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml tensors have at most four dimensions.
const MAX_DIMS: u32 = 4;
/// Arrays of arrays are legal; deeper nesting than this is a corrupt (or hostile) file.
const MAX_ARRAY_NESTING: usize = 8;

/// One tensor's description from the GGUF header.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    /// The GGUF tensor name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Dimensions in ggml order: innermost (contiguous) first.
    pub dims: Vec<u64>,
    /// Element type.
    pub ty: GgmlType,
    /// Absolute byte offset of the data in the file.
    pub start: u64,
    /// Number of elements.
    pub elements: u64,
}

impl TensorInfo {
    /// The row-major (PyTorch / Hugging Face) shape: the ggml dims reversed.
    pub fn shape(&self) -> Vec<usize> {
        // Dims were checked at open: their product (hence each) fits in usize.
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }

    /// Byte length of the data, `None` when the type's layout is unknown.
    pub fn byte_len(&self) -> Option<u64> {
        let layout = self.ty.layout()?;
        Some(self.elements / layout.block_elements as u64 * layout.block_bytes as u64)
    }
}

/// An open GGUF file.
#[derive(Debug)]
pub struct GgufFile {
    path: PathBuf,
    map: Mmap,
    version: u32,
    alignment: u64,
    data_offset: u64,
    metadata: Metadata,
    tensors: Vec<TensorInfo>,
    by_name: BTreeMap<String, usize>,
}

impl GgufFile {
    /// Maps and parses the file at `path`, checking every tensor of a known type lies inside it.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, GgufError> {
        let path = path.as_ref().to_owned();
        let io = |source| GgufError::Io {
            path: path.clone(),
            source,
        };
        let file = File::open(&path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len < MAGIC.len() as u64 {
            let what = "the magic".to_owned();
            return Err(GgufError::Truncated {
                path,
                what,
                start: 0,
                end: 4,
                len,
            });
        }
        // SAFETY: the map is read-only and private to this value. Like every memory-mapped
        // reader we rely on the file not being truncated or rewritten while it is open;
        // model files are written once and then only read.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let header = parse(&path, &map)?;
        let by_name = header
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(Self {
            metadata: Metadata::new(path.clone(), header.metadata),
            path,
            map,
            version: header.version,
            alignment: header.alignment,
            data_offset: header.data_offset,
            tensors: header.tensors,
            by_name,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Alignment of the tensor data (`general.alignment`, default 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute offset of the tensor data section.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// The metadata.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// All tensor infos, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor named `name` (GGUF name).
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// The raw bytes of `tensor`; an error when its type is unknown.
    pub fn tensor_bytes(&self, tensor: &TensorInfo) -> Result<&[u8], GgufError> {
        let len = tensor.byte_len().ok_or_else(|| self.unsupported(tensor))?;
        // In bounds: checked at open for every tensor of a known type.
        let start = tensor.start as usize;
        Ok(&self.map[start..start + len as usize])
    }

    /// `tensor` dequantised to f32, in ggml (flat, innermost-first) order.
    pub fn dequantize(&self, tensor: &TensorInfo) -> Result<Vec<f32>, GgufError> {
        let bytes = self.tensor_bytes(tensor)?;
        dequant::dequantize(tensor.ty, bytes).ok_or_else(|| self.unsupported(tensor))
    }

    fn unsupported(&self, tensor: &TensorInfo) -> GgufError {
        GgufError::UnsupportedType {
            path: self.path.clone(),
            tensor: tensor.name.clone(),
            ty: tensor.ty.name(),
        }
    }
}

/// What the header says, before the file is wrapped up.
struct Header {
    version: u32,
    alignment: u64,
    data_offset: u64,
    metadata: BTreeMap<String, MetadataValue>,
    tensors: Vec<TensorInfo>,
}

fn parse(path: &Path, bytes: &[u8]) -> Result<Header, GgufError> {
    let mut r = Cursor {
        path,
        bytes,
        pos: 0,
    };
    let magic = r.take(4, "the magic")?;
    if magic != MAGIC {
        return Err(GgufError::BadMagic {
            path: path.to_owned(),
            found: magic.to_vec(),
        });
    }
    let version = r.u32("the version")?;
    if !(2..=3).contains(&version) {
        return Err(GgufError::UnsupportedVersion {
            path: path.to_owned(),
            version,
        });
    }
    let tensor_count = r.u64("the tensor count")?;
    let kv_count = r.u64("the metadata count")?;

    let mut metadata = BTreeMap::new();
    for _ in 0..kv_count {
        let key = r.string("a metadata key")?;
        let ty = r.u32(&format!("the type of metadata key {key}"))?;
        let value = r.value(ty, &key, 0)?;
        if metadata.insert(key.clone(), value).is_some() {
            return Err(r.malformed(format!("metadata key {key} appears twice")));
        }
    }
    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(MetadataValue::U32(a)) if a.is_power_of_two() => u64::from(*a),
        Some(other) => {
            let what = format!("general.alignment must be a power-of-two UINT32, not {other:?}");
            return Err(r.malformed(what));
        }
    };

    // Every tensor info takes at least 24 bytes: cap the allocation by what is left.
    let left = (bytes.len() - r.pos) as u64 / 24;
    let mut infos = Vec::with_capacity(tensor_count.min(left) as usize);
    for _ in 0..tensor_count {
        infos.push(r.tensor_info()?);
    }
    let data_offset = (r.pos as u64).div_ceil(alignment) * alignment;

    let tensors = infos
        .into_iter()
        .map(|raw| r.locate(data_offset, alignment, raw))
        .collect::<Result<_, _>>()?;
    Ok(Header {
        version,
        alignment,
        data_offset,
        metadata,
        tensors,
    })
}

/// A tensor info as read, before it is checked and placed in the file.
struct RawTensor {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    offset: u64,
}

/// A bounds-checked little-endian reader over the file's bytes.
struct Cursor<'a> {
    path: &'a Path,
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8], GgufError> {
        let end = (self.pos as u64).saturating_add(n);
        if end > self.bytes.len() as u64 {
            return Err(GgufError::Truncated {
                path: self.path.to_owned(),
                what: what.to_owned(),
                start: self.pos as u64,
                end,
                len: self.bytes.len() as u64,
            });
        }
        let slice = &self.bytes[self.pos..end as usize];
        self.pos = end as usize;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], GgufError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N as u64, what)?);
        Ok(out)
    }

    fn u32(&mut self, what: &str) -> Result<u32, GgufError> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64, GgufError> {
        self.array(what).map(u64::from_le_bytes)
    }

    fn string(&mut self, what: &str) -> Result<String, GgufError> {
        let len = self.u64(what)?;
        let raw = self.take(len, what)?;
        String::from_utf8(raw.to_vec())
            .map_err(|e| self.malformed(format!("{what} is not UTF-8: {e}")))
    }

    fn value(&mut self, ty: u32, key: &str, depth: usize) -> Result<MetadataValue, GgufError> {
        let what = format!("the value of metadata key {key}");
        let what = what.as_str();
        Ok(match ty {
            0 => MetadataValue::U8(u8::from_le_bytes(self.array(what)?)),
            1 => MetadataValue::I8(i8::from_le_bytes(self.array(what)?)),
            2 => MetadataValue::U16(u16::from_le_bytes(self.array(what)?)),
            3 => MetadataValue::I16(i16::from_le_bytes(self.array(what)?)),
            4 => MetadataValue::U32(u32::from_le_bytes(self.array(what)?)),
            5 => MetadataValue::I32(i32::from_le_bytes(self.array(what)?)),
            6 => MetadataValue::F32(f32::from_le_bytes(self.array(what)?)),
            7 => match self.array::<1>(what)? {
                [0] => MetadataValue::Bool(false),
                [1] => MetadataValue::Bool(true),
                [b] => return Err(self.malformed(format!("{what} is a BOOL of {b}"))),
            },
            8 => MetadataValue::String(self.string(what)?),
            9 => {
                if depth >= MAX_ARRAY_NESTING {
                    return Err(self.malformed(format!("{what} nests arrays too deeply")));
                }
                let item_ty = self.u32(what)?;
                let len = self.u64(what)?;
                // Every item takes at least one byte: cap the allocation by what is left.
                let left = (self.bytes.len() - self.pos) as u64;
                let mut items = Vec::with_capacity(len.min(left) as usize);
                for _ in 0..len {
                    items.push(self.value(item_ty, key, depth + 1)?);
                }
                MetadataValue::Array(items)
            }
            10 => MetadataValue::U64(u64::from_le_bytes(self.array(what)?)),
            11 => MetadataValue::I64(i64::from_le_bytes(self.array(what)?)),
            12 => MetadataValue::F64(f64::from_le_bytes(self.array(what)?)),
            other => return Err(self.malformed(format!("{what} has unknown value type {other}"))),
        })
    }

    fn tensor_info(&mut self) -> Result<RawTensor, GgufError> {
        let name = self.string("a tensor name")?;
        let what = format!("the info of tensor {name}");
        let n_dims = self.u32(&what)?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(self.malformed(format!("tensor {name} has {n_dims} dimensions")));
        }
        let dims = (0..n_dims)
            .map(|_| self.u64(&what))
            .collect::<Result<Vec<_>, _>>()?;
        let ty = GgmlType::from_id(self.u32(&what)?);
        let offset = self.u64(&what)?;
        Ok(RawTensor {
            name,
            dims,
            ty,
            offset,
        })
    }

    /// Checks one tensor's dims, alignment and bounds, and places it in the file.
    fn locate(
        &self,
        data_offset: u64,
        alignment: u64,
        raw: RawTensor,
    ) -> Result<TensorInfo, GgufError> {
        let RawTensor {
            name,
            dims,
            ty,
            offset,
        } = raw;
        let file_len = self.bytes.len() as u64;
        let bad = |what: String| GgufError::BadTensor {
            path: self.path.to_owned(),
            tensor: name.clone(),
            what,
        };
        let elements = dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .filter(|&n| usize::try_from(n).is_ok())
            .ok_or_else(|| bad(format!("dims {dims:?} have too many elements")))?;
        if !offset.is_multiple_of(alignment) {
            return Err(bad(format!(
                "data offset {offset} is not a multiple of {alignment}"
            )));
        }
        let start = data_offset
            .checked_add(offset)
            .ok_or_else(|| bad(format!("data offset {offset} is out of range")))?;
        if let Some(layout) = ty.layout() {
            let row = dims[0];
            let block = layout.block_elements as u64;
            if !row.is_multiple_of(block) {
                return Err(bad(format!(
                    "rows of {row} elements are not whole {ty} blocks of {block}"
                )));
            }
            // Dims that claim more bytes than any file holds end past this one too.
            let end = (elements / block)
                .checked_mul(layout.block_bytes as u64)
                .and_then(|bytes| start.checked_add(bytes))
                .unwrap_or(u64::MAX);
            if end > file_len {
                let path = self.path.to_owned();
                return Err(GgufError::TensorOutOfBounds {
                    path,
                    tensor: name,
                    start,
                    end,
                    len: file_len,
                });
            }
        }
        Ok(TensorInfo {
            name,
            dims,
            ty,
            start,
            elements,
        })
    }

    fn malformed(&self, what: String) -> GgufError {
        GgufError::Malformed {
            path: self.path.to_owned(),
            what,
        }
    }
}
