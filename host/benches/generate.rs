//! Generation throughput of the embedded default model (SmolLM2-135M-Instruct on CPU, f32 by
//! default): a ~70-token chat prompt continued by 128 tokens at temperature 1, at batch 1, 16
//! and 64, on 2 libtorch threads.
//!
//! Run with `cargo bench -p drmas-host --bench generate` (`$DRMAS_MODEL` or the default model
//! path must hold the GGUF). `DRMAS_BENCH_BATCHES=1,16` picks the batch sizes and
//! `DRMAS_BENCH_THREADS` the thread count (libtorch's and the kernel's), `DRMAS_BENCH_DTYPE=bf16`
//! the weights' dtype (what a worker group with `dtype = "bf16"` generates with: libtorch's
//! bf16 products, which take AMX or AVX-512 BF16 where the CPU has them; the CPU kernels are
//! f32 only, so `libtorch` is then the one default backend). Prints, per batch and
//! mode, the prefill of distinct prompts, one decode step (the forward of one new token per row
//! over the prompt's cache) and the LM head alone; then for the same prompt in every row (a
//! sampling group: prefilled once) and for distinct prompts the tokens generated and tokens per
//! second over the whole `generate` call (prefill included).
//!
//! `DRMAS_BENCH_KERNELS` lists the backends to compare, interleaved per batch: `auto` (what a
//! worker group builds), `avx512`, `avx2`, `portable` (the CPU kernels of that version on the
//! products where they beat libtorch on this CPU), the same with `:all` (every product on the
//! kernels) or with the routes named after the colon, joined by `+` (`avx512:few-rows+attention`:
//! products of at most 3 rows and decode attention on the kernels, the other products on
//! libtorch; the elementwise steps and the draws always run on the kernels), and `libtorch`. By
//! default (f32): `auto` where it mixes versions, every version the CPU runs, then `libtorch`.
//! The CPU (model name and vector extensions) and the load average before and after are
//! printed with the results: the machine may be shared.
//!
//! When the Python peer is installed (`scripts/bench/peer-venv.sh`, or `$DRMAS_PEER_PYTHON`), the
//! distinct prompts of each batch also go through HF transformers `generate` on the same model
//! (converted to an HF folder, loaded in the same dtype), right after ours, and the ratio
//! ours / HF of each backend is printed.

#[path = "common/peer.rs"]
mod peer;
#[path = "common/settings.rs"]
mod settings;

use std::sync::Arc;
use std::time::Instant;

use drmas_host::engine::cpu::{CpuKernels, Isa, Routes};
use drmas_host::engine::{generate, GenerationRequest, SamplingParams};
use drmas_host::model::backend::{self, Backend};
use drmas_host::model::gguf::GgufModel;
use drmas_host::model::llama::Llama;
use drmas_host::rng::SeededRng;
use peer::Peer;
use serde_json::json;
use settings::{setting, setting_list};
use tch::{Device, Kind, Tensor};

const NEW_TOKENS: usize = 128;

