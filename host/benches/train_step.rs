//! One training forward + backward of SmolLM2-135M-Instruct (f32, CPU) on 8 × 256 tokens: ours
//! (tch, `Llama::forward_hidden` + the LM head, as the trainer runs it) against PyTorch eager
//! (HF transformers on the same model, converted to an HF folder) on the same token ids, with
//! the two alternating so both see the same load.
//!
//! The loss is the mean next-token cross-entropy over all positions (HF's `labels=input_ids`);
//! both losses are printed, and must agree. Each figure is compared with the matmul peak:
//! FLOPs per step = tokens × (6 × P + 12 × L × T × d), with P the weights that multiply
//! (every linear layer plus the LM head; the tied embedding lookup is not a matmul), L layers,
//! T the sequence length and d the attention width (heads × head dim): 6·P for the forward
//! and backward matmuls, 12·L·T·d for the attention scores and their weighted sums
//! (computed in full, causal or not). The peak is a 2048² f32 matmul on the same threads, in
//! libtorch and in PyTorch, printed beside the reference of 171 GFLOP/s (another
//! machine's); each step's fraction is of libtorch's peak here.
//!
//! Our side runs with the allocator settings `drmas-host` makes at start
//! ([`drmas_host::allocator::keep_freed_memory`]); the peer with Python's defaults.
//!
//! Run with `cargo bench -p drmas-host --bench train_step`; `DRMAS_BENCH_THREADS` (2) and
//! `DRMAS_BENCH_REPS` (3 alternating pairs) change the defaults. The peer is the one
//! `scripts/bench/peer-venv.sh` installs (or `$DRMAS_PEER_PYTHON`); without it only ours runs.

#[path = "common/peer.rs"]
mod peer;
#[path = "common/settings.rs"]
mod settings;

use std::time::Instant;

use drmas_host::model::llama::Llama;
use peer::Peer;
use serde_json::json;
use settings::setting;
use tch::{Device, Kind, Tensor};

const BATCH: i64 = 8;
const TOKENS: i64 = 256;
/// The reference matmul peak on the reference machine (GFLOP/s).
const REFERENCE_PEAK: f64 = 171.0;

