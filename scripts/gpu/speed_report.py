#!/usr/bin/env python3
"""Writes the GPU speed table (speed.json and speed.md) from the steps speed.sh ran.

Usage: speed_report.py LOGS_DIR OUT_DIR DEVICE MODEL_DIR SECONDS
LOGS_DIR holds steps.jsonl and each step's NAME.out (JSON) and NAME.log; MODEL_DIR the timed
model's config.json (for the FLOPs of a training token). Standard library only.

Generation: tokens/s of drmas and of HF `generate` on the same batch, their ratio, and each
side's decode step against the bound set by reading the weights and the mean KV cache once per
step at BANDWIDTH. Training: seconds and tokens/s of one step and MFU against PEAK_FLOPS, the
FLOPs of a token being 6·P + 12·L·T·d (P the weights that multiply, L layers, T the sequence
length, d heads × head dim: forward and backward matmuls, attention scores and sums). GRPO: the
rollout and update seconds of one `drmas-host train` iteration, from its metrics; against TRL
(`speed.sh grpo`), the second iteration of a Solver-only run and the second GRPOTrainer step
(scripts/bench/trl_grpo.py's JSON line). Profiles: for each side's steps run with `--profile`
(drmas's under libtorch's profiler, transformers' and PyTorch's under PyTorch's, summarised
alike), a table of their host events, device events and device busy time, then the busiest
device kernels and host operators of each.
"""

import datetime
import json
import sys
from pathlib import Path

# The H200's measured device-copy bandwidth (bytes/s) and dense bf16 matmul rate (FLOP/s).
BANDWIDTH = 4.3e12
PEAK_FLOPS = 790e12
# Tokens per row of a profiled generation (drmas-host's PROFILED_TOKENS), and the entries of
# each profile table.
PROFILED_TOKENS = 17
TOP = 12


def read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def last_json_line(path: Path):
    """The last non-empty line of `path` as JSON (a script that prints other lines before)."""
    try:
        return json.loads([line for line in path.read_text().splitlines() if line.strip()][-1])
    except (OSError, ValueError, IndexError):
        return None


def matmul_weights(config: dict) -> int:
    """Weights that multiply per token: every linear layer of every block plus the LM head."""
    h = config["hidden_size"]
    heads = config["num_attention_heads"]
    kv = config.get("num_key_value_heads", heads)
    head_dim = config.get("head_dim") or h // heads
    per_layer = h * heads * head_dim * 2 + h * kv * head_dim * 2 + 3 * h * config["intermediate_size"]
    return config["num_hidden_layers"] * per_layer + config["vocab_size"] * h


