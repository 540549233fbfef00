"""Summarises scripts/bench/grpo-vs-trl.sh: per round, drmas's iterations (rollout, update, total
seconds, mean completion length) and TRL's step, the ratio TRL / ours, and the update's fraction
of the matmul peak: this machine's when given (`--peak-gflops`, which grpo-vs-trl.sh measures
with the peer's PyTorch), else the reference machine's 171 GFLOP/s, said so. Standard library
only (runs without the peer venv).

    python3 scripts/bench/grpo_summary.py --model HF_FOLDER [--peak-gflops G] ROUND_DIR...

FLOPs of an update, two ways:
  simple:  6 x P x T           P every matmul weight (linear layers + LM head), T tokens trained
  precise: 6 x (P_body x T + P_head x R)   the LM head runs over the R response tokens only
T counts the tokens through the forward pass (prompts, responses and the little padding left by
length-sorted micro-batches).
"""

import argparse
import json
from pathlib import Path

REFERENCE_PEAK = 171e9  # FLOP/s, the matmul peak of the reference machine


def matmul_weights(config):
    """(weights of the decoder's linear layers, weights of the LM head) from an HF config.json."""
    h = config["hidden_size"]
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or h // heads
    kv = config.get("num_key_value_heads", heads)
    layer = 2 * h * heads * head_dim + 2 * h * kv * head_dim + 3 * h * config["intermediate_size"]
    return config["num_hidden_layers"] * layer, config["vocab_size"] * h


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, type=Path, help="the HF folder (for its config.json)")
    parser.add_argument("--peak-gflops", type=float,
                        help="this machine's matmul peak, GFLOP/s (default: the reference machine's)")
    parser.add_argument("rounds", nargs="+", type=Path)
    args = parser.parse_args()
    peak = args.peak_gflops * 1e9 if args.peak_gflops else REFERENCE_PEAK
    if args.peak_gflops:
        print(f"matmul peak here (2048² f32, PyTorch, best of 8): {peak / 1e9:.1f} GFLOP/s")
    else:
        print(f"no peer to measure this machine's matmul peak: percentages are of the reference "
              f"machine's {REFERENCE_PEAK / 1e9:.0f} GFLOP/s")
    body, head = matmul_weights(json.loads((args.model / "config.json").read_text()))

    ours_totals, trl_totals = [], []
    for folder in args.rounds:
        print(f"{folder}:")
        for line in (folder / "metrics.jsonl").read_text().splitlines():
            m = json.loads(line)
            if "time/update_s" not in m:
                continue
            rollout, update = m["time/rollout_s"], m["time/update_s"]
            forward = m["tokens_per_s/update"] * update
            responses = m["calls/solver"] * m["response_len/solver"]
            simple = 6 * (body + head) * forward / update
            precise = 6 * (body * forward + head * responses) / update
            ours_totals.append(rollout + update)
            print(
                f"  ours iteration {m['iteration']}: {rollout + update:.1f} s = rollout {rollout:.1f} s "
                f"({m['tokens_per_s/rollout']:.0f} tok/s) + update {update:.1f} s; mean completion "
                f"{m['response_len/solver']:.1f} tokens, reward {m['reward/mean']:.3f}; update "
                f"{forward:.0f} tokens ({responses:.0f} response): {simple / 1e9:.1f} GFLOP/s simple = "
                f"{100 * simple / peak:.0f} % of peak, {precise / 1e9:.1f} precise = "
                f"{100 * precise / peak:.0f} %"
            )
        trl_file = folder / "trl.json"
        if trl_file.is_file() and trl_file.read_text().strip():
            t = json.loads(trl_file.read_text())
            trl_totals.append(t["step_s"])
            print(
                f"  TRL step: {t['step_s']:.1f} s = generate {t['generate_s']:.1f} s + the rest "
                f"{t['update_s']:.1f} s; mean completion {t['mean_completion_len']:.1f} tokens, "
                f"reward {t['reward_mean']:.3f} (trl {t['trl']}, transformers {t['transformers']}, "
                f"torch {t['torch']}, {t['threads']} threads, gradient checkpointing "
                f"{'on' if t.get('gradient_checkpointing', True) else 'off'})"
            )
    if ours_totals and trl_totals:
        ours = sum(ours_totals) / len(ours_totals)
        trl = sum(trl_totals) / len(trl_totals)
        print(
            f"mean: ours {ours:.1f} s per iteration, TRL {trl:.1f} s per step: ours is "
            f"{trl / ours:.2f}x faster (target >= 2.5x)"
        )


if __name__ == "__main__":
    main()
