//! The GGUF loader against the embedded default model (SmolLM2-135M-Instruct, Q4_1) and
//! against references computed independently by llama.cpp's gguf-py and HF tokenizers
//! (`scripts/fixtures/gguf_reference.py`).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use drmas_host::model::gguf::permute::permute;
use drmas_host::model::gguf::reader::GgufFile;
use drmas_host::model::gguf::{GgufError, GgufModel};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn read_json(name: &str) -> Value {
    let text = std::fs::read_to_string(fixture(name)).expect("fixture is committed");
    serde_json::from_str(&text).expect("fixture is JSON")
}

fn floats(value: &Value) -> Vec<f32> {
    let items = value.as_array().expect("an array of numbers");
    items
        .iter()
        .map(|v| v.as_f64().expect("a number") as f32)
        .collect()
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-6 * w.abs().max(1.0),
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}

#[test]
fn smollm2_metadata_and_config() {
    let model = GgufModel::open(common::model_path()).expect("SmolLM2 opens");
    let file = model.file();
    assert_eq!(file.version(), 3);
    assert_eq!(
        model.metadata().str("general.architecture").expect("arch"),
        "llama"
    );

    let mut counts = BTreeMap::new();
    for t in file.tensors() {
        *counts.entry(t.ty.name()).or_insert(0) += 1;
    }
    let counts: Vec<_> = counts.iter().map(|(ty, n)| (ty.as_str(), *n)).collect();
    assert_eq!(counts, [("F32", 61), ("Q4_1", 210), ("Q8_0", 1)]);
    assert!(
        file.tensor("output.weight").is_none(),
        "SmolLM2 ties its embeddings"
    );

    let config = model.config_json().expect("config");
    let want = serde_json::json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "num_hidden_layers": 30,
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "head_dim": 64,
        "vocab_size": 49152,
        "max_position_embeddings": 8192,
        "rope_theta": 100000.0,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": true,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "rope_scaling": null,
    });
    for (key, value) in want.as_object().expect("object") {
        assert_eq!(&config[key], value, "config.json {key}");
    }
    let tokens = model
        .metadata()
        .strings("tokenizer.ggml.tokens")
        .expect("tokens");
    assert_eq!(tokens[2], "<|im_end|>");
    let template = model
        .chat_template()
        .expect("template")
        .expect("SmolLM2 has one");
    assert!(template.contains("<|im_start|>"));
}

#[test]
fn smollm2_blocks_match_gguf_py() {
    let file = GgufFile::open(common::model_path()).expect("SmolLM2 opens");
    let reference = read_json("smollm2_gguf_blocks.json");
    let blocks = reference["blocks"].as_array().expect("blocks");
    assert!(blocks.len() >= 10);
    let mut cache: BTreeMap<String, Vec<f32>> = BTreeMap::new();
    for block in blocks {
        let name = block["tensor"].as_str().expect("tensor name");
        let info = file.tensor(name).expect("tensor is in the file");
        assert_eq!(
            info.ty.name(),
            block["type"].as_str().expect("type"),
            "{name}"
        );
        let values = cache
            .entry(name.to_owned())
            .or_insert_with(|| file.dequantize(info).expect("dequantises"));
        let offset = block["offset"].as_u64().expect("offset") as usize;
        let want = floats(&block["values"]);
        assert_close(
            &values[offset..offset + want.len()],
            &want,
            &format!("{name}@{offset}"),
        );
    }
}

#[test]
fn every_supported_type_matches_gguf_py() {
    let file = GgufFile::open(fixture("quant_types.gguf")).expect("fixture opens");
    let reference = read_json("quant_types.json");
    let reference = reference.as_object().expect("object");
    assert_eq!(file.tensors().len(), reference.len());
    for (name, want) in reference {
        let info = file.tensor(name).expect("tensor is in the file");
        assert_eq!(info.ty.name(), want["type"].as_str().expect("type"));
        assert_eq!(info.shape(), [2, 256], "{name}");
        let got = file.dequantize(info).expect("dequantises");
        assert_close(&got, &floats(&want["values"]), name);
    }
    let names: Vec<_> = reference
        .values()
        .map(|v| v["type"].as_str().expect("type"))
        .collect();
    for ty in [
        "F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K",
    ] {
        assert!(names.contains(&ty), "fixture covers {ty}");
    }
}

