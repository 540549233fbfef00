//! Column checks made on a parquet file's schema before any row is read.

use std::path::Path;

use parquet::basic::{ConvertedType, LogicalType, Repetition, Type as PhysicalType};
use parquet::schema::types::Type;

use crate::DatasetError;

/// What a schema node holds, as far as the reader cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Integer,
    List,
    Struct,
    Other,
}

/// The kind of a schema node.
fn kind(node: &Type) -> Kind {
    let info = node.get_basic_info();
    if info.has_repetition() && info.repetition() == Repetition::REPEATED {
        return Kind::List;
    }
    if node.is_group() {
        let list = info.converted_type() == ConvertedType::LIST
            || matches!(info.logical_type_ref(), Some(LogicalType::List));
        return if list { Kind::List } else { Kind::Struct };
    }
    match node.get_physical_type() {
        PhysicalType::BYTE_ARRAY | PhysicalType::FIXED_LEN_BYTE_ARRAY => Kind::Text,
        PhysicalType::INT32 | PhysicalType::INT64 => Kind::Integer,
        _ => Kind::Other,
    }
}

/// A schema node in words, for errors: `a string`, `a list of integers`, …
fn describe(node: &Type) -> String {
    match kind(node) {
        Kind::Text => "a string".to_owned(),
        Kind::Integer => "an integer".to_owned(),
        Kind::Struct => "a struct".to_owned(),
        Kind::List => match list_leaf(node) {
            Some(leaf) if kind(leaf) == Kind::Text => "a list of strings".to_owned(),
            Some(leaf) if kind(leaf) == Kind::Integer => "a list of integers".to_owned(),
            Some(leaf) => format!("a list of {}", leaf.get_physical_type()),
            None => "a list of structs".to_owned(),
        },
        Kind::Other => format!("a {} column", node.get_physical_type()),
    }
}

/// The primitive element of a list of primitives (`None` for a list of structs).
fn list_leaf(node: &Type) -> Option<&Type> {
    if node.is_primitive() {
        return Some(node);
    }
    match node.get_fields() {
        [only] => list_leaf(only),
        _ => None,
    }
}

/// The schema node at `path` (top-level column, then struct fields), if the file has it.
fn find<'a>(schema: &'a Type, path: &[&str]) -> Option<&'a Type> {
    path.iter().try_fold(schema, |node, name| {
        if kind(node) != Kind::Struct {
            return None;
        }
        node.get_fields()
            .iter()
            .find(|field| field.name() == *name)
            .map(|field| &**field)
    })
}

/// How a column the reader knows must look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// A string.
    Text,
    /// A string or an integer.
    TextOrInteger,
    /// A list of strings.
    Texts,
    /// A list of strings, or one string.
    TextOrTexts,
    /// A list (of `{role, content}` messages).
    Messages,
}

impl Expect {
    /// The type in words, for errors.
    fn words(self) -> &'static str {
        match self {
            Self::Text => "a string",
            Self::TextOrInteger => "a string or an integer",
            Self::Texts => "a list of strings",
            Self::TextOrTexts => "a list of strings or a string",
            Self::Messages => "a list of {role, content} structs",
        }
    }

    /// Whether a column of this schema node can be read as this.
    fn accepts(self, node: &Type) -> bool {
        let texts =
            kind(node) == Kind::List && list_leaf(node).is_some_and(|l| kind(l) == Kind::Text);
        match self {
            Self::Text => kind(node) == Kind::Text,
            Self::TextOrInteger => matches!(kind(node), Kind::Text | Kind::Integer),
            Self::Texts => texts,
            Self::TextOrTexts => texts || kind(node) == Kind::Text,
            Self::Messages => kind(node) == Kind::List,
        }
    }
}

/// Checks `schema`: each column of `known` it has is of the expected type, and each entry of
/// `required` has at least one of its alternatives.
pub(crate) fn check_columns(
    schema: &Type,
    known: &[(&[&str], Expect)],
    required: &[&[&[&str]]],
    path: &Path,
) -> Result<(), DatasetError> {
    for &(column, expect) in known {
        if let Some(node) = find(schema, column) {
            if !expect.accepts(node) {
                return Err(DatasetError::ColumnType {
                    path: path.to_owned(),
                    column: column.join("."),
                    expected: expect.words(),
                    found: describe(node),
                });
            }
        }
    }
    match required
        .iter()
        .find(|alternatives| !alternatives.iter().any(|c| find(schema, c).is_some()))
    {
        Some(alternatives) => Err(DatasetError::MissingColumn {
            path: path.to_owned(),
            column: alternatives_in_words(alternatives),
        }),
        None => Ok(()),
    }
}

/// `` `a` (nor `b` nor `c`) ``: the first column and its alternatives, dotted.
fn alternatives_in_words(alternatives: &[&[&str]]) -> String {
    let mut names = alternatives.iter().map(|c| format!("`{}`", c.join(".")));
    let first = names.next().unwrap_or_default();
    let others: Vec<String> = names.collect();
    if others.is_empty() {
        first
    } else {
        format!("{first} (nor {})", others.join(" nor "))
    }
}

#[cfg(test)]
mod tests {
    use super::alternatives_in_words;

    #[test]
    fn a_missing_column_is_named_with_its_alternatives() {
        assert_eq!(alternatives_in_words(&[&["question"]]), "`question`");
        assert_eq!(
            alternatives_in_words(&[&["question"], &["extra_info", "question"], &["prompt"]]),
            "`question` (nor `extra_info.question` nor `prompt`)"
        );
    }
}
