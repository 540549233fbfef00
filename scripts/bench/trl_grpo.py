"""The TRL side of the GRPO comparison (issue #6): GRPOTrainer steps with the settings of a
drmas run file, the last one timed, printed as one JSON line.

    python scripts/bench/trl_grpo.py --config configs/bench/grpo-trl.toml --model HF_FOLDER

On the CPU in f32 by default; `--device cuda --precision autocast` trains f32 weights with bf16
autocast on a GPU (the GPU speed table's peer, scripts/gpu/speed.sh), `--steps 2` times the
second step, after the first has warmed the device up.

From the run file: the Solver's prompt template, the training data (GSM8K JSONL), prompts per
batch, group size, max response tokens, temperature and learning rate. The batch is every
prompt's group in one optimizer step, as drmas does: one forward and backward over it all, or
micro-batches of `--micro-batch` completions accumulated (TRL generates the whole batch once
per step either way). The reward is the math environment's: 1 when the last \\boxed{} answer (or
a GSM8K `#### n` line, or "the answer is n") equals the reference number, else 0.

Prints {"step_s", "generate_s", "update_s", "mean_completion_len", "reward_mean", "tokens", ...}:
`generate_s` is the time inside `model.generate`, `update_s` the rest of the step (scoring the
completions' log-probabilities, the loss, backward and the optimizer step).
"""

import argparse
import json
import math
import re
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import torch


def gsm8k_answer(solution):
    """The number after GSM8K's `####`, commas removed."""
    return solution.split("####")[-1].strip().replace(",", "")


def last_boxed(text):
    """The content of the last balanced \\boxed{...}, or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, begin = 0, start + len("\\boxed")
    for i in range(begin, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[begin + 1 : i]
    return None


def final_answer(text):
    """What the math environment takes as the final answer, for GSM8K's numeric answers."""
    text = text.split("</think>")[-1]
    for found in (
        last_boxed(text),
        (re.findall(r"####\s*([^\n]+)", text) or [None])[-1],
        (re.findall(r"answer is:?\s*\$?([-\d.,/]+)", text, re.IGNORECASE) or [None])[-1],
    ):
        if found is not None and found.strip():
            return found
    return None


def same_number(answer, reference):
    """Numeric equality after dropping commas, dollar signs, units in \\text{} and a final dot."""
    if answer is None:
        return False
    cleaned = re.sub(r"\\text\{[^}]*\}|\\[,!; ]|[$,\s]", "", answer).rstrip(".")
    cleaned = cleaned.replace("\\%", "").replace("%", "")
    try:
        return math.isclose(float(cleaned), float(reference), rel_tol=0, abs_tol=1e-6)
    except ValueError:
        return cleaned == reference


def boxed_reward(completions, answer, **_):
    """TRL reward function: 1.0 for a right final answer, else 0.0."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [float(same_number(final_answer(t), a)) for t, a in zip(texts, answer)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, type=Path, help="the drmas run file")
    parser.add_argument("--model", required=True, help="HF folder (drmas-host convert)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument(
        "--precision",
        choices=["f32", "autocast", "bf16"],
        default="f32",
        help="f32 weights and compute; f32 weights with bf16 autocast; bf16 weights",
    )
    parser.add_argument("--steps", type=int, default=1, help="optimizer steps; the last is timed")
    parser.add_argument(
        "--micro-batch",
        type=int,
        help="completions per forward and backward, accumulated into one optimizer step over "
        "the whole batch (default: the whole batch in one)",
    )
    parser.add_argument(
        "--no-gradient-checkpointing",
        action="store_true",
        help="turn off TRL's default activation checkpointing (drmas does not checkpoint)",
    )
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    on_gpu = args.device.startswith("cuda")
    if ":" in args.device:
        torch.cuda.set_device(args.device)

    def synchronize():
        if on_gpu:
            torch.cuda.synchronize()

    # Imported after the thread count is set.
    import datasets
    import transformers
    import trl

    run = tomllib.loads(args.config.read_text())
    (agent,) = run["agents"]
    template = agent["params"]["prompt"]
    rollout = run["rollout"]
    (group,) = run["worker_groups"].values()
    data_path = args.config.parent / run["environment"]["train_data"]["path"]
    rows = [json.loads(line) for line in data_path.read_text().splitlines() if line.strip()]
    prompts = rollout["prompts_per_batch"]
    if len(rows) < prompts:
        sys.exit(f"{data_path} has {len(rows)} problems, the run file asks for {prompts}")
    dataset = datasets.Dataset.from_list(
        [
            {
                "prompt": [{"role": "user", "content": template.replace("{question}", r["question"])}],
                "answer": gsm8k_answer(r["answer"]),
            }
            for r in rows[:prompts]
        ]
    )

    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    weights = torch.bfloat16 if args.precision == "bf16" else torch.float32
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=weights)
    generate = model.generate
    # Per optimizer step, the seconds inside `model.generate`.
    generate_seconds = []

    def timed_generate(*a, **kw):
        synchronize()
        start = time.perf_counter()
        out = generate(*a, **kw)
        synchronize()
        generate_seconds[-1] += time.perf_counter() - start
        return out

    model.generate = timed_generate

    class StepTimer(transformers.TrainerCallback):
        """Wall time of each optimizer step (generation included: GRPO generates inside it)."""

        def __init__(self):
            self.started, self.seconds = 0.0, []

        def on_step_begin(self, *_, **__):
            generate_seconds.append(0.0)
            synchronize()
            self.started = time.perf_counter()

        def on_step_end(self, *_, **__):
            synchronize()
            self.seconds.append(time.perf_counter() - self.started)

    group_size = rollout["group_size"]
    completions = prompts * group_size
    micro_batch = args.micro_batch or completions
    if completions % micro_batch:
        sys.exit(f"--micro-batch {micro_batch} does not divide the batch of {completions}")
    timer = StepTimer()
    with tempfile.TemporaryDirectory() as out:
        config = trl.GRPOConfig(
            output_dir=out,
            use_cpu=not on_gpu,
            bf16=args.precision in ("autocast", "bf16"),
            per_device_train_batch_size=micro_batch,
            # One generation of the whole batch per optimizer step, as drmas does.
            gradient_accumulation_steps=completions // micro_batch,
            num_generations=group_size,
            max_completion_length=rollout["max_response_tokens"],
            temperature=rollout.get("temperature", 1.0),
            top_p=1.0,
            top_k=0,
            learning_rate=group.get("learning_rate", 1e-6),
            beta=0.0,
            gradient_checkpointing=not args.no_gradient_checkpointing,
            max_steps=args.steps,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            seed=run["run"].get("seed", 0),
            dataloader_num_workers=0,
            disable_tqdm=True,
        )
        trainer = trl.GRPOTrainer(
            model=model,
            reward_funcs=boxed_reward,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[timer],
        )
        trainer.train()
    logged = [entry for entry in trainer.state.log_history if "reward" in entry][-1]
    step = timer.seconds[-1]
    generated = generate_seconds[-1]
    mean_len = logged.get("completions/mean_length", float("nan"))
    print(
        json.dumps(
            {
                "step_s": step,
                "generate_s": generated,
                "update_s": step - generated,
                "mean_completion_len": mean_len,
                "reward_mean": logged.get("reward"),
                "completions": completions,
                "micro_batch": micro_batch,
                "gradient_checkpointing": not args.no_gradient_checkpointing,
                "steps": len(timer.seconds),
                "device": args.device,
                "precision": args.precision,
                "threads": torch.get_num_threads(),
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "trl": trl.__version__,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
