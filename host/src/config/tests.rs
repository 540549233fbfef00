use super::*;

const VALID: &str = r#"
[run]
output_dir = "runs/test"
iterations = 2

[environment]
name = "math"
train_data = { path = "builtin:arithmetic", split = "train" }

[orchestra]
name = "math"
params = { max_loops = 2 }

[[agents]]
role = "solver"
agent = "Solver Agent"
worker_group = "shared"

[[agents]]
role = "verifier"
agent = "Verifier Agent"
worker_group = "shared"
temperature = 0.7

[worker_groups.shared]
model = "builtin:smollm2-135m"
device = "cuda:1"
dtype = "bf16"

[algorithm]
estimator = "grpo"
params = { norm_by_std = false }
"#;

fn parse(text: &str) -> Result<RunConfig, ConfigError> {
    RunConfig::parse(&RunFile::from_text("run.toml", text, PathBuf::from(".")))
}

fn error(text: &str) -> String {
    parse(text)
        .expect_err("the config should be rejected")
        .to_string()
}

#[test]
fn a_valid_file_parses_with_defaults_filled_in() {
    let config = parse(VALID).expect("valid config");
    assert_eq!(config.agents.len(), 2);
    assert_eq!(config.agents[1].temperature, Some(0.7));
    let group = &config.worker_groups["shared"];
    assert_eq!(group.device, Device::Cuda(1));
    assert_eq!(group.dtype, Dtype::Bf16);
    assert_eq!(group.micro_batch_size, 8);
    assert_eq!(config.algorithm.estimator.get_ref(), "grpo");
    assert_eq!(
        config.algorithm.params["norm_by_std"].as_bool(),
        Some(false)
    );
    assert_eq!(
        config.algorithm.loss.aggregation,
        LossAggregation::TokenMean
    );
    assert_eq!(config.rollout.group_size, 4);
}

#[test]
fn an_unknown_key_names_line_column_and_the_accepted_keys() {
    let text = VALID.replace("iterations = 2", "iterations = 2\nitertions = 3");
    let message = error(&text);
    assert!(message.starts_with("run.toml: "), "{message}");
    assert!(message.contains("line 5, column 1"), "{message}");
    assert!(message.contains("unknown field `itertions`"), "{message}");
    assert!(message.contains("`iterations`"), "{message}");
}

#[test]
fn a_wrong_type_names_line_and_column() {
    let message = error(&VALID.replace("iterations = 2", "iterations = \"two\""));
    assert!(message.contains("line 4, column 14"), "{message}");
    assert!(
        message.contains("invalid type: string \"two\", expected u32"),
        "{message}"
    );
}

#[test]
fn a_missing_required_field_is_named() {
    let message = error(&VALID.replace("iterations = 2\n", ""));
    assert!(message.contains("missing field `iterations`"), "{message}");
    assert!(message.contains("line 2, column 1"), "{message}");
}

#[test]
fn enum_like_fields_list_the_accepted_values() {
    let message = error(&VALID.replace("dtype = \"bf16\"", "dtype = \"f64\""));
    assert!(
        message.contains("unknown variant `f64`, expected one of `f32`, `bf16`, `f16`"),
        "{message}"
    );
    assert!(message.contains("line 28, column 9"), "{message}");

    let message = error(&VALID.replace("cuda:1", "gpu"));
    assert!(
        message.contains("unknown device `gpu`, expected `cpu` or `cuda:N`"),
        "{message}"
    );

    let text = format!("{VALID}\n[algorithm.loss]\naggregation = \"mean\"\n");
    let message = error(&text);
    assert!(
        message.contains("expected one of `token-mean`, `seq-mean-token-sum`"),
        "{message}"
    );
}

#[test]
fn an_undefined_worker_group_points_at_the_reference() {
    let message = error(&VALID.replace(
        "worker_group = \"shared\"\ntemperature",
        "worker_group = \"big\"\ntemperature",
    ));
    assert!(message.starts_with("run.toml:22:16: "), "{message}");
    assert!(
        message.contains("worker group `big`, which is not defined; defined: [shared]"),
        "{message}"
    );
}

#[test]
fn a_role_filled_twice_names_both_lines() {
    let message = error(&VALID.replace("role = \"verifier\"", "role = \"solver\""));
    assert!(message.starts_with("run.toml:20:8: "), "{message}");
    assert!(
        message.contains("role `solver` is filled twice (first at line 15)"),
        "{message}"
    );
}

