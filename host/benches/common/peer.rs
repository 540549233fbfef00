//! The Python peer of a benchmark (`scripts/bench/peer.py`: HF transformers and PyTorch eager on
//! the same model), run as a subprocess that answers JSON lines, so ours and the peer's
//! measurements can alternate in one run.
//!
//! The peer's python is `$DRMAS_PEER_PYTHON`, else the venv `scripts/bench/peer-venv.sh` makes
//! (`$DRMAS_CACHE/peer-venv`, `DRMAS_CACHE` defaulting to `~/.cache/drmas`). Without either the
//! benchmark measures ours only and says how to get the peer.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{json, Value};

/// A running peer with its model loaded.
pub struct Peer {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Peer {
    /// Starts the peer on the HF folder converted from the GGUF at `gguf` (converted once, see
    /// [`hf_folder`]) with `threads` torch threads and the weights in `dtype` (`f32` or `bf16`),
    /// or prints why there is none and returns `None`.
    pub fn start(gguf: &Path, threads: i32, dtype: &str) -> Option<Self> {
        let Some(python) = python() else {
            println!(
                "peer skipped: no Python peer found. Run scripts/bench/peer-venv.sh (a venv with \
                 torch, transformers and trl, ~2.7 GB) or set DRMAS_PEER_PYTHON to a python \
                 that has torch and transformers."
            );
            return None;
        };
        let folder = match hf_folder(gguf) {
            Ok(folder) => folder,
            Err(error) => {
                println!(
                    "peer skipped: converting {} failed: {error:#}",
                    gguf.display()
                );
                return None;
            }
        };
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/bench/peer.py");
        let spawned = Command::new(&python)
            .arg(&script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(error) => {
                println!("peer skipped: cannot run {}: {error}", python.display());
                return None;
            }
        };
        let (Some(input), Some(output)) = (child.stdin.take(), child.stdout.take()) else {
            println!("peer skipped: the peer's pipes are missing");
            return None;
        };
        let mut peer = Self {
            child,
            input,
            output: BufReader::new(output),
        };
        let model = folder.to_string_lossy();
        match peer.call(&json!({"cmd": "load", "model": model, "threads": threads, "dtype": dtype}))
        {
            Ok(info) => {
                println!("peer: {} on {model}, {info}", python.display());
                Some(peer)
            }
            Err(error) => {
                println!("peer skipped: {error}");
                None
            }
        }
    }

    /// Sends one request and returns the peer's answer, or its error as text.
    pub fn call(&mut self, request: &Value) -> Result<Value, String> {
        writeln!(self.input, "{request}")
            .and_then(|()| self.input.flush())
            .map_err(|e| format!("the peer stopped reading: {e}"))?;
        let mut line = String::new();
        match self.output.read_line(&mut line) {
            Ok(0) | Err(_) => return Err("the peer exited (its error is above)".into()),
            Ok(_) => {}
        }
        let answer: Value =
            serde_json::from_str(&line).map_err(|e| format!("bad answer {line:?}: {e}"))?;
        match answer.get("error") {
            Some(error) => Err(format!("the peer failed: {error}")),
            None => Ok(answer),
        }
    }

    /// A number of an answer (0 if it is missing, which the peer never does).
    pub fn number(answer: &Value, key: &str) -> f64 {
        answer.get(key).and_then(Value::as_f64).unwrap_or(0.0)
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // The peer holds no state worth a clean exit.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `$DRMAS_CACHE`, else `~/.cache/drmas`.
fn cache_dir() -> PathBuf {
    std::env::var_os("DRMAS_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/drmas")
        })
}

/// The peer's python, if there is one.
fn python() -> Option<PathBuf> {
    if let Some(python) = std::env::var_os("DRMAS_PEER_PYTHON") {
        return Some(PathBuf::from(python));
    }
    let venv = cache_dir().join("peer-venv");
    venv.join(".drmas-complete")
        .is_file()
        .then(|| venv.join("bin/python"))
}

/// The HF folder (f32) of the GGUF at `gguf`, written by `drmas-host convert` under
/// `$DRMAS_CACHE/peer/` the first time it is needed.
pub fn hf_folder(gguf: &Path) -> anyhow::Result<PathBuf> {
    let stem = gguf
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    let folder = cache_dir().join("peer").join(format!("{stem}-f32"));
    if !folder.join("model.safetensors").is_file() {
        drmas_host::convert(gguf, &folder, drmas_host::cli::Dtype::F32, None)?;
    }
    Ok(folder)
}
