//! The sampling engine against the embedded default model (SmolLM2-135M-Instruct): logprobs
//! equal to a training forward's, seeds, greedy, top-k/top-p, stop strings, per-row limits;
//! and the sampler alone on made-up distributions.

mod common;

use std::sync::{Mutex, OnceLock};

use drmas_host::engine::cpu::backend_for;
use drmas_host::engine::{
    generate, Decoding, FinishReason, Generation, GenerationRequest, PrefixCache, Sampler,
    SamplingParams,
};
use drmas_host::model::error::ModelError;
use drmas_host::model::gguf::GgufModel;
use drmas_host::model::llama::Llama;
use drmas_host::rng::SeededRng;
use tch::{Device, Kind, Tensor};
use tokenizers::Tokenizer;

/// Runs `f` with the tokenizer and the model, loaded once and shared by the tests (behind a
/// lock: libtorch tensors are not `Sync`).
fn with_model<R>(f: impl FnOnce(&Tokenizer, &Llama) -> R) -> R {
    static MODEL: OnceLock<Mutex<(Tokenizer, Llama)>> = OnceLock::new();
    let model = MODEL.get_or_init(|| {
        // One thread: on a small shared machine, libtorch's spinning worker threads slow down
        // badly when other processes compete for the cores.
        tch::set_num_threads(1);
        let gguf = GgufModel::open(common::model_path()).expect("the GGUF opens");
        let tokenizer = gguf.tokenizer().expect("the tokenizer loads");
        let mut llama = Llama::from_gguf(&gguf, Device::Cpu).expect("the model loads");
        // The CPU kernels, as worker groups build it: generation runs on them.
        llama.set_backend(backend_for(Device::Cpu).expect("the CPU kernels"));
        Mutex::new((tokenizer, llama))
    });
    let guard = model
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    f(&guard.0, &guard.1)
}

fn chat(tokenizer: &Tokenizer, question: &str) -> Vec<i64> {
    let text = format!(
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging \
         Face<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
    );
    let encoding = tokenizer.encode(text, false).expect("encodes");
    encoding.get_ids().iter().map(|&id| i64::from(id)).collect()
}

fn request(prompt: &[i64], params: SamplingParams, max_new_tokens: usize) -> GenerationRequest {
    GenerationRequest::new(prompt.to_vec(), params, max_new_tokens)
}

fn text(tokenizer: &Tokenizer, tokens: &[i64]) -> String {
    let ids: Vec<u32> = tokens.iter().map(|&t| t as u32).collect();
    tokenizer.decode(&ids, false).expect("decodes")
}

/// What a training forward gives for `generation`: the whole sequence at once (no cache, no
/// padding), `log_softmax(logits / T)` at each generated token.
fn training_logprobs(llama: &Llama, prompt: &[i64], generation: &Generation, t: f64) -> Vec<f32> {
    let full: Vec<i64> = prompt.iter().chain(&generation.tokens).copied().collect();
    let ids = Tensor::from_slice(&full).view([1, full.len() as i64]);
    let logits = tch::no_grad(|| llama.forward(&ids, None, None)).expect("forward");
    let n = generation.tokens.len() as i64;
    let predicting = logits.get(0).narrow(0, prompt.len() as i64 - 1, n);
    let chosen = Tensor::from_slice(&generation.tokens).view([n, 1]);
    let logprobs = (predicting / t)
        .log_softmax(-1, Kind::Float)
        .gather(-1, &chosen, false)
        .view([n]);
    Vec::<f32>::try_from(&logprobs).expect("f32s")
}

/// Asserts that `tokens` is the greedy continuation of `prompt`, each token the most likely
/// one after those before it, by one training forward over the whole sequence (no cache).
fn assert_greedy(llama: &Llama, prompt: &[i64], tokens: &[i64]) {
    let full: Vec<i64> = prompt.iter().chain(tokens).copied().collect();
    let ids = Tensor::from_slice(&full).view([1, full.len() as i64]);
    let logits = tch::no_grad(|| llama.forward(&ids, None, None)).expect("forward");
    let n = tokens.len() as i64;
    let best = logits
        .get(0)
        .narrow(0, prompt.len() as i64 - 1, n)
        .argmax(-1, false);
    assert_eq!(
        Vec::<i64>::try_from(&best).expect("i64s"),
        tokens,
        "not greedy"
    );
}

