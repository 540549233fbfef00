#!/usr/bin/env bash
# Lays out libtorch 2.11.0 with CUDA 13.0 (the release tch 0.24 needs) from PyPI's torch wheel, once,
# with the CUDA 13.0 runtime's headers beside it (cuda-include/, from NVIDIA's PyPI wheels): the
# CUDA graph shim (host/src/engine/cuda_graph.cpp) compiles against them.
#
# PyPI's `torch==2.11.0` Linux x86_64 wheel is the CUDA 13.0 build. Its `torch/include` and
# `torch/lib` are a libtorch folder; the CUDA libraries libtorch_cuda.so needs (cuBLAS, cuDNN, ...)
# come in other wheels and are not fetched: they are needed only at run time, where the GPU
# machine's own PyTorch provides them (see scripts/gpu/bundle.sh and docs/install.md).
#
# Idempotent: a finished install is marked by a stamp file and is never fetched again.
# Prints the install folder on stdout (everything else goes to stderr).
#
# Environment:
#   DRMAS_CACHE   where downloads and the libtorch folder live (default ~/.cache/drmas)
set -euo pipefail

TORCH_VERSION=2.11.0
# The CUDA runtime and compiler-runtime headers of cuda-toolkit 13.0.2, which torch 2.11.0 requires.
CUDA_RUNTIME_VERSION=13.0.96
CUDA_CRT_VERSION=13.0.88
cache="${DRMAS_CACHE:-$HOME/.cache/drmas}"
dest="$cache/libtorch-$TORCH_VERSION-cu130"
stamp="$dest/.drmas-complete"

log() { echo "[gpu/install-libtorch] $*" >&2; }

# The CUDA runtime's headers (cuda_runtime_api.h and what it includes: 5 MB), in
# $dest/cuda-include, once; marked by their own stamp, so an older install gains them.
install_cuda_headers() {
  local headers="$dest/cuda-include" work
  [[ -f "$headers/.drmas-complete" ]] && return 0
  command -v python3 >/dev/null || { log "python3 with pip is needed to fetch the CUDA header wheels from PyPI"; exit 1; }
  work="$(mktemp -d "$cache/tmp.XXXXXX")"
  log "fetching the CUDA 13.0 runtime headers (nvidia-cuda-runtime, nvidia-cuda-crt; ~4 MB, once)"
  python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$work/wheels" \
    "nvidia-cuda-runtime==$CUDA_RUNTIME_VERSION" "nvidia-cuda-crt==$CUDA_CRT_VERSION" >&2
  python3 - "$work/include" "$work"/wheels/*.whl >&2 <<'PY'
import os, sys, zipfile
out, wheels = sys.argv[1], sys.argv[2:]
prefix = "nvidia/cu13/include/"
for wheel in wheels:
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.startswith(prefix) and not name.endswith("/"):
                path = os.path.join(out, name[len(prefix):])
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with z.open(name) as src, open(path, "wb") as dst:
                    dst.write(src.read())
PY
  [[ -f "$work/include/cuda_runtime_api.h" && -f "$work/include/crt/host_config.h" ]] \
    || { log "wheel layout changed: nvidia/cu13/include/cuda_runtime_api.h not found"; rm -rf "$work"; exit 1; }
  rm -rf "$headers"
  mv "$work/include" "$headers"
  rm -rf "$work"
  touch "$headers/.drmas-complete"
}

if [[ -f "$stamp" ]]; then
  install_cuda_headers
  echo "$dest"
  exit 0
fi
command -v python3 >/dev/null || { log "python3 with pip is needed to fetch the torch wheel from PyPI"; exit 1; }
[[ "$(uname -sm)" == "Linux x86_64" ]] || { log "the CUDA build is made on Linux x86_64 only (this is $(uname -sm))"; exit 1; }

mkdir -p "$cache"
work="$(mktemp -d "$cache/tmp.XXXXXX")"
trap 'rm -rf "$work"' EXIT

log "fetching torch==$TORCH_VERSION (CUDA 13.0, ~530 MB, once)"
python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$work/wheels" "torch==$TORCH_VERSION" >&2

log "unpacking include/ and lib/"
python3 - "$work"/wheels/torch-*.whl "$work/unpacked" >&2 <<'PY'
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    z.extractall(out, [n for n in z.namelist() if n.startswith(("torch/include/", "torch/lib/"))])
PY

staged="$work/libtorch"
mkdir -p "$staged/lib"
mv "$work/unpacked/torch/include" "$staged/include"
# libtorch_python.so is Python's extension glue: a Rust program never loads it.
for lib in "$work"/unpacked/torch/lib/*.so*; do
  [[ "$(basename "$lib")" == libtorch_python.so ]] || mv "$lib" "$staged/lib/"
done
[[ -f "$staged/lib/libtorch_cuda.so" ]] || { log "wheel layout changed: torch/lib/libtorch_cuda.so not found"; exit 1; }
echo "$TORCH_VERSION" > "$staged/build-version"

rm -rf "$dest"
mv "$staged" "$dest"
touch "$stamp"
install_cuda_headers
log "installed libtorch $TORCH_VERSION (CUDA 13.0) in $dest"
echo "$dest"
