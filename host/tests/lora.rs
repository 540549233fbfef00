//! LoRA adapters on the tiny Llama fixture: B = 0 is exactly the base model, a batch mixing
//! adapters gives each row what its adapter alone gives (full forwards and cached generation),
//! a step changes only the adapters its rows used, adapters save and load bit for bit in PEFT's
//! layout, and a PEFT-made adapter (`scripts/golden/make_lora_fixture.py`) gives PEFT's logits,
//! merged or not.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use clap::Parser;
use drmas_host::engine::{generate, GenerationRequest, SamplingParams};
use drmas_host::model::layers::AdapterRows;
use drmas_host::model::llama::Llama;
use drmas_host::model::lora::{LoraSettings, TARGET_MODULES};
use drmas_host::model::peft::{AdapterConfig, ADAPTER_CONFIG_FILE};
use drmas_host::model::pretrained::Pretrained;
use drmas_host::rng::SeededRng;
use drmas_host::update::AdamW;
use serde_json::Value;
use tch::{Device, Kind, Tensor};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf")
}

fn base() -> Pretrained {
    Pretrained::load(&fixtures().join("llama"), Device::Cpu, Kind::Float).expect("fixture loads")
}

fn settings(rank: i64) -> LoraSettings {
    LoraSettings {
        rank,
        alpha: 16.0,
        dropout: 0.0,
        target_modules: TARGET_MODULES.map(str::to_owned).to_vec(),
    }
}

/// The fixture with `slots` adapters of rank 4 whose B matrices are random (not the zero init).
fn adapted(slots: usize) -> Pretrained {
    let mut pretrained = base();
    pretrained
        .model
        .add_adapters(&settings(4), slots, 7)
        .expect("adapters attach");
    tch::manual_seed(3);
    let adapters = pretrained.model.adapters().expect("adapters");
    let mut variables: Vec<_> = adapters.var_store().variables().into_iter().collect();
    variables.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, variable) in variables {
        if name.contains("lora_B") {
            let values = Tensor::randn(variable.size(), (Kind::Float, Device::Cpu)) * 0.3;
            tch::no_grad(|| variable.shallow_clone().copy_(&values));
        }
    }
    pretrained
}

fn ids(rows: &[&[i64]]) -> (Tensor, Tensor) {
    let width = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let mut ids = Vec::new();
    let mut mask = Vec::new();
    for row in rows {
        let pad = width - row.len();
        ids.extend(std::iter::repeat_n(0, pad).chain(row.iter().copied()));
        mask.extend(std::iter::repeat_n(0i64, pad).chain(std::iter::repeat_n(1, row.len())));
    }
    let shape = [rows.len() as i64, width as i64];
    (
        Tensor::from_slice(&ids).view(shape),
        Tensor::from_slice(&mask).view(shape),
    )
}

fn logits(model: &Llama, rows: &[&[i64]], slots: &[Option<usize>]) -> Tensor {
    let (input, mask) = ids(rows);
    let adapters = AdapterRows::new(slots, Device::Cpu, false);
    tch::no_grad(|| {
        let hidden = model.forward_hidden_with(&input, Some(&mask), None, &adapters)?;
        Ok::<_, drmas_host::model::error::ModelError>(model.logits(&hidden))
    })
    .expect("forward")
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[])
}

const A: &[i64] = &[5, 17, 42, 99, 7, 256, 300, 12, 64];
const B: &[i64] = &[3, 8, 250, 11];
const C: &[i64] = &[100, 101, 102, 103, 104, 105];

#[test]
fn zero_b_gives_exactly_the_base_logits() {
    let plain = base();
    let mut lora = base();
    lora.model
        .add_adapters(&settings(8), 2, 1)
        .expect("adapters attach");
    let want = logits(&plain.model, &[A, B], &[None, None]);
    for slots in [[Some(0), Some(0)], [Some(1), None], [Some(0), Some(1)]] {
        let got = logits(&lora.model, &[A, B], &slots);
        assert!(got.equal(&want), "adapters {slots:?} changed the logits");
    }
}

