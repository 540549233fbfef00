#!/usr/bin/env bash
# The GPU check, run on the GPU machine from the bundle folder (scripts/gpu/bundle.sh) in one
# call of at most 9 minutes. Each step records its outcome and the next one runs anyway. Three
# files go to $OUT (default ./check-out): report.md, report.json (every step's outcome and JSON
# output) and logs.tar.gz (every step's output and log), rewritten after every step, so a call
# cut off by its time limit still brings back the steps it finished.
#
# Steps: the GPU as nvidia-smi sees it; `drmas-host devices` (CUDA available, device names); logits
# and greedy generations on the device against the CPU in f32 (`devices --compare`) for the tiny
# Llama/Qwen2/Qwen3 fixtures and a random SmolLM2-135M-shaped model (make_model.py), in f32 and
# bf16, on a CUDA device also with the decode steps replayed as CUDA graphs; one update step (a
# fixed batch of two agents' calls) on the device against the CPU in f32 (`devices
# --compare-update`: loss and per-agent gradient norms) for the same models and dtypes; one training
# iteration of a tiny run on the device in f32 and bf16, of a tiny LoRA run in bf16, and of the
# SmolLM2-shaped model in bf16 (also with CUDA graphs), each with its seconds and peak GPU memory;
# two SmolLM2-shaped groups sharing the device, with and without `offload = true` (peak GPU memory,
# the moves' seconds); two groups of two model families (SmolLM2-shaped Llama, Qwen2.5-0.5B-shaped
# Qwen2), both training, then with the Qwen2 group frozen and both offloaded; one iteration of the
# SmolLM2-shaped model with its rollouts on two `drmas-host serve` workers on the device, with an
# adapter per agent loaded through vLLM's LoRA routes, with full weights, and with full weights
# for three iterations one step off-policy (rollout and weight-sync seconds, the sampler-trainer
# log-ratio, the policy lag);
# and a long-response update step (8 × 2048 tokens) of the SmolLM2-shaped model with and
# without activation checkpointing (peak GPU memory, seconds).
#
# Usage: ./check.sh
# Environment:
#   OUT                  where the report goes (default ./check-out)
#   DRMAS_CHECK_DEVICE   the device checked (default cuda:0; `cpu` runs the same steps on a
#                        machine without a GPU, to check the script itself)
#   DRMAS_PYTHON         the python3 holding torch 2.11 (see run.sh)
#   DRMAS_CHECK_LONG_TOKENS  the response length of the long-response update (default 2048; a
#                        CPU dry run takes less)
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
device="${DRMAS_CHECK_DEVICE:-cuda:0}"
source "$here/steps.sh" check
report() {
  "$python" "$here/report.py" "$logs" "$out" "$device" "$((SECONDS - began))"
}

fixtures="$here/fixtures/hf"
smollm2="$work/smollm2-135m-random"
qwen="$work/qwen2.5-0.5b-random"

if command -v nvidia-smi >/dev/null; then
  step gpu 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
fi
step devices 60 "$here/run.sh" devices
step make-smollm2 120 "$python" "$here/make_model.py" "$smollm2" --tokenizer "$fixtures/llama"
for dtype in f32 bf16; do
  step "compare-fixtures-$dtype" 120 "$here/run.sh" devices --device "$device" --dtype "$dtype" \
    --compare "$fixtures/llama" --compare "$fixtures/qwen2" --compare "$fixtures/qwen3"
  step "compare-smollm2-$dtype" 150 "$here/run.sh" devices --device "$device" --dtype "$dtype" \
    --compare "$smollm2"
done
# The same comparisons with the decode steps replayed as CUDA graphs (DRMAS_CUDA_DECODE=graphs).
if [[ "$device" == cuda* ]]; then
  for dtype in f32 bf16; do
    step "compare-fixtures-$dtype-graphs" 120 env DRMAS_CUDA_DECODE=graphs "$here/run.sh" devices \
      --device "$device" --dtype "$dtype" --compare "$fixtures/llama" --compare "$fixtures/qwen2" \
      --compare "$fixtures/qwen3"
    step "compare-smollm2-$dtype-graphs" 150 env DRMAS_CUDA_DECODE=graphs "$here/run.sh" devices \
      --device "$device" --dtype "$dtype" --compare "$smollm2"
  done
fi
for dtype in f32 bf16; do
  step "update-fixtures-$dtype" 180 "$here/run.sh" devices --device "$device" --dtype "$dtype" \
    --compare-update "$fixtures/llama" --compare-update "$fixtures/qwen2" \
    --compare-update "$fixtures/qwen3"
  step "update-smollm2-$dtype" 150 "$here/run.sh" devices --device "$device" --dtype "$dtype" \
    --compare-update "$smollm2"