fn greedy(tokenizer: &Tokenizer, llama: &Llama, prompt: &[i64], max_new: usize) -> Generation {
    let requests = [request(prompt, SamplingParams::GREEDY, max_new)];
    let generation = generate(llama, tokenizer, &requests, &mut SeededRng::new(0))
        .expect("generates")
        .remove(0);
    assert_greedy(llama, prompt, &generation.tokens);
    generation
}

#[test]
fn logprobs_match_a_training_forward() {
    with_model(|tokenizer, llama| {
        let prompts = [
            chat(tokenizer, "What is the capital of France?"),
            chat(tokenizer, "Hi"),
            chat(tokenizer, "Answer yes or no: is water wet?"),
            chat(tokenizer, "Write a long poem about the sea and the stars."),
        ];
        let nucleus = SamplingParams {
            temperature: 0.7,
            top_p: 0.9,
            top_k: 0,
        };
        let requests = [
            request(&prompts[0], SamplingParams::with_temperature(1.0), 4),
            request(&prompts[1], nucleus, 9),
            request(&prompts[2], SamplingParams::GREEDY, 12),
            request(&prompts[3], SamplingParams::with_temperature(1.0), 14),
            // The same prompt as the first (prefilled once), another temperature.
            request(&prompts[0], SamplingParams::with_temperature(1.3), 6),
        ];
        let generations =
            generate(llama, tokenizer, &requests, &mut SeededRng::new(7)).expect("generates");
        let mut lengths = Vec::new();
        for (request, generation) in requests.iter().zip(&generations) {
            let expected = training_logprobs(
                llama,
                &request.prompt,
                generation,
                request.params.logprob_temperature(),
            );
            assert_eq!(generation.logprobs.len(), generation.tokens.len());
            let diff = expected
                .iter()
                .zip(&generation.logprobs)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            assert!(
                diff < 1e-4,
                "logprobs differ by {diff}: {:?} vs {expected:?} ({:?})",
                generation.logprobs,
                generation.finish
            );
            lengths.push(generation.tokens.len());
        }
        eprintln!("lengths {lengths:?}");
        // Sequences finished at different steps, so rows were dropped from the batch.
        assert_eq!(lengths[0], 4);
        assert_eq!(generations[0].finish, FinishReason::Length);
        assert_eq!(lengths[3], 14);
        assert!(lengths[1] < 14 && lengths[2] < 14, "{lengths:?}");
    });
}

#[test]
fn a_seed_fixes_the_samples() {
    with_model(|tokenizer, llama| {
        let prompts = [
            chat(tokenizer, "Tell me a story."),
            chat(tokenizer, "Name an animal."),
        ];
        let requests: Vec<GenerationRequest> = prompts
            .iter()
            .map(|p| request(p, SamplingParams::with_temperature(1.0), 6))
            .collect();
        let run = |seed| {
            generate(llama, tokenizer, &requests, &mut SeededRng::new(seed))
                .expect("generates")
                .into_iter()
                .map(|g| (g.tokens, g.logprobs))
                .collect::<Vec<_>>()
        };
        let first = run(1);
        assert_eq!(first, run(1), "same seed");
        assert_ne!(first, run(2), "another seed");
    });
}

#[test]
fn a_request_with_its_own_seed_samples_the_same_alone_and_in_any_batch() {
    with_model(|tokenizer, llama| {
        let story = chat(tokenizer, "Tell me a story.");
        let animal = chat(tokenizer, "Name an animal.");
        let seeded = GenerationRequest {
            seed: Some(42),
            ..request(&story, SamplingParams::with_temperature(1.0), 6)
        };
        let other = request(&animal, SamplingParams::with_temperature(1.0), 6);
        let alone = generate(
            llama,
            tokenizer,
            std::slice::from_ref(&seeded),
            &mut SeededRng::new(1),
        )
        .expect("generates");
        // Another shared stream, and the seeded request second in a batch: same tokens.
        let batch = generate(llama, tokenizer, &[other, seeded], &mut SeededRng::new(9))
            .expect("generates");
        assert_eq!(alone[0].tokens, batch[1].tokens);
        for (a, b) in alone[0].logprobs.iter().zip(&batch[1].logprobs) {
            assert!((a - b).abs() < 1e-4, "{a} vs {b}");
        }
    });
}

