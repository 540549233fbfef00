#!/usr/bin/env bash
# The GPU speed table, run on the GPU machine from the bundle folder (scripts/gpu/bundle.sh) in
# one call of at most 9 minutes per architecture: drmas against the device's own PyTorch and
# transformers on the same random-initialised model of a real architecture (make_model.py, bf16).
# Each step records its outcome and the next one runs anyway. Three files go to $OUT (default
# ./speed-out): speed.md, speed.json and logs.tar.gz.
#
# Steps, per architecture:
#   qwen2.5-1.5b (default): sampled generation of 64 and 256 random 64-token prompts continued
#     by 512 tokens (`devices --generate` against HF `generate`, dynamic cache, and for batch 64
#     also the static cache); one training step of 16 calls of 32 + 480 tokens (`devices
#     --update`, bf16 weights with f32 masters) against PyTorch eager with autocast (f32 weights)
#     and in bf16; one GRPO iteration of `drmas-host train` (math Solver and Verifier sharing the
#     model, 16 prompts × 8 samples, responses of at most 256 tokens), its rollout and update
#     seconds. No TRL runs on the device (it is not installed there), so that row has no peer.
#   qwen2.5-7b: generation at batch 64 the same way; one training step of 8 calls of
#     32 + 2048 tokens with activation checkpointing on both sides.
#
# Usage: ./speed.sh [qwen2.5-1.5b | qwen2.5-7b]
# Environment:
#   OUT                   where the report goes (default ./speed-out)
#   DRMAS_SPEED_DEVICE    the device (default cuda:0; `cpu` with the settings below runs the steps
#                         on a machine without a GPU, to check the script itself)
#   DRMAS_SPEED_MODEL     an HF folder to time instead of making the architecture's model
#   DRMAS_SPEED_BATCHES, DRMAS_SPEED_NEW_TOKENS, DRMAS_SPEED_CALLS,
#   DRMAS_SPEED_RESPONSE_TOKENS, DRMAS_SPEED_GRPO ("PROMPTS GROUP_SIZE TOKENS", or "none")
#                         override the shapes above
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
    precisions="autocast bf16" grpo="${DRMAS_SPEED_GRPO:-16 8 256}"
    ;;
  qwen2.5-7b)
    batches="${DRMAS_SPEED_BATCHES:-64}" calls="${DRMAS_SPEED_CALLS:-8}"
    response="${DRMAS_SPEED_RESPONSE_TOKENS:-2048}" checkpointing="--activation-checkpointing"
    precisions="bf16" grpo="${DRMAS_SPEED_GRPO:-none}"
    ;;
  *)
    log "unknown architecture $arch: qwen2.5-1.5b or qwen2.5-7b"
    exit 2
    ;;
esac
new_tokens="${DRMAS_SPEED_NEW_TOKENS:-512}"
init_device=cpu
[[ "$device" == cuda* ]] && init_device="$device"

model="${DRMAS_SPEED_MODEL:-$work/$arch-random}"
if [[ -z "${DRMAS_SPEED_MODEL:-}" ]]; then
  step "make-$arch" 240 "$python" "$here/make_model.py" "$model" --arch "$arch" --dtype bf16 \
    --device "$init_device" --tokenizer "$here/fixtures/hf/qwen2"
fi
for batch in $batches; do
  step "generate-drmas-b$batch" 300 "$here/run.sh" devices --device "$device" --dtype bf16 \
    --generate "$model" --batch "$batch" --prompt-tokens 64 --new-tokens "$new_tokens"
  caches=dynamic
  [[ "$batch" == 64 ]] && caches="dynamic static"
  for cache in $caches; do
    step "generate-transformers-$cache-b$batch" 300 "$python" "$here/peer_speed.py" generate \
      "$model" --device "$device" --batch "$batch" --prompt-tokens 64 \
      --new-tokens "$new_tokens" --cache "$cache"
  done
done
step train-drmas 300 "$here/run.sh" devices --device "$device" --dtype bf16 --update "$model" \
  --calls "$calls" --response-tokens "$response" $checkpointing
for precision in $precisions; do
  step "train-pytorch-$precision" 300 "$python" "$here/peer_speed.py" train "$model" \
    --device "$device" --calls "$calls" --prompt-tokens 32 --response-tokens "$response" \
    --precision "$precision" $checkpointing
done
if [[ "$grpo" != none ]]; then
  read -r prompts group_size tokens <<<"$grpo"
  train grpo-drmas "$model" bf16 shared "" "$prompts" "$group_size" "$tokens" 300
fi

log "writing the report"
tar -czf "$out/logs.tar.gz" -C "$work" logs
"$python" "$here/speed_report.py" "$logs" "$out" "$device" "$model" "$((SECONDS - began))" \
  || log "speed_report.py failed"
log "done in $((SECONDS - began)) s: $out/speed.md"