#[test]
fn a_mixed_batch_gives_each_row_its_own_adapter() {
    let pretrained = adapted(2);
    let model = &pretrained.model;
    let rows = [A, B, C, B];
    let slots = [Some(0), Some(1), None, Some(0)];
    let batch = logits(model, &rows, &slots);
    let width = batch.size()[1];
    for (i, (row, slot)) in rows.iter().zip(slots).enumerate() {
        let alone = logits(model, &[row], &[slot]).get(0);
        let n = row.len() as i64;
        let got = batch.get(i as i64).narrow(0, width - n, n);
        let diff = max_abs_diff(&got, &alone);
        assert!(diff < 1e-4, "row {i} (adapter {slot:?}) differs by {diff}");
    }
    let base_row = logits(model, &[B], &[None]).get(0);
    let own = logits(model, &[B], &[Some(1)]).get(0);
    let other = logits(model, &[B], &[Some(0)]).get(0);
    assert!(
        max_abs_diff(&own, &base_row) > 0.1,
        "the adapter changes nothing"
    );
    assert!(
        max_abs_diff(&own, &other) > 0.1,
        "both adapters compute the same"
    );
}

#[test]
fn mixed_generation_matches_each_adapter_alone() {
    let pretrained = adapted(2);
    let request =
        |prompt: &[i64], adapter: Option<usize>, max_new_tokens: usize| GenerationRequest {
            adapter,
            ..GenerationRequest::new(
                prompt.to_vec(),
                SamplingParams::with_temperature(0.0),
                max_new_tokens,
            )
        };
    // The same prompt under two adapters must not share a prefill; rows finishing early are
    // dropped from the batch, and the adapter rows with them.
    let requests = [
        request(A, Some(0), 12),
        request(A, Some(1), 3),
        request(C, None, 5),
        request(B, Some(1), 12),
        request(A, Some(0), 12),
    ];
    let mut rng = SeededRng::new(0);
    let together = generate(
        &pretrained.model,
        &pretrained.tokenizer,
        &requests,
        &mut rng,
    )
    .expect("batch");
    for (i, request) in requests.iter().enumerate() {
        let alone = generate(
            &pretrained.model,
            &pretrained.tokenizer,
            std::slice::from_ref(request),
            &mut rng,
        )
        .expect("alone");
        assert_eq!(together[i].tokens, alone[0].tokens, "request {i}");
        for (a, b) in together[i].logprobs.iter().zip(&alone[0].logprobs) {
            assert!((a - b).abs() < 1e-4, "request {i}: logprob {a} vs {b}");
        }
    }
    assert_ne!(
        together[0].tokens[..3],
        together[1].tokens[..],
        "adapters agree: {:?} {:?}",
        together[0].tokens,
        together[1].tokens
    );
}

/// One optimizer step on rows `A` and `C`, through the adapters `slots`, of a loss that every
/// weight they pass through reaches.
fn train_step(model: &Llama, optimizer: &mut AdamW, slots: &[Option<usize>]) {
    let (input, mask) = ids(&[A, C]);
    let rows = AdapterRows::new(slots, Device::Cpu, true);
    let hidden = model
        .forward_hidden_with(&input, Some(&mask), None, &rows)
        .expect("forward");
    let loss = model
        .logits(&hidden)
        .log_softmax(-1, Kind::Float)
        .select(2, 5)
        .mean(Kind::Float);
    loss.backward();
    optimizer.step(1e-2).expect("an optimizer step");
}

