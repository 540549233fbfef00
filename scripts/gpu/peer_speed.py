#!/usr/bin/env python3
"""The peer of the GPU speed table: HF transformers and PyTorch eager on the same model folder.

scripts/gpu/speed.sh runs it beside `drmas-host devices --generate` and `--update` and
speed_report.py sets the two side by side. Each command prints one JSON object.

  generate MODEL --batch B --prompt-tokens P --new-tokens N [--cache dynamic|static]
      HF `generate` (bf16 weights, SDPA attention) of B random prompts of P tokens, sampled at
      temperature 1 with no top-k or top-p, as drmas measures it: a warm-up call of two tokens,
      calls of one token per row (the prefill) and of three (the first two decode steps), then
      the measured call; tokens are counted per row up to and including the first EOS.
  train MODEL --calls C --prompt-tokens P --response-tokens R [--precision autocast|bf16]
        [--activation-checkpointing]
      One training step of PyTorch eager on C sequences of P + R random tokens: forward,
      the mean cross-entropy of the response tokens, backward and a fused AdamW step, after one
      warm-up step. `autocast` keeps f32 weights and computes in bf16 (what HF's Trainer does
      with bf16=True); `bf16` holds the weights and the optimizer state in bf16. With
      --activation-checkpointing, transformers' gradient checkpointing recomputes each layer.

Options common to both: --device (default cuda:0), --seed, --profile (after the measured call
or step, one more under PyTorch's profiler: a generation of PROFILED_TOKENS tokens per row, or
one training step, summarised as `drmas-host devices --profile` summarises its own, in
"profile"). Needs torch and transformers.
"""

import argparse
import json
import time

import torch
import transformers
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

# Tokens per row of a profiled generation, as drmas-host's PROFILED_TOKENS: the prefill and 16
# decode steps.
PROFILED_TOKENS = 17
# The entries of each side of a profile, as drmas-host's PROFILE_ENTRIES.
PROFILE_ENTRIES = 30


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory_mib(device: torch.device):
    if device.type != "cuda":
        return None
    return torch.cuda.max_memory_allocated(device) / 2**20


def profiled(device: torch.device, work) -> dict:
    """Runs `work` under PyTorch's Kineto profiler (host operators, and on a GPU runtime calls,
    kernels, copies and fills) and summarises it as drmas-host's `Profile`: the wall-clock
    seconds, how many host and device events, the device's busy milliseconds, and the names of
    longest total duration and the most frequent host names, so that speed_report.py sets the
    two sides' counts side by side."""
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    synchronize(device)
    with profile(activities=activities) as recording:
        start = time.perf_counter()
        work()
        synchronize(device)
        wall_seconds = time.perf_counter() - start
    tally = {}
    for event in recording.profiler.kineto_results.events():
        key = (event.name(), event.device_type() != DeviceType.CPU)
        count, nanoseconds = tally.get(key, (0, 0))
        tally[key] = (count + 1, nanoseconds + event.duration_ns())
    host, device_names = [], []
    for (name, on_device), (count, nanoseconds) in tally.items():
        entry = {"name": name, "count": count, "total_ms": nanoseconds / 1e6}
        (device_names if on_device else host).append(entry)
    most_frequent = sorted(host, key=lambda e: (-e["count"], e["name"]))

    def by_time(entries: list) -> list:
        return sorted(entries, key=lambda e: (-e["total_ms"], e["name"]))

    return {
        "wall_seconds": wall_seconds,
        "host_events": sum(e["count"] for e in host),
        "device_events": sum(e["count"] for e in device_names),
        "device_total_ms": sum(e["total_ms"] for e in device_names),
        "host": by_time(host)[:PROFILE_ENTRIES],
        "host_most_frequent": most_frequent[:PROFILE_ENTRIES],
        "device": by_time(device_names)[:PROFILE_ENTRIES],
    }


