//! [`Batcher`]: the one thread that owns the served model. HTTP threads hand it jobs; it runs
//! the generation requests that arrive together as one batch of the local engine, lets those
//! that arrive while it runs join it between decode steps, answers each as soon as its
//! sequences finish, and runs weight updates and LoRA adapter loads between batches, so a batch
//! never sees two versions of the weights. Finished sequences' keys and values stay in a prefix
//! cache until a weight update (or a flush), so a prompt that begins with one (a conversation's
//! next turn) prefills only the rest.

use std::collections::VecDeque;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use tch::{Device, Kind};
use tokenizers::Tokenizer;

use super::adapter_slots::{AdapterSlots, HeldAdapter};
use super::refusal::Refusal;
use super::server_metrics::{BatchCounts, ServerMetrics};
use crate::engine::continuous_batching::{drive, requests_of, JobQueue};
use crate::engine::cpu::backend_for;
use crate::engine::{Decoding, Generation, GenerationRequest, PrefixCache};
use crate::model::error::ModelError;
use crate::model::pretrained::Pretrained;
use crate::rng::SeededRng;

/// What the model serves now, read by HTTP threads without waiting for the engine.
#[derive(Debug, Clone)]
pub struct Served {
    /// The folder or file the weights came from.
    pub model_path: String,
    /// The version given by the last weight update (`default` before any).
    pub weight_version: String,
    /// HF `model_type`.
    pub model_type: &'static str,
    /// HF architecture class.
    pub architecture: &'static str,
    /// Tokens in the vocabulary.
    pub vocab_size: usize,
    /// Positions the model takes.
    pub context_length: usize,
    /// The LoRA adapters loaded, by slot.
    pub adapters: Vec<HeldAdapter>,
}

impl Served {
    /// Whether the LoRA adapter `name` is loaded.
    pub fn holds(&self, name: &str) -> bool {
        self.adapters.iter().any(|adapter| adapter.name == name)
    }

    /// The loaded adapters' names, comma-separated (for messages).
    pub fn adapter_list(&self) -> String {
        let names: Vec<&str> = self.adapters.iter().map(|a| a.name.as_str()).collect();
        names.join(", ")
    }
}

/// What a generation job is answered with: the generations and the weight version that made
/// them.
pub type Generated = Result<(Vec<Generation>, String), Refusal>;

/// A job for the engine thread; the answer goes back on `reply`.
enum Job {
    Generate(GenerateJob),
    Reload {
        path: PathBuf,
        version: Option<String>,
        reply: Sender<anyhow::Result<String>>,
    },
    LoadAdapter {
        name: String,
        folder: PathBuf,
        reply: Sender<Result<(), Refusal>>,
    },
    UnloadAdapter {
        name: String,
        reply: Sender<Result<(), Refusal>>,
    },
    FlushCache {
        reply: Sender<()>,
    },
}

/// Requests to generate in one batch with others, each through the LoRA adapter its entry
/// of `adapters` names (`None`: the base model), and where their answer goes.
struct GenerateJob {
    requests: Vec<GenerationRequest>,
    adapters: Vec<Option<String>>,
    reply: Sender<Generated>,
}

/// How the engine batches.
#[derive(Debug, Clone, Copy)]
pub struct BatchLimits {
    /// The most sequences in one engine batch.
    pub max_batch: usize,
    /// How long the first job of a batch waits for others to join it.
    pub wait: Duration,
}

/// The handle HTTP threads send jobs through.
#[derive(Clone)]
pub struct Batcher {
    jobs: Sender<Job>,
    served: Arc<RwLock<Served>>,
    /// The served model's tokenizer (a weight update keeps the model, so the tokenizer too).
    tokenizer: Arc<Tokenizer>,
}