#[test]
fn malformed_toml_is_located() {
    let message = error("[run\noutput_dir = 1");
    assert!(message.contains("line 1, column 5"), "{message}");
}

#[test]
fn an_unreadable_file_names_the_path() {
    let message = RunConfig::load(Path::new("/nonexistent/run.toml"))
        .expect_err("missing file")
        .to_string();
    assert!(
        message.contains("cannot read run file /nonexistent/run.toml"),
        "{message}"
    );
}

#[test]
fn every_number_out_of_range_is_named_with_its_line() {
    let text = VALID
        .replace("iterations = 2", "iterations = 2\nseed = 1")
        .replace(
            "temperature = 0.7",
            "temperature = nan\ntop_p = 0\nlearning_rate = -1e-6",
        )
        .replace("dtype = \"bf16\"", "dtype = \"bf16\"\nlearning_rate = 10")
        + "\n[algorithm.loss]\nweight_decay = nan\ndual_clip = 0.5\n\n[rollout]\ngroup_size = 0\n\
           temperature = 1e-40\n";
    let message = error(&text);
    let lines: Vec<&str> = message.lines().collect();
    let expected = [
        "run.toml:26:17: [[agents]] role `verifier`: learning_rate = -0.000001 must be a number in \
         (0, 1] (AdamW moves each weight by about the learning rate per step; LLM fine-tuning \
         uses 1e-7 to 1e-3)",
        "run.toml:24:15: [[agents]] role `verifier`: temperature = NaN must be 0 (greedy) or a \
         finite number ≥ 1e-6 (the logits are divided by it: closer to 0 they overflow, and every \
         update would be skipped as non-finite)",
        "run.toml:25:9: [[agents]] role `verifier`: top_p = 0 must be a number in (0, 1]",
        "run.toml:32:17: [worker_groups.shared] learning_rate = 10 must be a number in (0, 1] \
         (AdamW moves each weight by about the learning rate per step; LLM fine-tuning uses 1e-7 \
         to 1e-3)",
        "run.toml:40:13: [algorithm.loss] dual_clip = 0.5 must be 0 (off) or a finite number > 1",
        "run.toml:39:16: [algorithm.loss] weight_decay = NaN must be a finite number ≥ 0",
    ];
    assert!(lines.len() >= expected.len(), "{message}");
    for line in expected {
        assert!(lines.contains(&line), "missing `{line}` in:\n{message}");
    }
    assert!(
        message.contains("run.toml:43:14: [rollout] group_size = 0 must be an integer from 1 to"),
        "{message}"
    );
    // Finite and above 0, but the logits divided by it overflow: every update of such a run
    // came out non-finite and was skipped.
    assert!(
        message.contains("run.toml:44:15: [rollout] temperature = 0.0000000000000000000000000000000000000001 must be 0 (greedy)"),
        "{message}"
    );
}

#[test]
fn save_every_saves_every_n_at_the_end_or_never() {
    let run = |save_every: &str| {
        let text = VALID.replace(
            "iterations = 2",
            &format!("iterations = 2\nsave_every = {save_every}"),
        );
        parse(&text).expect("valid config").run
    };
    let saved = |run: &RunSection| -> Vec<u32> {
        (1..=7).filter(|&i| run.saves_after(i, i == 7)).collect()
    };
    assert_eq!(saved(&parse(VALID).expect("valid").run), [7], "the default");
    assert_eq!(saved(&run("0")), [7]);
    assert_eq!(saved(&run("3")), [3, 6, 7]);
    let never = run("-1");
    assert!(saved(&never).is_empty() && !never.saves());
    assert!(run("1").saves());
    let message = error(&VALID.replace("iterations = 2", "iterations = 2\nsave_every = -2"));
    assert!(
        message.contains(
            "run.toml:5:14: [run] save_every = -2 must be -1 (never), 0 (at the end only) or an \
             integer ≥ 1 (every N iterations and at the end)"
        ),
        "{message}"
    );
}