/// The samples of one prompt (prefilled once, its keys and values read from one row while
/// two or more are left) draw what each draws alone, whichever of them finishes first.
#[test]
fn the_samples_of_one_prompt_draw_what_each_draws_alone() {
    with_model(|tokenizer, llama| {
        let story = chat(tokenizer, "Tell me a story.");
        let samples: Vec<GenerationRequest> = [3, 9, 5, 12]
            .into_iter()
            .enumerate()
            .map(|(i, max_new)| GenerationRequest {
                seed: Some(100 + i as u64),
                ..request(&story, SamplingParams::with_temperature(1.0), max_new)
            })
            .collect();
        let together =
            generate(llama, tokenizer, &samples, &mut SeededRng::new(1)).expect("generates");
        for (sample, in_group) in samples.iter().zip(&together) {
            let alone = generate(
                llama,
                tokenizer,
                std::slice::from_ref(sample),
                &mut SeededRng::new(2),
            )
            .expect("generates");
            assert_eq!(in_group.tokens, alone[0].tokens);
            assert_eq!(in_group.tokens.len(), sample.max_new_tokens);
            for (a, b) in alone[0].logprobs.iter().zip(&in_group.logprobs) {
                assert!((a - b).abs() < 1e-4, "{a} vs {b}");
            }
        }
    });
}

/// Requests admitted into a running batch between its steps (continuous batching) sample what
/// each samples alone, and the rows already running are unchanged by them: a prompt longer
/// than the batch's tokens so far (the running rows move right), prompts admitted once the
/// longest-prompt rows have left (their padding dropped), the samples of one prompt (running
/// and joining), a request for no tokens.
#[test]
fn requests_admitted_between_steps_sample_what_each_samples_alone() {
    with_model(|tokenizer, llama| {
        let seeded = |question: &str, max_new_tokens, seed| GenerationRequest {
            seed: Some(seed),
            ..request(
                &chat(tokenizer, question),
                SamplingParams::with_temperature(1.0),
                max_new_tokens,
            )
        };
        let sky = "Explain step by step why the sky is blue by day and red at sunset.";
        let dragon = "Tell me a long story about a dragon.";
        // Two samples of one prompt share its cache slots as they move.
        let running = vec![
            seeded(sky, 3, 1),
            seeded(dragon, 24, 2),
            seeded(dragon, 20, 7),
        ];
        let longer = seeded(
            &format!("{sky} Then say why clouds are white or grey."),
            6,
            3,
        );
        let joining_later = vec![
            seeded("Count to five.", 5, 4),
            seeded("Count to five.", 7, 5),
            seeded("Hi.", 0, 6),
        ];
        let mut rng = SeededRng::new(9);
        let mut decoding =
            Decoding::start(llama, tokenizer, running.clone(), &mut rng, None).expect("starts");
        decoding.step().expect("steps");
        let first = decoding
            .admit(std::slice::from_ref(&longer))
            .expect("admits");
        assert_eq!(first, Some(3..4));
        for _ in 0..8 {
            decoding.step().expect("steps");
        }
        assert!(
            decoding.is_finished(0) && decoding.is_finished(3),
            "the long prompts left"
        );
        assert_eq!(decoding.live_rows(), 2);
        let later = decoding.admit(&joining_later).expect("admits");
        assert_eq!(later, Some(4..7));
        assert!(
            decoding.is_finished(6),
            "a request for no tokens is finished at once"
        );
        assert_eq!(decoding.live_rows(), 4);
        while !decoding.is_done() {
            decoding.step().expect("steps");
        }
        let all = running.iter().chain([&longer]).chain(&joining_later);
        for (i, request) in all.enumerate() {
            let got = decoding.take(i);
            let alone = generate(
                llama,
                tokenizer,
                std::slice::from_ref(request),
                &mut SeededRng::new(0),
            )
            .expect("generates");
            assert_eq!(got.tokens, alone[0].tokens, "request {i}");
            assert_eq!(got.finish, alone[0].finish, "request {i}");
            for (a, b) in alone[0].logprobs.iter().zip(&got.logprobs) {
                assert!((a - b).abs() < 1e-4, "request {i}: {a} vs {b}");
            }
        }
        assert!(
            decoding
                .admit(&joining_later)
                .expect("a finished batch")
                .is_none(),
            "a finished batch takes no more requests"
        );
    });
}