impl Batcher {
    /// Loads `model` on `device` in `kind` on a new engine thread and returns once it is
    /// loaded (or failed to load). Unseeded requests draw from one stream seeded with `seed`;
    /// LoRA adapters are loaded into `adapters`; finished sequences are kept in `prefixes`;
    /// batches and weight updates are counted in `metrics`.
    pub fn start(
        model: PathBuf,
        (device, kind): (Device, Kind),
        seed: u64,
        limits: BatchLimits,
        (adapters, prefixes): (AdapterSlots, PrefixCache),
        metrics: Arc<ServerMetrics>,
    ) -> anyhow::Result<Self> {
        let (jobs, inbox) = mpsc::channel();
        let (ready, loaded) = mpsc::channel();
        std::thread::Builder::new()
            .name("engine".into())
            .spawn(move || match load(&model, device, kind) {
                Ok(pretrained) => {
                    let served = Arc::new(RwLock::new(describe(&pretrained, "default")));
                    let tokenizer = Arc::new(pretrained.tokenizer.clone());
                    let _ = ready.send(Ok((Arc::clone(&served), tokenizer)));
                    Engine {
                        pretrained,
                        device,
                        kind,
                        rng: SeededRng::new(seed),
                        served,
                        limits,
                        adapters,
                        prefixes,
                        metrics,
                        held: VecDeque::new(),
                    }
                    .run(&inbox);
                }
                Err(error) => {
                    let _ = ready.send(Err(error));
                }
            })
            .context("starting the engine thread")?;
        let (served, tokenizer) = loaded
            .recv()
            .context("the engine thread ended while loading the model")??;
        Ok(Self {
            jobs,
            served,
            tokenizer,
        })
    }

    /// The text of `tokens`, without special tokens when `skip_special_tokens`.
    pub fn decode(&self, tokens: &[i64], skip_special_tokens: bool) -> anyhow::Result<String> {
        let ids: Vec<u32> = tokens.iter().map(|&t| t as u32).collect();
        self.tokenizer
            .decode(&ids, skip_special_tokens)
            .map_err(|e| anyhow::anyhow!("decoding the output: {e}"))
    }

    /// What the model serves now.
    pub fn served(&self) -> Served {
        self.served
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Generates `requests` (already checked against [`Self::served`]), each through the
    /// LoRA adapter its entry of `adapters` names (`None`: the base model), in a batch with
    /// whatever else arrives meanwhile; returns the generations and the weight version that
    /// made them.
    pub fn generate(
        &self,
        requests: Vec<GenerationRequest>,
        adapters: Vec<Option<String>>,
    ) -> Generated {
        let job = |reply| {
            Job::Generate(GenerateJob {
                requests,
                adapters,
                reply,
            })
        };
        self.ask(job).unwrap_or_else(|| Err(stopped()))
    }

    /// Loads the PEFT folder `folder` as the adapter `name` once the running batch is done.
    pub fn load_adapter(&self, name: String, folder: PathBuf) -> Result<(), Refusal> {
        let job = |reply| Job::LoadAdapter {
            name,
            folder,
            reply,
        };
        self.ask(job).unwrap_or_else(|| Err(stopped()))
    }

    /// Unloads the adapter `name` once the running batch is done.
    pub fn unload_adapter(&self, name: String) -> Result<(), Refusal> {
        let job = |reply| Job::UnloadAdapter { name, reply };
        self.ask(job).unwrap_or_else(|| Err(stopped()))
    }

    /// Empties the prefix cache once the running batch is done.
    pub fn flush_cache(&self) -> Result<(), Refusal> {
        self.ask(|reply| Job::FlushCache { reply })
            .ok_or_else(stopped)
    }

    /// Replaces the weights by those of the HF folder `path` once the running batch is done;
    /// returns the version served from then on.
    pub fn reload(&self, path: PathBuf, version: Option<String>) -> anyhow::Result<String> {
        let job = |reply| Job::Reload {
            path,
            version,
            reply,
        };
        self.ask(job).context("the engine thread has stopped")?
    }

    /// Hands the engine thread the job `job` makes around a reply channel and waits for its
    /// answer; `None` when the thread has stopped.
    fn ask<R>(&self, job: impl FnOnce(Sender<R>) -> Job) -> Option<R> {
        let (reply, answer) = mpsc::channel();
        self.jobs.send(job(reply)).ok()?;
        answer.recv().ok()
    }
}

/// The engine thread's state.
struct Engine {
    pretrained: Pretrained,
    device: Device,
    kind: Kind,
    rng: SeededRng,
    served: Arc<RwLock<Served>>,
    limits: BatchLimits,
    /// The LoRA adapters loaded into the model.
    adapters: AdapterSlots,
    /// Finished sequences' keys and values, for prompts that begin with them.
    prefixes: PrefixCache,
    /// Where batches and weight updates are counted.
    metrics: Arc<ServerMetrics>,
    /// Jobs taken from the inbox that did not fit the last batch, in the order they came.
    held: VecDeque<Job>,
}

impl Engine {
    /// Answers jobs until every [`Batcher`] is dropped.
    fn run(mut self, inbox: &Receiver<Job>) {
        loop {
            let job = match self.held.pop_front() {
                Some(job) => job,
                None => match inbox.recv() {
                    Ok(job) => job,
                    Err(_) => return,
                },
            };
            match job {
                Job::Reload {
                    path,
                    version,
                    reply,
                } => {
                    let _ = reply.send(self.reload(path, version));
                }
                Job::LoadAdapter {
                    name,
                    folder,
                    reply,
                } => {
                    let loaded = self
                        .adapters
                        .load(&mut self.pretrained.model, &name, &folder);
                    if loaded.is_ok() {
                        tracing::info!("serving LoRA adapter `{name}` from {}", folder.display());
                    }
                    self.publish_adapters();
                    let _ = reply.send(loaded);
                }
                Job::UnloadAdapter { name, reply } => {
                    if let Some(slot) = self.adapters.slot_of(&name) {
                        self.prefixes.forget_adapter(slot);
                    }
                    let unloaded = self.adapters.unload(&name);
                    self.publish_adapters();
                    let _ = reply.send(unloaded);
                }
                Job::FlushCache { reply } => {
                    self.prefixes.clear();
                    self.metrics.set_prefix_cache_bytes(0);
                    let _ = reply.send(());
                }
                Job::Generate(job) => {
                    let batch = self.gather(inbox, vec![job]);
                    self.generate(inbox, batch);
                }
            }
        }
    }