fn main() {
    let threads: i32 = setting("DRMAS_BENCH_THREADS", 2);
    let reps: usize = setting("DRMAS_BENCH_REPS", 3);
    drmas_host::allocator::keep_freed_memory();
    tch::set_num_threads(threads);
    let path = drmas_host::model::default_model_path();
    let llama = Llama::load_from_gguf(&path, Device::Cpu).expect("the model loads");
    let mut peer = Peer::start(&path, threads, "f32");

    let c = llama.config();
    let vocab = c.vocab_size as i64;
    let linear: usize = llama
        .var_store()
        .variables()
        .iter()
        .filter(|(name, t)| t.dim() == 2 && name.contains("layers."))
        .map(|(_, t)| t.numel())
        .sum();
    let matmul_params = (linear + c.vocab_size * c.hidden_size) as f64;
    let attention_width = (c.num_attention_heads * c.head_dim) as f64;
    let step_flops = (BATCH * TOKENS) as f64
        * (6.0 * matmul_params
            + 12.0 * c.num_hidden_layers as f64 * TOKENS as f64 * attention_width);
    println!(
        "SmolLM2-135M f32, {threads} threads, forward + backward of {BATCH} x {TOKENS} tokens; \
         {:.1} M matmul weights, {:.3} TFLOP per step",
        matmul_params / 1e6,
        step_flops / 1e12
    );

    let ours_peak = matmul_gflops(2048, 8);
    let peer_peak = peer.as_mut().and_then(|p| {
        p.call(&json!({"cmd": "matmul", "n": 2048, "reps": 8}))
            .map(|a| Peer::number(&a, "gflops"))
            .map_err(|e| println!("peer matmul: {e}"))
            .ok()
    });
    println!(
        "matmul peak (2048² f32, best of 8): libtorch {ours_peak:.1} GFLOP/s{}; reference \
         {REFERENCE_PEAK} GFLOP/s",
        peer_peak.map_or(String::new(), |p| format!(", PyTorch {p:.1} GFLOP/s"))
    );

    tch::manual_seed(0);
    let ids = Tensor::randint(vocab, [BATCH, TOKENS], (Kind::Int64, Device::Cpu));
    let rows: Vec<Vec<i64>> = (0..BATCH)
        .map(|row| Vec::<i64>::try_from(ids.get(row)).expect("ids are int64"))
        .collect();
    let request = json!({"cmd": "train_step", "ids": rows});

    // The first step of each allocates gradients and picks kernels: not timed.
    let (_, loss) = ours_step(&llama, &ids);
    println!("warm-up: ours loss {loss:.6}");
    if let Some(p) = peer.as_mut() {
        match p.call(&request) {
            Ok(answer) => println!("warm-up: PyTorch loss {:.6}", Peer::number(&answer, "loss")),
            Err(error) => {
                println!("peer skipped: {error}");
                peer = None;
            }
        }
    }
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for rep in 1..=reps {
        let (seconds, loss) = ours_step(&llama, &ids);
        ours.push(seconds);
        print!("step {rep}: ours {seconds:.2} s (loss {loss:.6})");
        if let Some(p) = peer.as_mut() {
            match p.call(&request) {
                Ok(answer) => {
                    let seconds = Peer::number(&answer, "seconds");
                    theirs.push(seconds);
                    print!(
                        ", PyTorch {seconds:.2} s (loss {:.6})",
                        Peer::number(&answer, "loss")
                    );
                }
                Err(error) => print!(", PyTorch: {error}"),
            }
        }
        println!();
    }
    let summary = |name: &str, times: &[f64]| {
        let median = median(times);
        let gflops = step_flops / median / 1e9;
        println!(
            "{name:<8} median {median:.2} s per step = {gflops:.1} GFLOP/s = {:.0} % of the \
             matmul peak here",
            100.0 * gflops / ours_peak
        );
        median
    };
    let ours_median = summary("ours", &ours);
    if !theirs.is_empty() {
        let theirs_median = summary("PyTorch", &theirs);
        println!(
            "ours / PyTorch seconds per step = {:.2} (target <= 1.0)",
            ours_median / theirs_median
        );
    }
}

/// One forward + backward as the trainer runs it: hidden states, LM head, log-softmax,
/// gathered next-token log-probabilities; returns seconds and the loss.
fn ours_step(llama: &Llama, ids: &Tensor) -> (f64, f64) {
    for mut var in llama.var_store().trainable_variables() {
        var.zero_grad();
    }
    let start = Instant::now();
    let hidden = llama
        .forward_hidden(ids, None, None)
        .expect("the forward runs");
    let logits = llama.logits(&hidden.narrow(1, 0, TOKENS - 1));
    let targets = ids.narrow(1, 1, TOKENS - 1).unsqueeze(-1);
    let loss = -logits
        .log_softmax(-1, Kind::Float)
        .gather(2, &targets, false)
        .mean(Kind::Float);
    loss.backward();
    (start.elapsed().as_secs_f64(), loss.double_value(&[]))
}

/// Best-of-`reps` GFLOP/s of an `n` × `n` f32 matmul in libtorch.
fn matmul_gflops(n: i64, reps: usize) -> f64 {
    let (a, b) = (
        Tensor::randn([n, n], (Kind::Float, Device::Cpu)),
        Tensor::randn([n, n], (Kind::Float, Device::Cpu)),
    );
    let _ = a.matmul(&b);
    let best = (0..reps)
        .map(|_| {
            let start = Instant::now();
            let _ = a.matmul(&b);
            start.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min);
    2.0 * (n as f64).powi(3) / best / 1e9
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len().is_multiple_of(2) {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    } else {
        sorted[mid]
    }
}