#[test]
fn a_step_changes_only_the_adapter_its_rows_used() {
    let pretrained = adapted(2);
    let model = &pretrained.model;
    let snapshot = |vs: &tch::nn::VarStore| {
        let mut all: Vec<(String, Tensor)> = vs
            .variables()
            .into_iter()
            .map(|(n, t)| (n, t.detach().copy()))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    };
    let base_before = snapshot(model.var_store());
    let adapters = model.adapters().expect("adapters");
    let lora_before = snapshot(adapters.var_store());
    let mut params = adapters
        .var_store()
        .variables()
        .into_iter()
        .collect::<Vec<_>>();
    params.sort_by(|a, b| a.0.cmp(&b.0));
    let mut optimizer = AdamW::new(params, 0.01);
    train_step(model, &mut optimizer, &[Some(1), Some(1)]);

    for ((name, before), (_, after)) in base_before.iter().zip(snapshot(model.var_store())) {
        assert!(before.equal(&after), "base weight {name} changed");
    }
    let mut changed = 0;
    for ((name, before), (_, after)) in lora_before.iter().zip(snapshot(adapters.var_store())) {
        let same = before.equal(&after);
        if name.contains(".0.weight") {
            assert!(same, "{name} changed, but no row used adapter 0");
        } else {
            changed += usize::from(!same);
        }
    }
    assert_eq!(changed, 2 * 7 * 2, "every A and B of adapter 1 moves");
}

/// A step moves only the adapters its rows used: also when its batch mixes adapters, and when
/// an earlier step used the others (gradients are dropped between steps); never one at
/// learning rate 0, weight decay included.
#[test]
fn a_step_moves_only_the_used_adapters_with_a_learning_rate() {
    let pretrained = adapted(4);
    let model = &pretrained.model;
    let adapters = model.adapters().expect("adapters");
    let sorted = || {
        let mut all: Vec<(String, Tensor)> = adapters.var_store().variables().into_iter().collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    };
    let mut optimizer = AdamW::new(sorted(), 0.1);
    optimizer.scale_rates(
        |name| drmas_host::model::lora::is_slot_variable(name, 3),
        0.0,
    );
    train_step(model, &mut optimizer, &[Some(1), Some(2)]);
    optimizer.zero_grad().expect("dropped");
    let before: Vec<(String, Tensor)> = sorted()
        .into_iter()
        .map(|(n, t)| (n, t.detach().copy()))
        .collect();
    train_step(model, &mut optimizer, &[Some(0), Some(3)]);

    let mut moved = 0;
    for ((name, before), (_, after)) in before.iter().zip(sorted()) {
        let same = before.equal(&after);
        if drmas_host::model::lora::is_slot_variable(name, 0) {
            moved += usize::from(!same);
        } else {
            assert!(same, "{name} moved");
        }
    }
    assert_eq!(moved, 2 * 7 * 2, "every A and B of adapter 0 moves");
}

#[test]
fn a_saved_adapter_loads_back_bit_exactly() {
    let source = adapted(2);
    let dir = tempfile::tempdir().expect("tempdir");
    let folder = dir.path().join("solver");
    source
        .model
        .save_adapter(1, &folder, "tiny-llama")
        .expect("saves");
    let config = AdapterConfig::read(&folder).expect("config reads");
    assert_eq!(config.settings, settings(4));
    assert_eq!(config.base_model, "tiny-llama");

    let mut target = base();
    target
        .model
        .add_adapters(&settings(4), 2, 99)
        .expect("adapters attach");
    target.model.load_adapter(0, &folder).expect("loads");
    let saved = source.model.adapter_tensors(1).expect("slot 1");
    let loaded = target.model.adapter_tensors(0).expect("slot 0");
    assert_eq!(saved.len(), 2 * 7 * 2);
    for (name, tensor) in &saved {
        assert!(
            tensor.equal(&loaded[name]),
            "{name} differs after the round trip"
        );
    }
    let want = logits(&source.model, &[A], &[Some(1)]);
    assert!(logits(&target.model, &[A], &[Some(0)]).equal(&want));
}

fn golden() -> Value {
    let text = fs::read_to_string(fixtures().join("llama_lora.golden.json")).expect("committed");
    serde_json::from_str(&text).expect("JSON")
}