#[test]
fn smollm2_tokenizer_matches_hf_tokenizers() {
    let model = GgufModel::open(common::model_path()).expect("SmolLM2 opens");
    let tokenizer = model.tokenizer().expect("tokenizer loads");
    assert_eq!(tokenizer.get_vocab_size(true), 49152);
    assert_eq!(tokenizer.token_to_id("<|im_start|>"), Some(1));
    assert_eq!(tokenizer.token_to_id("<|im_end|>"), Some(2));
    let reference = read_json("smollm2_gguf_blocks.json");
    let cases = reference["tokenizer"].as_array().expect("cases");
    assert!(!cases.is_empty());
    for case in cases {
        let text = case["text"].as_str().expect("text");
        let want: Vec<u32> = case["ids"]
            .as_array()
            .expect("ids")
            .iter()
            .map(|v| v.as_u64().expect("id") as u32)
            .collect();
        let encoding = tokenizer.encode(text, false).expect("encodes");
        assert_eq!(encoding.get_ids(), want, "{text:?}");
        let decoded = tokenizer
            .decode(encoding.get_ids(), false)
            .expect("decodes");
        assert_eq!(decoded, text, "round trip");
    }
}

#[test]
fn smollm2_hf_tensors() {
    let model = GgufModel::open(common::model_path()).expect("SmolLM2 opens");
    let start = Instant::now();
    let mut shapes = BTreeMap::new();
    let mut elements = 0;
    let mut q0 = None;
    for tensor in model.tensors() {
        let tensor = tensor.expect("dequantises");
        assert_eq!(
            tensor.data.len(),
            tensor.shape.iter().product::<usize>(),
            "{}",
            tensor.name
        );
        elements += tensor.data.len();
        if tensor.name == "model.layers.0.self_attn.q_proj.weight" {
            q0 = Some(tensor.data);
        }
        shapes.insert(tensor.name, tensor.shape);
    }
    eprintln!("dequantised {elements} weights in {:?}", start.elapsed());
    assert_eq!(shapes.len(), 272);
    assert_eq!(elements, 134_515_008);
    let shape = |name: &str| shapes.get(name).map(Vec::as_slice);
    assert_eq!(shape("model.embed_tokens.weight"), Some(&[49152, 576][..]));
    assert_eq!(
        shape("model.layers.0.self_attn.q_proj.weight"),
        Some(&[576, 576][..])
    );
    assert_eq!(
        shape("model.layers.29.self_attn.k_proj.weight"),
        Some(&[192, 576][..])
    );
    assert_eq!(
        shape("model.layers.29.self_attn.v_proj.weight"),
        Some(&[192, 576][..])
    );
    assert_eq!(
        shape("model.layers.7.mlp.down_proj.weight"),
        Some(&[576, 1536][..])
    );
    assert_eq!(
        shape("model.layers.7.mlp.gate_proj.weight"),
        Some(&[1536, 576][..])
    );
    assert_eq!(
        shape("model.layers.7.post_attention_layernorm.weight"),
        Some(&[576][..])
    );
    assert_eq!(shape("model.norm.weight"), Some(&[576][..]));
    assert_eq!(shape("lm_head.weight"), None);

    // Re-permuting the HF-order rows gives back the file's rows.
    let file = model.file();
    let raw = file
        .dequantize(file.tensor("blk.0.attn_q.weight").expect("q"))
        .expect("raw");
    let q0 = q0.expect("q_proj is among the tensors");
    assert_ne!(q0, raw, "llama Q rows are reordered");
    assert_eq!(permute(&q0, 9, 576), Some(raw));
}

/// A minimal GGUF writer for malformed-file tests.
struct Gguf {
    version: u32,
    kv: Vec<(String, u32, Vec<u8>)>,
    tensors: Vec<(String, Vec<u64>, u32, Vec<u8>)>,
}

impl Gguf {
    fn new() -> Self {
        let arch = string_bytes("llama");
        Self {
            version: 3,
            kv: vec![("general.architecture".into(), 8, arch)],
            tensors: vec![],
        }
    }

    fn kv(mut self, key: &str, ty: u32, value: Vec<u8>) -> Self {
        self.kv.push((key.into(), ty, value));
        self
    }

