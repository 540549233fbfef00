//! The search environment's HTTP retriever going away during a training run: a server restarted
//! within `retry_for_secs` only pauses the run, which ends exactly where an uninterrupted one
//! does; a server that stays down stops the run with an error naming its URL, the last finished
//! iteration saved. The server is the search plugin's real one over BM25 on the bundled NQ
//! corpus; the plugin is its real library.

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use drmas_host::config::RunConfig;
use drmas_host::plugins::{BuildProfile, ExternalLinks, Registry};
use drmas_host::trainer::{TrainSummary, Trainer};
use drmas_search::retriever::bm25::{Bm25Options, Bm25Retriever};
use drmas_search::retriever::{Hit, Retriever, RetrieverError};
use drmas_search::server::{RetrievalServer, ServerConfig, ServerError, ServerHandle};
use serde_json::Value;

/// How long the restarted server stays away: several of the client's retries.
const OUTAGE: Duration = Duration::from_secs(2);

/// BM25 that counts the searches it answers and tells `notify` when it answers the
/// `notify_at`-th.
struct Counting {
    bm25: Arc<Bm25Retriever>,
    searches: AtomicUsize,
    notify_at: usize,
    notify: Mutex<Option<Sender<()>>>,
}

impl Counting {
    fn new(bm25: &Arc<Bm25Retriever>, notify_at: usize, notify: Option<Sender<()>>) -> Self {
        Self {
            bm25: bm25.clone(),
            searches: AtomicUsize::new(0),
            notify_at,
            notify: Mutex::new(notify),
        }
    }
}

impl Retriever for Counting {
    fn search(&self, queries: &[String], top_k: usize) -> Result<Vec<Vec<Hit>>, RetrieverError> {
        let hits = self.bm25.search(queries, top_k);
        if self.searches.fetch_add(1, Ordering::SeqCst) + 1 == self.notify_at {
            if let Some(notify) = self.notify.lock().expect("lock").take() {
                let _ = notify.send(());
            }
        }
        hits
    }
}

/// A retrieval server on `port`, stopped (once its requests in progress are answered) on drop.
struct Running {
    retriever: Arc<Counting>,
    handle: ServerHandle,
    thread: Option<JoinHandle<Result<(), ServerError>>>,
}

impl Running {
    fn start(port: u16, retriever: Counting) -> Self {
        let retriever = Arc::new(retriever);
        let server = RetrievalServer::bind(
            &format!("127.0.0.1:{port}"),
            retriever.clone(),
            ServerConfig::default(),
        )
        .expect("bind the retrieval server");
        let handle = server.handle();
        let thread = Some(std::thread::spawn(move || server.run()));
        Self {
            retriever,
            handle,
            thread,
        }
    }

    fn searches(&self) -> usize {
        self.retriever.searches.load(Ordering::SeqCst)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.handle.stop();
        if let Some(thread) = self.thread.take() {
            thread
                .join()
                .expect("server thread")
                .expect("the server served");
        }
    }
}

/// A loopback port nobody listens on.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// A listener on `port`, bound as soon as the stopped server's accept thread lets it go.
fn hold(port: u16) -> TcpListener {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpListener::bind(("127.0.0.1", port)) {
            Ok(listener) => return listener,
            Err(_) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(error) => panic!("hold port {port}: {error}"),
        }
    }
}

/// A search run on the tiny random Llama against the HTTP retriever on `port`, `iterations`
/// long, saved only at the end (or when cut short).
fn run_file(port: u16, iterations: u32, retry_for_secs: f64) -> String {
    let repo = common::repo();
    format!(
        r#"
[run]
output_dir = "run"
seed = 3
iterations = {iterations}
save_every = 0
eval_every = 0

[environment]
name = "search"
train_data = {{ path = "{questions}", split = "train", limit = 40 }}

[environment.params]
top_k = 2
max_turns = 2
retriever = {{ kind = "http", url = "http://127.0.0.1:{port}", timeout_secs = 5, retry_for_secs = {retry_for_secs} }}

[orchestra]
name = "search"
params = {{ max_turns = 2 }}

[[agents]]
role = "verifier"
agent = "Search Verifier Agent"
worker_group = "shared"
max_new_tokens = 4
# The random model never writes a verdict: count that as "not enough yet", so each episode searches.
params = {{ unparseable = "no" }}

[[agents]]
role = "search"
agent = "Search Agent"
worker_group = "shared"
max_new_tokens = 6

[[agents]]
role = "answer"
agent = "Answer Agent"
worker_group = "shared"
max_new_tokens = 6

[worker_groups.shared]
model = "{model}"
learning_rate = 1e-3
micro_batch_size = 4

[algorithm]
estimator = "drmas"

[rollout]
prompts_per_batch = 2
group_size = 2
max_response_tokens = 8
# The tiny model has 512 positions; passages make long prompts.
max_prompt_tokens = 400
"#,
        questions = repo.join("data/nq/questions.jsonl").display(),
        model = repo.join("host/tests/fixtures/hf/llama").display(),
    )
}

/// The search plugin's library, built as users' `--plugins` folders are.
fn search_plugin() -> &'static Registry {
    static REGISTRY: std::sync::OnceLock<Registry> = std::sync::OnceLock::new();
    REGISTRY.get_or_init(|| {
        Registry::load_folder(
            &common::repo().join("plugins/search"),
            BuildProfile::Dev,
            ExternalLinks::Refuse,
        )
        .expect("build and load the search plugin")
    })
}

