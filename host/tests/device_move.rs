//! A worker group moves to another device and back bit for bit: every weight, the LoRA adapters,
//! the reference model, the gradients and the optimizer's moments and step count — and it trains
//! on after the trip exactly as if it had stayed. The trip goes through CUDA when libtorch sees a
//! GPU, and stays on the CPU otherwise (where it checks that a move keeps every tensor in place).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use drmas_host::config::WorkerGroupSection;
use drmas_host::model::layers::AdapterRows;
use drmas_host::model::lora::{LoraSettings, TARGET_MODULES};
use drmas_host::trainer::{Residency, WorkerGroup};
use tch::{Device, Kind, Tensor};

fn tiny_llama() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/llama")
}

/// The device the round trip goes through.
fn elsewhere() -> Device {
    if tch::Cuda::is_available() {
        Device::Cuda(0)
    } else {
        Device::Cpu
    }
}

fn group(lora: bool) -> WorkerGroup {
    group_with("", lora)
}

/// The tiny group with `extra` lines in its `[worker_groups.NAME]` section.
fn group_with(extra: &str, lora: bool) -> WorkerGroup {
    let section: WorkerGroupSection =
        toml::from_str(&format!("model = \"tiny\"\nlearning_rate = 0.01\n{extra}"))
            .expect("section");
    let settings = LoraSettings {
        rank: 4,
        alpha: 8.0,
        dropout: 0.0,
        target_modules: TARGET_MODULES.map(str::to_owned).to_vec(),
    };
    let model = tiny_llama();
    WorkerGroup::load(
        "g",
        &section,
        &model,
        (!lora).then_some(model.as_path()),
        lora.then(|| (&settings, vec!["a".to_owned(), "b".to_owned()])),
        7,
        0.01,
        0.1,
    )
    .expect("the tiny model loads")
}

/// One optimizer step on a fixed batch, leaving its gradients in place.
fn train_step(group: &mut WorkerGroup) {
    let device = group.pretrained.model.device();
    let tokens = Tensor::from_slice(&[1i64, 5, 9, 2, 7, 3, 11, 4])
        .view([2, 4])
        .to_device(device);
    group.optimizer.zero_grad().expect("cleared");
    // Row 0 through adapter 0, row 1 through adapter 1 (the base alone with LoRA would train
    // nothing).
    let rows = if group.adapter_names.is_empty() {
        AdapterRows::base()
    } else {
        AdapterRows::new(&[Some(0), Some(1)], device, true)
    };
    let model = &group.pretrained.model;
    let hidden = model
        .forward_hidden_with(&tokens, None, None, &rows)
        .expect("forward");
    let logits = model.logits(&hidden);
    logits
        .to_kind(Kind::Float)
        .log_softmax(-1, Kind::Float)
        .mean(Kind::Float)
        .backward();
    group.optimizer.step(0.01).expect("an optimizer step");
}

/// Every tensor the group holds, by name, copied to the CPU: weights, adapters, the reference,
/// gradients and optimizer state.
fn snapshot(group: &WorkerGroup) -> BTreeMap<String, Tensor> {
    let mut all = BTreeMap::new();
    let mut add = |prefix: &str, name: &str, tensor: &Tensor| {
        all.insert(
            format!("{prefix}{name}"),
            tensor.to_device(Device::Cpu).copy(),
        );
        let gradient = tensor.grad();
        if gradient.defined() {
            all.insert(
                format!("grad.{prefix}{name}"),
                gradient.to_device(Device::Cpu).copy(),
            );
        }
    };
    let model = &group.pretrained.model;
    for (name, tensor) in model.var_store().variables() {
        add("model.", &name, &tensor);
    }
    if let Some(adapters) = model.adapters() {
        for (name, tensor) in adapters.var_store().variables() {
            add("adapter.", &name, &tensor);
        }
    }
    if let Some(reference) = &group.reference {
        for (name, tensor) in reference.model.var_store().variables() {
            add("reference.", &name, &tensor);
        }
    }
    for (name, tensor) in group.optimizer.state() {
        all.insert(
            format!("optimizer.{name}"),
            tensor.to_device(Device::Cpu).copy(),
        );
    }
    all
}

