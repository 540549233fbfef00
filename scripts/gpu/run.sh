#!/usr/bin/env bash
# Runs the GPU bundle's drmas-host (built against libtorch 2.11.0 + CUDA 13.0) with the libtorch
# of this machine's PyTorch 2.11, whose libraries find their CUDA libraries themselves.
#
# Usage: ./run.sh [drmas-host arguments]      e.g. ./run.sh devices
# Environment:
#   DRMAS_PYTHON   the python3 that holds torch 2.11 (default: /opt/torch/.venv/bin/python3 when
#                  present, else python3 on the PATH)
#   DRMAS_PLUGINS  the plugins folder (default: the bundle's plugins/)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

python="${DRMAS_PYTHON:-}"
if [[ -z "$python" ]]; then
  for candidate in /opt/torch/.venv/bin/python3 python3; do
    if command -v "$candidate" >/dev/null; then
      python="$candidate"
      break
    fi
  done
fi
[[ -n "$python" ]] || { echo "run.sh: no python3 found; set DRMAS_PYTHON to the python3 that holds torch 2.11" >&2; exit 1; }

# Where torch is and its version, without importing it (no CUDA start-up).
if ! found="$("$python" - <<'PY'
import importlib.metadata, importlib.util, os
spec = importlib.util.find_spec("torch")
if spec is None or spec.origin is None:
    raise SystemExit("no torch")
print(importlib.metadata.version("torch"))
print(os.path.join(os.path.dirname(spec.origin), "lib"))
PY
)"; then
  echo "run.sh: $python has no torch; install torch==2.11.0 there or set DRMAS_PYTHON" >&2
  exit 1
fi
version="$(sed -n 1p <<<"$found")"
torch_lib="$(sed -n 2p <<<"$found")"
case "$version" in
  2.11.0 | 2.11.0+*) ;;
  *)
    echo "run.sh: $python has torch $version; this bundle is built against libtorch 2.11.0 and runs only with torch 2.11.0 (CUDA 13.0)" >&2
    exit 1
    ;;
esac
[[ -f "$torch_lib/libtorch_cuda.so" ]] \
  || { echo "run.sh: $torch_lib has no libtorch_cuda.so: torch $version there is a CPU-only build" >&2; exit 1; }

export LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export DRMAS_PLUGINS="${DRMAS_PLUGINS:-$here/plugins}"
exec "$here/bin/drmas-host" "$@"
