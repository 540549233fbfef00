//! `drmas-host serve`: drmas's own engine behind SGLang's native HTTP protocol (the subset in
//! [`crate::engine::remote::wire`]) and OpenAI's `/v1/completions` as vLLM shapes it
//! ([`crate::engine::remote::openai_wire`]), with vLLM's runtime LoRA routes
//! ([`crate::engine::remote::lora_wire`]), so a trainer's rollouts can run on other
//! processes or machines, and the remote path is tested end to end with nothing fake in it.
//!
//! [`drmas_http_server`] reads each request, and the answering thread checks it and hands it to
//! one engine thread (`batcher`), which runs the requests that arrive together as one batch and
//! reloads weights between batches. What a client can make the server do is bounded: the body
//! size, how long it may stall, the prompts a request, the requests in progress (more are
//! refused with 503, which clients retry), and prompt plus new tokens by the model's context.
//! A bad request gets a 4xx answer naming the field and the limit; nothing a client sends, or
//! fails to send, stops the server.

mod adapter_slots;
mod batcher;
mod completions_route;
mod generate_route;
mod lora_routes;
mod refusal;
mod server_metrics;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use drmas_http_server::{HttpServer, Limits, Method, Reply, Request, Service};

use self::adapter_slots::{AdapterSlots, PaddedSlots};
use self::batcher::{BatchLimits, Batcher};
use self::generate_route::RequestLimits;
use self::lora_routes::Dialect;
use self::refusal::Refusal;
use self::server_metrics::{Gauges, ServerMetrics};
use crate::engine::remote::lora_wire::{
    LoraLimits, LOAD_LORA_ADAPTER_PATH, SERVER_INFO_PATH, SGLANG_LOAD_LORA_ADAPTER_PATH,
    SGLANG_UNLOAD_LORA_ADAPTER_PATH, UNLOAD_LORA_ADAPTER_PATH,
};
use crate::engine::remote::openai_wire::{CompletionAnswer, COMPLETIONS_PATH, MODELS_PATH};
use crate::engine::remote::wire::{
    ModelInfo, OneOrEach, UpdateWeightsAnswer, UpdateWeightsBody, GENERATE_PATH, HEALTH_PATH,
    MODEL_INFO_PATH, UPDATE_WEIGHTS_PATH,
};
use crate::engine::stop::{MAX_STOPS, MAX_STOP_BYTES};
use crate::engine::PrefixCache;

/// `GET /get_weight_version`.
const WEIGHT_VERSION_PATH: &str = "/get_weight_version";
/// `GET /metrics`: [`ServerMetrics`] in Prometheus's text format.
const METRICS_PATH: &str = "/metrics";
/// `POST` (or `GET`) `/flush_cache`: empties the prefix cache, as SGLang's route does.
const FLUSH_CACHE_PATH: &str = "/flush_cache";
/// Requests answered at once beyond the generation slots, so health and model-info probes are
/// answered while every slot waits for the engine.
const SPARE_TURNS: usize = 4;

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
    /// How long a client may stall mid-request or mid-answer, or leave a connection idle.
    pub idle_timeout: Duration,
    /// libtorch's CPU threads (0: libtorch's default).
    pub threads: usize,
    /// LoRA adapters held at once, loaded through vLLM's runtime LoRA routes (0: the routes
    /// are not served).
    pub max_loras: usize,
    /// The largest rank of the adapters, which may then differ in rank, scale and target
    /// modules; `None`: adapters of the first one's settings only.
    pub max_lora_rank: Option<i64>,
    /// With a largest rank, the projections the adapters may target (`None`: every one).
    pub lora_target_modules: Option<Vec<String>>,
    /// Bytes of finished sequences' keys and values kept for prompts that begin with them
    /// (0: none kept).
    pub prefix_cache_bytes: usize,
}

/// A bound server; [`Server::run`] serves until the process ends.
pub struct Server {
    http: HttpServer,
    endpoints: Arc<Endpoints>,
}

/// What the server answers on each path, and the state its answers share.
struct Endpoints {
    batcher: Batcher,
    options: ServeOptions,
    metrics: Arc<ServerMetrics>,
    running: AtomicUsize,
    next_id: AtomicU64,
    /// When the server started, in Unix seconds (`created` of its answers).
    started: u64,
}

impl Server {
    /// Loads the model and binds the address.
    pub fn bind(options: ServeOptions) -> anyhow::Result<Self> {
        let padded = options
            .max_lora_rank
            .map(|rank| PaddedSlots::new(rank, options.lora_target_modules.clone()))
            .transpose()?;
        let metrics = Arc::new(ServerMetrics::new(&options.served_model_name));
        let batcher = Batcher::start(
            options.model.clone(),
            (options.device, options.kind),
            options.seed,
            BatchLimits {
                max_batch: options.max_batch.max(1),
                wait: options.batch_wait,
            },
            (
                AdapterSlots::new(options.max_loras, padded),
                PrefixCache::new(options.prefix_cache_bytes),
            ),
            Arc::clone(&metrics),
        )?;
        let http = HttpServer::bind(&options.addr).map_err(|e| {
            anyhow::anyhow!(
                "cannot listen on {}: {e}; pick another --host/--port (port 0 picks a free one)",
                options.addr
            )
        })?;
        let endpoints = Arc::new(Endpoints {
            batcher,
            options,
            metrics,
            running: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
            started: unix_seconds(),
        });
        Ok(Self { http, endpoints })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.http.local_addr()
    }