/// A conversation's next turn resends the history: with a prefix cache, the tokens a finished
/// sequence shares with a prompt are reused and only the rest is prefilled, in a new batch and
/// in one joining a running batch, and each request samples what it samples without the cache.
#[test]
fn prompts_reuse_the_finished_sequences_they_begin_with() {
    with_model(|tokenizer, llama| {
        // Greedy: a sampled token in a tail of tokens a millionth likely each may differ with
        // the rounding of the prefill, whatever the cache.
        let asking = |prompt: Vec<i64>, max_new_tokens| {
            GenerationRequest::new(prompt, SamplingParams::GREEDY, max_new_tokens)
        };
        let mut prefixes = PrefixCache::new(256 << 20);
        let first_turns = vec![
            asking(chat(tokenizer, "Tell me a long story about a dragon."), 24),
            asking(chat(tokenizer, "Count to five."), 12),
        ];
        let mut rng = SeededRng::new(0);
        let mut decoding = Decoding::start(
            llama,
            tokenizer,
            first_turns.clone(),
            &mut rng,
            Some(&mut prefixes),
        )
        .expect("starts");
        while !decoding.is_done() {
            decoding.step().expect("steps");
        }
        let answers = decoding.into_outputs();
        assert_eq!(answers.iter().map(|a| a.cached_tokens).sum::<usize>(), 0);
        // What the cache holds: each prompt and its tokens but the last.
        let held: Vec<Vec<i64>> = (first_turns.iter().zip(&answers))
            .map(|(turn, answer)| {
                let generated = &answer.tokens[..answer.tokens.len() - 1];
                turn.prompt.iter().chain(generated).copied().collect()
            })
            .collect();
        assert_eq!(prefixes.len(), 2);
        let next_turn = |i: usize, question: &str| {
            let history = first_turns[i].prompt.iter().chain(&answers[i].tokens);
            let turn = format!(
                "<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
            );
            let encoding = tokenizer.encode(turn, false).expect("encodes");
            let new = encoding.get_ids().iter().map(|&id| i64::from(id));
            history.copied().chain(new).collect::<Vec<i64>>()
        };
        let second_turns = vec![
            asking(next_turn(0, "And then?"), 10),
            // A new conversation shares the system prompt with both.
            asking(chat(tokenizer, "Why is the sea salty?"), 10),
        ];
        let joining = asking(next_turn(1, "Now backwards."), 10);
        let mut decoding = Decoding::start(
            llama,
            tokenizer,
            second_turns.clone(),
            &mut rng,
            Some(&mut prefixes),
        )
        .expect("starts");
        decoding.step().expect("steps");
        let joined = decoding.admit(std::slice::from_ref(&joining));
        assert_eq!(joined.expect("admits"), Some(2..3));
        while !decoding.is_done() {
            decoding.step().expect("steps");
        }
        let shared = |prompt: &[i64]| {
            let limit = prompt.len() - 1;
            (held.iter())
                .map(|seq| {
                    seq.iter()
                        .zip(&prompt[..limit])
                        .take_while(|(a, b)| a == b)
                        .count()
                })
                .max()
                .unwrap_or(0)
        };
        let all: Vec<&GenerationRequest> = second_turns.iter().chain([&joining]).collect();
        let expected_cached = [held[0].len(), shared(&all[1].prompt), held[1].len()];
        assert!(
            expected_cached[1] > 20,
            "the system prompt is shared: {expected_cached:?}"
        );
        for (i, request) in all.into_iter().enumerate() {
            let got = decoding.take(i);
            assert_eq!(got.cached_tokens, expected_cached[i], "request {i}");
            let alone = generate(
                llama,
                tokenizer,
                std::slice::from_ref(request),
                &mut SeededRng::new(0),
            )
            .expect("generates")
            .remove(0);
            assert_eq!(alone.cached_tokens, 0);
            assert_eq!(got.tokens, alone.tokens, "request {i}");
            for (a, b) in alone.logprobs.iter().zip(&got.logprobs) {
                assert!((a - b).abs() < 1e-4, "request {i}: {a} vs {b}");
            }
        }
        drop(decoding);
        // The first turns' sequences are covered by the longer second turns now.
        assert_eq!(
            prefixes.len(),
            3,
            "two second turns and the new conversation"
        );
    });
}

