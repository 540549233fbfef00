//! Hugging Face folders: tiny random Llama / Qwen2 / Qwen3 models written and run by HF
//! transformers (`scripts/golden/make_fixtures.py`, fixtures in tests/fixtures/hf/) give the
//! same logits, greedy tokens, chat text and token ids here; `save_hf` round-trips bit for bit;
//! the SmolLM2 GGUF converts to an equivalent folder; bad folders fail with clear errors.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use drmas_host::model::architecture::Architecture;
use drmas_host::model::atomic_dir::Durability;
use drmas_host::model::chat_template::TemplateMessage;
use drmas_host::model::error::ModelError;
use drmas_host::model::llama::Llama;
use drmas_host::model::pretrained::Pretrained;
use drmas_host::model::safetensors_io::write_safetensors;
use drmas_host::model::save_hf::TiedHead;
use serde_json::Value;
use tch::{Device, Kind, Tensor};

const FAMILIES: [(&str, Architecture); 3] = [
    ("llama", Architecture::Llama),
    ("qwen2", Architecture::Qwen2),
    ("qwen3", Architecture::Qwen3),
];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf")
}

fn golden(family: &str) -> Value {
    let path = fixtures().join(format!("{family}.golden.json"));
    let text = fs::read_to_string(&path).expect("golden file is committed");
    serde_json::from_str(&text).expect("golden file is JSON")
}

fn load(dir: &Path, kind: Kind) -> Pretrained {
    Pretrained::load(dir, Device::Cpu, kind)
        .unwrap_or_else(|e| panic!("{} loads: {e}", dir.display()))
}

fn int_list(value: &Value) -> Vec<i64> {
    let items = value.as_array().expect("a list");
    items.iter().map(|v| v.as_i64().expect("an int")).collect()
}

fn ids(tokens: &[i64]) -> Tensor {
    Tensor::from_slice(tokens).view([1, tokens.len() as i64])
}

/// `new` tokens by argmax, decoding with the KV cache (no EOS stop).
fn greedy(model: &Llama, prompt: &[i64], new: usize) -> Vec<i64> {
    let mut cache = model
        .new_cache(1, (prompt.len() + new) as i64)
        .expect("a cache");
    let mut logits =
        tch::no_grad(|| model.forward(&ids(prompt), None, Some(&mut cache))).expect("prefill");
    let mut out = Vec::with_capacity(new);
    for _ in 0..new {
        let next = logits.select(1, -1).argmax(-1, false).int64_value(&[0]);
        out.push(next);
        logits =
            tch::no_grad(|| model.forward(&ids(&[next]), None, Some(&mut cache))).expect("step");
    }
    out
}

/// Logits of the golden batch (left-padded, masked), and the largest difference from
/// transformers' over the real positions.
fn batch_logits(model: &Llama, golden: &Value) -> (Tensor, f64) {
    let batch = &golden["batch"];
    let rows: Vec<Vec<i64>> = batch["input_ids"]
        .as_array()
        .expect("rows")
        .iter()
        .map(int_list)
        .collect();
    let masks: Vec<Vec<i64>> = batch["attention_mask"]
        .as_array()
        .expect("rows")
        .iter()
        .map(int_list)
        .collect();
    let width = rows[0].len() as i64;
    let input = Tensor::from_slice(&rows.concat()).view([rows.len() as i64, width]);
    let mask = Tensor::from_slice(&masks.concat()).view([rows.len() as i64, width]);
    let logits = tch::no_grad(|| model.forward(&input, Some(&mask), None)).expect("forward");
    let worst = common::worst_golden_logit_difference(&batch["logits"], &logits, &masks);
    (logits, worst)
}

