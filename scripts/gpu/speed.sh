#!/usr/bin/env bash
# The GPU speed table, run on the GPU machine from the bundle folder (scripts/gpu/bundle.sh) in
# one call of at most 9 minutes per architecture: drmas against the device's own PyTorch and
# transformers on the same random-initialised model of a real architecture (make_model.py, bf16).
# Each step records its outcome and the next one runs anyway. Three files go to $OUT (default
# ./speed-out): speed.md, speed.json and logs.tar.gz, rewritten after every step, so a call cut
# off by its time limit still brings back the steps it finished.
#
# Steps, per architecture:
#   qwen2.5-1.5b (default): sampled generation of 64 and 256 random 64-token prompts continued
#     by 512 tokens (`devices --generate`, its decode steps eager and on a CUDA device also
#     replayed as CUDA graphs, against HF `generate`, dynamic cache, and for batch 64 also the
#     static cache); one training step of 16 calls of 32 + 480 tokens (`devices
#     --update`, bf16 weights with f32 masters) against PyTorch eager with autocast (f32 weights)
#     and in bf16, drmas's with the calls of one agent (the peer's step), of two (a pass and a
#     gradient norm per agent), and of one with DRMAS_CUDA_ATTENTION=libtorch (libtorch's own
#     choice of attention kernel); one GRPO iteration of `drmas-host train` (math Solver and
#     Verifier sharing the model, 16 prompts × 8 samples, responses of at most 256 tokens,
#     micro-batches of at most 16,384 tokens), its rollout and update seconds.
#   drmas's eager generation and training steps each run once more under libtorch's profiler
#     (`--profile`), and so do transformers' dynamic-cache generation and PyTorch's training
#     steps under PyTorch's (peer_speed.py --profile): the report sets each side's host events,
#     kernels and device busy time side by side and lists their busiest kernels and operators.
#   attention_probe.py first, with the architecture's heads: which attention kernels libtorch
#     runs for drmas's and transformers' attention calls in training and decoding, and their
#     milliseconds (first call and median), also with each SDPA backend forced.
#   qwen2.5-7b: generation at batch 64 the same way; one training step of 8 calls of
#     32 + 2048 tokens with activation checkpointing on both sides.
#   grpo: GRPO against TRL's GRPOTrainer on the qwen2.5-1.5b model: the math Solver alone on 16
#     GSM8K problems × 8 samples × at most 256 tokens, one run file for both sides (TRL has one
#     agent); two iterations of `drmas-host train` (bf16 weights, f32 masters) and two
#     GRPOTrainer steps (f32 weights, bf16 autocast), both in micro-batches of 16 completions
#     without activation checkpointing, the second of each timed. TRL and the datasets package
#     it needs are not on the device: the bundle carries their wheels (wheels/), installed into
#     a temporary folder.
#
# Usage: ./speed.sh [qwen2.5-1.5b | qwen2.5-7b | grpo]
# Environment:
#   OUT                   where the report goes (default ./speed-out)
#   DRMAS_SPEED_DEVICE    the device (default cuda:0; `cpu` with the settings below runs the steps
#                         on a machine without a GPU, to check the script itself)
#   DRMAS_SPEED_MODEL     an HF folder to time instead of making the architecture's model
#   DRMAS_SPEED_BATCHES, DRMAS_SPEED_NEW_TOKENS, DRMAS_SPEED_CALLS,
#   DRMAS_SPEED_RESPONSE_TOKENS, DRMAS_SPEED_GRPO ("PROMPTS GROUP_SIZE TOKENS", or "none")
#                         override the shapes above
#   DRMAS_SPEED_CACHES    transformers' caches timed at batch 64 (default "dynamic static"; on
#                         an H100 the static cache's step took 119 s, the dynamic one's 64 s)
#   DRMAS_PYTHON          the python3 holding torch 2.11 (see run.sh)
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
arch="${1:-qwen2.5-1.5b}"
device="${DRMAS_SPEED_DEVICE:-cuda:0}"
source "$here/steps.sh" speed

