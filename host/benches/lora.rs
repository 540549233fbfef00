//! LoRA (rank 16, alpha 32, all seven projections) against full fine-tuning on the embedded
//! default model (SmolLM2-135M-Instruct, f32 on CPU): one update (forward, backward, AdamW) of
//! 8 calls × 256 tokens (128 prompt + 128 response), through `update_group` as the trainer
//! runs it. Then, for one decode step's projection with rows of four agents mixed, the two ways
//! of applying per-row adapters: gathering every row's own A and B for a batched matmul (what
//! the model does) against grouping rows by adapter.
//!
//! Run with `cargo bench -p drmas-host --bench lora` (`--profile dev` reuses the test build).
//! Each side runs in its own child process (the bench re-runs itself), so each peak resident
//! set (Linux `VmHWM`, reset after the model is loaded) is that side's alone. Prints per side
//! the trainable parameters, the optimizer's bytes, the resident set after loading, the peak
//! during the updates and each update's time, then the LoRA / full ratios.
//! `DRMAS_BENCH_STEPS` (default 2) sets the updates per side (0: only the per-row comparison),
//! `DRMAS_BENCH_THREADS` (2) the libtorch threads. The per-row comparison is the fastest of
//! seven alternating rounds of 50 steps each.

#[path = "common/settings.rs"]
mod settings;

use std::process::Command;
use std::time::Instant;

use drmas_host::advantage::PerToken;
use drmas_host::config::LossSection;
use drmas_host::engine::FinishReason;
use drmas_host::model::lora::{LoraSettings, TARGET_MODULES};
use drmas_host::model::pretrained::Pretrained;
use drmas_host::rng::SeededRng;
use drmas_host::rollout::AgentCall;
use drmas_host::update::{
    update_group, AdamW, AgentTraining, MicroBatch, Reference, RolloutCorrection, UpdateInputs,
    UpdateSettings,
};
use settings::setting;
use tch::{Device, Kind, Tensor};

/// Set in a child: which side it measures.
const CHILD: &str = "DRMAS_LORA_BENCH_SIDE";
const CALLS: usize = 8;
const PROMPT: usize = 128;
const RESPONSE: usize = 128;

fn main() {
    drmas_host::allocator::keep_freed_memory();
    let threads: i32 = setting("DRMAS_BENCH_THREADS", 2);
    let steps: usize = setting("DRMAS_BENCH_STEPS", 2);
    tch::set_num_threads(threads);
    if let Ok(side) = std::env::var(CHILD) {
        measure(&side, steps);
        return;
    }
    println!(
        "one update of {CALLS} × {} tokens, SmolLM2-135M f32 on CPU, {threads} threads, \
         {steps} updates per side",
        PROMPT + RESPONSE
    );
    let mut results = Vec::new();
    let sides: &[&str] = if steps == 0 { &[] } else { &["full", "lora"] };
    for &side in sides {
        let exe = std::env::current_exe().expect("the bench's own path");
        let output = Command::new(exe)
            .env(CHILD, side)
            .output()
            .expect("the child runs");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        print!("{text}");
        assert!(
            output.status.success(),
            "{side} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let value = |key: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{side} {key} ")))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or(f64::NAN)
        };
        results.push((value("peak_mib"), value("step_s")));
    }
    if let [(full_peak, full_step), (lora_peak, lora_step)] = results[..] {
        println!(
            "lora / full: peak memory during the update {:.2} ({lora_peak:.0} / {full_peak:.0} \
             MiB), update time {:.2} ({lora_step:.1} / {full_step:.1} s)",
            lora_peak / full_peak,
            lora_step / full_step
        );
    }
    mixed_rows(threads);
}