    fn tensor(mut self, name: &str, dims: &[u64], ty: u32, data: Vec<u8>) -> Self {
        self.tensors.push((name.into(), dims.to_vec(), ty, data));
        self
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(self.version.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend((self.kv.len() as u64).to_le_bytes());
        for (key, ty, value) in &self.kv {
            out.extend(string_bytes(key));
            out.extend(ty.to_le_bytes());
            out.extend(value);
        }
        let mut offset = 0u64;
        for (name, dims, ty, data) in &self.tensors {
            out.extend(string_bytes(name));
            out.extend((dims.len() as u32).to_le_bytes());
            dims.iter().for_each(|d| out.extend(d.to_le_bytes()));
            out.extend(ty.to_le_bytes());
            out.extend(offset.to_le_bytes());
            offset += (data.len() as u64).div_ceil(32) * 32;
        }
        for (_, _, _, data) in &self.tensors {
            out.resize(out.len().div_ceil(32) * 32, 0);
            out.extend(data);
        }
        out
    }
}

fn string_bytes(s: &str) -> Vec<u8> {
    let mut out = (s.len() as u64).to_le_bytes().to_vec();
    out.extend(s.as_bytes());
    out
}

/// A GGUF array value: item type, count, items.
fn array_bytes(item_ty: u32, items: Vec<Vec<u8>>) -> Vec<u8> {
    let mut out = item_ty.to_le_bytes().to_vec();
    out.extend((items.len() as u64).to_le_bytes());
    items.into_iter().for_each(|item| out.extend(item));
    out
}

/// GPT-2's byte-to-character table, the alphabet of byte-level BPE vocabularies.
fn byte_level_alphabet() -> Vec<String> {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    let mut shifted = 0;
    (0u32..256)
        .map(|b| {
            let c = if printable(b) {
                b
            } else {
                shifted += 1;
                255 + shifted
            };
            char::from_u32(c).expect("valid char").to_string()
        })
        .collect()
}

fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
    let path = std::env::temp_dir().join(format!("drmas-gguf-{}-{name}.gguf", std::process::id()));
    std::fs::write(&path, bytes).expect("temp file");
    path
}

fn open_bytes(name: &str, bytes: &[u8]) -> Result<GgufFile, GgufError> {
    let path = temp_file(name, bytes);
    let result = GgufFile::open(&path);
    std::fs::remove_file(&path).expect("temp file removed");
    result
}

#[test]
fn every_truncation_is_an_error_not_a_panic() {
    let bytes = std::fs::read(fixture("quant_types.gguf")).expect("fixture");
    let full = open_bytes("full", &bytes).expect("fixture opens");
    let data_end = full
        .tensors()
        .iter()
        .map(|t| t.start + t.byte_len().expect("known type"))
        .max()
        .expect("has tensors");
    for cut in (0..data_end as usize).step_by(37) {
        let err = open_bytes("cut", &bytes[..cut]).expect_err("truncated file must not open");
        let message = err.to_string();
        assert!(message.contains("drmas-gguf-"), "names the file: {message}");
        assert!(
            matches!(
                err,
                GgufError::Truncated { .. } | GgufError::TensorOutOfBounds { .. }
            ),
            "cut at {cut}: {err}"
        );
    }
}

#[test]
fn malformed_headers_are_errors() {
    let ok = Gguf::new().tensor("t.weight", &[32], 0, vec![0; 128]);
    assert!(open_bytes("ok", &ok.bytes()).is_ok());

    let mut bad_magic = ok.bytes();
    bad_magic[..4].copy_from_slice(b"GGML");
    let err = open_bytes("magic", &bad_magic).expect_err("bad magic");
    assert!(matches!(err, GgufError::BadMagic { .. }), "{err}");

    for version in [1, 4, 0x0300_0000] {
        let err = open_bytes(
            "version",
            &Gguf {
                version,
                ..Gguf::new()
            }
            .bytes(),
        )
        .expect_err("unsupported version");
        assert!(matches!(err, GgufError::UnsupportedVersion { .. }), "{err}");
    }

    let err = open_bytes("empty", b"").expect_err("empty file");
    assert!(matches!(err, GgufError::Truncated { .. }), "{err}");

    let rows = Gguf::new().tensor("t.weight", &[33], 8, vec![0; 68]);
    let err = open_bytes("rows", &rows.bytes()).expect_err("row not whole blocks");
    assert!(err.to_string().contains("t.weight"), "{err}");

    let mut odd_alignment = Gguf::new();
    odd_alignment
        .kv
        .push(("general.alignment".into(), 4, 3u32.to_le_bytes().to_vec()));
    let err = open_bytes("align", &odd_alignment.bytes()).expect_err("alignment 3");
    assert!(matches!(err, GgufError::Malformed { .. }), "{err}");
}

