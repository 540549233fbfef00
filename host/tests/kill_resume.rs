//! `drmas-host train` killed with SIGKILL at a series of moments — inside a checkpoint save (while
//! its `.partial` staging folder exists), right after a checkpoint lands, between an iteration's
//! metrics line and its save, and in the middle of an iteration — and resumed with `--resume`
//! each time: no kill leaves a checkpoint folder that is not complete and loadable, no resume
//! loses more than one iteration, and the run ends bit for bit where an uninterrupted one does,
//! with one metrics line per iteration.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Iterations of the run; every one is checkpointed.
const ITERATIONS: u32 = 6;
/// The worker group both agents train.
const GROUP: &str = "shared";
/// How long one process may take to reach the moment it is killed at.
const PATIENCE: Duration = Duration::from_secs(60);

/// A two-agent run on one worker group (tiny random Llama), checkpointed every iteration.
fn run_file() -> String {
    common::pair_run_file(ITERATIONS, 1, "")
}

/// The run under test.
type Run = common::TrainRun;

/// A run of [`run_file`] in the scratch folder `name`.
fn new_run(name: &str) -> Run {
    Run::new(&format!("kill-resume-{name}"), &run_file())
}

/// The checkpoints folder of `run`.
fn checkpoints(run: &Run) -> PathBuf {
    run.out().join("checkpoints")
}

/// Runs `run` to the end; fails the test unless the process succeeds.
fn finish(run: &mut Run) {
    let status = run.start().wait().expect("wait for drmas-host");
    assert!(status.success(), "{status}:\n{}", run.last_log());
}

/// Where a run is killed.
#[derive(Debug, Clone, Copy)]
enum Moment {
    /// As soon as the staging folder of this iteration's checkpoint exists: inside the save.
    Saving(u32),
    /// As soon as this iteration's checkpoint folder exists: right after the rename.
    Saved(u32),
    /// This long after the run prints this iteration's progress line (just before its metrics
    /// line and its save).
    AfterLine(u32, Duration),
}

/// Whether `moment` has come in the run folder `run`.
fn reached(run: &Run, moment: Moment) -> bool {
    let checkpoint = |i: u32| checkpoints(run).join(format!("iteration_{i:05}"));
    match moment {
        Moment::Saving(i) => {
            checkpoints(run).join(format!(".iteration_{i:05}.partial")).exists()
                // Missed: the save already finished. Kill now all the same.
                || checkpoint(i).exists()
        }
        Moment::Saved(i) => checkpoint(i).exists(),
        // (Or a later one, should a slow poll have let this start resume past iteration `i`.)
        Moment::AfterLine(i, _) => {
            let log = run.last_log();
            (i..=ITERATIONS).any(|j| log.contains(&format!("iteration {j:>3}/{ITERATIONS}")))
        }
    }
}

/// A child process that a failing test does not leave running.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the run and SIGKILLs it at `moment`; returns whether the kill hit inside a save (a
/// staging folder was left behind).
fn kill_at(run: &mut Run, moment: Moment) -> bool {
    let mut child = KillOnDrop(run.start());
    let child = &mut child.0;
    let started = Instant::now();
    while !reached(run, moment) {
        if let Some(status) = child.try_wait().expect("poll drmas-host") {
            panic!("exited ({status}) before {moment:?}:\n{}", run.last_log());
        }
        assert!(
            started.elapsed() < PATIENCE,
            "{moment:?} did not come:\n{}",
            run.last_log()
        );
        std::thread::yield_now();
    }
    if let Moment::AfterLine(_, delay) = moment {
        std::thread::sleep(delay);
    }
    child.kill().expect("SIGKILL");
    let status: ExitStatus = child.wait().expect("reap drmas-host");
    assert!(
        !status.success(),
        "{moment:?}: the run ended before the kill"
    );
    staging_folders(&checkpoints(run)) > 0
}

/// Staging folders of unfinished saves (`.iteration_NNNNN.partial`) under `root`.
fn staging_folders(root: &Path) -> usize {
    unfinished(root, ".partial")
}

/// Folders under `root` named `.iteration_NNNNN{suffix}`.
fn unfinished(root: &Path, suffix: &str) -> usize {
    std::fs::read_dir(root).map_or(0, |entries| {
        entries
            .filter_map(Result::ok)
            .filter(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.starts_with(".iteration_") && name.ends_with(suffix)
            })
            .count()
    })
}