    /// The base URL (`http://host:port`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr())
    }

    /// Serves until the process ends: each generation slot and a few probes answered at once.
    pub fn run(self) -> anyhow::Result<()> {
        let options = &self.endpoints.options;
        let limits = Limits {
            max_body_bytes: options.max_body_bytes,
            body_advice: "send fewer prompts a request, or raise the server's --max-body-bytes"
                .to_owned(),
            idle_timeout: options.idle_timeout,
            max_requests: options.max_running_requests.max(1) + SPARE_TURNS,
        };
        self.http.serve(self.endpoints, limits)?;
        Ok(())
    }
}

impl Service for Endpoints {
    fn answer(&self, request: Request) -> Reply {
        let reply = self.route(&request);
        self.metrics
            .record_answer(route_label(&request.path), reply.status());
        reply
    }

    fn refusal(&self, status: u16, message: String) -> Reply {
        Refusal::new(status, message).reply()
    }
}

/// The served route `path` is, or `other`: the label its answer is counted under.
fn route_label(path: &str) -> &'static str {
    [
        HEALTH_PATH,
        MODEL_INFO_PATH,
        SERVER_INFO_PATH,
        WEIGHT_VERSION_PATH,
        MODELS_PATH,
        METRICS_PATH,
        GENERATE_PATH,
        COMPLETIONS_PATH,
        UPDATE_WEIGHTS_PATH,
        FLUSH_CACHE_PATH,
        LOAD_LORA_ADAPTER_PATH,
        UNLOAD_LORA_ADAPTER_PATH,
        SGLANG_LOAD_LORA_ADAPTER_PATH,
        SGLANG_UNLOAD_LORA_ADAPTER_PATH,
    ]
    .into_iter()
    .find(|&route| route == path)
    .unwrap_or("other")
}

