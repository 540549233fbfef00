//! [`RemoteGenerator`]: a worker group's rollouts generated on a fleet of servers.
//!
//! A batch is cut into one request per server (smaller when `max_batch_per_request` says so),
//! sent `max_in_flight` at a time over all the batches the rollout runs on the group at once
//! (servers batch what arrives while they run, so an `async` rollout need not wait for one
//! batch before it sends the next). Every prompt carries its own `sampling_seed` drawn from the
//! run's stream, so what a prompt samples does not depend on which server answers it or what
//! the server batches it with. A request that fails for a transient reason (connection,
//! timeout, 5xx) is sent again, to the next server, after a growing wait; an answer is taken
//! whole or not at all, so no sample is lost or doubled. After `max_tries` attempts the batch
//! fails with an error that names every server tried and why.
//!
//! With a router (sglang-router) every request goes to it and it picks the server. The router
//! reads a request into its own typed form, which takes one `sampling_params` for the whole
//! request, so each prompt (with its own seed) is a request of its own there. OpenAI's
//! `/v1/completions` also takes one set of sampling parameters (one `seed`) a request, so with
//! `backend = "openai"` too each prompt is a request of its own.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use anyhow::{anyhow, bail};

use super::completions;
use super::connection::{Connection, Failure};
use super::in_flight::InFlight;
use super::openai_wire::CompletionBody;
use super::settings::{Protocol, RemoteSettings, WeightLoading, MAX_BACKOFF};
use super::wire::{GenerateBody, GenerateOutput, OneOrEach, WireSamplingParams, GENERATE_PATH};
use crate::engine::{FinishReason, Generation, GenerationRequest, Generator};
use crate::rng::SeededRng;

/// A [`Generator`] whose batches run on inference servers (see the module docs).
pub struct RemoteGenerator {
    pub(super) settings: RemoteSettings,
    pub(super) servers: Vec<Connection>,
    /// The router generation goes through, when there is one.
    pub(super) router: Option<Connection>,
    /// Servers left out for the rest of the run: they failed a weight update or answered
    /// with other weights than the fleet's.
    pub(super) retired: Vec<AtomicBool>,
    /// The weight version every answer must come from, once weights were pushed.
    pub(super) version: Mutex<Option<String>>,
    /// A LoRA group's adapters as the servers serve them, by slot, once they were pushed.
    pub(super) served_adapters: Mutex<Vec<String>>,
    /// Generation attempts that failed and were tried again, since the last
    /// [`RemoteGenerator::take_failed_attempts`].
    failed_attempts: AtomicU64,
    /// The requests in flight, over every batch running on the group.
    in_flight: InFlight,
}

impl RemoteGenerator {
    /// A generator on the servers of `settings`; nothing is sent until it is used.
    pub fn new(settings: RemoteSettings) -> Self {
        let servers: Vec<Connection> = settings
            .urls
            .iter()
            .map(|url| Connection::new(url, settings.request_timeout, settings.connect_timeout))
            .collect();
        let retired = servers.iter().map(|_| AtomicBool::new(false)).collect();
        let router = settings
            .router
            .as_deref()
            .map(|url| Connection::new(url, settings.request_timeout, settings.connect_timeout));
        Self {
            in_flight: InFlight::new(settings.max_in_flight),
            settings,
            servers,
            router,
            retired,
            version: Mutex::new(None),
            served_adapters: Mutex::new(Vec::new()),
            failed_attempts: AtomicU64::new(0),
        }
    }

    /// How many servers are still in the fleet.
    pub fn active_servers(&self) -> usize {
        self.active().len()
    }

    /// The generation attempts that failed (a server down, slow, busy or serving other
    /// weights) since the last call; each was tried again.
    pub fn take_failed_attempts(&self) -> u64 {
        self.failed_attempts.swap(0, Ordering::SeqCst)
    }