#[test]
fn a_stop_token_ends_the_sequence_as_its_last_token() {
    with_model(|tokenizer, llama| {
        let prompt = chat(tokenizer, "What is the capital of France?");
        let free = generate(
            llama,
            tokenizer,
            &[request(&prompt, SamplingParams::GREEDY, 8)],
            &mut SeededRng::new(0),
        )
        .expect("generates");
        let third = free[0].tokens[2];
        let stopped = generate(
            llama,
            tokenizer,
            &[GenerationRequest {
                stop_tokens: vec![third],
                ..request(&prompt, SamplingParams::GREEDY, 8)
            }],
            &mut SeededRng::new(0),
        )
        .expect("generates");
        let end = free[0]
            .tokens
            .iter()
            .position(|&t| t == third)
            .expect("in it")
            + 1;
        assert_eq!(stopped[0].tokens, free[0].tokens[..end]);
        assert_eq!(stopped[0].finish, FinishReason::Eos);
    });
}

/// With `ignore_eos` a sequence goes on past the model's EOS token, to its length; what it
/// samples up to there is unchanged.
#[test]
fn ignoring_eos_runs_a_sequence_to_its_length() {
    with_model(|tokenizer, llama| {
        let prompt = chat(tokenizer, "Say hi.");
        let run = |ignore_eos| {
            let request = GenerationRequest {
                ignore_eos,
                ..request(&prompt, SamplingParams::GREEDY, 48)
            };
            generate(llama, tokenizer, &[request], &mut SeededRng::new(0))
                .expect("generates")
                .remove(0)
        };
        let (ended, going) = (run(false), run(true));
        assert_eq!(ended.finish, FinishReason::Eos);
        assert!(
            ended.tokens.len() < 48,
            "{}",
            text(tokenizer, &ended.tokens)
        );
        assert_eq!(going.finish, FinishReason::Length);
        assert_eq!(going.tokens.len(), 48);
        assert_eq!(going.tokens[..ended.tokens.len()], ended.tokens);
        assert_greedy(llama, &prompt, &going.tokens);
    });
}

#[test]
fn greedy_matches_recomputing_the_whole_sequence() {
    with_model(|tokenizer, llama| {
        let long = chat(tokenizer, "What is the capital of France?");
        let short = chat(tokenizer, "Hi");
        let generations = generate(
            llama,
            tokenizer,
            &[
                request(&long, SamplingParams::GREEDY, 8),
                request(&short, SamplingParams::GREEDY, 6),
            ],
            &mut SeededRng::new(0),
        )
        .expect("generates");
        assert_greedy(llama, &long, &generations[0].tokens);
        assert_greedy(llama, &short, &generations[1].tokens);
        assert_eq!(generations[0].tokens.len(), 8);
        let answer = text(tokenizer, &generations[0].tokens);
        assert!(answer.contains("Paris"), "answer: {answer:?}");
    });
}

#[test]
fn top_k_one_and_a_tiny_top_p_are_greedy() {
    with_model(|tokenizer, llama| {
        let prompt = chat(tokenizer, "Name a colour.");
        let with = |params| request(&prompt, params, 6);
        let top_k = SamplingParams {
            top_k: 1,
            ..SamplingParams::with_temperature(1.0)
        };
        let top_p = SamplingParams {
            top_p: 1e-6,
            ..SamplingParams::with_temperature(1.0)
        };
        let requests = [with(SamplingParams::GREEDY), with(top_k), with(top_p)];
        let generations =
            generate(llama, tokenizer, &requests, &mut SeededRng::new(3)).expect("generates");
        assert_eq!(generations[1].tokens, generations[0].tokens, "top_k = 1");
        assert_eq!(generations[2].tokens, generations[0].tokens, "tiny top_p");
        // All at temperature 1, so the logprobs agree too.
        for g in &generations[1..] {
            for (a, b) in g.logprobs.iter().zip(&generations[0].logprobs) {
                assert!((a - b).abs() < 1e-5, "{:?}", g.logprobs);
            }
        }
    });
}

