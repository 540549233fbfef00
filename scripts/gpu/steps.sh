# Sourced by check.sh and speed.sh: the working folders and `step`, which runs one command of
# the check with a time limit, samples the GPU's memory while it runs and records its outcome.
#
# Usage: source steps.sh NAME (NAME: the script's, for its log lines and default report folder).
# Expects: $here (the bundle folder), $device, and a function `report` that writes the script's
# report from $logs into $out. Defines `step`, `write_report`, and `run_file` and `train` for
# one-iteration math runs. Sets: $out (where the report goes: $OUT, default
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

# The report and logs.tar.gz of the steps so far. `step` calls it after every step, so a call cut
# off by the device's time limit still brings back every step it finished.
write_report() {
  report >/dev/null 2>>"$logs/report.log" || log "the report failed: see report.log in logs.tar.gz"
  tar -czf "$out/logs.tar.gz" -C "$work" logs
}

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
  write_report
  return 0
}

# A run file: the math Solver and Verifier on MODEL on $device in DTYPE, sharing
# one group, or (GROUPS = two) each in its own group, the Verifier's on RUN_VERIFIER_MODEL if set
# (another model family) and frozen (`train = false`) if RUN_VERIFIER_FROZEN=1; EXTRA lines go
# into every group's section;
# PROMPTS prompts of GROUP_SIZE samples each, every response at most TOKENS tokens (default 8 ×
# 4, 32). The random models earn equal rewards, so every advantage is 0: the entropy bonus gives
# the update a gradient to compute and apply. One iteration, or RUN_ITERATIONS; RUN_ROLLOUT_EXTRA
# adds lines to [rollout].
run_file() {
  local model="$1" dtype="$2" dir="$3" groups="${4:-shared}" extra="${5:-}"
  local prompts="${6:-8}" group_size="${7:-4}" tokens="${8:-32}"
  local solver=shared verifier=shared
  if [[ "$groups" == two ]]; then
    solver=solver verifier=verifier
  fi
  cat <<EOF
[run]
output_dir = "$dir"
seed = 0
iterations = ${RUN_ITERATIONS:-1}
eval_every = 0
save_every = -1

[environment]
name = "math"
params = { level = 1, seed = 0 }
train_data = { path = "builtin:generated", split = "train", limit = 64 }

[orchestra]
name = "math"
params = { max_loops = 2 }

[[agents]]
role = "solver"
agent = "Solver Agent"
worker_group = "$solver"
max_new_tokens = $tokens

[[agents]]
role = "verifier"
agent = "Verifier Agent"
worker_group = "$verifier"
max_new_tokens = $((tokens < 8 ? tokens : 8))
$([[ "${RUN_VERIFIER_FROZEN:-0}" == 1 ]] && echo "train = false")

$(for group in $(printf '%s\n' "$solver" "$verifier" | sort -u); do
  group_model="$model"
  if [[ "$group" == verifier ]]; then
    group_model="${RUN_VERIFIER_MODEL:-$model}"
  fi
  printf '[worker_groups.%s]\nmodel = "%s"\ndtype = "%s"\ndevice = "%s"\nlearning_rate = 1e-5\nmicro_batch_size = 8\n%b\n' \
    "$group" "$group_model" "$dtype" "$device" "$extra"
done)

[algorithm]
estimator = "drmas"

[algorithm.loss]
entropy_coef = 0.01

[rollout]
prompts_per_batch = $prompts
group_size = $group_size
temperature = 1.0
max_prompt_tokens = 256
max_response_tokens = $tokens
${RUN_ROLLOUT_EXTRA:-}
EOF
}

# train NAME MODEL DTYPE [GROUPS [EXTRA [PROMPTS GROUP_SIZE TOKENS [LIMIT_S]]]]: run_file's run
# as step NAME (time limit LIMIT_S, default 240), its metrics kept in the logs.
train() {
  local name="$1" model="$2" dtype="$3"
  run_file "$model" "$dtype" "$work/runs/$name" "${4:-shared}" "${5:-}" "${6:-8}" "${7:-4}" \
    "${8:-32}" >"$work/$name.toml"
  step "$name" "${9:-240}" "$here/run.sh" train --config "$work/$name.toml"
  if [[ -f "$work/runs/$name/metrics.jsonl" ]]; then
    cp "$work/runs/$name/metrics.jsonl" "$logs/$name.metrics.jsonl"
  fi
}