    /// Adds the generation jobs held or arriving within the wait to `batch`, up to the batch
    /// limit; a job that does not fit (or a reload) is held for the next turn.
    fn gather(&mut self, inbox: &Receiver<Job>, mut batch: Vec<GenerateJob>) -> Vec<GenerateJob> {
        let deadline = Instant::now() + self.limits.wait;
        let mut rows: usize = batch.iter().map(|job| job.requests.len()).sum();
        while rows < self.limits.max_batch {
            let left = deadline.saturating_duration_since(Instant::now());
            let job = match self.held.pop_front() {
                Some(job) => job,
                None => match inbox.recv_timeout(left) {
                    Ok(job) => job,
                    Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
                },
            };
            match job {
                Job::Generate(job) if rows + job.requests.len() <= self.limits.max_batch => {
                    rows += job.requests.len();
                    batch.push(job);
                }
                other => {
                    self.held.push_front(other);
                    break;
                }
            }
        }
        batch
    }

    /// Generates every job of `batch` in one engine batch, each request through its adapter's
    /// slot, and answers each job its own outputs as soon as they are all finished. Between
    /// decode steps, generation jobs that arrive join the batch while it has room (continuous
    /// batching); the first job that does not fit, or any other job, is held, and the batch
    /// then runs to its end before it is taken.
    fn generate(&mut self, inbox: &Receiver<Job>, batch: Vec<GenerateJob>) {
        let batch: Vec<GenerateJob> = batch
            .into_iter()
            .filter_map(|job| with_slots(&self.adapters, job))
            .collect();
        if batch.is_empty() {
            return;
        }
        let version = self.version();
        let started = Instant::now();
        let Self {
            pretrained,
            rng,
            adapters,
            prefixes,
            limits,
            metrics,
            held,
            ..
        } = self;
        let mut queue = Arrivals {
            inbox,
            held,
            adapters,
            max_batch: limits.max_batch,
            metrics,
            version: &version,
            counts: BatchCounts::default(),
            running: Vec::with_capacity(batch.len()),
        };
        let (model, tokenizer) = (&pretrained.model, &pretrained.tokenizer);
        let requests = requests_of::<Arrivals>(&batch);
        let ended = match Decoding::start(model, tokenizer, requests, rng, Some(prefixes)) {
            Ok(decoding) => drive(decoding, batch, &mut queue),
            Err(error) => return queue.fail(batch, &error),
        };
        if !ended {
            return;
        }
        let mut counts = queue.counts;
        counts.took = started.elapsed();
        metrics.record_batch(&counts);
        metrics.set_prefix_cache_bytes(prefixes.bytes());
        tracing::debug!(
            sequences = counts.sequences,
            joined = counts.joined_requests,
            seconds = counts.took.as_secs_f64(),
            "generated a batch"
        );
    }