fn assert_bit_identical(before: &BTreeMap<String, Tensor>, after: &BTreeMap<String, Tensor>) {
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "the same tensors"
    );
    for (name, a) in before {
        let b = &after[name];
        assert_eq!(a.kind(), b.kind(), "{name}: dtype");
        assert_eq!(a.size(), b.size(), "{name}: shape");
        // Bitwise: reinterpret as integers of the same width, so -0.0 and NaN payloads count.
        let bits = |t: &Tensor| match t.kind() {
            Kind::Float => t.view_dtype(Kind::Int),
            Kind::BFloat16 | Kind::Half => t.view_dtype(Kind::Int16),
            _ => t.shallow_clone(),
        };
        assert!(bits(a).equal(&bits(b)), "{name}: values changed");
    }
}

fn round_trip(lora: bool) {
    let mut group = group(lora);
    train_step(&mut group);
    let before = snapshot(&group);
    assert!(
        before.keys().any(|k| k.starts_with("grad.")),
        "the step left gradients to carry"
    );

    group.to_device(elsewhere());
    assert_eq!(group.pretrained.model.device(), elsewhere());
    group.to_device(Device::Cpu);
    assert_eq!(group.pretrained.model.device(), Device::Cpu);
    assert_bit_identical(&before, &snapshot(&group));

    // Training on after the trip is what training on without it would have been.
    let mut stayed = self::group(lora);
    train_step(&mut stayed);
    train_step(&mut stayed);
    train_step(&mut group);
    assert_eq!(group.optimizer.steps(), 2);
    assert_bit_identical(&snapshot(&stayed), &snapshot(&group));
}

#[test]
fn a_fully_trained_group_with_a_reference_round_trips_bit_for_bit() {
    round_trip(false);
}

#[test]
fn a_lora_group_round_trips_bit_for_bit() {
    round_trip(true);
}

/// Where the group's parts are: (weights, optimizer state, reference).
fn places(group: &WorkerGroup) -> (Device, Device, Device) {
    let reference = group.reference.as_ref().expect("a reference");
    (
        group.pretrained.model.device(),
        group.optimizer.state_device().expect("optimizer state"),
        reference.model.device(),
    )
}

#[test]
fn an_offloaded_bf16_group_moves_each_part_at_its_phase_and_returns_bit_for_bit() {
    let home = elsewhere();
    let device = match home {
        Device::Cuda(n) => format!("cuda:{n}"),
        _ => "cpu".to_owned(),
    };
    let mut group = group_with(
        &format!("dtype = \"bf16\"\ndevice = \"{device}\"\noffload = true"),
        false,
    );
    let at = |weights_home, training_state_home| {
        Some(Residency {
            weights_home,
            training_state_home,
        })
    };
    assert_eq!(group.residency(), at(true, true), "loaded at home");
    train_step(&mut group);
    let trained = snapshot(&group);
    assert!(
        trained.keys().any(|k| k.starts_with("optimizer.master.")),
        "bf16 weights have f32 masters to carry"
    );

    group.offload_after_update();
    assert_eq!(group.residency(), at(false, false));
    assert_eq!(places(&group), (Device::Cpu, Device::Cpu, Device::Cpu));
    if let Device::Cuda(_) = home {
        let weight = &group.pretrained.model.var_store().variables()["model.norm.weight"];
        assert!(
            weight.is_pinned(home),
            "offloaded weights are in pinned memory"
        );
    }
    assert_bit_identical(&trained, &snapshot(&group));

    group.prepare_rollout();
    assert_eq!(group.residency(), at(true, false));
    assert_eq!(places(&group), (home, Device::Cpu, Device::Cpu));

    group.prepare_update();
    assert_eq!(group.residency(), at(true, true));
    assert_eq!(places(&group), (home, home, home));
    assert_bit_identical(&trained, &snapshot(&group));

    let seconds = group.take_offload_seconds().expect("offload is on");
    assert!(seconds >= 0.0 && seconds.is_finite(), "{seconds}");
    assert_eq!(group.take_offload_seconds(), Some(0.0), "taken once");
    assert_eq!(self::group(false).take_offload_seconds(), None);
}