done
train train-tiny-f32 "$fixtures/llama" f32
train train-tiny-bf16 "$fixtures/llama" bf16
train train-tiny-lora-bf16 "$fixtures/llama" bf16 shared \
  '[worker_groups.shared.lora]\nrank = 8\nalpha = 16\nper_agent = true'
train train-smollm2-bf16 "$smollm2" bf16
if [[ "$device" == cuda* ]]; then
  DRMAS_CUDA_DECODE=graphs train train-smollm2-bf16-graphs "$smollm2" bf16
fi
train train-smollm2-two-groups-bf16 "$smollm2" bf16 two
train train-smollm2-two-groups-offload-bf16 "$smollm2" bf16 two 'offload = true'
# Two model families sharing the device: the Solver's group on the SmolLM2-shaped Llama, the
# Verifier's on a Qwen2.5-0.5B-shaped Qwen2 (drawn on the device), each with its own tokenizer and
# optimizer; then the same with the Verifier frozen and both groups offloaded (the frozen group's
# weights leave while the other updates).
step make-qwen2.5-0.5b 120 "$python" "$here/make_model.py" "$qwen" --arch qwen2.5-0.5b \
  --tokenizer "$fixtures/qwen2" --dtype bf16 --device "${device%%:*}"
RUN_VERIFIER_MODEL="$qwen" train train-two-families-bf16 "$smollm2" bf16 two
RUN_VERIFIER_MODEL="$qwen" RUN_VERIFIER_FROZEN=1 \
  train train-two-families-frozen-offload-bf16 "$smollm2" bf16 two 'offload = true'
# Two `drmas-host serve` workers on the device serving the SmolLM2-shaped model in bf16, and the
# same one-iteration run with its rollouts on them (addressed directly: the device has no
# sglang-router): first with an adapter per agent, loaded through vLLM's LoRA routes, then with
# full weights, which the run pushes to both (so after the LoRA run: they change the base the
# workers hold), then three iterations of it one step off-policy (each rollout after the first
# made beside the previous update). Their metrics carry the rollout and weight-sync seconds and
# the sampler-trainer log-ratio, next to train-smollm2-bf16's in process.
# serve_worker N starts worker N and sets $url to its URL (empty if it did not start); it is not
# called as $(…), whose subshell would keep the pid from server_pids.
serve_worker() {
  local log="$logs/serve-worker-$1.log"
  url=""
  "$here/run.sh" serve --model "$smollm2" --served-model-name smollm2 --device "$device" \
    --dtype bf16 --port 0 --max-loras 4 >"$log" 2>&1 &
  server_pids+=($!)
  for _ in $(seq 1 1200); do
    if grep -q "listening on" "$log"; then
      url="$(grep -o 'http://[0-9.:]*' "$log" | head -1)"
      return
    fi
    sleep 0.1
  done
}
server_pids=()
serve_worker 1
first="$url"
serve_worker 2
second="$url"
if [[ -n "$first" && -n "$second" ]]; then
  train train-smollm2-served-lora-bf16 "$smollm2" bf16 shared \
    "[worker_groups.shared.rollout]\nbackend = \"openai\"\nurls = [\"$first\", \"$second\"]
model_name = \"smollm2\"\nweight_sync = \"vllm\"
[worker_groups.shared.lora]\nrank = 8\nalpha = 16\nper_agent = true"
  train train-smollm2-served-bf16 "$smollm2" bf16 shared \
    "[worker_groups.shared.rollout]\nbackend = \"sglang\"\nurls = [\"$first\", \"$second\"]"
  RUN_ITERATIONS=3 RUN_ROLLOUT_EXTRA="one_step_off_policy = true" \
    train train-smollm2-served-off-policy-bf16 "$smollm2" bf16 shared \
    "[worker_groups.shared.rollout]\nbackend = \"sglang\"\nurls = [\"$first\", \"$second\"]"
else
  for name in train-smollm2-served-lora-bf16 train-smollm2-served-bf16 \
    train-smollm2-served-off-policy-bf16; do
    step "$name" 5 sh -c 'echo "a serve worker did not start (serve-worker-*.log)" >&2; exit 1'
  done
fi
kill "${server_pids[@]}" 2>/dev/null
wait "${server_pids[@]}" 2>/dev/null
for checkpointing in "" --activation-checkpointing; do
  step "long-update-smollm2-bf16${checkpointing:+-checkpointed}" 150 "$here/run.sh" devices \
    --device "$device" --dtype bf16 --update "$smollm2" --calls 8 --response-tokens \
    "${DRMAS_CHECK_LONG_TOKENS:-2048}" $checkpointing
done

write_report
log "done in $((SECONDS - began)) s: $out/report.md"
