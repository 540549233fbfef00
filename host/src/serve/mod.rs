//! `drmas-host serve`: drmas's own engine behind SGLang's native HTTP protocol (the subset in
//! [`crate::engine::remote::wire`]) and OpenAI's `/v1/completions` as vLLM shapes it
//! ([`crate::engine::remote::openai_wire`]), so a trainer's rollouts can run on other processes
//! or machines, and the remote path is tested end to end with nothing fake in it.
//!
//! HTTP threads check each request and hand it to one engine thread (`batcher`), which runs
//! the requests that arrive together as one batch and reloads weights between batches. What a
//! client can make the server do is bounded: the body size, the prompts a request, the
//! requests in progress (more are refused with 503, which clients retry), and prompt plus
//! new tokens by the model's context. A bad request gets a 4xx answer naming the field and
//! the limit; nothing a client sends stops the server.

mod batcher;
mod completions_route;
mod generate_route;
mod http;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use tiny_http::{Method, Request};

use self::batcher::{BatchLimits, Batcher};
use self::generate_route::RequestLimits;
use self::http::{answer, read_body, refuse, Refusal};
use crate::engine::remote::openai_wire::{CompletionAnswer, COMPLETIONS_PATH, MODELS_PATH};
use crate::engine::remote::wire::{
    ModelInfo, UpdateWeightsAnswer, UpdateWeightsBody, GENERATE_PATH, HEALTH_PATH, MODEL_INFO_PATH,
    UPDATE_WEIGHTS_PATH,
};

/// `GET /get_weight_version`.
const WEIGHT_VERSION_PATH: &str = "/get_weight_version";
/// Stop strings (and stop token ids) a prompt may have.
const MAX_STOPS: usize = 64;
/// The longest stop string, in bytes.
const MAX_STOP_BYTES: usize = 1024;
/// HTTP threads beyond the generation slots, so health and model-info probes are answered
/// while every slot waits for the engine.
const SPARE_THREADS: usize = 4;

/// What `drmas-host serve` serves and within which limits.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The model: an HF folder or a `.gguf` file.
    pub model: PathBuf,
    /// The name `/v1/completions` requests give as `model` (`/v1/models` lists it).
    pub served_model_name: String,
    /// `host:port` to listen on (port 0 picks a free one).
    pub addr: String,
    /// Where the model runs.
    pub device: tch::Device,
    /// The weights' dtype.
    pub kind: tch::Kind,
    /// Seed of the stream that requests without `sampling_seed` draw from.
    pub seed: u64,
    /// The most sequences in one engine batch, and prompts in one request.
    pub max_batch: usize,
    /// Generation requests (`/generate`, `/v1/completions`) in progress at once; more are
    /// refused with 503.
    pub max_running_requests: usize,
    /// The largest request body, in bytes.
    pub max_body_bytes: usize,
    /// How long a batch waits for more requests to join it.
    pub batch_wait: Duration,
    /// libtorch's CPU threads (0: libtorch's default).
    pub threads: usize,
}

/// A bound server; [`Server::run`] serves until the process ends.
pub struct Server {
    http: tiny_http::Server,
    addr: SocketAddr,
    batcher: Batcher,
    options: ServeOptions,
    running: AtomicUsize,
    next_id: AtomicU64,
    /// When the server started, in Unix seconds (`created` of its answers).
    started: u64,
}

impl Server {
    /// Loads the model and binds the address.
    pub fn bind(options: ServeOptions) -> anyhow::Result<Self> {
        let batcher = Batcher::start(
            options.model.clone(),
            options.device,
            options.kind,
            options.seed,
            BatchLimits {
                max_batch: options.max_batch.max(1),
                wait: options.batch_wait,
            },
        )?;
        let http = tiny_http::Server::http(&options.addr).map_err(|e| {
            anyhow::anyhow!(
                "cannot listen on {}: {e}; pick another --host/--port (port 0 picks a free one)",
                options.addr
            )
        })?;
        let addr = http
            .server_addr()
            .to_ip()
            .context("the server's address is not an IP address")?;
        Ok(Self {
            http,
            addr,
            batcher,
            options,
            running: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
            started: unix_seconds(),
        })
    }

