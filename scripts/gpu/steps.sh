# Sourced by check.sh and speed.sh: the working folders and `step`, which runs one command of
# the check with a time limit, samples the GPU's memory while it runs and records its outcome.
#
# Usage: source steps.sh NAME (NAME: the script's, for its log lines and default report folder).
# Expects: $here (the bundle folder), $device. Sets: $out (where the report goes: $OUT, default
# $here/NAME-out), $python, $work (a temporary folder removed on exit), $logs, $steps, $began,
# and exports DRMAS_PYTHON.
script_name="$1"
out="${OUT:-$here/$script_name-out}"
python="${DRMAS_PYTHON:-$(command -v /opt/torch/.venv/bin/python3 || command -v python3)}"
export DRMAS_PYTHON="$python"
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
logs="$work/logs"
mkdir -p "$logs"
steps="$logs/steps.jsonl"
: >"$steps"
began=$SECONDS

log() { echo "[$script_name $((SECONDS - began))s] $*" >&2; }

# Samples the GPU's used memory (MiB) every 100 ms into $1 until stop_sampling.
start_sampling() {
  sampler=""
  if command -v nvidia-smi >/dev/null && [[ "$device" == cuda* ]]; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$1" 2>/dev/null &
    sampler=$!
  fi
}
stop_sampling() {
  if [[ -n "$sampler" ]]; then
    kill "$sampler" 2>/dev/null
    wait "$sampler" 2>/dev/null
  fi
}

# step NAME TIMEOUT_S COMMAND...: runs COMMAND with its stdout in NAME.out and its stderr in
# NAME.log, sampling GPU memory, and appends its outcome to steps.jsonl.
step() {
  local name="$1" limit="$2"
  shift 2
  log "$name"
  local start=$SECONDS baseline=0 peak=0
  if command -v nvidia-smi >/dev/null && [[ "$device" == cuda* ]]; then
    baseline="$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)"
  fi
  start_sampling "$work/$name.memory"
  timeout "$limit" "$@" >"$logs/$name.out" 2>"$logs/$name.log"
  local rc=$?
  stop_sampling
  if [[ -s "$work/$name.memory" ]]; then
    peak="$(sort -n "$work/$name.memory" | tail -1)"
  fi
  printf '{"name":"%s","rc":%d,"seconds":%d,"gpu_memory_baseline_mib":%d,"gpu_memory_peak_mib":%d}\n' \
    "$name" "$rc" "$((SECONDS - start))" "${baseline:-0}" "${peak:-0}" >>"$steps"
  log "$name: rc=$rc in $((SECONDS - start)) s"
  return 0
}