    /// The weight version the servers serve, once weights were pushed.
    pub fn weight_version(&self) -> Option<String> {
        self.version
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How the servers load new weights.
    pub fn weight_loading(&self) -> WeightLoading {
        self.settings.weight_loading
    }

    /// The indices of servers still in the fleet.
    pub(super) fn active(&self) -> Vec<usize> {
        (0..self.servers.len())
            .filter(|&i| !self.retired[i].load(Ordering::SeqCst))
            .collect()
    }

    /// Leaves server `index` out from now on, saying why.
    pub(super) fn retire(&self, index: usize, why: &str) {
        if !self.retired[index].swap(true, Ordering::SeqCst) {
            tracing::warn!(
                "worker group `{}`: leaving {} out of the fleet: {why}",
                self.settings.group,
                self.servers[index].url()
            );
        }
    }

    /// The wait before attempt `attempt` (1-based; the first waits nothing).
    pub(super) fn backoff(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(2).min(16);
        if attempt <= 1 {
            return Duration::ZERO;
        }
        self.settings
            .first_backoff
            .saturating_mul(1 << doublings)
            .min(MAX_BACKOFF)
    }

    /// Sends `body` (`prompts` prompts; `home` picks the server it goes to first) until a
    /// server answers it whole.
    fn send(&self, body: &Request, prompts: usize, home: usize) -> anyhow::Result<Vec<Generation>> {
        let tries = self.settings.max_tries.max(1);
        let mut failures: Vec<String> = Vec::new();
        for attempt in 1..=tries {
            std::thread::sleep(self.backoff(attempt));
            let active = self.active();
            if active.is_empty() {
                bail!(
                    "worker group `{}`: every server left the fleet ({})",
                    self.settings.group,
                    self.settings.urls.join(", ")
                );
            }
            let server = active[(home + attempt as usize - 1) % active.len()];
            let connection = self.router.as_ref().unwrap_or(&self.servers[server]);
            let answer = match body {
                Request::Native(body) => post_generate(connection, body)
                    .map_err(Answer::from)
                    .and_then(|outputs| self.read(outputs, prompts)),
                Request::Completion(body) => completions::generate(connection, body)
                    .map(|generation| vec![generation])
                    .map_err(Answer::from),
            };
            match answer {
                Ok(generations) => return Ok(generations),
                Err(Answer::Failed(Failure::Fatal(reason))) => bail!(
                    "worker group `{}`: {} refused a generation request: {reason}",
                    self.settings.group,
                    connection.url()
                ),
                Err(Answer::Failed(Failure::Transient(reason))) => {
                    self.failed_attempts.fetch_add(1, Ordering::SeqCst);
                    tracing::warn!(
                        "worker group `{}`: {} failed (attempt {attempt} of {tries}): {reason}",
                        self.settings.group,
                        connection.url()
                    );
                    failures.push(format!("{}: {reason}", connection.url()));
                }
                Err(Answer::Stale(found)) => {
                    self.failed_attempts.fetch_add(1, Ordering::SeqCst);
                    // Behind a router the server that answered is unknown: only try again.
                    if self.router.is_none() {
                        self.retire(server, &format!("it serves weight version {found}"));
                    }
                    failures.push(format!("{}: weight version {found}", connection.url()));
                }
            }
        }
        bail!(
            "worker group `{}`: no server generated a batch of {prompts} prompts in {tries} \
             attempts; is the fleet up? ({}). Attempts: {}",
            self.settings.group,
            self.settings.urls.join(", "),
            failures.join("; ")
        )
    }

    /// The generations of a whole answer, checked against the protocol and the weight
    /// version.
    fn read(
        &self,
        outputs: Vec<GenerateOutput>,
        prompts: usize,
    ) -> Result<Vec<Generation>, Answer> {
        let fatal = |reason: String| Answer::Failed(Failure::Fatal(reason));
        if outputs.len() != prompts {
            return Err(fatal(format!(
                "{} outputs for {prompts} prompts",
                outputs.len()
            )));
        }
        // A LoRA group's servers keep their base weights' version: the adapters' names carry
        // theirs, and a server holding no adapter of that name refuses the request.
        let expected = self
            .weight_version()
            .filter(|_| !self.settings.weight_loading.loads_adapters());
        outputs
            .into_iter()
            .enumerate()
            .map(|(i, output)| {
                if let (Some(want), Some(found)) = (&expected, &output.meta_info.weight_version) {
                    if want != found {
                        return Err(Answer::Stale(found.clone()));
                    }
                }
                generation(output).map_err(|reason| match reason {
                    Failure::Fatal(reason) => fatal(format!("output {i}: {reason}")),
                    transient => Answer::Failed(transient),
                })
            })
            .collect()
    }
}

/// `POST /generate` of `body` to `connection`: a list of outputs for a batch, one output for a
/// single prompt (SGLang's shapes).
fn post_generate(
    connection: &Connection,
    body: &GenerateBody,
) -> Result<Vec<GenerateOutput>, Failure> {
    match body.input_ids {
        OneOrEach::Each(_) => connection.post(GENERATE_PATH, body),
        OneOrEach::One(_) => connection
            .post::<_, GenerateOutput>(GENERATE_PATH, body)
            .map(|output| vec![output]),
    }
}

/// The body of one request for `requests`, each sampling from its seed through the adapter
/// `adapters` names (`None`: the base model): a batch, or through a router a single prompt
/// (`requests` holds one).
fn generate_body(
    requests: &[GenerationRequest],
    seeds: &[u64],
    adapters: &[Option<&str>],
    single: bool,
) -> GenerateBody {
    let mut params = requests.iter().zip(seeds).map(|(r, &s)| wire_params(r, s));
    let mut prompts = requests.iter().map(|r| r.prompt.clone());
    let (input_ids, sampling_params) = match (single, params.next(), prompts.next()) {
        (true, Some(params), Some(prompt)) => (OneOrEach::One(prompt), OneOrEach::One(params)),
        (_, first, prompt) => (
            OneOrEach::Each(prompt.into_iter().chain(prompts).collect()),
            OneOrEach::Each(first.into_iter().chain(params).collect()),
        ),
    };
    let owned = |adapter: &Option<&str>| adapter.map(str::to_owned);
    let lora_path = match adapters {
        _ if adapters.iter().all(Option::is_none) => None,
        [adapter] if single => Some(OneOrEach::One(owned(adapter))),
        _ => Some(OneOrEach::Each(adapters.iter().map(owned).collect())),
    };
    GenerateBody {
        input_ids,
        sampling_params: Some(sampling_params),
        return_logprob: Some(OneOrEach::One(true)),
        lora_path,
        stream: None,
    }
}

/// One request's body in the fleet's protocol.
enum Request {
    /// SGLang's `/generate`: a batch, or one prompt through a router.
    Native(GenerateBody),
    /// OpenAI's `/v1/completions`: one prompt.
    Completion(CompletionBody),
}

/// A failed attempt, or an answer from other weights than the fleet's.
enum Answer {
    Failed(Failure),
    Stale(String),
}

impl From<Failure> for Answer {
    fn from(failure: Failure) -> Self {
        Answer::Failed(failure)
    }
}

/// One output as a [`Generation`]: tokens and logprobs from `output_token_logprobs`, the
/// finish reason from `finish_reason` (an aborted request is worth another try).
fn generation(output: GenerateOutput) -> Result<Generation, Failure> {
    let fatal = |reason: &str| Failure::Fatal(reason.to_owned());
    let meta = output.meta_info;
    let pairs = meta
        .output_token_logprobs
        .ok_or_else(|| fatal("no meta_info.output_token_logprobs"))?;
    let tokens: Vec<i64> = pairs.iter().map(|&(_, token, _)| token).collect();
    let logprobs: Vec<f32> = pairs.iter().map(|&(lp, _, _)| lp as f32).collect();
    if output.output_ids.as_ref().is_some_and(|ids| *ids != tokens) {
        return Err(fatal(
            "output_ids differ from the tokens of output_token_logprobs",
        ));
    }
    let reason = meta
        .finish_reason
        .ok_or_else(|| fatal("no meta_info.finish_reason"))?;
    let finish = match (reason.kind.as_str(), &reason.matched) {
        ("length", _) => FinishReason::Length,
        ("stop", Some(serde_json::Value::String(_))) => FinishReason::Stop,
        ("stop", _) => FinishReason::Eos,
        ("abort", _) => {
            return Err(Failure::Transient(format!(
                "the server aborted the request: {}",
                reason.message.unwrap_or_default()
            )))
        }
        (other, _) => {
            return Err(Failure::Fatal(format!(
                "unknown finish_reason type `{other}`"
            )))
        }
    };
    Ok(Generation {
        tokens,
        logprobs,
        finish,
        cached_tokens: meta.cached_tokens,
    })
}

/// The wire form of `request`, sampling from `seed`.
fn wire_params(request: &GenerationRequest, seed: u64) -> WireSamplingParams {
    let p = request.params;
    WireSamplingParams {
        max_new_tokens: Some(request.max_new_tokens),
        temperature: Some(p.temperature),
        top_p: Some(p.top_p),
        top_k: Some(if p.top_k == 0 { -1 } else { p.top_k as i64 }),
        stop: (!request.stop.is_empty()).then(|| OneOrEach::Each(request.stop.clone())),
        stop_token_ids: (!request.stop_tokens.is_empty()).then(|| request.stop_tokens.clone()),
        sampling_seed: Some(seed),
        skip_special_tokens: None,
        ignore_eos: request.ignore_eos.then_some(true),
    }
}

impl Generator for RemoteGenerator {
    /// As many batches as requests may be in flight: each batch sends at least one.
    fn concurrent_batches(&self) -> usize {
        self.in_flight.limit()
    }