#[test]
fn stop_strings_and_lengths_end_sequences() {
    with_model(|tokenizer, llama| {
        let prompt = chat(tokenizer, "What is the capital of France?");
        let alone = greedy(tokenizer, llama, &prompt, 12).tokens;
        let answer = text(tokenizer, &alone);
        assert!(answer.contains("Paris"), "answer: {answer:?}");
        let stop = |stops: &[&str]| GenerationRequest {
            stop: stops.iter().map(|s| s.to_string()).collect(),
            ..request(&prompt, SamplingParams::GREEDY, 12)
        };
        let requests = [
            stop(&["Paris"]),
            // Spans tokens (" capital", " of").
            stop(&["Berlin", "capital of"]),
            stop(&["no such text"]),
            request(&prompt, SamplingParams::GREEDY, 3),
        ];
        let generations =
            generate(llama, tokenizer, &requests, &mut SeededRng::new(0)).expect("generates");
        for (generation, ending) in generations[..2].iter().zip(["Paris", "capital of"]) {
            assert_eq!(generation.finish, FinishReason::Stop);
            let decoded = text(tokenizer, &generation.tokens);
            assert!(decoded.ends_with(ending), "{decoded:?}");
            assert_eq!(generation.tokens, alone[..generation.tokens.len()]);
        }
        assert_eq!(generations[2].tokens, alone);
        assert_ne!(generations[2].finish, FinishReason::Stop);
        assert_eq!(generations[3].finish, FinishReason::Length);
        assert_eq!(generations[3].tokens, alone[..3]);
    });
}

#[test]
fn each_row_has_its_own_length() {
    with_model(|tokenizer, llama| {
        let a = chat(tokenizer, "Write a long poem about the sea.");
        let b = chat(tokenizer, "Hi");
        let limits = [1, 3, 7, 0, 5];
        let prompts = [&a, &b, &a, &b, &b];
        let requests: Vec<GenerationRequest> = prompts
            .iter()
            .zip(limits)
            .map(|(p, n)| request(p, SamplingParams::GREEDY, n))
            .collect();
        let generations =
            generate(llama, tokenizer, &requests, &mut SeededRng::new(0)).expect("generates");
        let full_a = greedy(tokenizer, llama, &a, 7).tokens;
        let full_b = greedy(tokenizer, llama, &b, 5).tokens;
        for ((generation, limit), prompt) in generations.iter().zip(limits).zip(prompts) {
            let full = if prompt == &a { &full_a } else { &full_b };
            let expected = &full[..limit.min(full.len())];
            assert_eq!(generation.tokens, expected, "limit {limit}");
            let finish = if expected.len() < limit {
                FinishReason::Eos
            } else {
                FinishReason::Length
            };
            assert_eq!(generation.finish, finish, "limit {limit}");
        }
    });
}

#[test]
fn bad_requests_are_input_errors() {
    with_model(|tokenizer, llama| {
        let fails = |requests: &[GenerationRequest], needle: &str| {
            let err =
                generate(llama, tokenizer, requests, &mut SeededRng::new(0)).expect_err("an error");
            assert!(matches!(err, ModelError::Input(_)), "{err:?}");
            assert!(err.to_string().contains(needle), "{err}");
        };
        let ok = request(&[1, 2, 3], SamplingParams::GREEDY, 2);
        fails(
            &[ok.clone(), request(&[], SamplingParams::GREEDY, 2)],
            "request 1: the prompt has no tokens",
        );
        fails(
            &[request(&[1], SamplingParams::GREEDY, 1 << 20)],
            "positions",
        );
        let bad_p = SamplingParams {
            top_p: 0.0,
            ..SamplingParams::default()
        };
        fails(&[request(&[1], bad_p, 2)], "top_p");
        fails(
            &[request(&[1], SamplingParams::with_temperature(-1.0), 2)],
            "temperature",
        );
        fails(
            &[request(&[1 << 40], SamplingParams::GREEDY, 2)],
            "vocabulary",
        );
        let none = generate(llama, tokenizer, &[], &mut SeededRng::new(0)).expect("nothing");
        assert!(none.is_empty());
        let zero = generate(
            llama,
            tokenizer,
            &[request(&[1, 2], SamplingParams::GREEDY, 0)],
            &mut SeededRng::new(0),
        )
        .expect("no new tokens");
        assert!(zero[0].tokens.is_empty() && zero[0].finish == FinishReason::Length);
    });
}

