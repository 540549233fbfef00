use std::fmt::Write;
use std::path::Path;

use super::chart::{Stroke, HEIGHT, WIDTH};
use super::figures::{self, AgentColors};
use super::plot_run;
use super::series::{MetricSeries, FILE_NAME};

/// Twelve iterations of a two-agent run on one shared worker group, evals every 4th.
fn sample_metrics() -> String {
    let mut text = String::new();
    for iteration in 0..12u32 {
        let t = f64::from(iteration);
        let _ = write!(
            text,
            "{{\"iteration\": {iteration}, \"reward/mean\": {}, \"reward/std\": 0.2, \
             \"grad_norm/group/shared\": {}, \"grad_norm/agent/solver\": {}, \
             \"grad_norm/agent/verifier\": {}, \"advantage/amplification/solver\": {}, \
             \"advantage/amplification/verifier\": 1.0, \"loss/clip_fraction\": 0.02, \
             \"invalid_rate/solver\": {}, \"invalid_rate/verifier\": 0.25, \
             \"truncated_rate/solver\": 0.125, \
             \"env/answered\": {}, \"env/turns\": 3.5, \
             \"time/rollout_s\": 31.2, \"unknown/thing\": null, \"note\": \"ok\"",
            0.1 + 0.05 * t,
            50.0 / (1.0 + t * t),
            40.0 / (1.0 + t * t),
            0.3 / (1.0 + t),
            1.0 + 0.02 * t,
            0.9 - 0.05 * t,
            0.05 * t,
        );
        if iteration % 4 == 3 {
            let _ = write!(
                text,
                ", \"eval/avg@4\": {}, \"eval/pass@4\": {}",
                0.2 + 0.04 * t,
                0.4 + 0.04 * t
            );
        }
        text.push_str("}\n");
    }
    text
}

fn run_dir(metrics: &str) -> tempfile::TempDir {
    let folder = tempfile::tempdir().expect("temp dir");
    std::fs::write(folder.path().join(FILE_NAME), metrics).expect("write metrics");
    folder
}

/// Checks the PNG signature and the IHDR size, then decodes it and returns its RGB pixels.
fn read_png(path: &Path) -> Vec<[u8; 3]> {
    let bytes = std::fs::read(path).expect("png written");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", path.display());
    assert_eq!(&bytes[12..16], b"IHDR");
    let width = u32::from_be_bytes(bytes[16..20].try_into().expect("4 bytes"));
    let height = u32::from_be_bytes(bytes[20..24].try_into().expect("4 bytes"));
    assert_eq!((width, height), (WIDTH, HEIGHT));
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .expect("png header");
    let mut buffer = vec![0; reader.output_buffer_size().expect("size")];
    let frame = reader.next_frame(&mut buffer).expect("png decodes");
    assert_eq!(frame.color_type, png::ColorType::Rgb);
    buffer[..frame.buffer_size()]
        .chunks_exact(3)
        .map(|pixel| [pixel[0], pixel[1], pixel[2]])
        .collect()
}