fn check_family(family: &str, arch: Architecture) {
    let golden = golden(family);
    let start = Instant::now();
    let pretrained = load(&fixtures().join(family), Kind::Float);
    let loaded = start.elapsed();
    let model = &pretrained.model;
    assert_eq!(model.config().architecture, arch);

    let (_, worst) = batch_logits(model, &golden);
    eprintln!("{family}: loaded in {loaded:.2?}; max |logit - transformers| = {worst:.2e}");
    assert!(
        worst < 1e-4,
        "{family}: logits differ from transformers by {worst}"
    );

    let prompt = int_list(&golden["greedy"]["prompt_ids"]);
    let want = int_list(&golden["greedy"]["new_ids"]);
    assert_eq!(
        greedy(model, &prompt, want.len()),
        want,
        "{family}: greedy tokens"
    );

    let chat = &golden["chat"];
    let messages: Vec<TemplateMessage<'_>> = chat["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| TemplateMessage {
            role: m["role"].as_str().expect("role"),
            content: m["content"].as_str().expect("content"),
        })
        .collect();
    let text = pretrained
        .chat_template
        .render(&messages, true)
        .expect("renders");
    assert_eq!(
        text,
        chat["text"].as_str().expect("text"),
        "{family}: chat text"
    );
    let chat_ids = pretrained.encode_chat(&messages).expect("encodes");
    assert_eq!(chat_ids, int_list(&chat["ids"]), "{family}: chat ids");

    let plain = &golden["plain"];
    let encoding = pretrained
        .tokenizer
        .encode(plain["text"].as_str().expect("text"), false)
        .expect("encodes");
    let plain_ids: Vec<i64> = encoding.get_ids().iter().map(|&i| i64::from(i)).collect();
    assert_eq!(
        plain_ids,
        int_list(&plain["ids"]),
        "{family}: plain text ids"
    );
    let decoded = pretrained.decode(&plain_ids).expect("decodes");
    assert_eq!(decoded, plain["text"].as_str().expect("text"));

    let eos = golden["eos_token_id"].as_i64().expect("eos id");
    assert_eq!(model.config().eos_token_ids, [eos]);
    assert_eq!(pretrained.chat_template.eos_token(), "<|im_end|>");
    assert_eq!(pretrained.chat_template.bos_token(), "<|endoftext|>");
}

#[test]
fn llama_matches_transformers() {
    check_family(FAMILIES[0].0, FAMILIES[0].1);
}

#[test]
fn qwen2_matches_transformers() {
    check_family(FAMILIES[1].0, FAMILIES[1].1);
}

#[test]
fn qwen3_sharded_matches_transformers() {
    check_family(FAMILIES[2].0, FAMILIES[2].1);
}

/// Every variable of `a` equals `b`'s bit for bit (same names, dtypes, shapes and values).
fn assert_same_weights(a: &Llama, b: &Llama) {
    let (a, b) = (a.var_store().variables(), b.var_store().variables());
    let mut names: Vec<_> = a.keys().collect();
    names.sort();
    let mut other: Vec<_> = b.keys().collect();
    other.sort();
    assert_eq!(names, other, "variable names");
    for name in names {
        let (x, y) = (&a[name], &b[name]);
        assert_eq!(x.kind(), y.kind(), "{name}: dtype");
        assert!(x.equal(y), "{name}: values differ");
    }
}

#[test]
fn save_hf_round_trips_bit_for_bit() {
    let root = tempfile::tempdir().expect("a temp dir");
    for (family, _) in FAMILIES {
        let original = load(&fixtures().join(family), Kind::Float);
        let out = root.path().join(family);
        original.save_hf(&out).expect("saves");
        // Saving again over the folder replaces it whole.
        original.save_hf(&out).expect("saves over");
        let again = load(&out, Kind::Float);
        assert_same_weights(&original.model, &again.model);
        assert_eq!(
            original.model.config(),
            again.model.config(),
            "{family}: config"
        );
        assert_eq!(
            original.chat_template.source(),
            again.chat_template.source()
        );
        let golden = golden(family);
        let (a, _) = batch_logits(&original.model, &golden);
        let (b, _) = batch_logits(&again.model, &golden);
        assert!(a.equal(&b), "{family}: logits after the round trip");
        let files: Vec<String> = fs::read_dir(&out)
            .expect("lists")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            !files.iter().any(|f| f == "lm_head.weight"),
            "{family}: {files:?}"
        );
        let config: Value = serde_json::from_str(
            &fs::read_to_string(out.join("config.json")).expect("config.json"),
        )
        .expect("JSON");
        assert_eq!(config["torch_dtype"], "float32");
    }
    let left: Vec<_> = fs::read_dir(root.path()).expect("lists").collect();
    assert_eq!(left.len(), FAMILIES.len(), "no temporary siblings are left");
}

/// The tensor names and the raw bytes of `name` in the folder `dir`'s `model.safetensors`.
fn checkpoint_tensor(dir: &Path, name: &str) -> (Vec<String>, Option<Vec<u8>>) {
    let bytes = fs::read(dir.join("model.safetensors")).expect("model.safetensors");
    let file = safetensors::SafeTensors::deserialize(&bytes).expect("a safetensors file");
    let names = file.names().into_iter().cloned().collect();
    let data = file.tensor(name).ok().map(|view| view.data().to_vec());
    (names, data)
}

