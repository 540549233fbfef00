//! `drmas-host … | head -1`: when stdout's reader goes away the binary ends quietly (SIGPIPE, as
//! Unix tools do), never with a panic about the broken pipe.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};

#[test]
fn a_closed_stdout_ends_the_binary_quietly() {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/llama");
    let out =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("broken-pipe-{}", std::process::id()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_drmas-host"))
        .arg("convert")
        .arg(&model)
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    // The reader goes away before the conversion prints its line.
    drop(child.stdout.take());
    let output = child.wait_with_output().expect("the binary ends");
    let _ = std::fs::remove_dir_all(&out);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        output.status.signal(),
        Some(libc::SIGPIPE),
        "ended by SIGPIPE, not {:?}: {stderr}",
        output.status
    );
}
