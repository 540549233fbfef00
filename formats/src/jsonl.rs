//! JSONL: one record a line.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use crate::{DatasetError, LoadOptions, Loaded};

/// Loads a JSONL file: `parse` turns each non-blank line (without its line break), with its
/// 1-based number, into a record or says why it is malformed.
pub fn load_jsonl<T>(
    path: &Path,
    options: &LoadOptions,
    parse: impl FnMut(&str, usize) -> Result<T, String>,
) -> Result<Loaded<T>, DatasetError> {
    let file = File::open(path).map_err(|source| DatasetError::Io {
        path: path.to_owned(),
        source,
    })?;
    read_jsonl(BufReader::new(file), path, options, parse)
}

/// Reads JSONL from any reader, like [`load_jsonl`]; `path` names it in errors.
///
/// Blank lines are ignored but counted. A line that is not valid UTF-8, or longer than
/// [`LoadOptions::max_record_bytes`], is malformed like any other, so it can be skipped; a long
/// line is read only up to the limit and the rest passed over, never held whole.
pub fn read_jsonl<T>(
    mut reader: impl BufRead,
    path: &Path,
    options: &LoadOptions,
    mut parse: impl FnMut(&str, usize) -> Result<T, String>,
) -> Result<Loaded<T>, DatasetError> {
    let mut loaded = Loaded::default();
    let mut buf = Vec::new();
    let mut line_no = 0;
    while !loaded.is_full(options) {
        buf.clear();
        let io = |source| DatasetError::Io {
            path: path.to_owned(),
            source,
        };
        // Room for the longest allowed line, its `\r\n`, and nothing more.
        let bound = options.max_record_bytes.saturating_add(2) as u64;
        let read = (&mut reader)
            .take(bound)
            .read_until(b'\n', &mut buf)
            .map_err(io)?;
        if read == 0 {
            break;
        }
        line_no += 1;
        let content = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let content = content.strip_suffix(b"\r").unwrap_or(content);
        if content.len() > options.max_record_bytes {
            if !buf.ends_with(b"\n") {
                skip_line(&mut reader).map_err(io)?;
            }
            let reason = format!(
                "the line is longer than {} bytes (max_record_bytes), too long for a task",
                options.max_record_bytes
            );
            loaded.push(Err(reason), options, |reason| DatasetError::Malformed {
                path: path.to_owned(),
                line: line_no,
                reason,
            })?;
            continue;
        }
        let record = match std::str::from_utf8(&buf) {
            Ok(line) if line.trim().is_empty() => continue,
            Ok(line) => parse(line.trim_end_matches(['\n', '\r']), line_no),
            Err(e) => Err(format!("invalid UTF-8: {e}")),
        };
        loaded.push(record, options, |reason| DatasetError::Malformed {
            path: path.to_owned(),
            line: line_no,
            reason,
        })?;
    }
    Ok(loaded)
}

/// Passes over the rest of the current line (through its `\n`) without keeping it.
fn skip_line(reader: &mut impl BufRead) -> std::io::Result<()> {
    loop {
        let available = reader.fill_buf()?;
        if available.is_empty() {
            return Ok(());
        }
        match available.iter().position(|&b| b == b'\n') {
            Some(end) => {
                reader.consume(end + 1);
                return Ok(());
            }
            None => {
                let len = available.len();
                reader.consume(len);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;

    /// Records each line as `<number>:<text>`; lines starting with `x` are malformed.
    fn parse(line: &str, number: usize) -> Result<String, String> {
        match line.strip_prefix('x') {
            Some(_) => Err("starts with x".to_owned()),
            None => Ok(format!("{number}:{line}")),
        }
    }

    fn read(text: &str, options: &LoadOptions) -> Result<Loaded<String>, DatasetError> {
        read_jsonl(Cursor::new(text), Path::new("t.jsonl"), options, parse)
    }

    #[test]
    fn lines_are_numbered_from_one_counting_blank_ones_and_lose_their_line_break() {
        let loaded = read("a\r\n\n  \nb", &LoadOptions::default()).expect("reads");
        assert_eq!(loaded.tasks, ["1:a", "4:b"]);
    }

    #[test]
    fn a_malformed_line_is_the_error_or_is_skipped_and_counted() {
        let error = read("a\nx\nb\n", &LoadOptions::default()).expect_err("line 2");
        assert_eq!(
            error.to_string(),
            "t.jsonl:2: starts with x; load with skip_malformed to skip such lines"
        );
        let skipping = LoadOptions {
            skip_malformed: true,
            ..LoadOptions::default()
        };
        let loaded = read("a\nx\nb\n", &skipping).expect("skips");
        assert_eq!((loaded.tasks.len(), loaded.skipped), (2, 1));
    }

    #[test]
    fn the_limit_counts_records_and_stops_reading() {
        let two = LoadOptions {
            limit: Some(2),
            skip_malformed: true,
            ..LoadOptions::default()
        };
        let loaded = read("a\nx\nb\nx\nc\n", &two).expect("reads");
        assert_eq!(
            (loaded.tasks, loaded.skipped),
            (vec!["1:a".into(), "3:b".into()], 1)
        );
        let none = LoadOptions {
            limit: Some(0),
            ..LoadOptions::default()
        };
        assert!(read("x\n", &none).expect("reads nothing").tasks.is_empty());
    }

    #[test]
    fn a_line_over_the_size_limit_is_malformed_and_passed_over() {
        let small = LoadOptions {
            max_record_bytes: 4,
            ..LoadOptions::default()
        };
        let text = format!("abcd\r\n{}\nb\n", "y".repeat(10_000));
        let error = read(&text, &small).expect_err("line 2 is too long");
        assert_eq!(
            error.to_string(),
            "t.jsonl:2: the line is longer than 4 bytes (max_record_bytes), too long for a task; \
             load with skip_malformed to skip such lines"
        );
        let skipping = LoadOptions {
            skip_malformed: true,
            ..small
        };
        let loaded = read(&text, &skipping).expect("skips");
        assert_eq!(loaded.tasks, ["1:abcd", "3:b"]);
        assert_eq!(loaded.skipped, 1);
    }
}
