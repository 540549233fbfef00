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

source "$(dirname "${BASH_SOURCE[0]}")/../pinned-venv.sh"
cache="${DRMAS_CACHE:-$HOME/.cache/drmas}"
pinned_venv peer-venv "${DRMAS_PEER_VENV:-$cache/peer-venv}" "~2.7 GB" "" \
  torch==2.13.0 transformers==5.23.0 trl==1.16.0 accelerate==1.15.0 datasets==5.2.0