impl Endpoints {
    /// The answer of the route `request` asks for.
    fn route(&self, request: &Request) -> Reply {
        let path = request.path.as_str();
        match (&request.method, path) {
            (&Method::GET, HEALTH_PATH) => Reply::json(200, &serde_json::json!({})),
            (&Method::GET, MODEL_INFO_PATH) => Reply::json(200, &self.model_info()),
            (&Method::GET, SERVER_INFO_PATH) => Reply::json(200, &self.lora_limits()),
            (&Method::GET, METRICS_PATH) => {
                let gauges = Gauges {
                    running_requests: self.running.load(Ordering::SeqCst),
                    lora_adapters: self.batcher.served().adapters.len(),
                };
                Reply::text(
                    200,
                    server_metrics::CONTENT_TYPE,
                    self.metrics.render(gauges),
                )
            }
            (&Method::GET, WEIGHT_VERSION_PATH) => {
                let version = self.batcher.served().weight_version;
                Reply::json(200, &serde_json::json!({ "weight_version": version }))
            }
            (&Method::GET, MODELS_PATH) => {
                let served = self.batcher.served();
                let name = &self.options.served_model_name;
                Reply::json(200, &completions_route::models(&served, name, self.started))
            }
            (&Method::POST, GENERATE_PATH) => self.admit(&request.body, Self::generate_answer),
            (&Method::POST, COMPLETIONS_PATH) => {
                self.admit(&request.body, Self::completions_answer)
            }
            (&Method::POST, UPDATE_WEIGHTS_PATH) => self.update_weights(&request.body),
            (&Method::POST | &Method::GET, FLUSH_CACHE_PATH) => match self.batcher.flush_cache() {
                Ok(()) => Reply::text(200, "text/plain; charset=utf-8", "Cache flushed.\n".into()),
                Err(refusal) => refusal.reply(),
            },
            (&Method::POST, LOAD_LORA_ADAPTER_PATH | SGLANG_LOAD_LORA_ADAPTER_PATH)
                if self.options.max_loras > 0 =>
            {
                let name = &self.options.served_model_name;
                lora_routes::load(&self.batcher, name, &request.body, dialect(path))
            }
            (&Method::POST, UNLOAD_LORA_ADAPTER_PATH | SGLANG_UNLOAD_LORA_ADAPTER_PATH)
                if self.options.max_loras > 0 =>
            {
                lora_routes::unload(&self.batcher, &request.body, dialect(path))
            }
            (_, GENERATE_PATH | COMPLETIONS_PATH | UPDATE_WEIGHTS_PATH | FLUSH_CACHE_PATH) => {
                Refusal::new(405, format!("{path} takes POST")).reply()
            }
            (
                _,
                HEALTH_PATH | MODEL_INFO_PATH | SERVER_INFO_PATH | WEIGHT_VERSION_PATH
                | MODELS_PATH | METRICS_PATH,
            ) => Refusal::new(405, format!("{path} takes GET")).reply(),
            (
                _,
                LOAD_LORA_ADAPTER_PATH
                | UNLOAD_LORA_ADAPTER_PATH
                | SGLANG_LOAD_LORA_ADAPTER_PATH
                | SGLANG_UNLOAD_LORA_ADAPTER_PATH,
            ) if self.options.max_loras > 0 => {
                Refusal::new(405, format!("{path} takes POST")).reply()
            }
            _ => {
                let lora = if self.options.max_loras > 0 {
                    format!(
                        ", POST {LOAD_LORA_ADAPTER_PATH}, POST {UNLOAD_LORA_ADAPTER_PATH}, POST \
                         {SGLANG_LOAD_LORA_ADAPTER_PATH}, POST {SGLANG_UNLOAD_LORA_ADAPTER_PATH}"
                    )
                } else {
                    String::new()
                };
                Refusal::new(
                    404,
                    format!(
                        "no endpoint {path}; served: POST {GENERATE_PATH}, POST \
                         {COMPLETIONS_PATH}, POST {UPDATE_WEIGHTS_PATH}, POST \
                         {FLUSH_CACHE_PATH}{lora}, GET \
                         {MODEL_INFO_PATH}, GET {SERVER_INFO_PATH}, GET {MODELS_PATH}, GET \
                         {WEIGHT_VERSION_PATH}, GET {METRICS_PATH}, GET {HEALTH_PATH}"
                    ),
                )
                .reply()
            }
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

    /// The LoRA limits SGLang reports among its server arguments: `--max-loras` adapters held
    /// at once, of rank up to `--max-lora-rank` on the projections `--lora-target-modules`
    /// names; without `--max-lora-rank` the first adapter sets the rest's rank, so none is
    /// reported.
    fn lora_limits(&self) -> LoraLimits {
        let options = &self.options;
        LoraLimits {
            enable_lora: options.max_loras > 0,
            max_lora_rank: options.max_lora_rank,
            lora_target_modules: options.lora_target_modules.clone().map(OneOrEach::Each),
            max_loaded_loras: (options.max_loras > 0).then_some(options.max_loras),
        }
    }

    /// A generation request (`/generate`, `/v1/completions`) with `body` answered by
    /// `respond`, within the cap on requests in progress.
    fn admit(
        &self,
        body: &[u8],
        respond: fn(&Self, &[u8]) -> Result<serde_json::Value, Refusal>,
    ) -> Reply {
        let cap = self.options.max_running_requests.max(1);
        if self.running.fetch_add(1, Ordering::SeqCst) >= cap {
            self.running.fetch_sub(1, Ordering::SeqCst);
            return Refusal::new(
                503,
                format!("busy: {cap} requests in progress (--max-running-requests); retry later"),
            )
            .reply();
        }
        let arrived = Instant::now();
        let result = respond(self, body);
        self.running.fetch_sub(1, Ordering::SeqCst);
        if result.is_ok() {
            self.metrics.record_request(arrived.elapsed());
        }
        match result {
            Ok(answer) => Reply::json(200, &answer),
            Err(refusal) => refusal.reply(),
        }
    }

    fn generate_answer(&self, body: &[u8]) -> Result<serde_json::Value, Refusal> {
        let served = self.batcher.served();
        let parsed = generate_route::parse(body, &served, self.limits())?;
        let (generations, version) = self
            .batcher
            .generate(parsed.requests.clone(), parsed.adapters.clone())?;
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
    fn completions_answer(&self, body: &[u8]) -> Result<serde_json::Value, Refusal> {
        let served = self.batcher.served();
        let name = &self.options.served_model_name;
        let parsed = completions_route::parse(body, &served, name, self.limits())?;
        let (generations, _version) = self
            .batcher
            .generate(parsed.requests.clone(), parsed.adapters.clone())?;
        let usage = completions_route::usage(parsed.prompt_tokens, &generations, parsed.samples);
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
    fn update_weights(&self, body: &[u8]) -> Reply {
        let result = serde_json::from_slice::<UpdateWeightsBody>(body)
            .map_err(|e| {
                Refusal::new(
                    400,
                    format!("malformed request ({e}); expected {{\"model_path\": string, \"weight_version\": string}}"),
                )
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
        Reply::json(status, &reply)
    }
}

/// Whose LoRA routes `path` is (one of the four LoRA paths).
fn dialect(path: &str) -> Dialect {
    if path.starts_with("/v1/") {
        Dialect::Vllm
    } else {
        Dialect::Sglang
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
    server.run()
}