    fn version(&self) -> String {
        self.served
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .weight_version
            .clone()
    }

    /// Shows the adapters held to the HTTP threads.
    fn publish_adapters(&self) {
        self.served
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .adapters = self.adapters.held();
    }

    /// Loads the HF folder `path` and serves it, with the adapters held, if it is the same
    /// model (shape and vocabulary); the old weights stay when anything fails.
    fn reload(&mut self, path: PathBuf, version: Option<String>) -> anyhow::Result<String> {
        let started = Instant::now();
        let mut fresh = load(&path, self.device, self.kind)?;
        let (old, new) = (self.pretrained.model.config(), fresh.model.config());
        let shape = |c: &crate::model::config::LlamaConfig| {
            (
                c.architecture,
                c.vocab_size,
                c.hidden_size,
                c.num_hidden_layers,
                c.num_attention_heads,
                c.num_key_value_heads,
                c.intermediate_size,
            )
        };
        anyhow::ensure!(
            shape(old) == shape(new),
            "{} holds another model ({} with {} layers, hidden size {}, vocabulary {}) than the \
             one served ({} with {} layers, hidden size {}, vocabulary {}); start another server \
             for it",
            path.display(),
            new.architecture.hf_class(),
            new.num_hidden_layers,
            new.hidden_size,
            new.vocab_size,
            old.architecture.hf_class(),
            old.num_hidden_layers,
            old.hidden_size,
            old.vocab_size
        );
        self.adapters.reattach(&mut fresh.model)?;
        let version = version.unwrap_or_else(|| self.version());
        self.pretrained = fresh;
        self.prefixes.clear();
        self.metrics.set_prefix_cache_bytes(0);
        let mut served = describe(&self.pretrained, &version);
        served.adapters = self.adapters.held();
        *self.served.write().unwrap_or_else(PoisonError::into_inner) = served;
        self.metrics.record_weight_update();
        tracing::info!(
            "serving {} (weight version {version}), loaded in {:.2?}",
            path.display(),
            started.elapsed()
        );
        Ok(version)
    }
}

/// The answer to a job sent to an engine thread that has stopped.
fn stopped() -> Refusal {
    Refusal::new(500, "the engine thread has stopped")
}

/// A job of the running batch: its requests' indices in the [`Decoding`] and where their
/// answer goes.
struct RunningJob {
    requests: Range<usize>,
    reply: Sender<Generated>,
}

/// `job` with each request's adapter set to the slot its name holds, or `None` once the job
/// has been answered that one of its adapters was unloaded since it was checked.
fn with_slots(adapters: &AdapterSlots, mut job: GenerateJob) -> Option<GenerateJob> {
    let slots: Result<Vec<Option<usize>>, String> = (job.adapters.iter())
        .map(|adapter| match adapter {
            None => Ok(None),
            Some(name) => (adapters.slot_of(name).map(Some))
                .ok_or_else(|| format!("The lora adapter '{name}' was unloaded meanwhile")),
        })
        .collect();
    match slots {
        Ok(slots) => {
            for (request, slot) in job.requests.iter_mut().zip(slots) {
                request.adapter = slot;
            }
            Some(job)
        }
        Err(gone) => {
            let _ = job.reply.send(Err(Refusal::new(404, gone)));
            None
        }
    }
}

/// The generation jobs of the engine's inbox as its running decoding sees them.
struct Arrivals<'e> {
    inbox: &'e Receiver<Job>,
    /// Jobs taken from the inbox that did not fit.
    held: &'e mut VecDeque<Job>,
    adapters: &'e AdapterSlots,
    max_batch: usize,
    metrics: &'e ServerMetrics,
    /// The weight version the decoding runs on.
    version: &'e str,
    counts: BatchCounts,
    running: Vec<RunningJob>,
}

