//! The retrieval corpus: a JSONL file in the Search-R1 / FlashRAG layout, one passage a line,
//! `{"id": "...", "contents": "\"Title\"\ntext"}`.

use std::fs::File;
use std::io::{BufRead, BufReader, Lines};
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// One passage of the corpus, as the file holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passage {
    /// The passage id (`id` in the file).
    pub id: String,
    /// The `contents` string, byte for byte: by convention the quoted title, a newline, the text.
    pub contents: String,
}

impl Passage {
    /// A passage with `id` and `contents`.
    pub fn new(id: impl Into<String>, contents: impl Into<String>) -> Passage {
        Passage {
            id: id.into(),
            contents: contents.into(),
        }
    }

    /// The title: see [`title_of`].
    pub fn title(&self) -> &str {
        title_of(&self.contents)
    }

    /// The text: see [`split_contents`].
    pub fn text(&self) -> &str {
        split_contents(&self.contents).1
    }
}

/// Splits a `contents` string at its first newline into the first line and the rest, as
/// Search-R1 does (`contents.split("\n")[0]` and the lines after it); a `contents` without a
/// newline is all first line.
pub fn split_contents(contents: &str) -> (&str, &str) {
    contents.split_once('\n').unwrap_or((contents, ""))
}

/// The title of a `contents` string: its first line with one pair of surrounding double quotes
/// removed (a first line without them is the title as it stands).
pub fn title_of(contents: &str) -> &str {
    let first_line = split_contents(contents).0;
    first_line
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or(first_line)
}

/// A corpus file that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    /// The file could not be opened or read.
    #[error(
        "cannot read corpus {path}: {source}; pass the path of a JSONL corpus with one \
         {{\"id\", \"contents\"}} object a line"
    )]
    Io {
        /// The corpus file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A line is not a `{"id", "contents"}` JSON object.
    #[error(
        "{path}:{line}: not a corpus passage ({reason}); each line must be a JSON object \
         {{\"id\": \"...\", \"contents\": \"\\\"Title\\\"\\ntext\"}}"
    )]
    Malformed {
        /// The corpus file.
        path: PathBuf,
        /// The 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
}

/// One line of the corpus file.
#[derive(Deserialize)]
struct RawPassage {
    id: IdValue,
    contents: String,
}

/// Passage ids are strings in FlashRAG's corpora and integers in some others.
#[derive(Deserialize)]
#[serde(untagged)]
enum IdValue {
    Text(String),
    Number(u64),
}

/// Streams the passages of a corpus file, in file order, skipping blank lines.
pub struct CorpusReader {
    path: PathBuf,
    lines: Lines<BufReader<File>>,
    line: usize,
}

impl CorpusReader {
    /// Opens a corpus file.
    pub fn open(path: &Path) -> Result<CorpusReader, CorpusError> {
        let file = File::open(path).map_err(|source| CorpusError::Io {
            path: path.to_owned(),
            source,
        })?;
        Ok(CorpusReader {
            path: path.to_owned(),
            lines: BufReader::new(file).lines(),
            line: 0,
        })
    }
}

impl Iterator for CorpusReader {
    type Item = Result<Passage, CorpusError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let line = self.lines.next()?;
            self.line += 1;
            let line = match line {
                Ok(line) => line,
                Err(source) => {
                    return Some(Err(CorpusError::Io {
                        path: self.path.clone(),
                        source,
                    }))
                }
            };
            if line.trim().is_empty() {
                continue;
            }
            return Some(match serde_json::from_str::<RawPassage>(&line) {
                Ok(raw) => {
                    let id = match raw.id {
                        IdValue::Text(id) => id,
                        IdValue::Number(id) => id.to_string(),
                    };
                    Ok(Passage::new(id, raw.contents))
                }
                Err(error) => Err(CorpusError::Malformed {
                    path: self.path.clone(),
                    line: self.line,
                    reason: error.to_string(),
                }),
            });
        }
    }
}

/// Reads a whole corpus file into memory.
pub fn read_corpus(path: &Path) -> Result<Vec<Passage>, CorpusError> {
    CorpusReader::open(path)?.collect()
}