/// Logits of the golden batch through `slots`, and the largest difference from PEFT's.
fn peft_difference(model: &Llama, golden: &Value, slots: &[Option<usize>]) -> f64 {
    let list = |v: &Value| -> Vec<i64> {
        let items = v.as_array().expect("a list");
        items.iter().map(|x| x.as_i64().expect("an int")).collect()
    };
    let rows: Vec<Vec<i64>> = golden["input_ids"]
        .as_array()
        .expect("rows")
        .iter()
        .map(list)
        .collect();
    let masks: Vec<Vec<i64>> = golden["attention_mask"]
        .as_array()
        .expect("rows")
        .iter()
        .map(list)
        .collect();
    let shape = [rows.len() as i64, rows[0].len() as i64];
    let input = Tensor::from_slice(&rows.concat()).view(shape);
    let mask = Tensor::from_slice(&masks.concat()).view(shape);
    let adapters = AdapterRows::new(slots, Device::Cpu, false);
    let logits = tch::no_grad(|| model.forward_hidden_with(&input, Some(&mask), None, &adapters))
        .map(|h| model.logits(&h))
        .expect("forward");
    common::worst_golden_logit_difference(&golden["logits"], &logits, &masks)
}

#[test]
fn a_peft_adapter_gives_peft_logits_merged_or_not() {
    let folder = fixtures().join("llama_lora");
    let config = AdapterConfig::read(&folder).expect("PEFT's config reads");
    assert_eq!((config.settings.rank, config.settings.alpha), (4, 8.0));
    assert_eq!(config.settings.dropout, 0.1);
    let mut pretrained = base();
    let model = &mut pretrained.model;
    model
        .add_adapters(&config.settings, 1, 0)
        .expect("adapters attach");
    model
        .load_adapter(0, &folder)
        .expect("PEFT's adapter loads");
    let golden = golden();
    let worst = peft_difference(model, &golden, &[Some(0), Some(0)]);
    eprintln!("max |logit - PEFT| = {worst:.2e}");
    assert!(worst < 1e-4, "logits differ from PEFT's by {worst}");
    assert!(
        peft_difference(model, &golden, &[None, None]) > 0.1,
        "the base is not PEFT's"
    );

    model.merge_adapter(0).expect("merges");
    assert!(model.adapters().is_none());
    let worst = peft_difference(model, &golden, &[None, None]);
    eprintln!("merged: max |logit - PEFT| = {worst:.2e}");
    assert!(worst < 1e-4, "merged logits differ from PEFT's by {worst}");
}

/// PEFT's rank-4 adapter (scale 2, every projection) padded into slots of rank 8 at scale 1
/// that held other values, as `serve --max-lora-rank` holds it: PEFT's logits; slots of a
/// smaller rank or fewer projections refuse it naming the field.
#[test]
fn a_peft_adapter_padded_into_wider_slots_gives_peft_logits() {
    let folder = fixtures().join("llama_lora");
    let mut pretrained = base();
    let model = &mut pretrained.model;
    let wide = LoraSettings {
        rank: 8,
        alpha: 8.0,
        ..settings(8)
    };
    model.add_adapters(&wide, 2, 5).expect("adapters attach");
    for tensor in model.adapter_tensors(1).expect("slot 1").values() {
        let values = Tensor::randn(tensor.size(), (Kind::Float, Device::Cpu));
        tch::no_grad(|| tensor.shallow_clone().copy_(&values));
    }
    model
        .load_adapter_padded(1, &folder)
        .expect("a rank-4 adapter fits rank-8 slots");
    let golden = golden();
    let worst = peft_difference(model, &golden, &[Some(1), Some(1)]);
    eprintln!("padded: max |logit - PEFT| = {worst:.2e}");
    assert!(worst < 1e-4, "logits differ from PEFT's by {worst}");

    let mut narrow = base();
    narrow
        .model
        .add_adapters(&settings(2), 1, 0)
        .expect("adapters attach");
    let err = narrow
        .model
        .load_adapter_padded(0, &folder)
        .expect_err("rank 4 into rank 2");
    assert!(
        err.to_string()
            .contains("r = 4 is larger than the rank of the model's adapters (2)"),
        "{err}"
    );
    let mut fewer = base();
    let attention_only = LoraSettings {
        target_modules: vec!["q_proj".to_owned(), "v_proj".to_owned()],
        ..settings(8)
    };
    fewer
        .model
        .add_adapters(&attention_only, 1, 0)
        .expect("adapters attach");
    let err = fewer
        .model
        .load_adapter_padded(0, &folder)
        .expect_err("every projection into q and v only");
    assert!(err.to_string().contains("names `k_proj`"), "{err}");
    assert!(err.to_string().contains(ADAPTER_CONFIG_FILE), "{err}");
}

