//! `drmas-host train` cut short by SIGINT, by a second SIGINT, by a plugin error, a plugin call
//! that never returns and a plugin that crashes: the first signal, the error and the hang save the
//! last finished iteration and say so, `--resume` from what was saved ends bit for bit where an
//! uninterrupted run does, and a crash names the plugin, component and method it happened in.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

/// Iterations of the interrupted runs (saved only at the end, unless cut short).
const ITERATIONS: u32 = 5;
/// The worker group both agents train.
const GROUP: &str = "shared";
/// How long one process may take to reach the moment it is signalled at.
const PATIENCE: Duration = Duration::from_secs(90);

/// The run under test.
type Run = common::TrainRun;

/// What these tests do with a run beyond starting it.
trait CutShort {
    /// A run of `run_file` in the scratch folder `name`.
    fn named(name: &str, run_file: &str) -> Self;
    /// The checkpoint folder of `iteration`.
    fn checkpoint(&self, iteration: u32) -> PathBuf;
    fn run(&mut self) -> ExitStatus;
    /// Starts the run, waits until it has printed iteration `iteration`'s line (and `delay`
    /// more), then sends SIGINT `signals` times; returns the exit status and how long the
    /// process took to end after the first signal.
    fn interrupt_after(
        &mut self,
        iteration: u32,
        delay: Duration,
        signals: usize,
    ) -> (ExitStatus, Duration) {
        let line = format!("iteration {iteration:>3}/{ITERATIONS}");
        self.interrupt_at(&line, delay, signals)
    }
    /// Like [`CutShort::interrupt_after`], once the log holds `line`.
    fn interrupt_at(
        &mut self,
        line: &str,
        delay: Duration,
        signals: usize,
    ) -> (ExitStatus, Duration);
}

impl CutShort for Run {
    fn named(name: &str, run_file: &str) -> Self {
        Run::new(&format!("cut-short-{name}"), run_file)
    }

    fn checkpoint(&self, iteration: u32) -> PathBuf {
        self.out()
            .join("checkpoints")
            .join(format!("iteration_{iteration:05}"))
    }

    fn run(&mut self) -> ExitStatus {
        self.start().wait().expect("wait for drmas-host")
    }

