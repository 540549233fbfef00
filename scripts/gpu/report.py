#!/usr/bin/env python3
"""Writes the GPU check's report (report.json and report.md) from the steps check.sh ran.

Usage: report.py LOGS_DIR OUT_DIR DEVICE SECONDS
LOGS_DIR holds steps.jsonl (one outcome per step) and each step's NAME.out (JSON where the step
prints JSON), NAME.log and, for training runs, NAME.metrics.jsonl. Standard library only.
"""

import datetime
import json
import sys
from pathlib import Path

# Metrics of a training run worth a column: the iteration's times, reward, policy loss,
# gradient norms per group and the sampler-trainer log-ratio per agent.
METRIC_PREFIXES = ("time/", "reward/mean", "loss/policy/", "grad_norm/group/", "mismatch/")


def read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def last_metrics(path: Path):
    try:
        lines = [line for line in path.read_text().splitlines() if line.strip()]
    except OSError:
        return None
    if not lines:
        return None
    record = json.loads(lines[-1])
    return {k: v for k, v in record.items() if k.startswith(METRIC_PREFIXES)}


def collect(logs: Path, device: str, seconds: int) -> dict:
    steps = []
    for line in (logs / "steps.jsonl").read_text().splitlines():
        step = json.loads(line)
        name = step["name"]
        step["output"] = read_json(logs / f"{name}.out")
        if step["output"] is None:
            step["output_text"] = tail(logs / f"{name}.out", 10)
        if step["rc"] != 0:
            step["log_tail"] = tail(logs / f"{name}.log")
        metrics = last_metrics(logs / f"{name}.metrics.jsonl")
        if metrics is not None:
            step["metrics"] = metrics
        steps.append(step)
    build = Path(__file__).resolve().parent / "BUILD"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": device,
        "seconds": seconds,
        "build": build.read_text().strip() if build.exists() else None,
        "steps": steps,
    }


def fmt(value, digits=3):
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def markdown(report: dict) -> str:
    steps = report["steps"]
    by_name = {step["name"]: step for step in steps}
    lines = [
        "# drmas GPU check",
        "",
        f"- date: {report['date']}, device checked: `{report['device']}`, "
        f"{report['seconds']} s in all",
    ]
    gpu = by_name.get("gpu")
    if gpu and gpu.get("output_text"):
        lines.append(f"- GPU (nvidia-smi): {' / '.join(gpu['output_text'].splitlines()[1:])}")
    devices = (by_name.get("devices") or {}).get("output") or {}
    found = devices.get("devices") or {}
    if found:
        names = ", ".join(f"cuda:{d['index']} {d.get('name')}" for d in found["cuda_devices"])
        lines.append(
            f"- drmas-host: libtorch {found.get('libtorch')}, CUDA available: "
            f"{found.get('cuda_available')}, cuDNN: {found.get('cudnn_available')}, "
            f"attention: {found.get('cuda_attention')} (cuDNN's allowed: "
            f"{found.get('cudnn_attention_allowed')}), decode steps: "
            f"{found.get('cuda_decode')}, devices: {names or 'none'}"
        )
    if report["build"]:
        lines.append(f"- bundle: {'; '.join(report['build'].splitlines())}")

    lines += ["", "## Steps", "", "| step | exit | seconds | GPU memory peak (MiB, baseline) |",
              "|---|---|---|---|"]
    for step in steps:
        memory = (f"{step['gpu_memory_peak_mib']} ({step['gpu_memory_baseline_mib']})"
                  if step["gpu_memory_peak_mib"] else "–")
        lines.append(f"| {step['name']} | {step['rc']} | {step['seconds']} | {memory} |")

    lines += ["", "## Logits and greedy generation against the CPU in f32", "",
              "| step | model | dtype | max abs diff / max abs logit (tolerance) "
              "| top-1 agreement | greedy identical + ties / prompts | device s | CPU s | pass |",
              "|---|---|---|---|---|---|---|---|---|"]
    for step in steps:
        output = step.get("output") or {}
        for c in output.get("comparisons", []):
            logits, greedy = c["logits"], c["greedy"]
            lines.append(
                f"| {step['name']} | {Path(c['model']).name} | {c['dtype']} "
                f"| {fmt(logits['relative'])} "
                f"({fmt(c['tolerance']['logits_relative'])}) | {fmt(logits['top1_agreement'])} "
                f"| {greedy['identical']} + {greedy['ties']} / {greedy['prompts']} "
                f"| {fmt(logits['device_seconds'] + greedy['device_seconds'])} "
                f"| {fmt(logits['cpu_seconds'] + greedy['cpu_seconds'])} | {c['pass']} |")

    lines += ["", "## One update step against the CPU in f32, and long-response steps", "",
              "| step | model | dtype | calls × tokens | checkpointing | policy loss (CPU) "
              "| grad norm (CPU) | agent norms (CPU) | max rel. diff (tolerance) | device s "
              "| GPU memory peak MiB | pass |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for step in steps:
        output = step.get("output") or {}
        for u in output.get("updates", []):
            d, c, shape = u["on_device"], u.get("cpu") or {}, u["shape"]
            norms = ", ".join(fmt(n) for n in d["agent_grad_norms"])
            cpu_norms = ", ".join(fmt(n) for n in c.get("agent_grad_norms", []))
            lines.append(
                f"| {step['name']} | {Path(u['model']).name} | {u['dtype']} "
                f"| {shape['calls']} × {shape['response_tokens']} "
                f"| {shape['activation_checkpointing']} "
                f"| {fmt(d['policy_loss'])} ({fmt(c.get('policy_loss'))}) "
                f"| {fmt(d['grad_norm'])} ({fmt(c.get('grad_norm'))}) | {norms} ({cpu_norms}) "
                f"| {fmt(u.get('relative_diff'))} ({fmt(u['tolerance'])}) | {fmt(d['seconds'])} "
                f"| {step['gpu_memory_peak_mib'] or '–'} | {u['pass']} |")

    trained = [step for step in steps if step["name"].startswith("train-")]
    if trained:
        lines += ["", "## One training iteration on the device", ""]
        for step in trained:
            metrics = step.get("metrics")
            summary = (", ".join(f"{k} {fmt(v)}" for k, v in sorted(metrics.items()))
                       if metrics else "no metrics written")
            lines.append(f"- {step['name']}: exit {step['rc']}, {step['seconds']} s, "
                         f"GPU memory peak {step['gpu_memory_peak_mib']} MiB; {summary}")

    failed = [step for step in steps if step["rc"] != 0]
    if failed:
        lines += ["", "## Failures", ""]
        for step in failed:
            lines += [f"### {step['name']} (exit {step['rc']})", "", "```",
                      step.get("log_tail", ""), "```", ""]
    return "\n".join(lines) + "\n"


def main() -> None:
    logs, out, device, seconds = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    report = collect(logs, device, seconds)
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "report.md").write_text(markdown(report))


if __name__ == "__main__":
    main()
