#!/usr/bin/env bash
# Memory-safety check of the host (not part of the test command; 22 minutes cold, 7 warm, on two
# cores): builds drmas-host under AddressSanitizer in target/asan, then runs the host library's
# tests and RUNS short demo runs (2 iterations, no checkpoint) with it, so that an out-of-bounds
# access or a use after free in the host's unsafe code (the CPU kernels, the pointers handed to
# libtorch and to plugins) is reported where it happens instead of faulting somewhere later.
#   ./scripts/asan.sh [RUNS]     (RUNS defaults to 1)
# libtorch and the plugins are not instrumented, but every allocation goes through the sanitizer's
# allocator, so a kernel that writes past a libtorch tensor is caught. The sanitizer is an
# unstable rustc flag: RUSTC_BOOTSTRAP=1 lets the stable toolchain take it, for this build only.
# An explicit --target keeps build scripts and proc macros uninstrumented.
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

runs="${1:-1}"
target="$(rustc -vV | sed -n 's/^host: //p')"
folder="$PWD/target/asan"
# `sanitized COMMAND [ARGS]`: cargo COMMAND on drmas-host, instrumented, ARGS after the options.
sanitized() {
  local command="$1"
  shift
  RUSTC_BOOTSTRAP=1 RUSTFLAGS="-Zsanitizer=address -Cforce-frame-pointers=yes" \
    cargo "$command" --release -p drmas-host --target "$target" --target-dir "$folder" "$@"
}
# Leaks are not errors here: plugin libraries and their descriptions live until the process ends.
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"

# The allocator test checks glibc's malloc settings, which the sanitizer's allocator replaces; one
# test asks libtorch for an impossible tensor, which the sanitizer would report instead of failing.
ASAN_OPTIONS="$ASAN_OPTIONS:allocator_may_return_null=1" \
  sanitized test --lib -- --skip allocator::tests
sanitized build

# The demo's run file, shortened. The plugin is built as drmas-host builds it (uninstrumented).
run_file="$folder/demo-short.toml"
sed -e 's/^iterations = .*/iterations = 2/' -e 's/^save_every = .*/save_every = -1/' \
  -e "s#^output_dir = .*#output_dir = \"$folder/demo-short\"#" configs/demo.toml >"$run_file"
if [[ "$(grep -cE '^(iterations = 2|save_every = -1|output_dir = ")' "$run_file")" != 3 ]]; then
  echo "asan.sh: configs/demo.toml no longer has the [run] keys this script rewrites" >&2
  exit 1
fi
for run in $(seq 1 "$runs"); do
  rm -rf "$folder/demo-short"
  log="$folder/demo-short-$run.log"
  if ! "$folder/$target/release/drmas-host" train --plugins ./plugins/math --config "$run_file" \
    >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    echo "asan.sh: demo run $run of $runs failed; its whole log is $log" >&2
    exit 1
  fi
  echo "demo run $run of $runs: clean"
done