def generate(args) -> dict:
    device = torch.device(args.device)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        args.model, dtype=torch.bfloat16, attn_implementation="sdpa"
    ).to(device)
    model.eval()
    eos = model.config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    generator = torch.Generator().manual_seed(args.seed)
    vocab = model.config.vocab_size
    ids = torch.randint(vocab, (args.batch, args.prompt_tokens), generator=generator).to(device)
    mask = torch.ones_like(ids)

    def run(new_tokens: int):
        torch.manual_seed(args.seed)
        synchronize(device)
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_new_tokens=new_tokens,
                pad_token_id=next(iter(eos), 0),
                cache_implementation="static" if args.cache == "static" else None,
            )
        synchronize(device)
        return out[:, args.prompt_tokens:].tolist(), time.perf_counter() - start

    run(2)
    # The fastest of three one-token calls, as drmas's side (PREFILL_REPEATS) takes it.
    prefill = min(run(1)[1] for _ in range(3))
    first_two_steps = min(run(3)[1] for _ in range(3)) - prefill
    rows, seconds = run(args.new_tokens)
    lengths = []
    for row in rows:
        ends = [i for i, token in enumerate(row) if token in eos]
        lengths.append(ends[0] + 1 if ends else len(row))
    tokens, longest = sum(lengths), max(lengths)
    result = {
        "side": "transformers",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cache": args.cache,
        "batch": args.batch,
        "prompt_tokens": args.prompt_tokens,
        "new_tokens": args.new_tokens,
        "tokens": tokens,
        "longest": longest,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "prefill_seconds": prefill,
        "decode_step_ms": (seconds - prefill) / max(longest - 1, 1) * 1e3,
        "first_two_steps_ms": first_two_steps * 1e3,
        "peak_memory_mib": peak_memory_mib(device),
    }
    if args.profile:
        result["profile"] = profiled(device, lambda: run(PROFILED_TOKENS))
    return result


def train(args) -> dict:
    device = torch.device(args.device)
    weights = torch.float32 if args.precision == "autocast" else torch.bfloat16
    model = transformers.AutoModelForCausalLM.from_pretrained(
        args.model, dtype=weights, attn_implementation="sdpa"
    ).to(device)
    if args.activation_checkpointing:
        model.gradient_checkpointing_enable()
    model.train()
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=1e-6, weight_decay=0.01, fused=device.type == "cuda"
    )
    generator = torch.Generator().manual_seed(args.seed)
    length = args.prompt_tokens + args.response_tokens
    ids = torch.randint(
        model.config.vocab_size, (args.calls, length), generator=generator
    ).to(device)
    # Only the response tokens are predicted, as in a policy update.
    labels = ids.clone()
    labels[:, : args.prompt_tokens] = -100

    def step() -> tuple:
        synchronize(device)
        start = time.perf_counter()
        with torch.autocast(
            device.type, dtype=torch.bfloat16, enabled=args.precision == "autocast"
        ):
            loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        synchronize(device)
        return time.perf_counter() - start, loss.item()

    step()
    seconds, loss = step()
    result = {
        "side": "pytorch",
        "torch": torch.__version__,
        "precision": args.precision,
        "activation_checkpointing": args.activation_checkpointing,
        "calls": args.calls,
        "prompt_tokens": args.prompt_tokens,
        "response_tokens": args.response_tokens,
        "forward_tokens": args.calls * length,
        "seconds": seconds,
        "tokens_per_s": args.calls * length / seconds,
        "loss": loss,
        "peak_memory_mib": peak_memory_mib(device),
    }
    if args.profile:
        result["profile"] = profiled(device, step)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    gen = commands.add_parser("generate")
    gen.add_argument("--batch", type=int, default=64)
    gen.add_argument("--prompt-tokens", type=int, default=64)
    gen.add_argument("--new-tokens", type=int, default=512)
    gen.add_argument("--cache", choices=["dynamic", "static"], default="dynamic")
    tr = commands.add_parser("train")
    tr.add_argument("--calls", type=int, default=16)
    tr.add_argument("--prompt-tokens", type=int, default=32)
    tr.add_argument("--response-tokens", type=int, default=480)
    tr.add_argument("--precision", choices=["autocast", "bf16"], default="autocast")
    tr.add_argument("--activation-checkpointing", action="store_true")
    for command in (gen, tr):
        command.add_argument("model")
        command.add_argument("--device", default="cuda:0")
        command.add_argument("--seed", type=int, default=0)
        command.add_argument("--profile", action="store_true",
                             help="also run once more under PyTorch's profiler")
    args = parser.parse_args()
    result = generate(args) if args.command == "generate" else train(args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