    fn generate(
        &self,
        requests: &[GenerationRequest],
        rng: &mut SeededRng,
    ) -> anyhow::Result<Vec<Generation>> {
        // Each request names its LoRA adapter as the servers hold it (`None`: the base model);
        // over /v1/completions that name is its `model`, the base model's served name without.
        let served = self
            .served_adapters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let adapters: Vec<Option<&str>> = requests
            .iter()
            .map(|request| {
                let Some(slot) = request.adapter else {
                    return Ok(None);
                };
                served
                    .get(slot)
                    .map(|name| Some(name.as_str()))
                    .ok_or_else(|| {
                        anyhow!(
                        "worker group `{}`: a request for LoRA adapter {slot}, which its servers \
                         were not given",
                        self.settings.group
                    )
                    })
            })
            .collect::<anyhow::Result<_>>()?;
        let models: Vec<Option<&str>> = match &self.settings.protocol {
            Protocol::Openai { model } => adapters
                .iter()
                .map(|adapter| Some(adapter.unwrap_or(model.as_str())))
                .collect(),
            Protocol::Sglang => vec![None; requests.len()],
        };
        // A seed fits a signed 64-bit integer, as vLLM's `seed` must; both protocols are sent
        // the same seeds, so they sample alike.
        let seeds: Vec<u64> = requests.iter().map(|_| rng.next_u64() >> 1).collect();
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        let over_completions = matches!(self.settings.protocol, Protocol::Openai { .. });
        let single = self.router.is_some() || over_completions;
        let servers = self.active().len().max(1);
        let size = if single {
            1
        } else {
            requests
                .len()
                .div_ceil(servers)
                .clamp(1, self.settings.max_batch_per_request.max(1))
        };
        let chunks: Vec<(usize, Request)> = requests
            .chunks(size)
            .zip(seeds.chunks(size))
            .zip(models.chunks(size).zip(adapters.chunks(size)))
            .map(|((requests, seeds), (models, adapters))| {
                // Over /v1/completions each chunk holds one prompt (`single`).
                let body = match (models, requests, seeds) {
                    (&[Some(model)], [request], &[seed]) => Request::Completion(completions::body(
                        request,
                        i64::try_from(seed).unwrap_or(i64::MAX),
                        model,
                    )),
                    _ => Request::Native(generate_body(requests, seeds, adapters, single)),
                };
                (requests.len(), body)
            })
            .collect();
        let queue = Mutex::new((0..chunks.len()).collect::<VecDeque<usize>>());
        let answers: Mutex<Vec<Option<Vec<Generation>>>> = Mutex::new(vec![None; chunks.len()]);
        let failure: Mutex<Option<anyhow::Error>> = Mutex::new(None);
        let workers = self.settings.max_in_flight.clamp(1, chunks.len());
        std::thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| loop {
                    if failure
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .is_some()
                    {
                        return;
                    }
                    let next = queue
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .pop_front();
                    let Some(index) = next else { return };
                    let (prompts, body) = &chunks[index];
                    let permit = self.in_flight.acquire();
                    let sent = self.send(body, *prompts, index);
                    drop(permit);
                    match sent {
                        Ok(generations) => {
                            answers.lock().unwrap_or_else(PoisonError::into_inner)[index] =
                                Some(generations);
                        }
                        Err(error) => {
                            failure
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .get_or_insert(error);
                            return;
                        }
                    }
                });
            }
        });
        if let Some(error) = failure.into_inner().unwrap_or_else(PoisonError::into_inner) {
            return Err(error);
        }
        let answers = answers.into_inner().unwrap_or_else(PoisonError::into_inner);
        let mut generations = Vec::with_capacity(requests.len());
        for answer in answers {
            generations
                .extend(answer.ok_or_else(|| anyhow!("a request of the batch went unanswered"))?);
        }
        Ok(generations)
    }
}
