# Sourced by router-venv.sh and bench/peer-venv.sh: `pinned_venv LABEL VENV SIZE CHECK PIN...`
# creates the venv VENV with exactly the PyPI pins PIN..., once, and prints its python on stdout
# (everything else on stderr). A stamp file holding the pins marks a finished venv: the same pins
# are never installed twice, changed ones replace the venv. CHECK is Python code run after the
# install (empty: none); SIZE says in the log how much is downloaded.
pinned_venv() {
  local label="$1" venv="$2" size="$3" check="$4"
  shift 4
  local stamp="$venv/.drmas-complete"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$*" ]]; then
    echo "$venv/bin/python"
    return 0
  fi
  log() { echo "[$label] $*" >&2; }
  command -v python3 >/dev/null || { log "python3 (with venv) is needed"; return 1; }
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  log "creating $venv"
  python3 -m venv "$venv" >&2 || { log "python3 -m venv failed (on Debian/Ubuntu: apt-get install python3-venv)"; return 1; }
  log "installing $* from PyPI ($size, once)"
  "$venv/bin/python" -m pip install --quiet --upgrade pip >&2
  "$venv/bin/python" -m pip install --quiet "$@" >&2
  if [[ -n "$check" ]]; then
    "$venv/bin/python" -c "$check" >&2
  fi
  echo "$*" > "$stamp"
  log "ready: $venv"
  echo "$venv/bin/python"
}
