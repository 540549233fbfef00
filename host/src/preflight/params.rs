//! Where a component's refusal of its `params` sits in the run file. A component parses its
//! params as TOML text the host writes from the run file's table, so a parse error names a line
//! of that text; this finds the key on that line and points at it in the run file instead (or at
//! the `params` table itself when the error names no line).

use crate::config::{ConfigError, RunFile, Step};
use crate::plugins::RegistryError;

/// `error`, from building a component from `snippet` (the TOML text of the run file's table at
/// `table`), located in `file`: a component's refusal names the run file's line and column;
/// other registry errors (an unknown name) pass through.
pub(super) fn locate(
    error: RegistryError,
    snippet: &str,
    file: &RunFile,
    table: &[Step<'_>],
) -> anyhow::Error {
    let RegistryError::Component(message) = error else {
        return error.into();
    };
    let Some((before, line, reason)) = toml_error(&message) else {
        return file.invalid_at(table, message).into();
    };
    let keys = keys_at_line(snippet, line);
    let mut path = table.to_vec();
    path.extend(keys.iter().map(|key| Step::Key(key.as_str())));
    let refused: ConfigError = file.invalid_at(
        &path,
        format!("{}: {reason}", before.trim_end_matches([':', ' '])),
    );
    refused.into()
}

/// Splits a `toml` parse error inside `message` into what precedes it, the 1-based line it
/// names and its reason (the last line of its report).
fn toml_error(message: &str) -> Option<(&str, usize, &str)> {
    const MARK: &str = "TOML parse error at line ";
    let start = message.find(MARK)?;
    let rest = &message[start + MARK.len()..];
    let digits = rest.find(|c: char| !c.is_ascii_digit())?;
    let line = rest[..digits].parse().ok()?;
    let reason = message.lines().last()?.trim();
    Some((&message[..start], line, reason))
}

/// The key path of line `line` (1-based) of `snippet`: the table headers above it and the key
/// it assigns (a header line names its table).
fn keys_at_line(snippet: &str, line: usize) -> Vec<String> {
    let mut header: Vec<String> = Vec::new();
    for text in snippet.lines().take(line.saturating_sub(1)) {
        if let Some(name) = header_name(text) {
            header = dotted(name);
        }
    }
    let Some(text) = snippet.lines().nth(line.saturating_sub(1)) else {
        return header;
    };
    if let Some(name) = header_name(text) {
        return dotted(name);
    }
    if let Some((key, _)) = text.split_once('=') {
        header.extend(dotted(key));
    }
    header
}

/// The name inside a `[table]` or `[[array]]` header line.
fn header_name(text: &str) -> Option<&str> {
    let text = text.trim();
    let inner = text.strip_prefix('[')?.strip_suffix(']')?;
    Some(inner.trim_start_matches('[').trim_end_matches(']'))
}

/// The keys of a dotted key (`a.b`, `"a b".c`), unquoted.
fn dotted(key: &str) -> Vec<String> {
    key.split('.')
        .map(|part| part.trim().trim_matches('"').trim_matches('\'').to_owned())
        .filter(|part| !part.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "[environment]\nname = \"search\"\n\n[environment.params]\ntop_k = 2\n\n\
                       [environment.params.retriever]\nkind = \"bm25\"\ncorpsu = \"c.jsonl\"\n";

    fn file() -> RunFile {
        RunFile::from_text("run.toml", RUN, std::path::PathBuf::new())
    }

    #[test]
    fn a_key_the_component_refuses_is_named_at_its_line_in_the_run_file() {
        let snippet = "top_k = 2\n\n[retriever]\nkind = \"bm25\"\ncorpsu = \"c.jsonl\"\n";
        let message = "cannot build environment `search` of plugin `search` (lib.so): TOML parse \
                       error at line 5, column 1\n  |\n5 | corpsu = \"c.jsonl\"\n  | ^^^^^^\n\
                       unknown field `corpsu`, expected `corpus`";
        let error = locate(
            RegistryError::Component(message.into()),
            snippet,
            &file(),
            &[Step::Key("environment"), Step::Key("params")],
        );
        assert_eq!(
            error.to_string(),
            "run.toml:9:10: cannot build environment `search` of plugin `search` (lib.so): \
             unknown field `corpsu`, expected `corpus`"
        );
    }

    #[test]
    fn a_refusal_without_a_line_points_at_the_params_table() {
        let error = locate(
            RegistryError::Component("max_turns must be at least 1".into()),
            "",
            &file(),
            &[Step::Key("environment"), Step::Key("params")],
        );
        assert_eq!(
            error.to_string(),
            "run.toml:4:1: max_turns must be at least 1"
        );
    }
}
