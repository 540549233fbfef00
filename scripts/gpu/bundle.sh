#!/usr/bin/env bash
# Builds the GPU bundle: drmas-host linked against libtorch 2.11.0 with CUDA 13.0 and the
# built-in plugins, in release and stripped, plus what scripts/gpu/check.sh and speed.sh run,
# into one folder (default target/gpu-bundle, ~20 MB) that travels to a GPU machine holding
# PyTorch 2.11.0+cu130.
#
# The workspace builds with tch 0.26 / libtorch 2.13 (CPU); tch 0.24 is the release for
# libtorch 2.11, and the host compiles unchanged against both (tch 0.26 only adds operators the
# host does not call). So this script copies the sources into target/gpu/src, pins tch and
# torch-sys to 0.24.0 there (every other crate keeps Cargo.lock's version), and builds in its own
# target folder, target/gpu/build, never the workspace's. See docs/install.md ("GPU").
#
# Linking: only libtorch_cuda.so's registration code makes CUDA available, and nothing
# references its symbols, so the linker would drop it (--as-needed): it is linked with
# --no-as-needed. The CUDA libraries it needs (cuBLAS, cuDNN, ...) are not here, so unresolved
# symbols of shared libraries are allowed. Both flags go to drmas-host's link only (cargo rustc).
# At run time bin/run.sh finds the GPU machine's own torch/lib; those libraries find their CUDA
# libraries through their own RUNPATH.
#
# Usage: scripts/gpu/bundle.sh [OUT_DIR]
# Environment: DRMAS_CACHE (default ~/.cache/drmas) holds the libtorch folder; CARGO_BUILD_JOBS
# as usual.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${1:-$repo/target/gpu-bundle}"
src="$repo/target/gpu/src"
build="$repo/target/gpu/build"
tch_version=0.24.0
limit_mib=48
cache="${DRMAS_CACHE:-$HOME/.cache/drmas}"
# TRL and the packages it needs that the GPU machine's Python 3.12 lacks, for speed.sh grpo.
trl_wheels=(trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19)

log() { echo "[gpu/bundle] $*" >&2; }
command -v cargo >/dev/null || { log "cargo is needed (rustup.rs)"; exit 1; }
command -v git >/dev/null || { log "git is needed to list the sources"; exit 1; }

libtorch="$(bash "$repo/scripts/gpu/install-libtorch.sh")"

# The commit the bundle is built from, read when the sources are mirrored (a commit made while
# it builds does not change what it holds).
commit="$(git -C "$repo" rev-parse HEAD)$(git -C "$repo" diff --quiet HEAD || echo ' (with local changes)')"
log "mirroring the sources in $src (tch and torch-sys pinned to $tch_version)"
# Tracked and untracked-but-not-ignored files as they are in the working tree. A file whose
# content changed is copied with a new modification time, so cargo rebuilds what it feeds;
# unchanged files keep theirs, so cargo rebuilds nothing else; files gone from the tree go.
mkdir -p "$src"
declare -A keep=()
while IFS= read -r -d '' file; do
  [[ -e "$repo/$file" ]] || continue
  keep["$file"]=1
  if ! cmp -s "$repo/$file" "$src/$file"; then
    mkdir -p "$(dirname "$src/$file")"
    cp "$repo/$file" "$src/$file"
  fi
done < <(cd "$repo" && git ls-files -z --cached --others --exclude-standard)
while IFS= read -r -d '' file; do
  [[ -n "${keep["${file#./}"]:-}" ]] || rm -f "$src/$file"
done < <(cd "$src" && find . -type f ! -name Cargo.lock -print0)
manifest="$src/Cargo.toml"
sed -i -E "s/^tch = \"[^\"]+\"/tch = \"=$tch_version\"/; s/^torch-sys = \"[^\"]+\"/torch-sys = \"=$tch_version\"/" "$manifest"
for crate in tch torch-sys; do
  grep -q "^$crate = \"=$tch_version\"" "$manifest" \
    || { log "Cargo.toml has no plain \`$crate = \"...\"\` line to pin: update this script"; exit 1; }
done

export LIBTORCH="$libtorch" CARGO_TARGET_DIR="$build"
unset LIBTORCH_USE_PYTORCH
started=$SECONDS
log "building the plugins (release)"
(cd "$src" && cargo build --release -p drmas-math -p drmas-search)
log "building drmas-host (release, libtorch $(cat "$libtorch/build-version") with CUDA)"
(cd "$src" && cargo rustc --release -p drmas-host --bin drmas-host -- \
  -C link-arg=-Wl,--no-as-needed,-ltorch_cuda,--as-needed,--allow-shlib-undefined)
log "built in $((SECONDS - started)) s"

host="$build/release/drmas-host"
readelf -d "$host" | grep -q 'NEEDED.*\[libtorch_cuda.so\]' \
  || { log "$host does not need libtorch_cuda.so: CUDA would never be available"; exit 1; }
readelf -d "$host" | grep -q 'NEEDED.*\[libc10_cuda.so\]' \
  || { log "$host was built without CUDA graphs (no CUDA runtime headers in $libtorch/cuda-include?)"; exit 1; }

log "assembling $out"
rm -rf "$out"
mkdir -p "$out/bin" "$out/plugins" "$out/fixtures"
strip -o "$out/bin/drmas-host" "$host"
for plugin in libdrmas_math.so libdrmas_search.so; do
  strip -o "$out/plugins/$plugin" "$build/release/$plugin"
done
cp -r "$repo/host/tests/fixtures/hf" "$out/fixtures/hf"
cp "$repo"/scripts/gpu/{run,check,speed,steps}.sh "$repo"/scripts/gpu/*.py "$out/"
chmod +x "$out/run.sh" "$out/check.sh" "$out/speed.sh"
# The GRPO comparison with TRL: its script, 16 GSM8K problems and TRL's wheels.
cp "$repo/scripts/bench/trl_grpo.py" "$out/"
mkdir -p "$out/fixtures/gsm8k"
head -n 16 "$repo/data/gsm8k/test.jsonl" >"$out/fixtures/gsm8k/test-16.jsonl"
cp "$repo/data/gsm8k/LICENSE" "$out/fixtures/gsm8k/LICENSE"
wheels="$cache/gpu-wheels"
wheel_of() { compgen -G "$wheels/${1%%==*}-${1##*==}-*.whl" | head -1; }
missing=()
for spec in "${trl_wheels[@]}"; do
  [[ -n "$(wheel_of "$spec")" ]] || missing+=("$spec")
done
if (( ${#missing[@]} == 0 )) || python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --platform manylinux2014_x86_64 --platform any \
    -d "$wheels" "${missing[@]}"; then
  mkdir -p "$out/wheels"
  for spec in "${trl_wheels[@]}"; do
    cp "$(wheel_of "$spec")" "$out/wheels/"
  done
else
  log "could not fetch ${missing[*]} from PyPI: \`speed.sh grpo\` will have no TRL peer"
fi
{
  echo "commit $commit"
  echo "libtorch $(cat "$libtorch/build-version") (CUDA 13.0), tch $tch_version"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} > "$out/BUILD"

size_kib=$(du -sk "$out" | cut -f1)
if (( size_kib > limit_mib * 1024 )); then
  log "the bundle is $((size_kib / 1024)) MiB, over the $limit_mib MiB it must stay under"
  exit 1
fi
log "bundle: $out ($((size_kib / 1024)) MiB)"
echo "$out"