/// Trains `text` in the scratch folder `dir`.
fn train(dir: &Path, text: &str) -> anyhow::Result<TrainSummary> {
    let path = dir.join("run.toml");
    std::fs::write(&path, text)?;
    let (config, file) = RunConfig::load(&path)?;
    let plan = drmas_host::preflight::prepare(&config, &file, search_plugin())?;
    Trainer::new(config, &file, plan)?.train()
}

/// The metrics of each iteration but timings (which an outage changes).
fn metrics(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("run/metrics.jsonl"))
        .expect("metrics.jsonl")
        .lines()
        .map(|line| {
            let mut value: Value = serde_json::from_str(line).expect("a JSON line");
            let object = value.as_object_mut().expect("an object");
            object.retain(|key, _| !key.starts_with("time/") && !key.starts_with("tokens_per_s/"));
            value
        })
        .collect()
}

fn checkpoint(dir: &Path, iteration: u32) -> PathBuf {
    dir.join("run/checkpoints")
        .join(format!("iteration_{iteration:05}"))
}

fn weights(dir: &Path, iteration: u32) -> Vec<u8> {
    std::fs::read(checkpoint(dir, iteration).join("shared/model.safetensors"))
        .expect("checkpoint weights")
}

/// The NQ index, built once per test process.
fn bm25() -> Arc<Bm25Retriever> {
    let index = common::scratch(&format!("outage-index-{}", std::process::id()));
    Arc::new(
        Bm25Retriever::open_or_build(
            &common::repo().join("data/nq/corpus.jsonl"),
            &index,
            &Bm25Options {
                threads: 1,
                ..Bm25Options::default()
            },
            &|_| {},
        )
        .expect("index the NQ corpus"),
    )
}

/// Searches a run of `iterations` makes against an undisturbed server (the probe included),
/// with that run's folder.
fn undisturbed(bm25: &Arc<Bm25Retriever>, name: &str, iterations: u32) -> (usize, PathBuf) {
    let port = free_port();
    let server = Running::start(port, Counting::new(bm25, 0, None));
    let dir = common::scratch(&format!("{name}-{}", std::process::id()));
    train(&dir, &run_file(port, iterations, 60.0)).expect("an undisturbed run");
    (server.searches(), dir)
}

#[test]
fn a_retriever_restarted_mid_run_only_pauses_it_and_one_that_stays_down_stops_it_saved() {
    let bm25 = bm25();
    let (first_iteration, one) = undisturbed(&bm25, "outage-one", 1);
    let (both, reference) = undisturbed(&bm25, "outage-reference", 2);
    assert!(
        both > first_iteration && first_iteration > 0,
        "both iterations search ({first_iteration} of {both} searches are the first's)"
    );

    // Down after iteration 1's last search; iteration 2's first try is let in and cut off (so
    // the run surely meets the outage), the port then refuses for OUTAGE, and the server comes
    // back on it.
    let port = free_port();
    let (went_down, down) = channel();
    let first = Running::start(port, Counting::new(&bm25, first_iteration, Some(went_down)));
    let restarter = std::thread::spawn({
        let bm25 = bm25.clone();
        move || {
            down.recv().ok()?;
            drop(first);
            let stopped = Instant::now();
            let listener = hold(port);
            drop(listener.accept().expect("iteration 2's first try"));
            drop(listener);
            std::thread::sleep(OUTAGE);
            Some((Running::start(port, Counting::new(&bm25, 0, None)), stopped))
        }
    });
    let dir = common::scratch(&format!("outage-restarted-{}", std::process::id()));
    let summary = train(&dir, &run_file(port, 2, 60.0)).expect("the run waits for the server");
    let (second, stopped) = restarter
        .join()
        .expect("restarter")
        .expect("the server went down during the run");
    assert!(
        second.searches() > 0,
        "the run searched the restarted server (down {:?} ago)",
        stopped.elapsed()
    );
    assert_eq!(summary.iterations, 2);
    assert_eq!(metrics(&dir), metrics(&reference), "metrics differ");
    assert!(
        weights(&dir, 2) == weights(&reference, 2),
        "the final weights differ"
    );
    drop(second);

    // Down after iteration 1's last search for good: the run gives up after retry_for_secs.
    let port = free_port();
    let (went_down, down) = channel();
    let server = Running::start(port, Counting::new(&bm25, first_iteration, Some(went_down)));
    let stopper = std::thread::spawn(move || {
        if down.recv().is_ok() {
            drop(server);
        }
    });
    let dir = common::scratch(&format!("outage-down-{}", std::process::id()));
    let error = train(&dir, &run_file(port, 3, 1.0)).expect_err("the server stays down");
    stopper.join().expect("stopper");
    let message = format!("{error:#}");
    assert!(
        message.contains(&format!(
            "cannot reach retriever at http://127.0.0.1:{port}/retrieve"
        )),
        "{message}"
    );
    assert!(
        checkpoint(&dir, 1).is_dir(),
        "iteration 1 is saved: {message}"
    );
    assert!(!checkpoint(&dir, 2).exists(), "iteration 2 did not finish");
    assert!(
        weights(&dir, 1) == weights(&one, 1),
        "the saved iteration is the one an uninterrupted one-iteration run ends with"
    );
}