/// Samples `rows` rows of `logits` `[V]` with `params` and counts each token: three draws of a
/// third of the rows by one sampler (which adapts between draws, see `Sampler`).
fn frequencies(logits: &[f32], params: SamplingParams, rows: usize) -> Vec<f64> {
    let v = logits.len() as i64;
    let per_draw = rows.div_ceil(3);
    let batch = Tensor::from_slice(logits)
        .view([1, v])
        .expand([per_draw as i64, v], false);
    let mut sampler = Sampler::new(&vec![params; per_draw], v, Device::Cpu);
    let mut rng = SeededRng::new(11);
    let mut counts = vec![0.0; logits.len()];
    for _ in 0..3 {
        let (tokens, _) = sampler
            .sample(&batch, &vec![true; per_draw], &mut rng)
            .expect("samples");
        for t in Vec::<i64>::try_from(&tokens.view([-1])).expect("i64s") {
            counts[t as usize] += 1.0 / (3 * per_draw) as f64;
        }
    }
    counts
}

fn assert_close(found: &[f64], expected: &[f64]) {
    for (f, e) in found.iter().zip(expected) {
        assert!((f - e).abs() < 0.015, "{found:?} vs {expected:?}");
    }
}

#[test]
fn the_sampler_draws_from_the_filtered_distribution() {
    // Probabilities 0.05, 0.5, 0.15, 0.3 (deliberately not sorted).
    let probs = [0.05f32, 0.5, 0.15, 0.3];
    let logits: Vec<f32> = probs.iter().map(|p| p.ln()).collect();
    let rows = 20_000;
    let plain = frequencies(&logits, SamplingParams::default(), rows);
    assert_close(&plain, &[0.05, 0.5, 0.15, 0.3]);
    // Top-k 3 drops 0.05; top-p 0.75 keeps 0.5 and 0.3 (0.5 alone is short of 0.75).
    let top_k = SamplingParams {
        top_k: 3,
        ..SamplingParams::default()
    };
    assert_close(
        &frequencies(&logits, top_k, rows),
        &[0.0, 0.5 / 0.95, 0.15 / 0.95, 0.3 / 0.95],
    );
    let top_p = SamplingParams {
        top_p: 0.75,
        ..SamplingParams::default()
    };
    assert_close(
        &frequencies(&logits, top_p, rows),
        &[0.0, 0.5 / 0.8, 0.0, 0.3 / 0.8],
    );
    // Temperature 0.5 squares the probabilities (then renormalises).
    let squared: Vec<f64> = probs.iter().map(|&p| f64::from(p * p)).collect();
    let total: f64 = squared.iter().sum();
    let cold: Vec<f64> = squared.iter().map(|p| p / total).collect();
    assert_close(
        &frequencies(&logits, SamplingParams::with_temperature(0.5), rows),
        &cold,
    );
    assert_close(
        &frequencies(&logits, SamplingParams::GREEDY, 10),
        &[0.0, 1.0, 0.0, 0.0],
    );
}

#[test]
fn top_p_over_a_long_tail_keeps_exactly_the_nucleus() {
    // Four likely tokens hold 0.9 (as 0.05, 0.5, 0.15, 0.2); 4,996 others share 0.1 equally.
    // The nucleus of 0.75 lies in the first candidates, that of 0.95 needs thousands of tail
    // tokens, that of 0.999 nearly all: every way the sampler finds the nucleus.
    let vocab = 5000;
    let tail = 0.1 / (vocab - 4) as f64;
    let mut probs = vec![0.05, 0.5, 0.15, 0.2];
    probs.resize(vocab, tail);
    let logits: Vec<f32> = probs.iter().map(|&p| (p as f32).ln()).collect();
    let rows = 4000;
    for top_p in [0.75, 0.95, 0.999] {
        let params = SamplingParams {
            top_p,
            ..SamplingParams::default()
        };
        let found = frequencies(&logits, params, rows);
        // Kept: the likely tokens while the mass before them is within top_p, then tail tokens.
        let mut kept = vec![0.0; vocab];
        let mut before = 0.0;
        for i in [1, 3, 2, 0].into_iter().chain(4..vocab) {
            if before <= top_p {
                kept[i] = probs[i];
            }
            before += probs[i];
        }
        let mass: f64 = kept.iter().sum();
        let tail_found: f64 = found[4..].iter().sum();
        let tail_kept: f64 = kept[4..].iter().sum::<f64>() / mass;
        let mut expected: Vec<f64> = kept[..4].iter().map(|p| p / mass).collect();
        expected.push(tail_kept);
        let mut got = found[..4].to_vec();
        got.push(tail_found);
        for (f, e) in got.iter().zip(&expected) {
            assert!(
                (f - e).abs() < 0.03,
                "top_p {top_p}: {got:?} vs {expected:?}"
            );
        }
    }
}