/// Asserts every entry of `root` is either a staging folder or a complete, loadable checkpoint
/// whose state names its own iteration; returns the newest checkpoint's iteration.
fn check_checkpoints(root: &Path) -> Option<u32> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return None;
    };
    let mut newest = None;
    for entry in entries {
        let path = entry.expect("a folder entry").path();
        let name = path
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        // A save in progress, or an old checkpoint being deleted: never read as a checkpoint.
        if name.starts_with(".iteration_")
            && (name.ends_with(".partial") || name.ends_with(".deleting"))
        {
            continue;
        }
        let iteration: u32 = name
            .strip_prefix("iteration_")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("unexpected entry {}", path.display()));
        let state: Value = serde_json::from_slice(
            &std::fs::read(path.join("trainer_state.json"))
                .unwrap_or_else(|e| panic!("{}: no trainer state: {e}", path.display())),
        )
        .unwrap_or_else(|e| panic!("{}: a torn trainer state: {e}", path.display()));
        assert_eq!(state["iteration"], iteration, "{}", path.display());
        for file in ["model.safetensors", "optimizer.safetensors"] {
            let file = path.join(GROUP).join(file);
            let tensors = tch::Tensor::read_safetensors(&file)
                .unwrap_or_else(|e| panic!("{}: unreadable: {e}", file.display()));
            assert!(!tensors.is_empty(), "{}: no tensors", file.display());
        }
        assert!(path.join(GROUP).join("config.json").is_file());
        newest = newest.max(Some(iteration));
    }
    newest
}

fn final_files(run: &Run) -> Vec<(String, Vec<u8>)> {
    let end = checkpoints(run).join(format!("iteration_{ITERATIONS:05}"));
    ["model.safetensors", "optimizer.safetensors"]
        .into_iter()
        .map(|file| {
            let path = end.join(GROUP).join(file);
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (file.to_owned(), bytes)
        })
        .collect()
}

#[test]
fn a_run_killed_in_training_and_in_saves_resumes_to_the_same_end() {
    let started = Instant::now();
    let mut reference = new_run("reference");
    finish(&mut reference);
    let reference_metrics = common::metrics(&reference.out());
    let took = started.elapsed();

    let mut run = new_run("killed");
    let moments = [
        Moment::Saving(1),
        Moment::Saved(2),
        Moment::AfterLine(3, Duration::ZERO),
        Moment::Saving(4),
        Moment::AfterLine(5, Duration::from_millis(40)),
        Moment::Saving(6),
    ];
    let mut in_saves = 0;
    let mut report = Vec::new();
    let mut expected = Vec::new();
    for moment in moments {
        in_saves += usize::from(kill_at(&mut run, moment));
        let newest = check_checkpoints(&checkpoints(&run));
        let written = common::metrics(&run.out()).keys().copied().max();
        let lost = written.unwrap_or(0).saturating_sub(newest.unwrap_or(0));
        report.push(format!(
            "{moment:?}: metrics to {written:?}, checkpoint {newest:?}, staging {}",
            staging_folders(&checkpoints(&run))
        ));
        assert!(
            lost <= 1,
            "{moment:?}: {lost} iterations lost (metrics to {written:?}, checkpoint {newest:?})"
        );
        expected.push(match newest {
            Some(i) => format!("resuming after iteration {i}"),
            None => "no checkpoint to resume from".to_owned(),
        });
    }
    finish(&mut run);
    // Each start after a kill resumed from exactly the newest complete checkpoint.
    for (index, line) in expected.iter().enumerate() {
        let log = std::fs::read_to_string(run.log(index + 2)).expect("a log");
        assert!(
            log.contains(line),
            "start {}: no `{line}`:\n{log}",
            index + 2
        );
    }
    eprintln!(
        "reference run {took:.1?}; kills:\n  {}\n{in_saves} of {} kills hit inside a save; \
         total {:.1?}",
        report.join("\n  "),
        moments.len(),
        started.elapsed()
    );

    assert!(in_saves > 0, "no kill landed inside a save");
    assert_eq!(
        check_checkpoints(&checkpoints(&run)),
        Some(ITERATIONS),
        "the last checkpoint"
    );
    assert_eq!(
        unfinished(&checkpoints(&run), ""),
        0,
        "a resumed run cleans up what the kills left"
    );
    assert!(
        final_files(&run) == final_files(&reference),
        "the resumed run's final weights or optimizer differ from the uninterrupted run's"
    );
    let resumed_metrics = common::metrics(&run.out());
    let iterations: Vec<u32> = resumed_metrics.keys().copied().collect();
    assert_eq!(iterations, (0..=ITERATIONS).collect::<Vec<_>>());
    for (iteration, line) in &resumed_metrics {
        assert_eq!(
            common::deterministic(line),
            common::deterministic(&reference_metrics[iteration]),
            "metrics of iteration {iteration}"
        );
    }
    let samples = |run: &Run| {
        std::fs::read_to_string(run.out().join("samples.jsonl")).expect("samples.jsonl")
    };
    assert_eq!(samples(&run), samples(&reference), "samples.jsonl");
}
