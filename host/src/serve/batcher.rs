//! [`Batcher`]: the one thread that owns the served model. HTTP threads hand it jobs; it runs
//! the generation requests that arrive together as one batch of the local engine, and weight
//! updates between batches, so a batch never sees two versions of the weights.

use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use tch::{Device, Kind};
use tokenizers::Tokenizer;

use crate::engine::cpu::backend_for;
use crate::engine::{generate, Generation, GenerationRequest};
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
}

/// A job for the engine thread; the answer goes back on `reply`.
enum Job {
    Generate {
        requests: Vec<GenerationRequest>,
        reply: Sender<anyhow::Result<(Vec<Generation>, String)>>,
    },
    Reload {
        path: PathBuf,
        version: Option<String>,
        reply: Sender<anyhow::Result<String>>,
    },
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
    /// loaded (or failed to load). Unseeded requests draw from one stream seeded with `seed`.
    pub fn start(
        model: PathBuf,
        device: Device,
        kind: Kind,
        seed: u64,
        limits: BatchLimits,
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
                        held: None,
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

    /// Generates `requests` (already checked against [`Self::served`]) in a batch with
    /// whatever else arrives meanwhile; returns the generations and the weight version that
    /// made them.
    pub fn generate(
        &self,
        requests: Vec<GenerationRequest>,
    ) -> anyhow::Result<(Vec<Generation>, String)> {
        let (reply, answer) = mpsc::channel();
        self.jobs
            .send(Job::Generate { requests, reply })
            .ok()
            .context("the engine thread has stopped")?;
        answer.recv().context("the engine thread has stopped")?
    }

    /// Replaces the weights by those of the HF folder `path` once the running batch is done;
    /// returns the version served from then on.
    pub fn reload(&self, path: PathBuf, version: Option<String>) -> anyhow::Result<String> {
        let (reply, answer) = mpsc::channel();
        self.jobs
            .send(Job::Reload {
                path,
                version,
                reply,
            })
            .ok()
            .context("the engine thread has stopped")?;
        answer.recv().context("the engine thread has stopped")?
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
    /// A job taken from the inbox that did not fit the last batch.
    held: Option<Job>,
}

impl Engine {
    /// Answers jobs until every [`Batcher`] is dropped.
    fn run(mut self, inbox: &Receiver<Job>) {
        loop {
            let job = match self.held.take() {
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
                Job::Generate { requests, reply } => {
                    let batch = self.gather(inbox, vec![(requests, reply)]);
                    self.generate(batch);
                }
            }
        }
    }

    /// Adds the generation jobs that arrive within the wait to `batch`, up to the batch limit;
    /// a job that does not fit (or a reload) is held for the next turn.
    fn gather(&mut self, inbox: &Receiver<Job>, mut batch: Vec<GenerateJob>) -> Vec<GenerateJob> {
        let deadline = Instant::now() + self.limits.wait;
        let mut rows: usize = batch.iter().map(|(r, _)| r.len()).sum();
        while rows < self.limits.max_batch {
            let left = deadline.saturating_duration_since(Instant::now());
            let job = match inbox.recv_timeout(left) {
                Ok(job) => job,
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            };
            match job {
                Job::Generate { requests, reply }
                    if rows + requests.len() <= self.limits.max_batch =>
                {
                    rows += requests.len();
                    batch.push((requests, reply));
                }
                other => {
                    self.held = Some(other);
                    break;
                }
            }
        }
        batch
    }

    /// Generates every job of `batch` in one engine batch and answers each its own outputs.
    fn generate(&mut self, batch: Vec<GenerateJob>) {
        let all: Vec<GenerationRequest> = batch.iter().flat_map(|(r, _)| r.clone()).collect();
        let model = &self.pretrained;
        let started = Instant::now();
        let result = generate(&model.model, &model.tokenizer, &all, &mut self.rng);
        tracing::debug!(
            sequences = all.len(),
            requests = batch.len(),
            seconds = started.elapsed().as_secs_f64(),
            "generated a batch"
        );
        let version = self.version();
        match result {
            Ok(generations) => {
                let mut generations = generations.into_iter();
                for (requests, reply) in batch {
                    let mine: Vec<Generation> = generations.by_ref().take(requests.len()).collect();
                    let _ = reply.send(Ok((mine, version.clone())));
                }
            }
            Err(error) => {
                for (_, reply) in batch {
                    let _ = reply.send(Err(anyhow::anyhow!("generation failed: {error}")));
                }
            }
        }
    }

    fn version(&self) -> String {
        self.served
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .weight_version
            .clone()
    }

    /// Loads the HF folder `path` and serves it if it is the same model (shape and
    /// vocabulary); the old weights stay when anything fails.
    fn reload(&mut self, path: PathBuf, version: Option<String>) -> anyhow::Result<String> {
        let started = Instant::now();
        let fresh = load(&path, self.device, self.kind)?;
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
        let version = version.unwrap_or_else(|| self.version());
        self.pretrained = fresh;
        *self.served.write().unwrap_or_else(PoisonError::into_inner) =
            describe(&self.pretrained, &version);
        tracing::info!(
            "serving {} (weight version {version}), loaded in {:.2?}",
            path.display(),
            started.elapsed()
        );
        Ok(version)
    }
}

/// A generation job: its requests and where its answer goes.
type GenerateJob = (
    Vec<GenerationRequest>,
    Sender<anyhow::Result<(Vec<Generation>, String)>>,
);

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
    }
}