#[test]
fn an_episode_failure_rate_of_one_is_named_with_its_line() {
    let text = format!("{VALID}\n[rollout]\nmax_episode_failure_rate = 1.0\n");
    let line = VALID.lines().count() + 3;
    let message = error(&text);
    assert!(
        message.contains(&format!(
            "run.toml:{line}:28: [rollout] max_episode_failure_rate = 1 must be a number in [0, 1)"
        )),
        "{message}"
    );
    let config = parse(&format!(
        "{VALID}\n[rollout]\nmax_episode_failure_rate = 0.25\n"
    ))
    .expect("0.25 is in range");
    assert_eq!(config.rollout.max_episode_failure_rate, 0.25);
    assert_eq!(
        parse(VALID)
            .expect("valid")
            .rollout
            .max_episode_failure_rate,
        0.0,
        "off by default"
    );
}

#[test]
fn a_plugin_call_limit_beyond_a_day_is_named_with_its_line() {
    let text = format!("{VALID}\n[rollout]\nplugin_call_timeout_s = 100000\n");
    let message = error(&text);
    assert!(
        message.contains(
            "[rollout] plugin_call_timeout_s = 100000 must be an integer from 0 to 86400"
        ) && message.contains("run.toml:"),
        "{message}"
    );
}

#[test]
fn dapo_and_dr_grpo_numbers_are_checked_where_they_are_written() {
    let text = format!(
        "{VALID}\n[algorithm.loss]\nloss_scale_factor = -1.0\n\n[algorithm.dynamic_sampling]\n\
         enabled = true\nmax_rollout_batches = 0\n\n[algorithm.overlong_penalty]\nbuffer = 4\n\
         factor = nan\n"
    );
    let message = error(&text);
    for needle in [
        "[algorithm.loss] loss_scale_factor = -1 must be a finite number > 0",
        "[algorithm.dynamic_sampling] max_rollout_batches = 0 must be an integer from 1 to 1024",
        "[algorithm.overlong_penalty] factor = NaN must be a finite number ≥ 0",
    ] {
        assert!(
            message.contains(needle),
            "missing `{needle}` in:\n{message}"
        );
    }
}

#[test]
fn adamws_betas_and_epsilon_are_read_and_checked() {
    let config = parse(&format!(
        "{VALID}\n[algorithm.loss]\nadam_betas = [0.9, 0.95]\nadam_epsilon = 1e-6\n"
    ))
    .expect("other betas");
    assert_eq!(config.algorithm.loss.adam_betas, [0.9, 0.95]);
    assert_eq!(config.algorithm.loss.adam_epsilon, 1e-6);
    let message = error(&format!(
        "{VALID}\n[algorithm.loss]\nadam_betas = [0.9, 1.0]\nadam_epsilon = 0.0\n"
    ));
    for needle in [
        "[algorithm.loss] adam_betas = 1 must be a number in [0, 1)",
        "[algorithm.loss] adam_epsilon = 0 must be a finite number > 0",
    ] {
        assert!(
            message.contains(needle),
            "missing `{needle}` in:\n{message}"
        );
    }
}

#[test]
fn kl_types_take_verls_names_too() {
    for (name, kind) in [
        ("k1", KlType::K1),
        ("kl", KlType::K1),
        ("k2", KlType::K2),
        ("mse", KlType::K2),
        ("low_var_kl", KlType::LowVarKl),
        ("k3", KlType::LowVarKl),
        ("abs", KlType::Abs),
    ] {
        let config = parse(&format!(
            "{VALID}\n[algorithm.kl_in_reward]\ncoef = 0.01\nkl_type = \"{name}\"\n"
        ))
        .expect(name);
        assert_eq!(config.algorithm.kl_in_reward.kl_type, kind, "{name}");
    }
    let message = error(&format!(
        "{VALID}\n[algorithm.kl_in_reward]\ncoef = 0.01\nkl_type = \"full\"\n"
    ));
    assert!(message.contains("unknown variant `full`"), "{message}");
}