#[test]
fn unsupported_types_are_named_errors() {
    // IQ4_XS (23): a real ggml type this loader does not dequantise.
    let file = Gguf::new().tensor("blk.0.attn_q.weight", &[256, 1], 23, vec![0; 136]);
    let file = temp_file("iq4", &file.bytes());
    let model = GgufModel::open(&file).expect("opens: only dequantising needs the type");
    let header = model
        .check_tensor_types()
        .expect_err("the header check sees the type");
    assert!(
        header.to_string().contains("blk.0.attn_q.weight") && header.to_string().contains("IQ4_XS"),
        "{header}"
    );
    let err = model
        .tensors()
        .next()
        .expect("one tensor")
        .expect_err("IQ4_XS is unsupported");
    std::fs::remove_file(&file).expect("temp file removed");
    let message = err.to_string();
    assert!(
        matches!(err, GgufError::UnsupportedType { .. }),
        "{message}"
    );
    assert!(
        message.contains("blk.0.attn_q.weight") && message.contains("IQ4_XS"),
        "{message}"
    );
}

#[test]
fn unknown_architectures_and_tensors_are_errors() {
    let mut other = Gguf::new();
    other.kv[0].2 = string_bytes("mamba");
    let path = temp_file("arch", &other.bytes());
    let err = GgufModel::open(&path).expect_err("mamba is unsupported");
    assert!(
        matches!(err, GgufError::UnsupportedArchitecture { .. }),
        "{err}"
    );

    let extra = Gguf::new().tensor("rope_freqs.weight", &[32], 0, vec![0; 128]);
    std::fs::write(&path, extra.bytes()).expect("temp file");
    let err = GgufModel::open(&path).expect_err("rope_freqs has no HF name");
    std::fs::remove_file(&path).expect("temp file removed");
    assert!(matches!(err, GgufError::UnknownTensor { .. }), "{err}");
}

#[test]
fn llama3_style_tokenizer_adds_bos_and_groups_digits() {
    let mut tokens = byte_level_alphabet();
    tokens.extend(["12", "123", "<|begin_of_text|>"].map(String::from));
    let bos = tokens.len() as u32 - 1;
    let mut types = vec![1i32; tokens.len()];
    types[bos as usize] = 3;
    let strings = |items: &[String]| items.iter().map(|t| string_bytes(t)).collect();
    let merges = ["1 2", "12 3"].map(String::from);
    let file = Gguf::new()
        .kv("tokenizer.ggml.model", 8, string_bytes("gpt2"))
        .kv("tokenizer.ggml.pre", 8, string_bytes("llama-bpe"))
        .kv("tokenizer.ggml.tokens", 9, array_bytes(8, strings(&tokens)))
        .kv(
            "tokenizer.ggml.token_type",
            9,
            array_bytes(5, types.iter().map(|t| t.to_le_bytes().to_vec()).collect()),
        )
        .kv("tokenizer.ggml.merges", 9, array_bytes(8, strings(&merges)))
        .kv("tokenizer.ggml.bos_token_id", 4, bos.to_le_bytes().to_vec())
        .kv("tokenizer.ggml.add_bos_token", 7, vec![1]);
    let path = temp_file("llama3-tok", &file.bytes());
    let model = GgufModel::open(&path).expect("opens");
    let tokenizer = model.tokenizer();
    std::fs::remove_file(&path).expect("temp file removed");
    let tokenizer = tokenizer.expect("tokenizer loads");
    let encoding = tokenizer.encode("12345 a", true).expect("encodes");
    // Llama 3 splits numbers into groups of up to three digits: "123" "45" " a".
    let id = |t: &str| tokenizer.token_to_id(t).expect("in vocabulary");
    assert_eq!(
        encoding.get_ids(),
        [bos, id("123"), id("4"), id("5"), id("Ġ"), id("a")]
    );
    let decoded = tokenizer.decode(encoding.get_ids(), true).expect("decodes");
    assert_eq!(decoded, "12345 a");
}