    fn interrupt_at(
        &mut self,
        line: &str,
        delay: Duration,
        signals: usize,
    ) -> (ExitStatus, Duration) {
        let mut child = self.start();
        let started = Instant::now();
        while !self.last_log().contains(line) {
            if let Some(status) = child.try_wait().expect("poll drmas-host") {
                panic!("exited ({status}) before `{line}`:\n{}", self.last_log());
            }
            if started.elapsed() > PATIENCE {
                let _ = child.kill();
                panic!("no `{line}` in time:\n{}", self.last_log());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(delay);
        let pid = libc::pid_t::try_from(child.id()).expect("a pid");
        let signalled = Instant::now();
        for _ in 0..signals {
            // SAFETY: kill(2) on our own child, which has not been reaped yet.
            assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0, "kill");
            std::thread::sleep(Duration::from_millis(20));
        }
        let status = child.wait().expect("wait for drmas-host");
        (status, signalled.elapsed())
    }
}

/// The saved weights, optimizer moments and trainer state of `checkpoint`.
fn checkpoint_files(checkpoint: &Path) -> Vec<(String, Vec<u8>)> {
    [
        format!("{GROUP}/model.safetensors"),
        format!("{GROUP}/optimizer.safetensors"),
        "trainer_state.json".to_owned(),
    ]
    .into_iter()
    .map(|file| {
        let path = checkpoint.join(&file);
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        (file, bytes)
    })
    .collect()
}

/// Asserts the run in `run` ended where `reference` did: the same final checkpoint, metrics
/// (but timings) and samples.
fn assert_same_end(run: &Run, reference: &Run, iterations: u32) {
    assert!(
        checkpoint_files(&run.checkpoint(iterations))
            == checkpoint_files(&reference.checkpoint(iterations)),
        "the final checkpoints differ"
    );
    let ran = common::metrics(&run.out());
    let expected = common::metrics(&reference.out());
    assert_eq!(
        ran.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    for (iteration, line) in &ran {
        assert_eq!(
            common::deterministic(line),
            common::deterministic(&expected[iteration]),
            "metrics of iteration {iteration}"
        );
    }
    let samples = |run: &Run| {
        std::fs::read_to_string(run.out().join("samples.jsonl")).expect("samples.jsonl")
    };
    assert_eq!(samples(run), samples(reference), "samples.jsonl");
}

#[test]
fn sigint_saves_a_checkpoint_and_resume_ends_where_an_uninterrupted_run_does() {
    // With TensorBoard scalars and a decaying learning rate, which a resumed run continues.
    let run_file = common::pair_run_file(ITERATIONS, 0, "")
        .replace("[run]\n", "[run]\ntensorboard = true\n")
        + "\n[algorithm.loss]\nlr_schedule = \"cosine\"\nmin_lr_ratio = 0.1\n";
    let mut reference = Run::named("reference", &run_file);
    assert!(reference.run().success(), "{}", reference.last_log());
    let rates: Vec<f64> = common::metrics(&reference.out())
        .values()
        .filter_map(|line| line["lr/shared"].as_f64())
        .collect();
    assert_eq!(rates.len(), ITERATIONS as usize, "{rates:?}");
    assert_eq!(rates[0], 1e-3, "the first step at the peak");
    assert!(
        rates.windows(2).all(|pair| pair[1] < pair[0]) && rates[rates.len() - 1] > 1e-4,
        "a cosine decay towards 1e-4: {rates:?}"
    );

    let mut run = Run::named("sigint", &run_file);
    // Right after an iteration's line (its metrics and the next rollout), then a little later.
    for (iteration, delay) in [(1, Duration::ZERO), (3, Duration::from_millis(30))] {
        let (status, _) = run.interrupt_after(iteration, delay, 1);
        let log = run.last_log();
        assert_eq!(status.code(), Some(130), "{status}:\n{log}");
        assert!(log.contains("interrupted by SIGINT"), "{log}");
        assert!(
            log.contains("is saved in") && log.contains("drmas-host train --resume"),
            "no word on the checkpoint:\n{log}"
        );
        let saved = (iteration..=ITERATIONS)
            .rev()
            .find(|&i| run.checkpoint(i).is_dir())
            .unwrap_or_else(|| panic!("no checkpoint at or after {iteration}:\n{log}"));
        assert!(
            log.contains(&format!("Iteration {saved} is saved in")),
            "the message names another iteration than {saved}:\n{log}"
        );
    }
    let status = run.run();
    assert!(status.success(), "{status}:\n{}", run.last_log());
    assert_same_end(&run, &reference, ITERATIONS);
    // The resumed run's TensorBoard scalars are its metrics, each iteration once.
    let scalars = common::tensorboard_scalars(&run.out());
    let metrics = common::metrics(&run.out());
    assert_eq!(
        scalars.keys().collect::<Vec<_>>(),
        metrics.keys().collect::<Vec<_>>()
    );
    for (iteration, line) in &metrics {
        let numbers: std::collections::BTreeMap<String, f32> = line
            .as_object()
            .expect("an object")
            .iter()
            .filter(|(key, _)| key.as_str() != "iteration")
            .filter_map(|(key, value)| Some((key.clone(), value.as_f64()? as f32)))
            .collect();
        assert_eq!(
            scalars[iteration], numbers,
            "the scalars of iteration {iteration}"
        );
    }
}

#[test]
fn sigint_during_the_update_finishes_and_saves_that_iteration_and_resume_ends_where_an_uninterrupted_run_does(
) {
    // Four optimizer steps per iteration (two epochs of two mini-batches), the rate falling
    // linearly over all of them: the signal lands between steps of one update.
    let run_file = common::pair_run_file(ITERATIONS, 0, "")
        + "\n[algorithm.loss]\nmini_batches = 2\nppo_epochs = 2\nlr_schedule = \"linear\"\n";
    let mut reference = Run::named("update-reference", &run_file);
    assert!(reference.run().success(), "{}", reference.last_log());
    let rates: Vec<(u32, f64)> = common::metrics(&reference.out())
        .into_iter()
        .filter_map(|(iteration, line)| Some((iteration, line["lr/shared"].as_f64()?)))
        .collect();
    assert_eq!(rates.len(), ITERATIONS as usize, "{rates:?}");
    for (iteration, rate) in rates {
        // The iteration's first step is step 4(i − 1) + 1 of 4 × ITERATIONS.
        let expected = 1e-3 * (1.0 - f64::from(iteration - 1) / f64::from(ITERATIONS));
        assert!(
            (rate - expected).abs() < 1e-12,
            "iteration {iteration}: lr {rate}, expected {expected}"
        );
    }

    let mut run = Run::named("sigint-update", &run_file);
    run.log_filter = "warn,drmas_host::trainer=debug".to_owned();
    // The signal is sent as the update starts; should it land after it (the process was not
    // scheduled in time), the next iteration's update is tried, on the resumed run (a signal
    // landing in a rollout drops that iteration, which the resumed run then does again).
    let mut landed = None;
    for iteration in 1..ITERATIONS {
        let marker = format!("iteration {iteration}: updating the worker groups");
        let (status, _) = run.interrupt_at(&marker, Duration::ZERO, 1);
        let log = run.last_log();
        assert_eq!(status.code(), Some(130), "{status}:\n{log}");
        if log.contains(&format!(
            "SIGINT (Ctrl-C) came during the update of iteration {iteration}, \
             which was finished first. Iteration {iteration} is saved in"
        )) {
            assert!(run.checkpoint(iteration).is_dir(), "{log}");
            assert_eq!(
                common::metrics(&run.out()).keys().last(),
                Some(&iteration),
                "the finished iteration's metrics line is written"
            );
            landed = Some(iteration);
            break;
        }
    }
    assert!(
        landed.is_some(),
        "no signal landed in an update:\n{}",
        run.last_log()
    );
    let status = run.run();
    assert!(status.success(), "{status}:\n{}", run.last_log());
    assert_same_end(&run, &reference, ITERATIONS);
}

#[test]
fn an_evaluation_cut_short_is_done_by_the_resumed_run_and_joins_its_iterations_metrics() {
    // Evaluating `sigma` takes a second, so a signal after the last iteration's line lands in
    // the final evaluation.
    let run_file = common::pair_run_file(ITERATIONS, 0, "")
        .replace(
            "name = \"parity\"",
            "name = \"slow-parity\"\nparams = { sleep_ms = 1000 }",
        )
        .replace("\"alpha, beta\"", "\"alpha, sigma\"");
    let mut reference = Run::named("eval-reference", &run_file);
    assert!(reference.run().success(), "{}", reference.last_log());

    let mut run = Run::named("sigint-eval", &run_file);
    let (status, _) = run.interrupt_after(ITERATIONS, Duration::from_millis(100), 1);
    let log = run.last_log();
    assert_eq!(status.code(), Some(130), "{status}:\n{log}");
    assert!(
        log.contains(&format!("Iteration {ITERATIONS} is saved in")),
        "{log}"
    );
    let final_eval = |run: &Run| {
        run.out()
            .join(format!("eval/iteration_{ITERATIONS:05}.json"))
    };
    assert!(
        !final_eval(&run).exists(),
        "the signal did not cut the final evaluation short:\n{log}"
    );

    let status = run.run();
    let log = run.last_log();
    assert!(status.success(), "{status}:\n{log}");
    assert!(
        log.contains(&format!(
            "eval after iteration {ITERATIONS} (cut short before): avg@2"
        )),
        "{log}"
    );
    assert_eq!(
        std::fs::read(final_eval(&run)).expect("the redone evaluation"),
        std::fs::read(final_eval(&reference)).expect("the reference's evaluation")
    );
    assert_same_end(&run, &reference, ITERATIONS);
}

#[test]
fn a_second_sigint_stops_at_once_without_saving() {
    let mut run = Run::named("twice", &common::pair_run_file(ITERATIONS, 0, ""));
    let (status, took) = run.interrupt_after(1, Duration::ZERO, 2);
    let log = run.last_log();
    assert_eq!(status.code(), Some(130), "{status}:\n{log}");
    assert!(log.contains("second signal; stopping at once"), "{log}");
    assert!(took < Duration::from_secs(5), "took {took:?} to stop");
}

#[test]
fn an_error_after_the_first_iteration_saves_the_last_finished_one() {
    let (run, log) = run_failing_in_iteration_3("error", 0);
    assert!(log.contains("Iteration 2 is saved in"), "{log}");
    let mut reference = Run::named("error-reference", &common::pair_run_file(2, 0, ""));
    assert!(reference.run().success(), "{}", reference.last_log());
    assert!(
        checkpoint_files(&run.checkpoint(2)) == checkpoint_files(&reference.checkpoint(2)),
        "the checkpoint saved on the error is not the one a two-iteration run ends with"
    );
}

#[test]
fn a_run_that_saves_nothing_says_so_when_an_error_cuts_it_short() {
    let (run, log) = run_failing_in_iteration_3("error-unsaved", -1);
    assert!(
        log.contains(
            "Iteration 2 is not saved: the run file's `[run] save_every = -1` writes no \
             checkpoint."
        ),
        "{log}"
    );
    assert!(
        !run.out().join("checkpoints").exists(),
        "a checkpoint was written:\n{log}"
    );
}

/// Runs the four-iteration pair run, saving as `save_every` says, on an environment that fails
/// in iteration 3's rollout (4 evaluation episodes before training, then 8 per iteration: reset
/// 21 is iteration 3's); checks that it exits with status 1 naming the error and the dropped
/// iteration, and returns the run and its log.
fn run_failing_in_iteration_3(name: &str, save_every: i64) -> (Run, String) {
    let faulty = common::pair_run_file(4, save_every, "").replace(
        "name = \"parity\"",
        "name = \"faulty-parity\"\nparams = { after_resets = 20, fault = \"error\" }",
    );
    let mut run = Run::named(name, &faulty);
    let status = run.run();
    let log = run.last_log();
    assert_eq!(status.code(), Some(1), "{status}:\n{log}");
    assert!(
        log.contains("reset after 20 resets: asked to fail")
            && log.contains("iteration 3 was dropped (an error in its rollout). Iteration 2 is"),
        "{log}"
    );
    (run, log)
}

/// The two-agent run on the `faulty-parity` environment, which fails as `fault` says from reset
/// `after_resets + 1` on, with `[rollout] plugin_call_timeout_s = 1`.
fn faulty_run_file(iterations: u32, after_resets: u32, fault: &str) -> String {
    common::pair_run_file(iterations, 0, "")
        .replace(
            "name = \"parity\"",
            &format!(
                "name = \"faulty-parity\"\nparams = {{ after_resets = {after_resets}, fault = \"{fault}\" }}"
            ),
        )
        .replace("[rollout]\n", "[rollout]\nplugin_call_timeout_s = 1\n")
}

#[test]
fn a_plugin_call_that_never_returns_stops_the_run_naming_it_and_saves() {
    // 4 evaluation episodes, 8 in iteration 1: reset 13, iteration 2's first, never returns.
    let mut run = Run::named("hang", &faulty_run_file(3, 12, "hang"));
    let started = Instant::now();
    let status = run.run();
    let log = run.last_log();
    assert_eq!(status.code(), Some(1), "{status}:\n{log}");
    assert!(
        log.contains("environment `faulty-parity` of plugin `fixture` (")
            && log.contains("did not return from `reset` within 1 s"),
        "{log}"
    );
    assert!(
        log.contains("iteration 2 was dropped") && log.contains("Iteration 1 is saved in"),
        "{log}"
    );
    assert!(run.checkpoint(1).is_dir(), "no checkpoint:\n{log}");
    assert!(started.elapsed() < PATIENCE, "took {:?}", started.elapsed());
}

#[test]
fn a_plugin_that_crashes_is_named_before_the_process_dies() {
    // A fault's report names the address it faulted at: 0x0 for a write through null.
    for (fault, signal, name) in [
        ("abort", libc::SIGABRT, "SIGABRT"),
        ("null", libc::SIGSEGV, "SIGSEGV at address 0x0"),
    ] {
        let mut run = Run::named(&format!("crash-{fault}"), &faulty_run_file(1, 0, fault));
        let status = run.run();
        let log = run.last_log();
        assert_eq!(status.signal(), Some(signal), "{fault}: {status}:\n{log}");
        assert!(
            log.contains(&format!(
                "drmas-host: crashed ({name}) inside environment `faulty-parity` of plugin \
                 `fixture` ("
            )) && log.contains("libdrmas_fixture_plugin.so), method reset")
                && log.contains("run again with core dumps on (`ulimit -c unlimited`)"),
            "{fault}:\n{log}"
        );
    }
}
