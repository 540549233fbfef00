#!/usr/bin/env python3
"""Which of libtorch's attention kernels runs for drmas's and transformers' attention on a
device, and what each costs: the evidence for choosing drmas's attention calls there.

Usage: attention_probe.py [--device cuda:0] [--heads 12] [--kv-heads 2] [--head-dim 128]
Prints one JSON object (Qwen2.5-1.5B's head layout by default, bf16 on a GPU, f32 on the CPU).

Training: B × T = 8 × 512 queries, forward and backward, rows left-padded by 0–112 tokens:
  `gqa-mask`     a bool mask and `enable_gqa` (drmas's training and prefill call);
  `repeat-mask`  a bool mask, keys and values repeated to every query head (transformers' call
                 when a mask is needed);
  `gqa-causal`   no padding, `is_causal` and `enable_gqa` (transformers' unpadded call).
  Each under libtorch's default choice, then with each backend forced in turn (flash,
  efficient, cuDNN, math), where that backend accepts it.
Decode: B = 64 rows of one query against a cache growing by one position a step, from 64 to
  64 + STEPS positions (a new shape every step, as in generation), and the same calls repeated
  at one shape (so the difference is any per-shape setup):
  `sdpa-gqa-mask`  SDPA with a bool mask and `enable_gqa` (drmas before its eager products);
  `sdpa-gqa`       SDPA without a mask, `enable_gqa` (transformers' decode without padding);
  `eager`          drmas's decode attention: each key/value head's query heads as the rows of
                   two batched products around an f32 softmax.
For every case: the first call's milliseconds, the median of the others, and the device
kernels (or, on the CPU, the operators) that took the most time in one profiled call.
"""

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BATCH, LENGTH, PAD_STEP = 8, 512, 16
DECODE_BATCH, DECODE_START, STEPS = 64, 64, 32
REPEATS = 10
BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "math": SDPBackend.MATH,
}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def milliseconds(device: torch.device, call) -> float:
    synchronize(device)
    start = time.perf_counter()
    call()
    synchronize(device)
    return (time.perf_counter() - start) * 1e3