#[test]
fn a_tied_model_saved_with_its_head_holds_the_embeddings_twice_and_loads_the_same() {
    let root = tempfile::tempdir().expect("a temp dir");
    for family in ["qwen2", "llama"] {
        let original = load(&fixtures().join(family), Kind::Float);
        let tied = original.model.config().tie_word_embeddings;
        let omitted = root.path().join(format!("{family}-omitted"));
        let written = root.path().join(format!("{family}-written"));
        original
            .save_hf_with(&omitted, Durability::Flushed, TiedHead::Omitted)
            .expect("saves");
        original
            .save_hf_with(&written, Durability::Flushed, TiedHead::Written)
            .expect("saves");
        let (names, head) = checkpoint_tensor(&written, "lm_head.weight");
        let (_, embeddings) = checkpoint_tensor(&written, "model.embed_tokens.weight");
        if tied {
            assert_eq!(head, embeddings, "{family}: the head is the embeddings");
            let (omitted_names, _) = checkpoint_tensor(&omitted, "lm_head.weight");
            assert!(
                !omitted_names.iter().any(|n| n == "lm_head.weight"),
                "{family}"
            );
            assert_eq!(names.len(), omitted_names.len() + 1, "{family}");
        } else {
            assert_ne!(head, embeddings, "{family}: its own head");
            assert_eq!(
                fs::read(omitted.join("model.safetensors")).ok(),
                fs::read(written.join("model.safetensors")).ok(),
                "{family}: nothing to add"
            );
        }
        let again = load(&written, Kind::Float);
        assert_same_weights(&original.model, &again.model);
        let golden = golden(family);
        let (a, _) = batch_logits(&original.model, &golden);
        let (b, _) = batch_logits(&again.model, &golden);
        assert!(a.equal(&b), "{family}: logits after the round trip");
    }
    assert!(
        load(&fixtures().join("qwen2"), Kind::Float)
            .model
            .config()
            .tie_word_embeddings,
        "the qwen2 fixture is tied"
    );
}

#[test]
fn bf16_loads_close_to_f32_and_saves_as_bf16() {
    let dir = fixtures().join("llama");
    let golden = golden("llama");
    let bf16 = load(&dir, Kind::BFloat16);
    assert_eq!(bf16.model.kind(), Kind::BFloat16);
    for (name, t) in bf16.model.var_store().variables() {
        assert_eq!(t.kind(), Kind::BFloat16, "{name}");
    }
    let (logits, worst) = batch_logits(&bf16.model, &golden);
    let scale = logits.to_kind(Kind::Float).abs().max().double_value(&[]);
    eprintln!("bf16: max |logit - transformers f32| = {worst:.3} (logits up to {scale:.1})");
    assert!(worst < 0.05 * scale, "bf16 logits drift by {worst}");

    let root = tempfile::tempdir().expect("a temp dir");
    let out = root.path().join("bf16");
    bf16.save_hf(&out).expect("saves");
    let config: Value =
        serde_json::from_str(&fs::read_to_string(out.join("config.json")).expect("config"))
            .expect("JSON");
    assert_eq!(config["torch_dtype"], "bfloat16");
    let again = load(&out, Kind::BFloat16);
    assert_same_weights(&bf16.model, &again.model);
}

#[test]
fn smollm2_gguf_converts_to_an_equivalent_hf_folder() {
    let gguf = drmas_host::model::default_model_path();
    assert!(
        gguf.is_file(),
        "{} is missing: run scripts/install-model.sh",
        gguf.display()
    );
    let root = tempfile::tempdir().expect("a temp dir");
    let out = root.path().join("smollm2");
    let start = Instant::now();
    let cli = drmas_host::cli::Cli::try_parse_from([
        "drmas-host".as_ref(),
        "convert".as_ref(),
        gguf.as_os_str(),
        out.as_os_str(),
    ])
    .expect("parses");
    drmas_host::run(cli).expect("converts");
    eprintln!("converted in {:.2?}", start.elapsed());

    let from_gguf = load(&gguf, Kind::Float);
    let from_folder = load(&out, Kind::Float);
    assert_same_weights(&from_gguf.model, &from_folder.model);
    assert_eq!(from_gguf.model.config(), from_folder.model.config());
    assert_eq!(
        from_gguf.chat_template.source(),
        from_folder.chat_template.source()
    );
    let messages = [TemplateMessage {
        role: "user",
        content: "What is the capital of France?",
    }];
    let prompt = from_gguf.encode_chat(&messages).expect("encodes");
    assert_eq!(prompt, from_folder.encode_chat(&messages).expect("encodes"));
    let a = tch::no_grad(|| from_gguf.model.forward(&ids(&prompt), None, None)).expect("fwd");
    let b = tch::no_grad(|| from_folder.model.forward(&ids(&prompt), None, None)).expect("fwd");
    assert!(a.equal(&b), "logits of the GGUF and the converted folder");
}