#[test]
fn a_run_gets_reward_grad_norm_amplification_and_format_charts() {
    let folder = run_dir(&sample_metrics());
    let written = plot_run(folder.path()).expect("plots");
    let names: Vec<String> = written
        .iter()
        .map(|path| {
            path.file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(
        names,
        [
            "reward.png",
            "grad_norm.png",
            "amplification.png",
            "format.png"
        ]
    );
    for path in &written {
        assert_eq!(path.parent(), Some(folder.path()));
        let pixels = read_png(path);
        assert_eq!(pixels.len(), (WIDTH * HEIGHT) as usize);
        // Drawn, not blank: a white background with dark text and coloured lines on it.
        let white = pixels.iter().filter(|p| **p == [255, 255, 255]).count();
        assert!(white > pixels.len() / 2, "{}", path.display());
        let dark = pixels.iter().filter(|p| p.iter().all(|c| *c < 80)).count();
        assert!(
            dark > 2_000,
            "{}: {dark} dark pixels (text, axes)",
            path.display()
        );
        // The first palette colour: the reward line, the solver's lines.
        let first = pixels.iter().filter(|p| **p == [31, 119, 180]).count();
        assert!(
            first > 500,
            "{}: {first} pixels of the first line",
            path.display()
        );
    }
}

#[test]
fn charts_show_what_the_metrics_have() {
    let metrics = MetricSeries::parse(&sample_metrics(), Path::new(FILE_NAME)).expect("parses");
    let colors = AgentColors::new(&metrics);

    let reward = figures::reward(&metrics);
    let labels: Vec<&str> = reward
        .lines
        .iter()
        .map(|line| line.label.as_str())
        .collect();
    assert_eq!(labels, ["reward (mean)", "eval avg@4", "eval pass@4"]);
    assert_eq!(reward.bands.len(), 1);
    assert_eq!(reward.bands[0].points[0], (0, 0.1 - 0.2, 0.1 + 0.2));
    assert_eq!(reward.lines[1].points.len(), 3, "evals only where measured");

    let grad = figures::grad_norm(&metrics, &colors);
    let labels: Vec<&str> = grad.lines.iter().map(|line| line.label.as_str()).collect();
    assert_eq!(labels, ["solver", "verifier", "group shared"]);
    assert!(
        grad.log_y(),
        "norms from 50 to 0.025 span more than two decades"
    );

    let amplification = figures::amplification(&metrics, &colors);
    assert_eq!(
        amplification.lines[0].color, grad.lines[0].color,
        "solver keeps its colour"
    );
    assert_eq!(amplification.lines[1].color, grad.lines[1].color);
    assert!(!amplification.log_y());

    // Each agent's invalid rate and cut-off share in its colour, and the environment's rates
    // (not `env/turns`, which is no share).
    let format = figures::format(&metrics, &colors);
    let labels: Vec<&str> = format
        .lines
        .iter()
        .map(|line| line.label.as_str())
        .collect();
    assert_eq!(
        labels,
        [
            "solver invalid",
            "verifier invalid",
            "solver cut off",
            "answered"
        ]
    );
    assert_eq!(format.lines[0].color, grad.lines[0].color);
    assert_eq!(format.lines[1].color, grad.lines[1].color);
    // The cut-off share in the agent's colour, dashed.
    assert_eq!(format.lines[2].color, grad.lines[0].color);
    assert_eq!(format.lines[2].stroke, Stroke::Dashed);
    assert_eq!(format.lines[2].points[5], (5, 0.125));
    assert_eq!(format.lines[0].points[2], (2, 0.8));
    assert!(!format.log_y());
}

#[test]
fn narrow_grad_norms_stay_linear_and_no_amplification_means_no_chart() {
    let folder = run_dir(
        "{\"iteration\": 0, \"reward/mean\": 0.2, \"grad_norm/agent/solver\": 1.5}\n\
         {\"iteration\": 1, \"reward/mean\": 0.3, \"grad_norm/agent/solver\": 0.9}\n",
    );
    let metrics = MetricSeries::read_run(folder.path()).expect("reads");
    assert!(!figures::grad_norm(&metrics, &AgentColors::new(&metrics)).log_y());
    let written = plot_run(folder.path()).expect("plots");
    assert_eq!(
        written,
        [
            folder.path().join("reward.png"),
            folder.path().join("grad_norm.png")
        ]
    );
    assert!(!folder.path().join("amplification.png").exists());
}

#[test]
fn a_kl_chart_shows_the_kl_in_the_reward_and_a_nonzero_loss_term_only() {
    let lines = |extra: &str| {
        (0..3)
            .map(|i| {
                format!(
                    "{{\"iteration\": {i}, \"reward/mean\": 0.2, \"grad_norm/agent/solver\": 1.5, \
                     \"grad_norm/agent/verifier\": 1.0, \"loss/kl/shared\": 0.0{extra}}}\n"
                )
            })
            .collect::<String>()
    };
    // No KL anywhere (the loss's term logged as 0): no chart.
    let folder = run_dir(&lines(""));
    let written = plot_run(folder.path()).expect("plots");
    assert!(
        !written.contains(&folder.path().join("kl.png")),
        "{written:?}"
    );
    // The KL in the reward, per agent, in each agent's colour.
    let text = lines(", \"kl_in_reward/kl/solver\": 0.01, \"kl_in_reward/kl/verifier\": 0.03");
    let metrics = MetricSeries::parse(&text, Path::new(FILE_NAME)).expect("parses");
    let colors = AgentColors::new(&metrics);
    let kl = figures::kl(&metrics, &colors);
    let labels: Vec<&str> = kl.lines.iter().map(|line| line.label.as_str()).collect();
    assert_eq!(labels, ["solver", "verifier"]);
    assert_eq!(kl.lines[1].color, colors.agent("verifier"));
    assert_eq!(kl.lines[1].points[2], (2, 0.03));
    let folder = run_dir(&text);
    let written = plot_run(folder.path()).expect("plots");
    read_png(&folder.path().join("kl.png"));
    assert!(written.contains(&folder.path().join("kl.png")));
    // A loss term that is not 0 is a dashed line of its group.
    let text = lines("").replace("\"loss/kl/shared\": 0.0", "\"loss/kl/shared\": 0.002");
    let metrics = MetricSeries::parse(&text, Path::new(FILE_NAME)).expect("parses");
    let kl = figures::kl(&metrics, &AgentColors::new(&metrics));
    assert_eq!(kl.lines.len(), 1);
    assert_eq!(kl.lines[0].label, "loss shared");
    assert_eq!(kl.lines[0].stroke, Stroke::Dashed);
}

#[test]
fn a_single_iteration_still_plots() {
    let folder = run_dir("{\"iteration\": 0, \"reward/mean\": 0.5, \"grad_norm/agent/a\": 0}\n");
    let written = plot_run(folder.path()).expect("plots");
    assert_eq!(written.len(), 2);
    for path in &written {
        read_png(path);
    }
}

#[test]
fn a_missing_metrics_file_names_the_path_and_says_to_train_first() {
    let folder = tempfile::tempdir().expect("temp dir");
    let error = format!("{:#}", plot_run(folder.path()).expect_err("no metrics"));
    let path = folder.path().join(FILE_NAME);
    assert!(error.contains(&path.display().to_string()), "{error}");
    assert!(error.contains("train"), "{error}");
}

#[test]
fn a_malformed_middle_line_is_an_error_naming_its_line() {
    let mut text = sample_metrics();
    text.insert_str(
        0,
        "{\"iteration\": -1, \"reward/mean\": 0.1}\n{\"iteration\": 0, \"rew\n",
    );
    let folder = run_dir(&text);
    let error = format!("{:#}", plot_run(folder.path()).expect_err("malformed"));
    let expected = format!("{}:2", folder.path().join(FILE_NAME).display());
    assert!(error.contains(&expected), "{error}");
}

#[test]
fn a_truncated_last_line_is_skipped() {
    let mut text = sample_metrics();
    text.push_str("{\"iteration\": 12, \"reward/mean\": 0.7, \"grad_no");
    let folder = run_dir(&text);
    let metrics = MetricSeries::read_run(folder.path()).expect("tolerated");
    assert_eq!(metrics.lines(), 12);
    assert_eq!(metrics.skipped_last_line(), Some(13));
    assert_eq!(plot_run(folder.path()).expect("plots").len(), 4);
}

#[test]
fn nothing_plottable_is_an_error_listing_the_keys_found() {
    let folder = run_dir("{\"iteration\": 0, \"time/rollout_s\": 3}\n");
    let error = format!(
        "{:#}",
        plot_run(folder.path()).expect_err("nothing to plot")
    );
    assert!(error.contains("time/rollout_s"), "{error}");
    assert!(error.contains("reward/mean"), "{error}");

    let folder = run_dir("\n");
    let error = format!("{:#}", plot_run(folder.path()).expect_err("empty"));
    assert!(error.contains("no complete iteration"), "{error}");
}

#[test]
fn the_plot_subcommand_takes_a_run_folder() {
    use clap::Parser;
    let cli = crate::cli::Cli::try_parse_from(["drmas-host", "plot", "runs/demo"]).expect("parses");
    assert_eq!(
        cli.command,
        Some(crate::cli::Command::Plot {
            run_dir: "runs/demo".into()
        })
    );
    assert!(crate::cli::Cli::try_parse_from(["drmas-host", "plot"]).is_err());
}

/// A run's metrics may hold any finite number (a plugin's reward of 1e308, a gradient norm
/// near f32's largest, a subnormal): every chart still draws, in bounded time — `train` plots
/// at its end, so a chart that never finished would keep the run from ending.
#[test]
fn metrics_of_extreme_numbers_plot_every_chart_in_bounded_time() {
    let extremes = [
        1e308,
        -1.7976931348623157e308,
        5e-324,
        0.0,
        3.4e38,
        1.0,
        2.2250738585072014e-308,
        -5e-324,
    ];
    let mut text = String::new();
    for (iteration, value) in extremes.iter().enumerate() {
        let mut line = format!("{{\"iteration\": {iteration}");
        for key in [
            "reward/mean",
            "reward/std",
            "grad_norm/group/shared",
            "grad_norm/agent/solver",
            "advantage/amplification/solver",
            "invalid_rate/solver",
            "eval/avg@4",
            "eval/pass@4",
            "kl_in_reward/kl/solver",
            "loss/kl/shared",
        ] {
            let _ = write!(line, ", \"{key}\": {value:e}");
        }
        text.push_str(&line);
        text.push_str("}\n");
    }
    let folder = run_dir(&text);
    let path = folder.path().to_owned();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let written = plot_run(&path).expect("plots");
        done.send(written).expect("the test waits");
    });
    let written = finished
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("every chart written within a minute");
    assert_eq!(written.len(), 5, "{written:?}");
    for path in &written {
        read_png(path);
    }
}