def busiest(device: torch.device, call, entries: int = 4) -> list:
    """The device kernels (the CPU's operators) of one call of `call`, most time first."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as profile:
        call()
        synchronize(device)
    totals = {}
    for event in profile.events():
        on_device = event.device_type == torch.autograd.DeviceType.CUDA
        if on_device == (device.type == "cuda") and (on_device or event.name.startswith("aten::")):
            time_us = event.device_time if on_device else event.cpu_time
            totals[event.name] = totals.get(event.name, 0.0) + time_us
    ranked = sorted(totals.items(), key=lambda item: -item[1])[:entries]
    return [{"name": name[:120], "us": round(us, 1)} for name, us in ranked]


def timed(device: torch.device, call, shapes=None) -> dict:
    """First call, then the median of REPEATS calls (or one call per shape of `shapes`)."""
    first = milliseconds(device, call if shapes is None else lambda: call(shapes[0]))
    if shapes is None:
        rest = [milliseconds(device, call) for _ in range(REPEATS)]
        kernels = busiest(device, call)
    else:
        rest = [milliseconds(device, lambda s=s: call(s)) for s in shapes[1:]]
        kernels = busiest(device, lambda: call(shapes[-1]))
    return {"first_ms": round(first, 3), "median_ms": round(statistics.median(rest), 3),
            "kernels": kernels}


def training_cases(device, dtype, heads, kv_heads, head_dim):
    generator = torch.Generator(device="cpu").manual_seed(0)

    def tensor(*shape):
        return torch.randn(*shape, generator=generator).to(device, dtype).requires_grad_()

    q = tensor(BATCH, heads, LENGTH, head_dim)
    k, v = tensor(BATCH, kv_heads, LENGTH, head_dim), tensor(BATCH, kv_heads, LENGTH, head_dim)
    upstream = torch.randn(BATCH, heads, LENGTH, head_dim, generator=generator).to(device, dtype)
    positions = torch.arange(LENGTH, device=device)
    padding = torch.arange(BATCH, device=device) * PAD_STEP
    keys_real = positions[None, :] >= padding[:, None]
    causal = positions[None, :] <= positions[:, None]
    mask = (causal[None] & keys_real[:, None, :])[:, None]
    # A padded query row attends to itself, so no row of the mask is empty.
    mask = mask | torch.eye(LENGTH, dtype=torch.bool, device=device)[None, None]
    group = heads // kv_heads

    def repeat(t):
        return t[:, :, None].expand(-1, -1, group, -1, -1).reshape(BATCH, heads, LENGTH, head_dim)

    calls = {
        "gqa-mask": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                           enable_gqa=True),
        "repeat-mask": lambda: F.scaled_dot_product_attention(q, repeat(k), repeat(v),
                                                              attn_mask=mask),
        "gqa-causal": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                             enable_gqa=True),
    }
    cases = []
    for name, attend in calls.items():
        def step(attend=attend):
            torch.autograd.grad(attend(), (q, k, v), upstream)

        for backend in [None, *BACKENDS]:
            case = {"case": name, "backend": backend or "default"}
            try:
                if backend is None:
                    case.update(timed(device, step))
                else:
                    with sdpa_kernel(BACKENDS[backend]):
                        case.update(timed(device, step))
            except RuntimeError as error:
                case["declined"] = str(error).splitlines()[0][:200]
            cases.append(case)
    return cases


def decode_cases(device, dtype, heads, kv_heads, head_dim):
    generator = torch.Generator(device="cpu").manual_seed(1)
    longest = DECODE_START + STEPS
    q = torch.randn(DECODE_BATCH, heads, 1, head_dim, generator=generator).to(device, dtype)
    cache = [torch.randn(DECODE_BATCH, kv_heads, longest, head_dim,
                         generator=generator).to(device, dtype) for _ in range(2)]
    mask = torch.ones(DECODE_BATCH, 1, 1, longest, dtype=torch.bool, device=device)
    group = heads // kv_heads

    def eager(length):
        k, v = (t[:, :, :length] for t in cache)
        grouped = q.view(DECODE_BATCH, kv_heads, group, head_dim)
        scores = grouped @ k.transpose(-1, -2) * head_dim ** -0.5
        scores = scores.masked_fill(~mask[..., :length], float("-inf"))
        weights = torch.softmax(scores.float(), dim=-1).to(dtype)
        return (weights @ v).view(DECODE_BATCH, heads, 1, head_dim)

    calls = {
        "sdpa-gqa-mask": lambda length: F.scaled_dot_product_attention(
            q, cache[0][:, :, :length], cache[1][:, :, :length], attn_mask=mask[..., :length],
            enable_gqa=True),
        "sdpa-gqa": lambda length: F.scaled_dot_product_attention(
            q, cache[0][:, :, :length], cache[1][:, :, :length], enable_gqa=True),
        "eager": eager,
    }
    growing = list(range(DECODE_START, longest + 1))
    cases = []
    with torch.no_grad():
        for name, attend in calls.items():
            for shapes, label in [(growing, "growing"), ([longest] * (REPEATS + 1), "one shape")]:
                case = {"case": name, "cache": label}
                try:
                    case.update(timed(device, attend, shapes))
                except RuntimeError as error:
                    case["declined"] = str(error).splitlines()[0][:200]
                cases.append(case)
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=128)
    args = parser.parse_args()
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    shape = (args.heads, args.kv_heads, args.head_dim)
    report = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version() if device.type == "cuda" else None,
        "dtype": str(dtype).removeprefix("torch."),
        "heads": args.heads,
        "kv_heads": args.kv_heads,
        "head_dim": args.head_dim,
        "training": training_cases(device, dtype, *shape),
        "decode": decode_cases(device, dtype, *shape),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