// ---- bad folders -------------------------------------------------------------------------

/// A writable copy of the fixture `family`.
fn copy_fixture(family: &str, root: &Path) -> PathBuf {
    let dir = root.join(family);
    fs::create_dir_all(&dir).expect("mkdir");
    for entry in fs::read_dir(fixtures().join(family)).expect("lists") {
        let entry = entry.expect("entry");
        fs::copy(entry.path(), dir.join(entry.file_name())).expect("copies");
    }
    dir
}

fn edit_config(dir: &Path, edit: impl FnOnce(&mut Value)) {
    let path = dir.join("config.json");
    let mut config: Value =
        serde_json::from_str(&fs::read_to_string(&path).expect("reads")).expect("JSON");
    edit(&mut config);
    fs::write(&path, config.to_string()).expect("writes");
}

fn load_err(dir: &Path) -> ModelError {
    Pretrained::load(dir, Device::Cpu, Kind::Float).expect_err("does not load")
}

fn assert_mentions(err: &ModelError, parts: &[&str]) {
    let message = err.to_string();
    eprintln!("error: {message}");
    for part in parts {
        assert!(message.contains(part), "{part:?} not in: {message}");
    }
}

#[test]
fn a_truncated_safetensors_file_is_named() {
    let root = tempfile::tempdir().expect("a temp dir");
    let dir = copy_fixture("llama", root.path());
    let file = dir.join("model.safetensors");
    let len = fs::metadata(&file).expect("stat").len();
    let bytes = fs::read(&file).expect("reads");
    fs::write(&file, &bytes[..(len / 2) as usize]).expect("truncates");
    let err = load_err(&dir);
    assert_mentions(&err, &["model.safetensors", "truncated or corrupt"]);
    fs::write(&file, &bytes[..4]).expect("truncates more");
    assert_mentions(&load_err(&dir), &["model.safetensors"]);
}

#[test]
fn a_wrong_shape_names_the_file_tensor_and_both_shapes() {
    let root = tempfile::tempdir().expect("a temp dir");
    let dir = copy_fixture("qwen2", root.path());
    edit_config(&dir, |c| c["intermediate_size"] = 96.into());
    let err = load_err(&dir);
    assert_mentions(
        &err,
        &[
            "model.safetensors",
            "model.layers.0.mlp.down_proj.weight",
            "[64, 96]",
            "[64, 128]",
        ],
    );
}

#[test]
fn a_missing_tensor_or_shard_is_named() {
    let root = tempfile::tempdir().expect("a temp dir");
    let dir = copy_fixture("llama", root.path());
    let file = dir.join("model.safetensors");
    let mut tensors: std::collections::BTreeMap<String, Tensor> = Tensor::read_safetensors(&file)
        .expect("reads")
        .into_iter()
        .collect();
    let _ = tensors.remove("model.norm.weight").expect("was there");
    write_safetensors(&file, &tensors).expect("writes");
    assert_mentions(
        &load_err(&dir),
        &["model.safetensors", "model.norm.weight", "missing"],
    );

    // Tied models ignore a stored copy of the LM head.
    let qwen2 = copy_fixture("qwen2", root.path());
    let tied_file = qwen2.join("model.safetensors");
    let mut tied: std::collections::BTreeMap<String, Tensor> = Tensor::read_safetensors(&tied_file)
        .expect("reads")
        .into_iter()
        .collect();
    let embed = tied["model.embed_tokens.weight"].copy();
    tied.insert("lm_head.weight".to_owned(), embed);
    write_safetensors(&tied_file, &tied).expect("writes");
    Pretrained::load(&qwen2, Device::Cpu, Kind::Float).expect("a tied copy is ignored");

    let qwen3 = copy_fixture("qwen3", root.path());
    fs::remove_file(qwen3.join("model-00002-of-00003.safetensors")).expect("removes");
    assert_mentions(
        &load_err(&qwen3),
        &["model-00002-of-00003.safetensors", "missing"],
    );
}