#[test]
fn the_rng_is_uniform_and_seeded() {
    let mut rng = SeededRng::new(5);
    let draws: Vec<f32> = (0..10_000).map(|_| rng.uniform()).collect();
    assert!(draws.iter().all(|&u| (0.0..1.0).contains(&u)));
    let mean = draws.iter().sum::<f32>() / draws.len() as f32;
    assert!((mean - 0.5).abs() < 0.01, "mean {mean}");
    assert_eq!(SeededRng::new(5), SeededRng::new(5));
    assert_ne!(SeededRng::new(5).next_u64(), SeededRng::new(6).next_u64());
}

#[test]
fn prepared_draws_are_used_once_by_the_next_sample() {
    tch::manual_seed(3);
    let vocab = 50;
    let logits = Tensor::randn([3, vocab], (Kind::Float, Device::Cpu)) * 3.0;
    // Row 1 is greedy; row 2 has finished: only row 0 draws a uniform.
    let params = [
        SamplingParams::with_temperature(0.8),
        SamplingParams::GREEDY,
        SamplingParams {
            top_p: 0.9,
            ..SamplingParams::default()
        },
    ];
    let live = [true, true, false];
    let mut draws = 0;
    let mut uniform = |row: usize| {
        draws += 1;
        [0.37, 0.5, 0.5][row]
    };
    let mut prepared = Sampler::new(&params, vocab, Device::Cpu);
    prepared.prepare_draws(&live, &mut uniform).expect("draws");
    let (tokens, logprobs) = prepared.sample_prepared(&logits).expect("samples");
    assert_eq!(draws, 1, "one live, sampling row");
    let mut at_once = Sampler::new(&params, vocab, Device::Cpu);
    let (expected_tokens, expected_logprobs) = at_once
        .sample_with(&logits, &live, &mut |row| [0.37, 0.5, 0.5][row])
        .expect("samples");
    assert!(tokens.equal(&expected_tokens) && logprobs.equal(&expected_logprobs));

    let again = prepared
        .sample_prepared(&logits)
        .expect_err("the draws were used")
        .to_string();
    assert!(again.contains("prepare_draws"), "{again}");
    // Rows kept keep their draws; rows admitted after them draw theirs (greedy ones none).
    let first = [0.37, 0.5, 0.62];
    (prepared.prepare_draws(&[true; 3], &mut |row| first[row])).expect("draws");
    prepared.retain(&[0, 2]);
    let mut admitted = Vec::new();
    prepared.admit(&params[..2], &mut |row| {
        admitted.push(row);
        0.81
    });
    assert_eq!(
        admitted,
        [0],
        "the new sampling row draws, the greedy one not"
    );
    let rows = Tensor::from_slice(&[0i64, 2, 0, 1]);
    let (tokens, logprobs) = prepared
        .sample_prepared(&logits.index_select(0, &rows))
        .expect("the kept and admitted rows' draws");
    let mut expected = Sampler::new(
        &[params[0], params[2], params[0], params[1]],
        vocab,
        Device::Cpu,
    );
    let uniforms = [0.37, 0.62, 0.81, 0.5];
    let (expected_tokens, expected_logprobs) = expected
        .sample_with(&logits.index_select(0, &rows), &[true; 4], &mut |row| {
            uniforms[row]
        })
        .expect("samples");
    assert!(tokens.equal(&expected_tokens) && logprobs.equal(&expected_logprobs));

    let mut greedy = Sampler::new(&[SamplingParams::GREEDY; 3], vocab, Device::Cpu);
    let (argmax, _) = greedy
        .sample_prepared(&logits)
        .expect("greedy rows draw nothing");
    assert!(argmax.equal(&logits.argmax(-1, true)));
}
