#!/usr/bin/env bash
# One GRPO iteration of drmas against one step of TRL's GRPOTrainer on the same settings (issue #6):
# configs/bench/grpo-trl.toml (8 GSM8K problems x 8 samples x <= 64 new tokens, SmolLM2-135M f32,
# CPU). Runs ours (`drmas-host train`, 2 iterations), then TRL (scripts/bench/trl_grpo.py), ROUNDS
# times alternating, then prints seconds per step, the rollout/update split, mean completion lengths,
# the ratio and the update's fraction of this machine's matmul peak, measured with the peer's
# PyTorch (scripts/bench/grpo_summary.py).
#
# The peer needs the venv of scripts/bench/peer-venv.sh (or DRMAS_PEER_PYTHON pointing to a python
# with torch, transformers and trl); without it only ours runs.
#
# Environment:
#   ROUNDS              alternating rounds of ours + TRL (default 1)
#   DRMAS_BENCH_THREADS torch threads on both sides (default 2)
#   DRMAS_PEER_PYTHON   the peer's python (default: the peer venv, when installed)
# Results: runs/bench-grpo-results/round-N/{metrics.jsonl,trl.json}.
source "$(dirname "${BASH_SOURCE[0]}")/../env.sh"

rounds="${ROUNDS:-1}"
threads="${DRMAS_BENCH_THREADS:-2}"
cache="${DRMAS_CACHE:-$HOME/.cache/drmas}"
config=configs/bench/grpo-trl.toml
run_dir=runs/bench-grpo
results=runs/bench-grpo-results

python="${DRMAS_PEER_PYTHON:-}"
if [[ -z "$python" && -f "$cache/peer-venv/.drmas-complete" ]]; then
  python="$cache/peer-venv/bin/python"
fi

cargo build --release -p drmas-host
host="${CARGO_TARGET_DIR:-target}/release/drmas-host"
model_stem="$(basename "$DRMAS_MODEL" .gguf)"
hf="$cache/peer/$model_stem-f32"
[[ -f "$hf/model.safetensors" ]] || "$host" convert "$DRMAS_MODEL" "$hf"

rm -rf "$results"
mkdir -p "$results"
for round in $(seq 1 "$rounds"); do
  dir="$results/round-$round"
  mkdir -p "$dir"
  rm -rf "$run_dir"
  echo "round $round, ours: $(uptime)"
  OMP_NUM_THREADS="$threads" "$host" train --plugins ./plugins --config "$config"
  cp "$run_dir/metrics.jsonl" "$dir/"
  if [[ -n "$python" ]]; then
    echo "round $round, TRL: $(uptime)"
    "$python" scripts/bench/trl_grpo.py --config "$config" --model "$hf" --threads "$threads" \
      | tail -n 1 > "$dir/trl.json"
  fi
  echo "round $round done: $(uptime)"
done
if [[ -z "$python" ]]; then
  echo "TRL skipped: no Python peer found. Run scripts/bench/peer-venv.sh (a venv with torch," \
       "transformers and trl, ~2.7 GB) or set DRMAS_PEER_PYTHON to a python that has them."
fi
# This machine's matmul peak, for the update's fraction of it: the peer's `matmul` (2048² f32 in
# PyTorch, the same MKL as ours, best of 8) on the same threads.
peak=()
if [[ -n "$python" ]]; then
  gflops="$(echo '{"cmd": "matmul", "n": 2048, "reps": 8}' \
    | OMP_NUM_THREADS="$threads" "$python" scripts/bench/peer.py \
    | python3 -c 'import json, sys; print(json.load(sys.stdin).get("gflops", ""))')"
  [[ -n "$gflops" ]] && peak=(--peak-gflops "$gflops")
fi
python3 scripts/bench/grpo_summary.py --model "$hf" "${peak[@]}" "$results"/round-*