#[test]
fn missing_files_and_unsupported_architectures_are_named() {
    let root = tempfile::tempdir().expect("a temp dir");
    let dir = copy_fixture("llama", root.path());
    edit_config(&dir, |c| {
        c["architectures"] = serde_json::json!(["MistralForCausalLM"])
    });
    let err = load_err(&dir);
    assert_mentions(
        &err,
        &["config.json", "MistralForCausalLM", "not supported"],
    );

    edit_config(&dir, |c| {
        c["architectures"] = serde_json::json!(["Qwen2ForCausalLM"]);
        c["use_sliding_window"] = true.into();
    });
    assert_mentions(&load_err(&dir), &["config.json", "sliding"]);

    fs::remove_file(dir.join("config.json")).expect("removes");
    assert_mentions(&load_err(&dir), &["config.json", "missing"]);

    let dir = copy_fixture("qwen2", root.path());
    fs::remove_file(dir.join("tokenizer.json")).expect("removes");
    assert_mentions(&load_err(&dir), &["tokenizer.json", "missing"]);

    let dir = copy_fixture("qwen3", root.path());
    fs::remove_file(dir.join("model.safetensors.index.json")).expect("removes");
    assert_mentions(&load_err(&dir), &["model.safetensors.index.json"]);

    let err = load_err(&root.path().join("nothing-here"));
    assert_mentions(&err, &["nothing-here", "no such file"]);
    let err = Pretrained::load(&fixtures().join("llama"), Device::Cpu, Kind::Int64)
        .expect_err("not a float dtype");
    assert_mentions(&err, &["Int64"]);
}

#[test]
fn a_safetensors_file_declaring_more_than_it_holds_is_refused_before_allocating() {
    let root = tempfile::tempdir().expect("a temp dir");
    let dir = copy_fixture("llama", root.path());
    let file = dir.join("model.safetensors");
    // Each is an error naming the file; allocating what they declare would abort the test.
    // A header length of 2^62 bytes in a 16-byte file.
    let mut bytes = (1u64 << 62).to_le_bytes().to_vec();
    bytes.extend_from_slice(b"{}      ");
    fs::write(&file, &bytes).expect("writes");
    assert_mentions(
        &load_err(&dir),
        &["model.safetensors", "truncated or corrupt"],
    );
    // A tensor whose shape declares 2^62 elements over 8 bytes of data.
    let header = br#"{"model.embed_tokens.weight":{"dtype":"F32","shape":[2147483648,2147483648],"data_offsets":[0,8]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header);
    bytes.extend_from_slice(&[0; 8]);
    fs::write(&file, &bytes).expect("writes");
    assert_mentions(&load_err(&dir), &["model.safetensors"]);
}

#[test]
fn a_nan_or_infinite_weight_names_the_file_and_tensor() {
    let root = tempfile::tempdir().expect("a temp dir");
    let dir = copy_fixture("llama", root.path());
    let file = dir.join("model.safetensors");
    let mut tensors: std::collections::BTreeMap<String, Tensor> = Tensor::read_safetensors(&file)
        .expect("reads")
        .into_iter()
        .collect();
    let name = "model.layers.1.mlp.up_proj.weight";
    let poisoned = tensors[name].copy();
    let _ = poisoned.get(3).get(5).fill_(f64::NAN);
    let _ = poisoned.get(0).get(0).fill_(f64::INFINITY);
    tensors.insert(name.to_owned(), poisoned);
    write_safetensors(&file, &tensors).expect("writes");
    assert_mentions(
        &load_err(&dir),
        &[
            "model.safetensors",
            name,
            "holds 2 NaN or infinite value(s)",
        ],
    );
}

#[test]
fn config_sizes_are_bounded_and_checked_against_the_weights_before_allocating() {
    let root = tempfile::tempdir().expect("a temp dir");
    let dir = copy_fixture("llama", root.path());
    edit_config(&dir, |c| c["hidden_size"] = 1_000_000_000_000_u64.into());
    assert_mentions(
        &load_err(&dir),
        &[
            "config.json",
            "hidden_size = 1000000000000 is outside 1..=65536",
        ],
    );
    edit_config(&dir, |c| {
        c["hidden_size"] = 64.into();
        c["max_position_embeddings"] = 1_000_000_000_000_u64.into();
    });
    assert_mentions(
        &load_err(&dir),
        &["config.json", "max_position_embeddings = 1000000000000"],
    );
    // In bounds, but not what the weights hold: the header check refuses it before the model
    // (3 M × 64 embeddings) is allocated.
    edit_config(&dir, |c| {
        c["max_position_embeddings"] = 512.into();
        c["vocab_size"] = 3_000_000.into();
    });
    assert_mentions(
        &load_err(&dir),
        &[
            "model.safetensors",
            "tensor model.embed_tokens.weight has shape [384, 64]",
            "(vocab_size, hidden_size) implies [3000000, 64]",
        ],
    );
    edit_config(&dir, |c| {
        c["vocab_size"] = 384.into();
        c["num_hidden_layers"] = 3.into();
    });
    assert_mentions(
        &load_err(&dir),
        &["num_hidden_layers = 3, but the weights hold 2 layers"],
    );
}