/// A one-layer Llama (hidden 8, two query heads sharing one key/value head) with a byte-level
/// BPE tokenizer and a chat template, every tensor f32: small enough to mutate byte by byte.
fn tiny_llama_gguf() -> Gguf {
    let mut tokens = byte_level_alphabet();
    tokens.extend(["12", "<|im_start|>", "<|im_end|>"].map(String::from));
    let vocab = tokens.len() as u64;
    let mut types = vec![1i32; tokens.len()];
    types[tokens.len() - 2..].fill(3);
    let strings = |items: &[String]| items.iter().map(|t| string_bytes(t)).collect();
    let u32_value = |v: u32| v.to_le_bytes().to_vec();
    let floats = |count: u64, scale: f32| {
        (0..count)
            .flat_map(|i| ((i % 7) as f32 * scale - 0.03).to_le_bytes())
            .collect::<Vec<u8>>()
    };
    let mut file = Gguf::new()
        .kv("llama.embedding_length", 4, u32_value(8))
        .kv("llama.attention.head_count", 4, u32_value(2))
        .kv("llama.attention.head_count_kv", 4, u32_value(1))
        .kv("llama.feed_forward_length", 4, u32_value(16))
        .kv("llama.block_count", 4, u32_value(1))
        .kv("llama.context_length", 4, u32_value(32))
        .kv(
            "llama.attention.layer_norm_rms_epsilon",
            6,
            1e-5f32.to_le_bytes().to_vec(),
        )
        .kv("tokenizer.ggml.model", 8, string_bytes("gpt2"))
        .kv("tokenizer.ggml.tokens", 9, array_bytes(8, strings(&tokens)))
        .kv(
            "tokenizer.ggml.token_type",
            9,
            array_bytes(5, types.iter().map(|t| t.to_le_bytes().to_vec()).collect()),
        )
        .kv(
            "tokenizer.ggml.merges",
            9,
            array_bytes(8, strings(&["1 2".to_owned()])),
        )
        .kv("tokenizer.ggml.eos_token_id", 4, u32_value(vocab as u32 - 1))
        .kv(
            "tokenizer.chat_template",
            8,
            string_bytes(
                "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}",
            ),
        )
        .tensor("token_embd.weight", &[8, vocab], 0, floats(8 * vocab, 0.01));
    for (name, dims) in [
        ("blk.0.attn_norm.weight", vec![8]),
        ("blk.0.attn_q.weight", vec![8, 8]),
        ("blk.0.attn_k.weight", vec![8, 4]),
        ("blk.0.attn_v.weight", vec![8, 4]),
        ("blk.0.attn_output.weight", vec![8, 8]),
        ("blk.0.ffn_norm.weight", vec![8]),
        ("blk.0.ffn_gate.weight", vec![8, 16]),
        ("blk.0.ffn_up.weight", vec![8, 16]),
        ("blk.0.ffn_down.weight", vec![16, 8]),
        ("output_norm.weight", vec![8]),
    ] {
        let count = dims.iter().product();
        file = file.tensor(name, &dims, 0, floats(count, 0.02));
    }
    file
}

/// Opens `path` as far as a worker group would: the model, its tokenizer and chat template.
fn load_all(path: &Path) -> Result<(), String> {
    let gguf = GgufModel::open(path).map_err(|e| e.to_string())?;
    gguf.tokenizer().map_err(|e| e.to_string())?;
    gguf.chat_template().map_err(|e| e.to_string())?;
    drmas_host::model::llama::Llama::from_gguf(&gguf, tch::Device::Cpu)
        .map_err(|e| e.to_string())?;
    Ok(())
}

#[test]
fn every_changed_header_byte_is_an_error_or_a_model_never_a_panic() {
    let bytes = tiny_llama_gguf().bytes();
    let path = temp_file("mutated", &bytes);
    load_all(&path).expect("the unchanged file loads whole");
    let header_end = GgufFile::open(&path).expect("opens").data_offset() as usize;
    let started = Instant::now();
    let (mut panics, mut errors) = (Vec::new(), 0);
    // Each byte zeroed, set to all ones, or its top bit flipped: lengths, counts, types and
    // values go to zero, to the largest values and to far off ones.
    let changes = (0..header_end).flat_map(|position| {
        let original = bytes[position];
        [0x00, 0xff, original ^ 0x80]
            .into_iter()
            .filter(move |&changed| changed != original)
            .map(move |changed| (position, changed))
    });
    for (position, changed) in changes {
        let mut mutated = bytes.clone();
        mutated[position] = changed;
        std::fs::write(&path, &mutated).expect("temp file");
        match std::panic::catch_unwind(|| load_all(&path)) {
            Ok(Ok(())) => {}
            Ok(Err(_)) => errors += 1,
            Err(payload) => {
                let message = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                panics.push(format!("byte {position} = {changed:#04x}: {message}"));
            }
        }
    }
    std::fs::remove_file(&path).expect("temp file removed");
    assert!(
        panics.is_empty(),
        "{} panics:\n{}",
        panics.len(),
        panics.join("\n")
    );
    assert!(
        errors > header_end,
        "most changes are refused: {errors} of about {}",
        3 * header_end
    );
    assert!(
        started.elapsed().as_secs() < 120,
        "{header_end} changed files took {:?}",
        started.elapsed()
    );
}