#[test]
fn the_kl_in_the_reward_is_off_by_default_and_its_keys_are_checked() {
    let config = parse(VALID).expect("valid");
    assert!(!config.algorithm.kl_in_reward.enabled());
    let config = parse(&format!(
        "{VALID}\n[algorithm.kl_in_reward]\ncoef = 0.01\nkl_type = \"low_var_kl\"\n\
         controller = \"adaptive\"\ntarget = 6.0\nhorizon = 5000\n"
    ))
    .expect("an adaptive KL in the reward");
    let kl = config.algorithm.kl_in_reward;
    assert!(kl.enabled());
    assert_eq!(
        (kl.coef, kl.kl_type, kl.controller, kl.target, kl.horizon),
        (0.01, KlType::LowVarKl, KlController::Adaptive, 6.0, 5000.0)
    );
    let message = error(&format!(
        "{VALID}\n[algorithm.kl_in_reward]\ncoef = -1.0\ntarget = 0.0\nhorizon = inf\n"
    ));
    for needle in [
        "[algorithm.kl_in_reward] coef = -1 must be a finite number ≥ 0",
        "[algorithm.kl_in_reward] target = 0 must be a finite number > 0",
        "[algorithm.kl_in_reward] horizon = inf must be a finite number > 0",
    ] {
        assert!(
            message.contains(needle),
            "missing `{needle}` in:\n{message}"
        );
    }
    let message = error(&format!(
        "{VALID}\n[algorithm.kl_in_reward]\ncontroller = \"adaptive\"\n"
    ));
    assert!(
        message.contains("controller = adaptive must be \"fixed\" while coef = 0"),
        "{message}"
    );
}

#[test]
fn cispo_may_leave_its_weight_unbounded_below_and_a_surrogate_may_not() {
    let cispo = parse(&format!(
        "{VALID}\n[algorithm.loss]\npolicy_loss = \"cispo\"\nclip_low = 1.0\nclip_high = 4.0\n"
    ))
    .expect("CISPO without a lower bound");
    assert_eq!(cispo.algorithm.loss.policy_loss, PolicyLoss::Cispo);
    let ppo = error(&format!("{VALID}\n[algorithm.loss]\nclip_low = 1.0\n"));
    assert!(
        ppo.contains("[algorithm.loss] clip_low = 1 must be a number in [0, 1)"),
        "{ppo}"
    );
}

#[test]
fn mini_batches_and_epochs_are_read_and_a_mini_batch_needs_an_episode() {
    let config = parse(&format!(
        "{VALID}\n[algorithm.loss]\nmini_batches = 2\nppo_epochs = 3\n"
    ))
    .expect("two mini-batches, three epochs");
    assert_eq!(config.algorithm.loss.mini_batches, 2);
    assert_eq!(config.algorithm.loss.ppo_epochs, 3);
    let default = parse(VALID).expect("the defaults");
    assert_eq!(
        (
            default.algorithm.loss.mini_batches,
            default.algorithm.loss.ppo_epochs
        ),
        (1, 1)
    );
    let message = error(&format!(
        "{VALID}\n[rollout]\nprompts_per_batch = 2\ngroup_size = 4\n\n[algorithm.loss]\n\
         mini_batches = 9\nppo_epochs = 0\n"
    ));
    for needle in [
        "[algorithm.loss] mini_batches = 9 must be an integer from 1 to [rollout] \
         prompts_per_batch × group_size (8): each mini-batch holds at least one episode",
        "[algorithm.loss] ppo_epochs = 0 must be an integer from 1 to 1024",
    ] {
        assert!(
            message.contains(needle),
            "missing `{needle}` in:\n{message}"
        );
    }
}

#[test]
fn a_learning_rate_schedule_is_read_and_its_floor_checked() {
    let config = parse(&format!(
        "{VALID}\n[algorithm.loss]\nlr_schedule = \"cosine\"\nmin_lr_ratio = 0.1\n"
    ))
    .expect("a cosine decay to a tenth");
    assert_eq!(config.algorithm.loss.lr_schedule, LrDecay::Cosine);
    assert_eq!(config.algorithm.loss.min_lr_ratio, 0.1);
    let too_low = error(&format!(
        "{VALID}\n[algorithm.loss]\nlr_schedule = \"linear\"\nmin_lr_ratio = 1.5\n"
    ));
    assert!(
        too_low.contains("[algorithm.loss] min_lr_ratio = 1.5 must be a number in [0, 1]"),
        "{too_low}"
    );
    let without_decay = error(&format!("{VALID}\n[algorithm.loss]\nmin_lr_ratio = 0.1\n"));
    assert!(
        without_decay.contains(
            "[algorithm.loss] min_lr_ratio = 0.1 must be left out with lr_schedule = \"constant\""
        ),
        "{without_decay}"
    );
    let unknown = error(&format!(
        "{VALID}\n[algorithm.loss]\nlr_schedule = \"cosine_with_restarts\"\n"
    ));
    assert!(
        unknown.contains("expected one of `constant`, `linear`, `cosine`"),
        "{unknown}"
    );
}