fn main() {
    drmas_host::allocator::keep_freed_memory();
    let threads: i32 = setting("DRMAS_BENCH_THREADS", 2);
    let batches: Vec<usize> = setting_list("DRMAS_BENCH_BATCHES", &[1, 16, 64]);
    let dtype: String = setting("DRMAS_BENCH_DTYPE", "f32".to_owned());
    let kind = match dtype.as_str() {
        "f32" => Kind::Float,
        "bf16" => Kind::BFloat16,
        other => {
            eprintln!("DRMAS_BENCH_DTYPE: {other:?} is not f32 or bf16");
            std::process::exit(2)
        }
    };
    // `auto` (what a worker group builds) only where it is not one version's tuned kernels.
    let auto =
        (CpuKernels::tuned(Isa::best()) != Some(CpuKernels::fastest())).then(|| "auto".to_owned());
    let kernel_modes = auto
        .into_iter()
        .chain(
            Isa::supported()
                .into_iter()
                .map(|isa| isa.name().to_owned()),
        )
        .filter(|_| kind == Kind::Float);
    let default_modes: Vec<String> = kernel_modes.chain(["libtorch".to_owned()]).collect();
    let modes: Vec<(String, Arc<dyn Backend>)> =
        setting_list("DRMAS_BENCH_KERNELS", &default_modes)
            .into_iter()
            .map(|name: String| {
                let backend = backend_named(&name);
                (name, backend)
            })
            .collect();
    print_cpu();
    if cfg!(debug_assertions) {
        println!(
            "warning: built in the dev profile, where drmas's own code (the CPU kernels) is \
             compiled at opt-level 1 and runs several times slower; for figures, run without \
             `--profile dev`"
        );
    }
    for (name, backend) in &modes {
        println!("{name:<12} = {}", backend.name());
    }
    tch::set_num_threads(threads);
    let path = drmas_host::model::default_model_path();
    let gguf = GgufModel::open(&path).expect("the model file opens (scripts/install-model.sh)");
    let tokenizer = gguf.tokenizer().expect("the tokenizer loads");
    let mut llama = Llama::from_gguf(&gguf, Device::Cpu).expect("the model loads");
    llama.set_kind(kind);
    let text =
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging \
                Face<|im_end|>\n<|im_start|>user\nA farmer has 17 sheep, 3 cows and twice as many \
                chickens as cows. He sells 5 sheep and buys 4 more cows. How many animals does \
                he have now? Explain your reasoning step by step.<|im_end|>\n\
                <|im_start|>assistant\n";
    let prompt: Vec<i64> = tokenizer
        .encode(text, false)
        .expect("encodes")
        .get_ids()
        .iter()
        .map(|&id| i64::from(id))
        .collect();
    println!(
        "SmolLM2-135M {dtype}, {threads} threads, {}-token prompt, {NEW_TOKENS} new tokens, \
         temperature 1",
        prompt.len()
    );
    let request = GenerationRequest::new(
        prompt.clone(),
        SamplingParams::with_temperature(1.0),
        NEW_TOKENS,
    );
    let mut peer = Peer::start(&path, threads, &dtype);
    // Warm-up: libtorch's first calls allocate and pick kernels.
    let warm = GenerationRequest {
        max_new_tokens: 4,
        ..request.clone()
    };
    generate(
        &llama,
        &tokenizer,
        &[warm.clone(), warm],
        &mut SeededRng::new(0),
    )
    .expect("generates");
    for batch in batches {
        // Distinct prompts: the same question numbered differently, so nothing is shared.
        let distinct: Vec<Vec<i64>> = (0..batch)
            .map(|i| {
                let numbered = text.replace("A farmer", &format!("Farmer {i}"));
                let encoding = tokenizer.encode(numbered, false).expect("encodes");
                encoding.get_ids().iter().map(|&id| i64::from(id)).collect()
            })
            .collect();
        let longest = distinct.iter().map(Vec::len).max().unwrap_or(0);
        let padded: Vec<i64> = distinct
            .iter()
            .flat_map(|p| std::iter::repeat_n(0, longest - p.len()).chain(p.iter().copied()))
            .collect();
        let valid: Vec<bool> = distinct
            .iter()
            .flat_map(|p| {
                std::iter::repeat_n(false, longest - p.len())
                    .chain(std::iter::repeat_n(true, p.len()))
            })
            .collect();
        let shape = [batch as i64, longest as i64];
        let (ids, mask) = (
            Tensor::from_slice(&padded).view(shape),
            Tensor::from_slice(&valid).view(shape),
        );
        let hidden = Tensor::randn([batch as i64, 1, 576], (kind, Device::Cpu));
        let next = Tensor::zeros([batch as i64, 1], (Kind::Int64, Device::Cpu));
        for (mode, backend) in &modes {
            llama.set_backend(backend.clone());
            // What `generate` runs: the prefill of distinct prompts, the LM head of one position
            // per row, decode steps each adding one token to the cache.
            let (prefill, head, step) = {
                let mut cache = llama
                    .new_cache(batch as i64, longest as i64 + 6)
                    .expect("a cache");
                let start = Instant::now();
                let _ = tch::no_grad(|| llama.forward_last(&ids, Some(&mask), Some(&mut cache)))
                    .expect("prefill");
                let prefill = start.elapsed().as_secs_f64() * 1e3;
                let head = time_ms(20, || {
                    let _ = tch::no_grad(|| llama.logits(&hidden));
                });
                let step = time_ms(5, || {
                    let _ = tch::no_grad(|| llama.forward_last(&next, None, Some(&mut cache)))
                        .expect("decode step");
                });
                (prefill, head, step)
            };
            println!(
                "batch {batch:>3} {mode:<12} prefill of {batch} distinct prompts {prefill:>7.1} \
                 ms, decode step {step:>7.1} ms, LM head alone {head:>6.2} ms"
            );
        }
        let peer_prompts = distinct.clone();
        let runs = [
            ("same prompt", vec![request.clone(); batch]),
            (
                "distinct prompts",
                distinct
                    .into_iter()
                    .map(|prompt| GenerationRequest {
                        prompt,
                        ..request.clone()
                    })
                    .collect(),
            ),
        ];
        let mut ours = Vec::new();
        for (name, requests) in runs {
            for (mode, backend) in &modes {
                llama.set_backend(backend.clone());
                let start = Instant::now();
                let generations = generate(&llama, &tokenizer, &requests, &mut SeededRng::new(1))
                    .expect("generates");
                let elapsed = start.elapsed().as_secs_f64();
                let tokens: usize = generations.iter().map(|g| g.tokens.len()).sum();
                let longest = generations
                    .iter()
                    .map(|g| g.tokens.len())
                    .max()
                    .unwrap_or(0);
                println!(
                    "  {mode:<12} {name:<16}: {tokens:>5} tokens (longest {longest}) in \
                 {elapsed:>6.2} s = {:>7.1} tokens/s",
                    tokens as f64 / elapsed,
                );
                if name == "distinct prompts" {
                    ours.push((mode, tokens as f64 / elapsed));
                }
            }
        }
        if let Some(p) = peer.as_mut() {
            let request = json!({"cmd": "generate", "prompts": peer_prompts,
                                 "max_new_tokens": NEW_TOKENS, "seed": 1});
            match p.call(&request) {
                Ok(answer) => {
                    let (tokens, seconds) = (
                        Peer::number(&answer, "tokens"),
                        Peer::number(&answer, "seconds"),
                    );
                    let hf = tokens / seconds;
                    let ratios: Vec<String> = ours
                        .iter()
                        .map(|(mode, ours)| format!("{mode} {:.2}", ours / hf))
                        .collect();
                    println!(
                        "  {:<16}: {tokens:>5} tokens (longest {}) in {seconds:>6.2} s = \
                         {hf:>7.1} tokens/s; ours / HF: {}",
                        "HF transformers",
                        Peer::number(&answer, "longest"),
                        ratios.join(", "),
                    );
                }
                Err(error) => println!("  HF transformers: {error}"),
            }
        }
    }
    print_load();
}

