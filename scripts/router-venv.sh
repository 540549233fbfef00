#!/usr/bin/env bash
# Installs PyPI's sglang-router (SGLang's router: a Rust binary built into a Python wheel) into a
# venv, once, at a pinned version. The router test (host/tests/router.rs) and the serving
# benchmark (scripts/bench/serving.sh) use it; without it the test is skipped with a message.
#
# The wheel is ~31 MB (~130 MB installed with fastapi, uvicorn, aiohttp, orjson, setproctitle).
# Idempotent: a finished venv is marked by a stamp file holding the pinned version.
# Prints the router's launcher (the venv's python) on stdout; everything else goes to stderr.
#
# Environment:
#   DRMAS_CACHE         cache folder (default ~/.cache/drmas)
#   DRMAS_ROUTER_VENV   the venv's folder (default $DRMAS_CACHE/router-venv)
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/pinned-venv.sh"
cache="${DRMAS_CACHE:-$HOME/.cache/drmas}"
pinned_venv router-venv "${DRMAS_ROUTER_VENV:-$cache/router-venv}" "~31 MB" \
  "import sglang_router.launch_router" sglang-router==0.3.2