case "$arch" in
  qwen2.5-1.5b)
    batches="${DRMAS_SPEED_BATCHES:-64 256}" calls="${DRMAS_SPEED_CALLS:-16}"
    response="${DRMAS_SPEED_RESPONSE_TOKENS:-480}" checkpointing=""
    precisions="autocast bf16" grpo="${DRMAS_SPEED_GRPO:-16 8 256}" trl_grpo=none
    heads="12 2 128" more_agents=2 attention_row=yes
    ;;
  qwen2.5-7b)
    batches="${DRMAS_SPEED_BATCHES:-64}" calls="${DRMAS_SPEED_CALLS:-8}"
    response="${DRMAS_SPEED_RESPONSE_TOKENS:-2048}" checkpointing="--activation-checkpointing"
    precisions="bf16" grpo="${DRMAS_SPEED_GRPO:-none}" trl_grpo=none
    heads="28 4 128" more_agents="" attention_row=no
    ;;
  grpo)
    arch=qwen2.5-1.5b batches="" calls="" precisions="" grpo=none more_agents="" attention_row=no
    trl_grpo="${DRMAS_SPEED_GRPO:-16 8 256}" heads=""
    ;;
  *)
    log "unknown architecture $arch: qwen2.5-1.5b, qwen2.5-7b or grpo"
    exit 2
    ;;
esac
new_tokens="${DRMAS_SPEED_NEW_TOKENS:-512}"
init_device=cpu
[[ "$device" == cuda* ]] && init_device="$device"

model="${DRMAS_SPEED_MODEL:-$work/$arch-random}"
report() {
  "$python" "$here/speed_report.py" "$logs" "$out" "$device" "$model" "$((SECONDS - began))"
}

if [[ -n "$heads" ]]; then
  read -r query_heads kv_heads head_dim <<<"$heads"
  step attention-probe 120 "$python" "$here/attention_probe.py" --device "$device" \
    --heads "$query_heads" --kv-heads "$kv_heads" --head-dim "$head_dim"
fi
if [[ -z "${DRMAS_SPEED_MODEL:-}" ]]; then
  step "make-$arch" 240 "$python" "$here/make_model.py" "$model" --arch "$arch" --dtype bf16 \
    --device "$init_device" --tokenizer "$here/fixtures/hf/qwen2"
fi
# The GRPO comparison with TRL: the Solver alone on the bundle's GSM8K problems, its prompt
# and TRL's defaults (symmetric clip 0.2, token-mean loss, no KL), as configs/bench/grpo-trl.toml.
solver_run_file() {
  local prompts="$1" group_size="$2" tokens="$3" micro_batch="$4"
  cat <<EOF
[run]
output_dir = "$work/runs/grpo-solver-drmas"
seed = 0
iterations = 2
eval_every = 0
save_every = -1

[environment]
name = "math"
params = { format = "gsm8k" }
train_data = { path = "$here/fixtures/gsm8k/test-16.jsonl" }

[orchestra]
name = "solver-only"

[[agents]]
role = "solver"
agent = "Solver Agent"
worker_group = "policy"
params = { prompt = "{question}\n\nPlease reason step by step, and put your final answer within \\\\boxed{}." }

[worker_groups.policy]
model = "$model"
dtype = "bf16"
device = "$device"
learning_rate = 1e-6
micro_batch_size = $micro_batch

[algorithm]
estimator = "grpo"

[algorithm.loss]
clip_low = 0.2
clip_high = 0.2
aggregation = "token-mean"

[rollout]
prompts_per_batch = $prompts
group_size = $group_size
temperature = 1.0
max_prompt_tokens = 512
max_response_tokens = $tokens
EOF
}