#[test]
fn a_huge_prompt_is_cut_before_tokenising_and_keeps_the_same_tail() {
    let pretrained =
        Pretrained::load(&fixtures().join("llama"), Device::Cpu, Kind::Float).expect("loads");
    let prompt = |words: usize| format!("{}and that is the end.", "many words ".repeat(words));
    let tail = |content: &str| {
        let messages = [TemplateMessage {
            role: "user",
            content,
        }];
        pretrained
            .codec()
            .encode_chat_tail(&messages, 32)
            .expect("encodes")
    };
    // 11 MB of text: tokenised whole this took seconds and gigabytes; cut, it takes what 32
    // tokens' worth of it takes, and ends in the same tokens as a prompt just over the limit.
    let (huge, huge_cut) = tail(&prompt(1_000_000));
    let (short, short_cut) = tail(&prompt(40));
    assert_eq!(huge.len(), 32);
    assert!(huge_cut && short_cut);
    assert_eq!(huge, short);
    let (whole, cut) = tail("2 + 2?");
    assert!(!cut && whole.len() < 32, "{whole:?}");
}

/// The changes made to `bytes[range]`: each byte zeroed, set to all ones and its top bit
/// flipped (lengths, offsets, shapes and numbers go to zero, to the largest values and far
/// off; JSON gets stray bytes and invalid UTF-8).
fn byte_changes(bytes: &[u8], range: std::ops::Range<usize>) -> Vec<(usize, u8)> {
    range
        .flat_map(|position| {
            let original = bytes[position];
            [0x00, 0xff, original ^ 0x80]
                .into_iter()
                .filter(move |&changed| changed != original)
                .map(move |changed| (position, changed))
        })
        .collect()
}

/// Loads `dir` with every change of `changes` made to its `file` in turn; the panics, if any.
fn panics_loading(dir: &Path, file: &str, bytes: &[u8], changes: &[(usize, u8)]) -> Vec<String> {
    let path = dir.join(file);
    let mut panics = Vec::new();
    for &(position, changed) in changes {
        let mut mutated = bytes.to_vec();
        mutated[position] = changed;
        fs::write(&path, &mutated).expect("writes");
        let loaded = std::panic::catch_unwind(|| Pretrained::load(dir, Device::Cpu, Kind::Float));
        if let Err(payload) = loaded {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            panics.push(format!(
                "{file} byte {position} = {changed:#04x}: {message}"
            ));
        }
    }
    fs::write(&path, bytes).expect("restores");
    panics
}

#[test]
fn every_changed_byte_of_a_folders_headers_and_json_is_an_error_or_a_model_never_a_panic() {
    let root = tempfile::tempdir().expect("a temp dir");
    let dir = copy_fixture("llama", root.path());
    let started = Instant::now();
    let weights = fs::read(dir.join("model.safetensors")).expect("reads");
    let header_len = u64::from_le_bytes(weights[..8].try_into().expect("8 bytes")) as usize;
    let mut panics = panics_loading(
        &dir,
        "model.safetensors",
        &weights,
        &byte_changes(&weights, 0..8 + header_len),
    );
    for file in [
        "config.json",
        "generation_config.json",
        "tokenizer_config.json",
        "tokenizer.json",
    ] {
        let bytes = fs::read(dir.join(file)).expect("reads");
        panics.extend(panics_loading(
            &dir,
            file,
            &bytes,
            &byte_changes(&bytes, 0..bytes.len()),
        ));
    }
    assert!(
        panics.is_empty(),
        "{} panics:\n{}",
        panics.len(),
        panics.join("\n")
    );
    Pretrained::load(&dir, Device::Cpu, Kind::Float).expect("the restored folder loads");
    eprintln!("{:?}", started.elapsed());
}