#[test]
fn gspo_is_read_and_needs_its_aggregation() {
    let config = parse(&format!(
        "{VALID}\n[algorithm.loss]\npolicy_loss = \"gspo\"\naggregation = \"seq-mean-token-mean\"\n"
    ))
    .expect("gspo with its aggregation");
    assert_eq!(config.algorithm.loss.policy_loss, PolicyLoss::Gspo);
    let message = error(&format!(
        "{VALID}\n[algorithm.loss]\npolicy_loss = \"gspo\"\n"
    ));
    assert!(
        message.contains(
            "[algorithm.loss] aggregation = token-mean must be seq-mean-token-mean with \
             policy_loss = \"gspo\""
        ),
        "{message}"
    );
}

#[test]
fn a_value_left_out_is_never_out_of_range() {
    let config = parse(VALID).expect("the defaults are in range");
    assert_eq!(config.algorithm.loss.weight_decay, 0.01);
}

#[test]
fn lora_numbers_are_checked_where_they_are_written() {
    let text = format!("{VALID}\n[worker_groups.shared.lora]\nrank = 0\ndropout = 1.0\n");
    let message = error(&text);
    assert!(
        message.contains("[worker_groups.shared.lora] rank = 0 must be an integer from 1 to 65536"),
        "{message}"
    );
    assert!(
        message
            .contains(":36:11: [worker_groups.shared.lora] dropout = 1 must be a number in [0, 1)"),
        "{message}"
    );
}

#[test]
fn old_logprobs_are_recomputed_by_default_only_where_another_precision_samples() {
    let config = parse(VALID).expect("valid config");
    let group = &config.worker_groups["shared"];
    assert_eq!(config.algorithm.old_logprobs, None);
    assert_eq!(
        OldLogprobs::for_group(None, group),
        OldLogprobs::Recompute,
        "a bf16 group recomputes"
    );
    let f32_text = VALID.replace("dtype = \"bf16\"", "dtype = \"f32\"");
    let config = parse(&f32_text).expect("valid config");
    let group = &config.worker_groups["shared"];
    assert_eq!(OldLogprobs::for_group(None, group), OldLogprobs::Sampler);
    let recompute = parse(&format!("{f32_text}old_logprobs = \"recompute\"\n")).expect("valid");
    assert_eq!(
        OldLogprobs::for_group(recompute.algorithm.old_logprobs, group),
        OldLogprobs::Recompute
    );
    let message = error(&format!("{f32_text}old_logprobs = \"trainer\"\n"));
    assert!(
        message.contains("expected `sampler` or `recompute`"),
        "the accepted names: {message}"
    );
}

#[test]
fn the_tis_cap_is_checked_where_it_is_written() {
    let text = format!("{VALID}\n[algorithm.rollout_correction]\ntis_cap = 0.5\n");
    let message = error(&text);
    assert!(
        message.contains(
            ":35:11: [algorithm.rollout_correction] tis_cap = 0.5 must be a finite number ≥ 1"
        ),
        "{message}"
    );
    let config = parse(&text.replace("0.5", "2.0")).expect("a cap of 2 is valid");
    assert_eq!(config.algorithm.rollout_correction.tis_cap, Some(2.0));
    let sampler = format!(
        "{VALID}old_logprobs = \"sampler\"\n\n[algorithm.rollout_correction]\ntis_cap = 2.0\n"
    );
    let message = error(&sampler);
    assert!(
        message.contains(":36:11:") && message.contains("no worker group recomputes them"),
        "{message}"
    );
}

#[test]
fn micro_batch_tokens_are_read_per_group_and_per_agent_but_once_per_agent() {
    let text = VALID
        .replace(
            "dtype = \"bf16\"",
            "dtype = \"bf16\"\nmicro_batch_tokens = 4096",
        )
        .replace(
            "temperature = 0.7",
            "temperature = 0.7\nmicro_batch_size = 2",
        );
    let config = parse(&text).expect("valid config");
    assert_eq!(
        config.worker_groups["shared"].micro_batch_tokens,
        Some(4096)
    );
    assert_eq!(config.agents[1].micro_batch_size, Some(2));

    let both = text.replace(
        "micro_batch_size = 2",
        "micro_batch_size = 2\nmicro_batch_tokens = 512",
    );
    let message = error(&both);
    assert!(
        message.contains(
            "micro_batch_tokens = 512 must be left out when the agent sets micro_batch_size"
        ),
        "{message}"
    );
    let zero = text.replace("micro_batch_tokens = 4096", "micro_batch_tokens = 0");
    let message = error(&zero);
    assert!(
        message.contains("[worker_groups.shared] micro_batch_tokens = 0 must be an integer ≥ 1"),
        "{message}"
    );
}