/// The backend a `DRMAS_BENCH_KERNELS` item names (see the header comment); exits on a name
/// it does not know or a version this CPU does not run.
fn backend_named(name: &str) -> Arc<dyn Backend> {
    match name {
        "libtorch" => return backend::libtorch(),
        "auto" => return Arc::new(CpuKernels::fastest()),
        _ => {}
    }
    let (isa, routes) = match name.split_once(':') {
        Some((isa, routes)) => (isa, Some(routes)),
        None => (name, None),
    };
    let kernels = Isa::from_name(isa).and_then(|isa| {
        let routes = match routes {
            None => Routes::for_this_cpu(isa),
            Some(names) => routes_named(names)?,
        };
        CpuKernels::new(isa, routes)
    });
    match kernels {
        Some(kernels) => Arc::new(kernels),
        None => {
            eprintln!(
                "DRMAS_BENCH_KERNELS: {name:?} is not auto, avx512, avx2, portable (each \
                 optionally with :all or :ROUTE+ROUTE…, routes being few-rows, decode, prefill \
                 and attention) or libtorch, or this CPU does not run it"
            );
            std::process::exit(2)
        }
    }
}

/// The routes `all` or a `+`-joined list of them names; `None` for a name it does not know.
fn routes_named(names: &str) -> Option<Routes> {
    if names == "all" {
        return Some(Routes::ALL);
    }
    let mut routes = Routes {
        few_rows: false,
        decode: false,
        prefill: false,
        attention: false,
    };
    for name in names.split('+') {
        let route = match name {
            "few-rows" => &mut routes.few_rows,
            "decode" => &mut routes.decode,
            "prefill" => &mut routes.prefill,
            "attention" => &mut routes.attention,
            _ => return None,
        };
        *route = true;
    }
    Some(routes)
}

/// Prints the CPU's model name, the vector extensions the kernels care about, the cores and
/// the load average (from `/proc`; skipped where there is none).
fn print_cpu() {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |name: &str| {
        info.lines()
            .find(|line| line.starts_with(name))
            .and_then(|line| line.split_once(':'))
            .map(|(_, value)| value.trim().to_owned())
            .unwrap_or_else(|| "unknown".to_owned())
    };
    let flags = field("flags");
    let vector: Vec<&str> = flags
        .split_whitespace()
        .filter(|flag| ["avx2", "fma", "avx512f", "avx512bw", "avx512vl"].contains(flag))
        .collect();
    println!(
        "CPU: {} ({}), {} logical cores, flags: {}; supported kernels: {}",
        field("model name"),
        field("vendor_id"),
        std::thread::available_parallelism().map_or(0, usize::from),
        vector.join(" "),
        Isa::supported()
            .iter()
            .map(|isa| isa.name())
            .collect::<Vec<_>>()
            .join(", "),
    );
    print_load();
}

/// Prints the 1, 5 and 15-minute load averages.
fn print_load() {
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        let averages: Vec<&str> = load.split_whitespace().take(3).collect();
        println!("load average: {}", averages.join(" "));
    }
}

/// The median of `runs` timings of `f`, in milliseconds, after one warm-up call.
fn time_ms(runs: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[runs / 2]
}
