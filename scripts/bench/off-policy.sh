#!/usr/bin/env bash
# Synchronous against one-step off-policy iterations ([rollout] one_step_off_policy) on the demo
# run file (configs/demo.toml, its first ITERATIONS iterations, no evaluation) with rollouts on
# one `drmas-host serve --threads 1` worker. The worker is pinned to one core and the trainer to
# another (taskset), so the rollout and the update each have a core, as servers on their own GPUs
# or machines have. The two modes alternate, ROUNDS times. Prints the CPU, then a markdown table
# per run: wall seconds from start to end (model loading included), mean seconds per iteration of
# the rollout, the update and the update's wait for the next rollout, the largest sampler-trainer
# log-ratio, and the mean reward; then each round's off-policy time as a fraction of the
# synchronous one.
#
# Needs 2 cores, util-linux's taskset and the built-in model (scripts/install-model.sh).
#
# Environment:
#   ITERATIONS   iterations per run (default 4)
#   ROUNDS       synchronous/off-policy pairs (default 2)
#   BENCH_DIR    scratch folder (default runs/bench-off-policy)
source "$(dirname "${BASH_SOURCE[0]}")/../env.sh"
set -euo pipefail

iterations="${ITERATIONS:-4}"
rounds="${ROUNDS:-2}"
bench="${BENCH_DIR:-runs/bench-off-policy}"
target="${CARGO_TARGET_DIR:-target}"
[[ "$(nproc)" -ge 2 ]] || { echo "needs 2 cores: one for the worker, one for the trainer" >&2; exit 1; }
command -v taskset >/dev/null || { echo "needs taskset (util-linux)" >&2; exit 1; }
cargo build --release -p drmas-host -p drmas-math >&2
drmas="$target/release/drmas-host"
model="${DRMAS_MODEL:-${DRMAS_CACHE:-$HOME/.cache/drmas}/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
[[ -f "$model" ]] || { echo "the built-in model is missing: run scripts/install-model.sh" >&2; exit 1; }

rm -rf "$bench"
mkdir -p "$bench"
taskset -c 1 "$drmas" serve --model "$model" --port 0 --threads 1 >"$bench/worker.log" 2>&1 &
worker=$!
trap 'kill "$worker" 2>/dev/null || true' EXIT
url=""
for _ in $(seq 1 600); do
  url="$(grep -o 'http://[0-9.:]*' "$bench/worker.log" | head -1 || true)"
  [[ -n "$url" ]] && break
  sleep 0.1
done
[[ -n "$url" ]] || { echo "the worker did not start: $(cat "$bench/worker.log")" >&2; exit 1; }

# Trains the demo run file on the worker as run $1 (sync or off-policy in its name), pinned to
# core 0; writes its wall seconds to the run's folder.
run() {
  local name="$1" dir="$bench/$1"
  mkdir -p "$dir"
  sed -e "s|^output_dir = .*|output_dir = \"run\"|" -e "s|^iterations = .*|iterations = $iterations|" \
      -e "s|^model = \"builtin:smollm2-135m\"|model = \"$model\"|" -e "s|^k = 2|k = 0|" \
      configs/demo.toml >"$dir/run.toml"
  if [[ "$name" == off-policy* ]]; then
    sed -i 's|^\[rollout\]$|[rollout]\none_step_off_policy = true|' "$dir/run.toml"
  fi
  printf '\n[worker_groups.shared.rollout]\nbackend = "sglang"\nurls = ["%s"]\nrequest_timeout_s = 600\n' \
    "$url" >>"$dir/run.toml"
  echo "== $name" >&2
  local start end
  start="$(date +%s.%N)"
  taskset -c 0 "$drmas" train --plugins ./plugins/math --config "$dir/run.toml" >"$dir/train.log" 2>&1 ||
    { tail -20 "$dir/train.log" >&2; exit 1; }
  end="$(date +%s.%N)"
  python3 -c "print($end - $start)" >"$dir/wall_s"
}

names=()
for round in $(seq 1 "$rounds"); do
  run "sync $round"
  run "off-policy $round"
  names+=("sync $round" "off-policy $round")
done

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "date: $(date -u +%Y-%m-%dT%H:%MZ); commit $(git rev-parse --short HEAD); $iterations iterations each"
python3 - "$bench" "${names[@]}" <<'PY'
import json, sys, pathlib
bench = pathlib.Path(sys.argv[1])
print("| run | wall s | rollout s/it | update s/it | wait s/it | max abs log-ratio (solver, verifier) | reward |")
print("|---|---|---|---|---|---|---|")
walls = {}
for name in sys.argv[2:]:
    lines = [json.loads(l) for l in open(bench / name / "run" / "metrics.jsonl") if "reward/mean" in l]
    mean = lambda key: sum(l.get(key) or 0.0 for l in lines) / len(lines)
    waits = [l["time/next_rollout_wait_s"] for l in lines if "time/next_rollout_wait_s" in l]
    wait = f"{sum(waits) / len(waits):.1f}" if waits else "—"
    walls[name] = float((bench / name / "wall_s").read_text())
    top = ", ".join(
        f"{max(l[f'mismatch/{r}/log_ratio_abs_max'] for l in lines):.1e}" for r in ("solver", "verifier"))
    print(f"| {name} | {walls[name]:.1f} | {mean('time/rollout_s'):.1f} | {mean('time/update_s'):.1f} | "
          f"{wait} | {top} | {mean('reward/mean'):.3f} |")
for name in sys.argv[2:]:
    if name.startswith("off-policy"):
        round = name.split()[-1]
        print(f"round {round}: off-policy takes {walls[name] / walls['sync ' + round]:.2f}× the synchronous time")
PY