    /// The base URL (`http://host:port`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Serves on one thread per generation slot plus a few for probes.
    pub fn run(&self) {
        let threads = self.options.max_running_requests.max(1) + SPARE_THREADS;
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    while let Ok(request) = self.http.recv() {
                        self.respond(request);
                    }
                });
            }
        });
    }

    fn respond(&self, request: Request) {
        let path = request
            .url()
            .split('?')
            .next()
            .unwrap_or_default()
            .to_owned();
        match (request.method(), path.as_str()) {
            (Method::Get, HEALTH_PATH) => answer(request, 200, &serde_json::json!({})),
            (Method::Get, MODEL_INFO_PATH) => answer(request, 200, &self.model_info()),
            (Method::Get, WEIGHT_VERSION_PATH) => {
                let version = self.batcher.served().weight_version;
                answer(
                    request,
                    200,
                    &serde_json::json!({ "weight_version": version }),
                );
            }
            (Method::Get, MODELS_PATH) => {
                let served = self.batcher.served();
                let name = &self.options.served_model_name;
                answer(
                    request,
                    200,
                    &completions_route::models(&served, name, self.started),
                );
            }
            (Method::Post, GENERATE_PATH) => self.admit(request, Self::generate_answer),
            (Method::Post, COMPLETIONS_PATH) => self.admit(request, Self::completions_answer),
            (Method::Post, UPDATE_WEIGHTS_PATH) => self.update_weights(request),
            (_, GENERATE_PATH | COMPLETIONS_PATH | UPDATE_WEIGHTS_PATH) => {
                refuse(request, Refusal::new(405, format!("{path} takes POST")));
            }
            (_, HEALTH_PATH | MODEL_INFO_PATH | WEIGHT_VERSION_PATH | MODELS_PATH) => {
                refuse(request, Refusal::new(405, format!("{path} takes GET")));
            }
            _ => refuse(
                request,
                Refusal::new(
                    404,
                    format!(
                        "no endpoint {path}; served: POST {GENERATE_PATH}, POST \
                         {COMPLETIONS_PATH}, POST {UPDATE_WEIGHTS_PATH}, GET {MODEL_INFO_PATH}, \
                         GET {MODELS_PATH}, GET {WEIGHT_VERSION_PATH}, GET {HEALTH_PATH}"
                    ),
                ),
            ),
        }
    }

    fn model_info(&self) -> ModelInfo {
        let served = self.batcher.served();
        ModelInfo {
            tokenizer_path: Some(served.model_path.clone()),
            model_path: served.model_path,
            is_generation: true,
            weight_version: Some(served.weight_version),
            model_type: Some(served.model_type.to_owned()),
            architectures: Some(vec![served.architecture.to_owned()]),
            vocab_size: Some(served.vocab_size),
            context_length: Some(served.context_length),
        }
    }

    /// A generation request (`/generate`, `/v1/completions`) answered by `respond`, within
    /// the cap on requests in progress.
    fn admit(
        &self,
        mut request: Request,
        respond: fn(&Self, &mut Request) -> Result<serde_json::Value, Refusal>,
    ) {
        let cap = self.options.max_running_requests.max(1);
        if self.running.fetch_add(1, Ordering::SeqCst) >= cap {
            self.running.fetch_sub(1, Ordering::SeqCst);
            return refuse(
                request,
                Refusal::new(
                    503,
                    format!(
                        "busy: {cap} requests in progress (--max-running-requests); retry later"
                    ),
                ),
            );
        }
        let result = respond(self, &mut request);
        self.running.fetch_sub(1, Ordering::SeqCst);
        match result {
            Ok(body) => answer(request, 200, &body),
            Err(refusal) => refuse(request, refusal),
        }
    }

    fn generate_answer(&self, request: &mut Request) -> Result<serde_json::Value, Refusal> {
        let body = read_body(request, self.options.max_body_bytes, "--max-body-bytes")?;
        let served = self.batcher.served();
        let parsed = generate_route::parse(&body, &served, self.limits())?;
        drop(body);
        let (generations, version) = self
            .batcher
            .generate(parsed.requests.clone())
            .map_err(|e| Refusal::new(500, format!("{e:#}")))?;
        let mut outputs = Vec::with_capacity(generations.len());
        for ((request, generation), wanted) in
            parsed.requests.iter().zip(generations).zip(&parsed.wanted)
        {
            let text = self
                .batcher
                .decode(&generation.tokens, wanted.skip_special_tokens)
                .map_err(|e| Refusal::new(500, format!("{e:#}")))?;
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            outputs.push(generate_route::output(
                format!("{id:x}"),
                request,
                generation,
                wanted,
                text,
                &version,
            ));
        }
        let value = if parsed.batch {
            serde_json::to_value(outputs)
        } else {
            serde_json::to_value(outputs.pop())
        };
        value.map_err(|e| Refusal::new(500, format!("cannot serialise the answer: {e}")))
    }

    /// `POST /v1/completions`: vLLM's completion answer, one choice per prompt and sample.
    fn completions_answer(&self, request: &mut Request) -> Result<serde_json::Value, Refusal> {
        let body = read_body(request, self.options.max_body_bytes, "--max-body-bytes")?;
        let served = self.batcher.served();
        let name = &self.options.served_model_name;
        let parsed = completions_route::parse(&body, &served, name, self.limits())?;
        drop(body);
        let (generations, _version) = self
            .batcher
            .generate(parsed.requests.clone())
            .map_err(|e| Refusal::new(500, format!("{e:#}")))?;
        let usage = completions_route::usage(parsed.prompt_tokens, &generations);
        let mut choices = Vec::with_capacity(generations.len());
        for (index, ((request, generation), wanted)) in parsed
            .requests
            .iter()
            .zip(generations)
            .zip(&parsed.wanted)
            .enumerate()
        {
            let text = self
                .batcher
                .decode(&generation.tokens, wanted.skip_special_tokens)
                .map_err(|e| Refusal::new(500, format!("{e:#}")))?;
            let token_text = |token: i64| self.batcher.decode(&[token], false).unwrap_or_default();
            choices.push(completions_route::choice(
                index,
                request,
                generation,
                wanted,
                text,
                token_text,
                parsed.tokens_as_ids,
            ));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let answer = CompletionAnswer {
            id: format!("cmpl-{id:x}"),
            object: "text_completion".into(),
            created: unix_seconds(),
            model: name.clone(),
            choices,
            usage,
        };
        serde_json::to_value(answer)
            .map_err(|e| Refusal::new(500, format!("cannot serialise the answer: {e}")))
    }

    /// What one generation request may hold.
    fn limits(&self) -> RequestLimits {
        RequestLimits {
            max_batch: self.options.max_batch.max(1),
            max_stops: MAX_STOPS,
            max_stop_bytes: MAX_STOP_BYTES,
        }
    }

    /// `POST /update_weights_from_disk`: `{"success": true, ...}` once the new weights serve.
    fn update_weights(&self, mut request: Request) {
        let result = read_body(&mut request, self.options.max_body_bytes, "--max-body-bytes")
            .and_then(|body| {
                serde_json::from_slice::<UpdateWeightsBody>(&body).map_err(|e| {
                    Refusal::new(
                        400,
                        format!("malformed request ({e}); expected {{\"model_path\": string, \"weight_version\": string}}"),
                    )
                })
            })
            .and_then(|body| {
                if body.load_format.as_deref().is_some_and(|f| f != "auto") {
                    return Err(Refusal::new(
                        400,
                        "load_format: only `auto` (an HF model folder) is served",
                    ));
                }
                let path = PathBuf::from(&body.model_path);
                self.batcher
                    .reload(path, body.weight_version)
                    .map_err(|e| Refusal::new(400, format!("{e:#}")))
                    .map(|version| (body.model_path, version))
            });
        let (status, reply) = match result {
            Ok((path, version)) => (
                200,
                UpdateWeightsAnswer {
                    success: true,
                    message: format!("serving {path} (weight version {version})"),
                    num_paused_requests: 0,
                },
            ),
            Err(refusal) => (
                refusal.status,
                UpdateWeightsAnswer {
                    success: false,
                    message: refusal.message,
                    num_paused_requests: 0,
                },
            ),
        };
        answer(request, status, &reply);
    }
}

/// Seconds since the Unix epoch (0 on a clock set before it).
fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// `drmas-host serve`: loads the model, prints `listening on URL` and serves until killed.
pub fn serve(options: ServeOptions) -> anyhow::Result<()> {
    if options.threads > 0 {
        tch::set_num_threads(i32::try_from(options.threads).unwrap_or(i32::MAX));
    }
    let server = Server::bind(options)?;
    println!("drmas-host serve: listening on {}", server.url());
    use std::io::Write;
    std::io::stdout().flush()?;
    server.run();
    Ok(())
}
