#!/usr/bin/env bash
# README command 1: installs what is missing, builds, and runs the main job on the embedded default.
# A previous demo run is kept: its folder is renamed runs/demo-YYYYmmdd-HHMMSS before the new run.
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

# The host and the one plugin the demo's run file uses, in one cargo invocation (the search
# plugin is not needed here, so it is not built).
cargo build --release -p drmas-host -p drmas-math
if [[ -d runs/demo && " $* " != *" --resume "* ]]; then
  previous="runs/demo-$(date -r runs/demo +%Y%m%d-%H%M%S)"
  mv runs/demo "$previous"
  echo "the previous demo run is now in $previous"
fi
exec "${CARGO_TARGET_DIR:-target}/release/drmas-host" train --plugins ./plugins/math --config configs/demo.toml "$@"
