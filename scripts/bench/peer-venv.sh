#!/usr/bin/env bash
# Creates the Python venv of the peer benchmarks (HF transformers generate, PyTorch eager training,
# TRL GRPOTrainer), once, with pinned versions from PyPI.
#
# PyPI's torch wheel is a CUDA build: with its dependencies the venv takes ~2.7 GB of downloads
# (~5 GB on disk). The benchmarks run it on the CPU.
#
# Idempotent: a finished venv is marked by a stamp file holding the pinned list; the same list is
# never installed twice, a changed one replaces the venv.
# Prints the venv's python on stdout (everything else goes to stderr). The Rust benchmarks find it
# there (or wherever $DRMAS_PEER_PYTHON points).
#
# Environment:
#   DRMAS_CACHE       cache folder (default ~/.cache/drmas)
#   DRMAS_PEER_VENV   the venv's folder (default $DRMAS_CACHE/peer-venv)
set -euo pipefail

PINS=(torch==2.13.0 transformers==5.23.0 trl==1.16.0 accelerate==1.15.0 datasets==5.2.0)
cache="${DRMAS_CACHE:-$HOME/.cache/drmas}"
venv="${DRMAS_PEER_VENV:-$cache/peer-venv}"
stamp="$venv/.drmas-complete"

if [[ -f "$stamp" && "$(cat "$stamp")" == "${PINS[*]}" ]]; then
  echo "$venv/bin/python"
  exit 0
fi

log() { echo "[peer-venv] $*" >&2; }
command -v python3 >/dev/null || { log "python3 (3.10 or newer, with venv) is needed"; exit 1; }

rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
log "creating $venv"
python3 -m venv "$venv" >&2 || { log "python3 -m venv failed (on Debian/Ubuntu: apt-get install python3-venv)"; exit 1; }
log "installing ${PINS[*]} from PyPI (~2.7 GB, once)"
"$venv/bin/python" -m pip install --quiet --upgrade pip >&2
"$venv/bin/python" -m pip install --quiet "${PINS[@]}" >&2
echo "${PINS[*]}" > "$stamp"
log "ready: $venv"
echo "$venv/bin/python"
