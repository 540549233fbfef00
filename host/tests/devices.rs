//! `drmas-host devices`: what this build reports about CUDA, the refusal of a CUDA device it
//! cannot use, the comparison of a model on a device (or in a dtype) against the CPU in f32 —
//! on CUDA when libtorch sees a GPU (skipped with a printed reason otherwise), in bf16 on the
//! CPU always — and the figures of a timed generation.

use std::path::{Path, PathBuf};

use drmas_host::config::Device as RunDevice;
use drmas_host::devices::{
    check_available, compare, generation_speed, DeviceReport, GenerationShape, Tolerance,
    PROFILED_TOKENS, PROFILE_ENTRIES,
};
use tch::{Device, Kind};

fn fixture(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hf")
        .join(family)
}

#[test]
fn the_report_agrees_with_libtorch() {
    let report = DeviceReport::detect();
    assert_eq!(report.cuda_available, tch::Cuda::is_available());
    assert!(
        report.libtorch_has_cuda || !report.cuda_available,
        "CUDA is available only through libtorch_cuda.so"
    );
    assert_eq!(
        report.cuda_devices.len() as i64,
        if report.cuda_available {
            tch::Cuda::device_count()
        } else {
            0
        }
    );
    assert!(
        report.libtorch.is_some_and(|v| v.starts_with("2.")),
        "the libtorch folder's build-version is reported: {:?}",
        report.libtorch
    );
}

#[test]
fn a_cuda_device_that_is_not_there_is_refused_with_what_to_do() {
    assert_eq!(check_available(RunDevice::Cpu), Ok(()));
    let count = if tch::Cuda::is_available() {
        tch::Cuda::device_count() as usize
    } else {
        0
    };
    let missing = RunDevice::Cuda(count);
    let message = check_available(missing).expect_err("no such device");
    assert!(
        message.contains(&format!("device = \"cuda:{count}\"")),
        "{message}"
    );
    if DeviceReport::detect().libtorch_has_cuda {
        assert!(!message.contains("CPU-only"), "{message}");
    } else {
        assert!(
            message.contains("CPU-only libtorch") && message.contains("docs/install.md"),
            "{message}"
        );
    }
}

#[test]
fn bf16_on_the_cpu_stays_within_its_tolerance_of_f32() {
    for family in ["llama", "qwen2"] {
        let tolerance = Tolerance::for_kind(Kind::BFloat16);
        let result = compare(&fixture(family), Device::Cpu, Kind::BFloat16, 16, tolerance)
            .unwrap_or_else(|e| panic!("{family}: {e:#}"));
        let logits = &result.logits;
        assert!(result.pass, "{family}: {result:#?}");
        assert!(
            logits.max_abs_diff > 0.0,
            "{family}: bf16 rounds, so logits differ"
        );
        assert!(
            logits.relative < tolerance.logits_relative,
            "{family}: {logits:?}"
        );
        assert!(logits.top1_agreement > 0.9, "{family}: {logits:?}");
        assert_eq!(result.greedy.prompts, 4);
        for divergence in &result.greedy.differences {
            assert!(divergence.cpu_gap >= 0.0, "{family}: {divergence:?}");
        }
    }
}

#[test]
fn f32_on_cuda_matches_the_cpu() {
    if !tch::Cuda::is_available() {
        eprintln!(
            "skipped: libtorch sees no CUDA device (has CUDA: {})",
            tch::utils::has_cuda()
        );
        return;
    }
    for family in ["llama", "qwen2", "qwen3"] {
        let result = compare(
            &fixture(family),
            Device::Cuda(0),
            Kind::Float,
            32,
            Tolerance::for_kind(Kind::Float),
        )
        .unwrap_or_else(|e| panic!("{family}: {e:#}"));
        assert!(result.pass, "{family}: {result:#?}");
    }
}

#[test]
fn a_timed_generation_counts_its_tokens_and_the_bytes_each_step_reads() {
    let shape = GenerationShape {
        batch: 3,
        prompt_tokens: 10,
        new_tokens: 12,
    };
    let model = fixture("llama");
    let speed =
        generation_speed(&model, Device::Cpu, Kind::BFloat16, shape, false).expect("generates");
    assert!(speed.longest >= 1 && speed.longest <= 12, "{speed:?}");
    assert!(
        speed.tokens >= speed.longest && speed.tokens <= 3 * speed.longest,
        "{speed:?}"
    );
    // Wall-clock times under a parallel test run: their difference may be anything, their sign not.
    assert!(
        speed.seconds > 0.0 && speed.prefill_seconds > 0.0,
        "{speed:?}"
    );
    assert!(
        speed.decode_step_ms.is_finite() && speed.first_two_steps_ms.is_finite(),
        "{speed:?}"
    );
    let expected_rate = speed.tokens as f64 / speed.seconds;
    assert!((speed.tokens_per_s - expected_rate).abs() <= 1e-9 * expected_rate);
    // The fixture's weights, 2 bytes each in bf16: every tensor of its safetensors file.
    let weights: i64 = tch::Tensor::read_safetensors(model.join("model.safetensors"))
        .expect("fixture weights")
        .iter()
        .map(|(_, tensor)| tensor.numel() as i64)
        .sum();
    assert_eq!(speed.weight_bytes, 2 * weights as u64);
    // 2 layers × (K and V) × 2 KV heads × head dim 16 × 2 bytes per token, over a mean context
    // of the prompt plus half the longest row, for each of the 3 rows.
    let per_token = 2.0 * 2.0 * 2.0 * 16.0 * 2.0;
    let context = 10.0 + speed.longest as f64 / 2.0;
    assert_eq!(
        speed.kv_cache_bytes_per_step,
        (3.0 * context * per_token) as u64
    );
    let too_long = GenerationShape {
        new_tokens: 600,
        ..shape
    };
    let error = generation_speed(&model, Device::Cpu, Kind::BFloat16, too_long, false)
        .expect_err("past the context");
    assert!(
        format!("{error:#}").contains("exceed the model's 512 positions"),
        "{error:#}"
    );
}

#[test]
fn a_profiled_generation_records_one_embedding_per_forward_pass() {
    let shape = GenerationShape {
        batch: 2,
        prompt_tokens: 6,
        new_tokens: 24,
    };
    let speed = generation_speed(&fixture("qwen2"), Device::Cpu, Kind::Float, shape, true)
        .expect("generates");
    let profile = speed.profile.expect("profiled");
    // The profiled call repeats the timed one's batch and seed for PROFILED_TOKENS tokens: one
    // forward pass per token of its longest row (the prefill gives the first), each starting
    // with one embedding lookup.
    let forwards = speed.longest.min(PROFILED_TOKENS) as u64;
    let embedding = profile
        .host
        .iter()
        .find(|e| e.name == "aten::embedding")
        .unwrap_or_else(|| panic!("no embedding recorded: {profile:#?}"));
    assert_eq!(embedding.count, forwards, "{profile:#?}");
    assert!(embedding.total_ms > 0.0 && embedding.total_ms <= profile.wall_seconds * 1e3);
    assert_eq!(profile.device_events, 0, "the CPU runs no device kernels");
    assert!(profile.host.len() <= PROFILE_ENTRIES);
}