def flops_per_token(config: dict, sequence: int) -> float:
    heads = config["num_attention_heads"]
    d = heads * (config.get("head_dim") or config["hidden_size"] // heads)
    return 6 * matmul_weights(config) + 12 * config["num_hidden_layers"] * sequence * d


def collect(logs: Path, config: dict) -> dict:
    steps = {}
    for line in (logs / "steps.jsonl").read_text().splitlines():
        step = json.loads(line)
        step["output"] = read_json(logs / f"{step['name']}.out")
        steps[step["name"]] = step
    generation, training = [], []
    for name, step in steps.items():
        out = step["output"] or {}
        if name.startswith("generate-drmas-"):
            side = "drmas (CUDA graphs)" if name.startswith("generate-drmas-graphs-") else "drmas"
            for figures in out.get("generations", []):
                bound = (figures["weight_bytes"] + figures["kv_cache_bytes_per_step"]) / BANDWIDTH
                generation.append({"side": side, "step": name, **figures,
                                   "decode_bound_ms": bound * 1e3})
        elif name.startswith("generate-transformers-"):
            if out:
                generation.append({**out, "side": f"transformers ({out['cache']} cache)",
                                   "step": name})
        elif name.startswith("train-drmas"):
            for update in out.get("updates", []):
                shape = update["shape"]
                sequence = 32 + shape["response_tokens"]
                seconds = update["on_device"]["seconds"]
                agents = shape.get("agents", 2)
                per_agent = "1 agent" if agents == 1 else f"{agents} agents, a pass and a norm each"
                if name.endswith("-libtorch-attention"):
                    per_agent += "; grouped heads, libtorch's attention kernel"
                training.append({
                    "side": f"drmas (bf16, f32 masters; {per_agent})", "step": name,
                    "calls": shape["calls"], "sequence": sequence,
                    "activation_checkpointing": shape["activation_checkpointing"],
                    "forward_tokens": update["forward_tokens"], "seconds": seconds,
                    "profile": update.get("profile"),
                })
        elif name.startswith("train-pytorch-") and out:
            training.append({
                "side": f"PyTorch eager ({out['precision']})", "step": name,
                "calls": out["calls"], "sequence": out["prompt_tokens"] + out["response_tokens"],
                "activation_checkpointing": out["activation_checkpointing"],
                "forward_tokens": out["forward_tokens"], "seconds": out["seconds"],
                "profile": out.get("profile"),
            })
    grpo = None
    metrics = logs / "grpo-drmas.metrics.jsonl"
    if metrics.exists():
        lines = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        trained = [line for line in lines if line.get("iteration", 0) >= 1]
        if trained:
            grpo = {"step": steps.get("grpo-drmas"), **trained[-1]}
    against_trl = None
    metrics = logs / "grpo-solver-drmas.metrics.jsonl"
    trl = last_json_line(logs / "grpo-solver-trl.out")
    if metrics.exists() or trl:
        lines = [json.loads(line) for line in metrics.read_text().splitlines()
                 if line.strip()] if metrics.exists() else []
        timed = [line for line in lines if line.get("iteration", 0) >= 2]
        against_trl = {"drmas": timed[-1] if timed else None, "trl": trl}
    for row in training:
        row["tokens_per_s"] = row["forward_tokens"] / row["seconds"]
        row["mfu"] = row["tokens_per_s"] * flops_per_token(config, row["sequence"]) / PEAK_FLOPS
    attention = (steps.get("attention-probe") or {}).get("output")
    return {"steps": list(steps.values()), "generation": generation, "training": training,
            "grpo": grpo, "grpo_against_trl": against_trl, "attention": attention}


def markdown(report: dict, device: str, seconds: int) -> str:
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# GPU speed table",
        "",
        f"Device `{device}`, {date}, {seconds} s in all. Model: random-initialised "
        f"`{report['architecture']}` in bf16, the same folder on both sides.",
    ]
    if report["generation"]:
        lines += [
            "",
            "## Generation (sampled, temperature 1, 64-token random prompts)",
            "",
            "| side | batch | new tokens | tokens | tokens/s | drmas's speed-up (eager / CUDA "
            "graphs) | decode step (ms) | bound (ms) | first two steps (ms) | prefill (s) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
    drmas = {}
    for g in report["generation"]:
        if g["side"].startswith("drmas"):
            drmas.setdefault(g["shape"]["batch"], {})[g["side"]] = g
    for g in report["generation"]:
        batch = g["shape"]["batch"] if "shape" in g else g["batch"]
        new_tokens = g["shape"]["new_tokens"] if "shape" in g else g["new_tokens"]
        ours = [drmas.get(batch, {}).get(side) for side in ("drmas", "drmas (CUDA graphs)")]
        ratio = "" if g["side"].startswith("drmas") else " / ".join(
            f"{row['tokens_per_s'] / g['tokens_per_s']:.2f}" if row else "–" for row in ours)
        bound = f"{g['decode_bound_ms']:.2f}" if "decode_bound_ms" in g else ""
        first = f"{g['first_two_steps_ms']:.1f}" if "first_two_steps_ms" in g else ""
        lines.append(
            f"| {g['side']} | {batch} | {new_tokens} | {g['tokens']} | {g['tokens_per_s']:.0f} "
            f"| {ratio} | {g['decode_step_ms']:.2f} | {bound} | {first} "
            f"| {g['prefill_seconds']:.3f} |"
        )
    if report["training"]:
        lines += [
            "",
            "## Training (one step: forward, backward, AdamW)",
            "",
            "| side | calls × tokens | checkpointing | forward tokens | seconds | tokens/s | MFU "
            "| drmas's speed-up |",
            "|---|---|---|---|---|---|---|---|",
        ]
    ours = next((t for t in report["training"] if t["step"] == "train-drmas"), None)
    for t in report["training"]:
        peer = ours and not t["step"].startswith("train-drmas")
        ratio = f"{t['seconds'] / ours['seconds']:.2f}" if peer else ""
        lines.append(
            f"| {t['side']} | {t['calls']} × {t['sequence']} | "
            f"{'yes' if t['activation_checkpointing'] else 'no'} | {t['forward_tokens']} | "
            f"{t['seconds']:.3f} | {t['tokens_per_s']:.0f} | {t['mfu'] * 100:.1f} % | {ratio} |"
        )
    lines += profiles(report)
    lines += attention(report)
    grpo = report["grpo"]
    if grpo:
        calls = {key.split("/", 1)[1]: int(value) for key, value in grpo.items()
                 if key.startswith("calls/")}
        lengths = ", ".join(f"{role} {grpo.get('response_len/' + role, 0):.0f}" for role in calls)
        step_seconds = grpo["step"]["seconds"] if grpo["step"] else ""
        lines += [
            "",
            "## One GRPO iteration (`drmas-host train`, math Solver and Verifier sharing the model)",
            "",
            "| calls | mean response tokens | rollout (s) | of which generation (s) | update (s) "
            "| rollout tokens/s | step with loading (s) |",
            "|---|---|---|---|---|---|---|",
            f"| {', '.join(f'{role} {n}' for role, n in calls.items())} | {lengths} "
            f"| {grpo.get('time/rollout_s', 0):.1f} | {grpo.get('time/generation_s', 0):.1f} "
            f"| {grpo.get('time/update_s', 0):.1f} | {grpo.get('tokens_per_s/rollout', 0):.0f} "
            f"| {step_seconds} |",
        ]
    against_trl = report.get("grpo_against_trl")
    if against_trl:
        ours, trl = against_trl["drmas"], against_trl["trl"]
        lines += [
            "",
            "## GRPO against TRL's GRPOTrainer (the math Solver alone, the second step of each)",
            "",
            "| side | step (s) | rollout / generate (s) | update (s) | mean completion tokens "
            "| drmas's speed-up |",
            "|---|---|---|---|---|---|",
        ]
        ours_seconds = None
        if ours:
            rollout, update = ours.get("time/rollout_s", 0), ours.get("time/update_s", 0)
            ours_seconds = rollout + update
            lines.append(f"| drmas (bf16, f32 masters) | {ours_seconds:.1f} | {rollout:.1f} "
                         f"| {update:.1f} | {ours.get('response_len/solver', 0):.0f} | |")
        if trl:
            ratio = f"{trl['step_s'] / ours_seconds:.2f}" if ours_seconds else ""
            lines.append(f"| TRL {trl['trl']} ({trl['precision']}) | {trl['step_s']:.1f} "
                         f"| {trl['generate_s']:.1f} | {trl['update_s']:.1f} "
                         f"| {trl['mean_completion_len']:.0f} | {ratio} |")
        else:
            lines.append("| TRL | did not run: see the steps below and its log |||||")
    lines += ["", "## Steps", "", "| step | exit | seconds | peak GPU memory (MiB) |",
              "|---|---|---|---|"]
    for step in report["steps"]:
        lines.append(f"| {step['name']} | {step['rc']} | {step['seconds']} "
                     f"| {step['gpu_memory_peak_mib']} |")
    lines += ["", "drmas's speed-up is its tokens/s over the row's (generation) and the row's "
              "seconds over its own one-agent step's for the same calls (training). drmas's "
              "forward tokens count "
              "each prompt once for the calls that share it when it trains the prompts in a pass "
              "of their own (on a GPU, only when that halves the tokens); PyTorch's count every "
              f"sequence whole. MFU is against {PEAK_FLOPS / 1e12:.0f} TFLOP/s, the decode bound "
              f"at {BANDWIDTH / 1e12:.1f} TB/s. Against TRL, drmas's speed-up is TRL's step "
              "seconds over drmas's iteration (rollout + update) on the same run file.", ""]
    return "\n".join(lines)


def profiles(report: dict) -> list:
    """The section of the profiled runs (each side's `--profile`): their events and device busy
    time side by side, then each one's busiest kernels and host operators."""
    runs = [(f"{g['step']}: {PROFILED_TOKENS} tokens per row (the prefill and "
             f"{PROFILED_TOKENS - 1} decode steps)", g["profile"])
            for g in report["generation"] if g.get("profile")]
    runs += [(f"{t['step']}: one more training step", t["profile"])
             for t in report["training"] if t.get("profile")]
    if not runs:
        return []
    lines = [
        "", "## Where each side's time goes (a further, profiled run of each step)", "",
        "drmas under libtorch's profiler, transformers and PyTorch under PyTorch's: the same "
        "Kineto events, counted alike (host events nest: `aten::linear` holds its `aten::mm`).",
        "", "| run | wall-clock under the profiler (ms) | device busy (ms) | busy | host events "
        "| device events |", "|---|---|---|---|---|---|",
    ]
    for title, profile in runs:
        wall_ms = profile["wall_seconds"] * 1e3
        busy = profile["device_total_ms"]
        lines.append(f"| {title} | {wall_ms:.1f} | {busy:.1f} "
                     f"| {busy / wall_ms * 100 if wall_ms else 0:.0f} % | {profile['host_events']} "
                     f"| {profile['device_events']} |")
    for title, profile in runs:
        lines += ["", f"### {title}"]
        if profile["device"]:
            lines += ["", "| kernel | count | total (ms) |", "|---|---|---|"]
            lines += [f"| `{e['name'][:90]}` | {e['count']} | {e['total_ms']:.2f} |"
                      for e in profile["device"][:TOP]]
        lines += ["", "| host operator or runtime call (nested: totals overlap) | count "
                  "| total (ms) |", "|---|---|---|"]
        lines += [f"| `{e['name'][:90]}` | {e['count']} | {e['total_ms']:.2f} |"
                  for e in profile["host"][:TOP]]
        lines += ["", "| most frequent host operator or runtime call | count | total (ms) |",
                  "|---|---|---|"]
        lines += [f"| `{e['name'][:90]}` | {e['count']} | {e['total_ms']:.2f} |"
                  for e in profile.get("host_most_frequent", [])[:TOP]]
    return lines


def attention(report: dict) -> list:
    """The section of attention_probe.py's cases: which kernels libtorch runs for each
    attention call, and their milliseconds."""
    probe = report.get("attention")
    if not probe:
        return []

    def kernels(case: dict) -> str:
        if "declined" in case:
            return f"declined: {case['declined'][:80]}"
        return "; ".join(f"`{k['name'][:60]}` {k['us']:.0f} µs" for k in case["kernels"][:2])

    def times(case: dict) -> str:
        if "declined" in case:
            return "| | "
        return f"| {case['first_ms']:.2f} | {case['median_ms']:.3f} "

    lines = [
        "", "## Attention kernels (`attention_probe.py`)", "",
        f"torch {probe['torch']}, cuDNN {probe['cudnn']}, {probe['dtype']}, {probe['heads']} "
        f"query and {probe['kv_heads']} key/value heads of {probe['head_dim']}. Training: "
        "forward and backward of 8 × 512 queries; decode: 64 rows of one query, the cache "
        "growing a position a step (a new shape each) or at one shape.", "",
        "| training call | backend | first (ms) | median (ms) | busiest kernels |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {c['case']} | {c['backend']} {times(c)}| {kernels(c)} |"
              for c in probe["training"]]
    lines += ["", "| decode call | cache | first (ms) | median (ms) | busiest kernels |",
              "|---|---|---|---|---|"]
    lines += [f"| {c['case']} | {c['cache']} {times(c)}| {kernels(c)} |"
              for c in probe["decode"]]
    return lines


def main() -> None:
    logs, out, device, model, seconds = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], \
        Path(sys.argv[4]), int(sys.argv[5])
    # Before the model is made (the report is rewritten after every step) there is no config,
    # and no training row to need it.
    config_file = model / "config.json"
    config = json.loads(config_file.read_text()) if config_file.exists() else {}
    report = collect(logs, config)
    report["architecture"] = model.name
    report["device"] = device
    out.mkdir(parents=True, exist_ok=True)
    (out / "speed.json").write_text(json.dumps(report, indent=1))
    (out / "speed.md").write_text(markdown(report, device, seconds))


if __name__ == "__main__":
    main()