#[test]
fn mismatched_or_unsupported_adapters_are_refused_with_the_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let folder = dir.path().join("adapter");
    fs::create_dir(&folder).expect("mkdir");
    let peft = fixtures().join("llama_lora");
    for file in fs::read_dir(&peft).expect("fixture") {
        let path = file.expect("entry").path();
        fs::copy(&path, folder.join(path.file_name().expect("name"))).expect("copy");
    }
    let mut pretrained = base();
    pretrained
        .model
        .add_adapters(&settings(8), 1, 0)
        .expect("adapters attach");
    let err = pretrained
        .model
        .load_adapter(0, &folder)
        .expect_err("rank 4 into rank 8");
    assert!(err.to_string().contains("r = 4"), "{err}");
    let (input, _) = ids(&[A]);
    let err = pretrained
        .model
        .forward_hidden_with(
            &input,
            None,
            None,
            &AdapterRows::new(&[Some(1)], Device::Cpu, false),
        )
        .expect_err("one adapter only");
    assert!(
        err.to_string().contains("adapter 1 does not exist"),
        "{err}"
    );

    let config_path = folder.join(ADAPTER_CONFIG_FILE);
    let mut config: Value =
        serde_json::from_str(&fs::read_to_string(&config_path).expect("reads")).expect("JSON");
    config["use_dora"] = Value::Bool(true);
    fs::write(&config_path, config.to_string()).expect("writes");
    let err = AdapterConfig::read(&folder).expect_err("DoRA");
    assert!(err.to_string().contains("use_dora"), "{err}");

    // A config is read up to a bound, whatever the folder holds.
    fs::write(&config_path, " ".repeat(2 << 20)).expect("writes");
    let err = AdapterConfig::read(&folder).expect_err("2 MiB of config");
    assert!(
        err.to_string().contains("larger than 1048576 bytes"),
        "{err}"
    );

    let mut wrong = settings(4);
    wrong.target_modules.push("lm_head".to_owned());
    let err = base()
        .model
        .add_adapters(&wrong, 1, 0)
        .expect_err("lm_head is not a projection");
    assert!(err.to_string().contains("`lm_head`"), "{err}");
}

#[test]
fn convert_merges_a_peft_adapter_into_a_plain_folder() {
    let root = tempfile::tempdir().expect("tempdir");
    let out = root.path().join("merged");
    let (model, adapter) = (fixtures().join("llama"), fixtures().join("llama_lora"));
    let cli = drmas_host::cli::Cli::try_parse_from([
        "drmas-host".as_ref(),
        "convert".as_ref(),
        model.as_os_str(),
        out.as_os_str(),
        "--merge-adapter".as_ref(),
        adapter.as_os_str(),
    ])
    .expect("parses");
    drmas_host::run(cli).expect("converts");
    let merged = Pretrained::load(&out, Device::Cpu, Kind::Float).expect("loads");
    let worst = peft_difference(&merged.model, &golden(), &[None, None]);
    assert!(
        worst < 1e-4,
        "the merged folder differs from PEFT's logits by {worst}"
    );
}
