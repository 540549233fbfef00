//! The repository is the whole product: no tracked file may refer to a path outside it (a folder
//! beside the clone that a user does not have, such as a team's shared data).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Every file of the repository: git's list when this is a git checkout, else the tree without
/// build outputs.
fn repository_files(root: &Path) -> Vec<PathBuf> {
    let listed = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output();
    match listed {
        Ok(output) if output.status.success() => output
            .stdout
            .split(|&b| b == 0)
            .filter(|name| !name.is_empty())
            .map(|name| PathBuf::from(String::from_utf8_lossy(name).into_owned()))
            .collect(),
        _ => {
            let mut files = Vec::new();
            walk(root, Path::new(""), &mut files);
            files
        }
    }
}

fn walk(root: &Path, relative: &Path, files: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(root.join(relative)).expect("read the repository");
    for entry in entries {
        let entry = entry.expect("directory entry");
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.')
            || (relative.as_os_str().is_empty() && matches!(&*name, "target" | "runs"))
        {
            continue;
        }
        let path = relative.join(&*name);
        if entry.file_type().expect("file type").is_dir() {
            walk(root, &path, files);
        } else {
            files.push(path);
        }
    }
}

/// The folder a relative path written in `file` is resolved from: a Rust source's crate
/// (`CARGO_MANIFEST_DIR`), a Markdown link's own folder and a Markdown command's repository root
/// (the docs' commands run there), and any other file's own folder (run files, scripts, manifests).
fn base_of(root: &Path, file: &Path, in_markdown_link: bool) -> PathBuf {
    let own_folder = file.parent().unwrap_or(Path::new("")).to_owned();
    match file.extension().and_then(|e| e.to_str()) {
        Some("rs") => own_folder
            .ancestors()
            .find(|dir| root.join(dir).join("Cargo.toml").is_file())
            .unwrap_or(Path::new(""))
            .to_owned(),
        Some("md") if !in_markdown_link => PathBuf::new(),
        _ => own_folder,
    }
}

/// The relative paths written in `file` (its `text`) that climb out of the repository from the
/// folder they are resolved from, with their line numbers.
fn escaping_paths(text: &str, root: &Path, file: &Path) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let bytes = line.as_bytes();
        let mut at = 0;
        while let Some(offset) = line[at..].find("../") {
            let start = at + offset;
            let mut end = start;
            let mut ups = 0;
            while line[end..].starts_with("../") {
                ups += 1;
                end += 3;
            }
            // `a/../b` climbs from `a`, not from the base: only a run that starts a path counts.
            let starts_path = start == 0 || !matches!(bytes[start - 1], b'/' | b'.');
            let in_link = line[..start].ends_with("](");
            let tail_end = line[end..]
                .find(|c: char| c.is_whitespace() || "\"'`)],;".contains(c))
                .map_or(line.len(), |n| end + n);
            let depth = base_of(root, file, in_link).components().count();
            if starts_path && ups > depth {
                found.push((index + 1, line[start..tail_end].to_owned()));
            }
            at = end;
        }
    }
    found
}

#[test]
fn no_tracked_file_refers_to_a_path_outside_the_repository() {
    let root = common::repo();
    let files = repository_files(&root);
    assert!(
        files.iter().any(|f| f == Path::new("Cargo.toml")),
        "the file list of {} misses Cargo.toml",
        root.display()
    );
    let mut outside = Vec::new();
    for file in &files {
        // Data files are text from the world (passages may quote `../`), the lockfile is cargo's,
        // and this file holds examples of what it looks for.
        if file.starts_with("data") || file == Path::new("Cargo.lock") || file == Path::new(file!())
        {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(root.join(file)) else {
            continue; // binary
        };
        for (line, path) in escaping_paths(&text, &root, file) {
            outside.push(format!("{}:{line}: {path}", file.display()));
        }
    }
    assert!(
        outside.is_empty(),
        "these refer to paths outside the repository, which a clone does not have; ship what they \
         need inside it (data/ for datasets):\n{}",
        outside.join("\n")
    );
}

#[test]
fn the_check_finds_a_path_that_climbs_out_of_a_crate() {
    let root = common::repo();
    let test_file = Path::new("plugins/math/tests/dataset.rs");
    let text = "let d = Path::new(env!(\"CARGO_MANIFEST_DIR\")).join(\"../../../outside/data\");\n\
                let ok = Path::new(env!(\"CARGO_MANIFEST_DIR\")).join(\"../../data\");";
    assert_eq!(
        escaping_paths(text, &root, test_file),
        [(1, "../../../outside/data".to_owned())]
    );
    let run_file = Path::new("configs/search.toml");
    let text = "a = \"../../outside/nq/questions.jsonl\"\nb = \"../data/nq/questions.jsonl\"";
    assert_eq!(
        escaping_paths(text, &root, run_file),
        [(1, "../../outside/nq/questions.jsonl".to_owned())]
    );
    let doc = Path::new("docs/architecture.md");
    let text = "The map is `../outside/ARCHITECTURE.md`; see [the guide](../README.md).";
    assert_eq!(
        escaping_paths(text, &root, doc),
        [(1, "../outside/ARCHITECTURE.md".to_owned())]
    );
}