impl JobQueue for Arrivals<'_> {
    type Job = GenerateJob;

    fn requests(job: &GenerateJob) -> &[GenerationRequest] {
        &job.requests
    }

    fn run(&mut self, job: GenerateJob, places: Range<usize>, joined: bool) {
        self.counts.sequences += job.requests.len();
        self.counts.prompt_tokens += job.requests.iter().map(|r| r.prompt.len()).sum::<usize>();
        self.counts.joined_requests += usize::from(joined);
        self.running.push(RunningJob {
            requests: places,
            reply: job.reply,
        });
    }

    /// Answers the jobs whose requests have all finished with their outputs, counting the
    /// tokens generated; jobs may always join (while nothing is held: see `arrivals`).
    fn answer_finished(&mut self, decoding: &mut Decoding) -> bool {
        let (counts, version) = (&mut self.counts, self.version);
        self.running.retain(|job| {
            if !job.requests.clone().all(|i| decoding.is_finished(i)) {
                return true;
            }
            let outputs: Vec<Generation> = job.requests.clone().map(|i| decoding.take(i)).collect();
            counts.generation_tokens += outputs.iter().map(|g| g.tokens.len()).sum::<usize>();
            counts.cached_tokens += outputs.iter().map(|g| g.cached_tokens).sum::<usize>();
            let _ = job.reply.send(Ok((outputs, version.to_owned())));
            false
        });
        self.metrics.set_running_sequences(decoding.live_rows());
        true
    }

    /// The generation jobs waiting in the inbox, in order, while their sequences fit beside
    /// `live_rows` within `--max-batch` and nothing is held; the first that does not fit, or
    /// any other job, is held.
    fn arrivals(&mut self, live_rows: usize) -> Vec<GenerateJob> {
        let mut room = self.max_batch.saturating_sub(live_rows);
        let mut arrived = Vec::new();
        while self.held.is_empty() {
            let job = match self.inbox.try_recv() {
                Ok(Job::Generate(job)) => job,
                Ok(other) => {
                    self.held.push_back(other);
                    break;
                }
                Err(_) => break,
            };
            let Some(job) = with_slots(self.adapters, job) else {
                continue;
            };
            if job.requests.len() > room {
                self.held.push_back(Job::Generate(job));
                break;
            }
            room -= job.requests.len();
            arrived.push(job);
        }
        arrived
    }

    fn hold(&mut self, jobs: Vec<GenerateJob>) {
        for job in jobs.into_iter().rev() {
            self.held.push_front(Job::Generate(job));
        }
    }

    fn fail(&mut self, jobs: Vec<GenerateJob>, error: &ModelError) {
        for job in jobs {
            let failed = Refusal::new(500, format!("generation failed: {error}"));
            let _ = job.reply.send(Err(failed));
        }
    }

    fn fail_running(&mut self, error: &ModelError) {
        self.metrics.set_running_sequences(0);
        for job in self.running.drain(..) {
            let failed = Refusal::new(500, format!("generation failed: {error}"));
            let _ = job.reply.send(Err(failed));
        }
    }
}

/// Loads a model for serving, on the kernels a worker group on `device` would use.
fn load(path: &std::path::Path, device: Device, kind: Kind) -> anyhow::Result<Pretrained> {
    let mut pretrained = Pretrained::load(path, device, kind)
        .with_context(|| format!("loading {}", path.display()))?;
    pretrained.model.set_backend(backend_for(device)?);
    Ok(pretrained)
}

fn describe(pretrained: &Pretrained, version: &str) -> Served {
    let config = pretrained.model.config();
    Served {
        model_path: pretrained.source.display().to_string(),
        weight_version: version.to_owned(),
        model_type: config.architecture.model_type(),
        architecture: config.architecture.hf_class(),
        vocab_size: config.vocab_size,
        context_length: config.max_position_embeddings,
        adapters: Vec::new(),
    }
}