#[test]
fn a_frozen_agent_takes_no_training_settings_and_some_agent_must_train() {
    let frozen = VALID.replace("temperature = 0.7", "temperature = 0.7\ntrain = false");
    let config = parse(&frozen).expect("a frozen verifier");
    assert!(config.agents[0].trains() && !config.agents[1].trains());
    assert!(config.group_trains("shared"));
    let file = RunFile::from_text("run.toml", frozen.as_str(), PathBuf::from("."));
    check_trainable(&config, &file).expect("the solver trains");

    let with_rate = frozen.replace("train = false", "train = false\nlearning_rate = 1e-5");
    assert_eq!(
        error(&with_rate),
        "run.toml:25:17: agent `verifier` has train = false, so its learning_rate would change \
         nothing; remove it, or train the agent"
    );

    let none = frozen.replace(
        "worker_group = \"shared\"\n\n[[agents]]",
        "worker_group = \"shared\"\ntrain = false\n\n[[agents]]",
    );
    let config = parse(&none).expect("parses: `eval` runs it");
    assert!(!config.group_trains("shared"));
    let file = RunFile::from_text("run.toml", none.as_str(), PathBuf::from("."));
    let refused = check_trainable(&config, &file).expect_err("nothing trains");
    assert_eq!(
        refused.to_string(),
        "run.toml:18:9: no agent trains (train = false on every [[agents]]): train one, or \
         evaluate with `drmas-host eval`"
    );
}

#[test]
fn one_step_off_policy_needs_every_group_on_servers_and_recomputed_logprobs() {
    let off_policy = "\n[rollout]\none_step_off_policy = true\n";
    let config = parse(VALID).expect("valid config");
    assert!(!config.rollout.one_step_off_policy, "off by default");
    let message = error(&format!("{VALID}{off_policy}"));
    assert!(
        message.contains(":35:23:")
            && message.contains("worker group `shared` generates in this process"),
        "{message}"
    );
    let servers = "\n[worker_groups.shared.rollout]\nbackend = \"sglang\"\nurls = [\"http://127.0.0.1:30000\"]\n";
    let text = format!("{VALID}{off_policy}{servers}");
    let config = parse(&text).expect("every group on servers");
    assert!(config.rollout.one_step_off_policy);
    let group = &config.worker_groups["shared"];
    assert_eq!(
        OldLogprobs::for_group(config.algorithm.old_logprobs, group),
        OldLogprobs::Recompute
    );
    let message = error(&text.replace(
        "params = { norm_by_std = false }\n",
        "params = { norm_by_std = false }\nold_logprobs = \"sampler\"\n",
    ));
    assert!(
        message.contains(":33:16:") && message.contains("one update behind"),
        "{message}"
    );
}

#[test]
fn an_agents_stop_strings_are_read_and_bounded() {
    let with =
        |stop: &str| VALID.replace("temperature = 0.7", &format!("temperature = 0.7\n{stop}"));
    let config = parse(&with(r#"stop = ["</verify>", "\n\n"]"#)).expect("valid config");
    assert_eq!(config.agents[1].stop, ["</verify>", "\n\n"]);
    assert!(config.agents[0].stop.is_empty());
    let message = error(&with(r#"stop = ["</verify>", ""]"#));
    assert!(
        message.contains(
            "run.toml:24:8: [[agents]] role `verifier`: stop = […, \"\", …] must be a list of \
             non-empty strings of at most 1024 bytes each"
        ),
        "{message}"
    );
    let long = format!("stop = [\"{}\"]", "x".repeat(1025));
    assert!(
        error(&with(&long)).contains("stop = […, a string of 1025 bytes, …] must be"),
        "{}",
        error(&with(&long))
    );
    let many = format!("stop = [{}]", vec!["\"x\""; 65].join(", "));
    assert!(
        error(&with(&many)).contains("stop = [… 65 strings] must be at most 64 strings"),
        "{}",
        error(&with(&many))
    );
}
