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

PIN="sglang-router==0.3.2"
cache="${DRMAS_CACHE:-$HOME/.cache/drmas}"
venv="${DRMAS_ROUTER_VENV:-$cache/router-venv}"
stamp="$venv/.drmas-complete"

if [[ -f "$stamp" && "$(cat "$stamp")" == "$PIN" ]]; then
  echo "$venv/bin/python"
  exit 0
fi

log() { echo "[router-venv] $*" >&2; }
command -v python3 >/dev/null || { log "python3 (3.8 or newer, with venv) is needed"; exit 1; }

rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
log "creating $venv"
python3 -m venv "$venv" >&2 || { log "python3 -m venv failed (on Debian/Ubuntu: apt-get install python3-venv)"; exit 1; }
log "installing $PIN from PyPI (~31 MB, once)"
"$venv/bin/python" -m pip install --quiet "$PIN" >&2
"$venv/bin/python" -c "import sglang_router.launch_router" >&2
echo "$PIN" > "$stamp"
log "ready: $venv"
echo "$venv/bin/python"