/// One side, in a child process: loads the model, takes `steps` updates, prints its figures.
fn measure(side: &str, steps: usize) {
    let path = drmas_host::model::default_model_path();
    let mut pretrained =
        Pretrained::load(&path, Device::Cpu, Kind::Float).expect("the model loads");
    let lora = side == "lora";
    if lora {
        let settings = LoraSettings {
            rank: 16,
            alpha: 32.0,
            dropout: 0.0,
            target_modules: TARGET_MODULES.map(str::to_owned).to_vec(),
        };
        pretrained
            .model
            .add_adapters(&settings, 1, 0)
            .expect("adapters attach");
    }
    let model = &pretrained.model;
    let trained = match model.adapters() {
        Some(adapters) => adapters.var_store(),
        None => model.var_store(),
    };
    let mut params: Vec<(String, Tensor)> = trained.variables().into_iter().collect();
    params.sort_by(|a, b| a.0.cmp(&b.0));
    let count: i64 = params.iter().map(|(_, p)| p.numel() as i64).sum();
    let mut optimizer = AdamW::new(params, 0.0);
    let loaded_mib = status_mib("VmRSS");
    reset_peak();

    let vocab = model.config().vocab_size as u64;
    let mut rng = SeededRng::new(1);
    let mut tokens =
        |n: usize| -> Vec<i64> { (0..n).map(|_| (rng.next_u64() % vocab) as i64).collect() };
    let calls: Vec<AgentCall> = (0..CALLS)
        .map(|i| AgentCall {
            episode: i,
            index: 0,
            agent: 0,
            step: 0,
            prompt: tokens(PROMPT),
            cached_prompt_tokens: 0,
            response: tokens(RESPONSE),
            text: String::new(),
            logprobs: vec![-11.0; RESPONSE],
            temperature: 1.0,
            valid: true,
            breaks_contract: false,
            finish: FinishReason::Length,
        })
        .collect();
    let refs: Vec<&AgentCall> = calls.iter().collect();
    let per_call: Vec<f64> = (0..CALLS)
        .map(|i| if i % 2 == 0 { 1.0 } else { -1.0 })
        .collect();
    let lengths: Vec<usize> = calls.iter().map(|c| c.response.len()).collect();
    let advantages = PerToken::broadcast(&per_call, &lengths);
    let agents = [AgentTraining {
        loss: LossSection::default(),
        micro_batch: MicroBatch::Calls(CALLS),
        adapter: lora.then_some(0),
        activation_checkpointing: false,
        correction: RolloutCorrection::default(),
    }];
    let mut times = Vec::new();
    for _ in 0..steps {
        let start = Instant::now();
        let report = update_group(
            model,
            Reference::None,
            &mut optimizer,
            &UpdateInputs::new(&refs, &advantages),
            &agents,
            &UpdateSettings::one_step(1.0, 1e-5),
        )
        .expect("an update");
        assert!(report.skipped.is_none(), "the update was skipped");
        times.push(start.elapsed().as_secs_f64());
    }
    let optimizer_bytes = count as f64 * 8.0;
    println!("{side} trainable_params {count}");
    println!(
        "{side} optimizer_mib {:.1} (AdamW moments; gradients as much again)",
        optimizer_bytes / 1048576.0
    );
    println!("{side} loaded_mib {loaded_mib:.0}");
    println!("{side} peak_mib {:.0}", status_mib("VmHWM"));
    let shown: Vec<String> = times.iter().map(|t| format!("{t:.1}")).collect();
    // The last update: the first also pays for libtorch's first allocations.
    println!(
        "{side} step_s {:.2} (each: {} s)",
        times.last().copied().unwrap_or(f64::NAN),
        shown.join(", ")
    );
}

/// A `/proc/self/status` figure (`VmRSS`, `VmHWM`) in MiB.
fn status_mib(key: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

/// Resets the peak resident set (`VmHWM`) to the current one (Linux ≥ 4.0).
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// One decode step of a `gate_proj`-sized projection (576 → 1536) at batch 64, rows spread over
/// four rank-16 adapters: grouping rows per adapter against gathering each row's A and B.
fn mixed_rows(threads: i32) {
    tch::set_num_threads(threads);
    tch::manual_seed(0);
    let (batch, slots, rank, din, dout) = (64i64, 4i64, 16i64, 576i64, 1536i64);
    let opts = (Kind::Float, Device::Cpu);
    let a = Tensor::randn([slots, rank, din], opts);
    let b = Tensor::randn([slots, dout, rank], opts);
    let x = Tensor::randn([batch, 1, din], opts);
    let row_slot = Tensor::arange(batch, (Kind::Int64, Device::Cpu)).remainder(slots);
    let groups: Vec<(i64, Tensor)> = (0..slots)
        .map(|s| (s, row_slot.eq(s).nonzero().squeeze_dim(1)))
        .collect();
    let grouped = || {
        let mut y = Tensor::zeros([batch, 1, dout], opts);
        for (slot, rows) in &groups {
            let delta = x
                .index_select(0, rows)
                .linear::<Tensor>(&a.get(*slot), None)
                .linear::<Tensor>(&b.get(*slot), None);
            y = y.index_add(0, rows, &delta);
        }
        y
    };
    let gathered = || {
        let rows_a = a.index_select(0, &row_slot);
        let rows_b = b.index_select(0, &row_slot);
        x.bmm(&rows_a.transpose(1, 2)).bmm(&rows_b.transpose(1, 2))
    };
    let diff = (grouped() - gathered()).abs().max().double_value(&[]);
    assert!(diff < 1e-3, "the two ways disagree by {diff}");
    // Alternating rounds, the fastest of each: the machine is shared, so a slow spell should
    // not land on one side only.
    let round = |f: &dyn Fn() -> Tensor| {
        let start = Instant::now();
        let n = 50;
        for _ in 0..n {
            let _ = f();
        }
        start.elapsed().as_secs_f64() / f64::from(n) * 1e6
    };
    let (mut g, mut h) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..7 {
        g = g.min(round(&grouped));
        h = h.min(round(&gathered));
    }
    println!(
        "per-row adapters, batch {batch} over {slots} adapters, 576 → 1536, rank {rank}: grouped \
         {g:.0} µs, gathered {h:.0} µs per projection"
    );
}