if [[ "$trl_grpo" != none ]]; then
  read -r prompts group_size tokens <<<"$trl_grpo"
  # Both sides run forward and backward on 16 completions at a time (fewer in a smaller check).
  micro_batch=$((prompts * group_size < 16 ? prompts * group_size : 16))
  solver_run_file "$prompts" "$group_size" "$tokens" "$micro_batch" >"$work/grpo-solver.toml"
  step grpo-solver-drmas 300 "$here/run.sh" train --config "$work/grpo-solver.toml"
  if [[ -f "$work/runs/grpo-solver-drmas/metrics.jsonl" ]]; then
    cp "$work/runs/grpo-solver-drmas/metrics.jsonl" "$logs/grpo-solver-drmas.metrics.jsonl"
  fi
  step trl-install 120 "$python" -m pip install --no-deps --no-index --quiet \
    --target "$work/python" "$here"/wheels/*.whl
  step grpo-solver-trl 300 env PYTHONPATH="$work/python" "$python" "$here/trl_grpo.py" \
    --config "$work/grpo-solver.toml" --model "$model" --device "$device" \
    --precision autocast --steps 2 --no-gradient-checkpointing --micro-batch "$micro_batch"
fi
for batch in $batches; do
  step "generate-drmas-b$batch" 300 "$here/run.sh" devices --device "$device" --dtype bf16 \
    --generate "$model" --batch "$batch" --prompt-tokens 64 --new-tokens "$new_tokens" --profile
  if [[ "$device" == cuda* ]]; then
    # Not profiled: CUPTI and graph capture have hung or crashed together in libtorch's
    # profiler, and a hang would take the step's whole 300 s.
    step "generate-drmas-graphs-b$batch" 300 env DRMAS_CUDA_DECODE=graphs "$here/run.sh" devices \
      --device "$device" --dtype bf16 --generate "$model" --batch "$batch" --prompt-tokens 64 \
      --new-tokens "$new_tokens"
  fi
  caches=dynamic
  [[ "$batch" == 64 ]] && caches="${DRMAS_SPEED_CACHES:-dynamic static}"
  for cache in $caches; do
    # The static cache is left unprofiled, as drmas's CUDA graphs are: transformers may compile
    # its steps into graphs.
    profile=""
    [[ "$cache" == dynamic ]] && profile=--profile
    step "generate-transformers-$cache-b$batch" 300 "$python" "$here/peer_speed.py" generate \
      "$model" --device "$device" --batch "$batch" --prompt-tokens 64 \
      --new-tokens "$new_tokens" --cache "$cache" $profile
  done
done
if [[ -n "$calls" ]]; then
  # One agent is the peer's step; two add a pass and a gradient norm per agent (Dr. MAS's
  # per-agent norms), so the second row says what those cost.
  step train-drmas 300 "$here/run.sh" devices --device "$device" --dtype bf16 --update "$model" \
    --calls "$calls" --agents 1 --response-tokens "$response" $checkpointing --profile
  for agents in $more_agents; do
    step "train-drmas-$agents-agents" 300 "$here/run.sh" devices --device "$device" \
      --dtype bf16 --update "$model" --calls "$calls" --agents "$agents" \
      --response-tokens "$response" $checkpointing
  done
  # The attention libtorch would choose itself (cuDNN on Hopper), against drmas's default.
  if [[ "$attention_row" == yes ]]; then
    step train-drmas-libtorch-attention 300 env DRMAS_CUDA_ATTENTION=libtorch "$here/run.sh" \
      devices --device "$device" --dtype bf16 --update "$model" --calls "$calls" --agents 1 \
      --response-tokens "$response" $checkpointing
  fi
fi
for precision in $precisions; do
  step "train-pytorch-$precision" 300 "$python" "$here/peer_speed.py" train "$model" \
    --device "$device" --calls "$calls" --prompt-tokens 32 --response-tokens "$response" \
    --precision "$precision" $checkpointing --profile
done
if [[ "$grpo" != none ]]; then
  read -r prompts group_size tokens <<<"$grpo"
  # Micro-batches by tokens, as a GPU run sets them: the Verifier's short verdicts train in a
  # few passes rather than one per 8 of them.
  train grpo-drmas "$model" bf16 shared "micro_batch_tokens = 16384" "$prompts" "$group_size" \
    "$tokens" 300
fi

write_report
log "done in $((SECONDS - began)) s: $out/speed.md"
