//! Reading the values of a parquet row: nested columns, strings, lists of strings, ids, and verl's
//! chat `prompt`. Each accessor that can fail says why in words naming the column, the reason a
//! malformed row is reported with.

use parquet::record::{Field, Row};

/// The non-null value at `path` in `row` (a top-level column, then struct fields), if any.
pub fn value<'a>(row: &'a Row, path: &[&str]) -> Option<&'a Field> {
    let (first, rest) = path.split_first()?;
    let field = row
        .get_column_iter()
        .find(|(name, _)| name.as_str() == *first)
        .map(|(_, field)| field)?;
    match (field, rest) {
        (Field::Null, _) => None,
        (field, []) => Some(field),
        (Field::Group(inner), rest) => value(inner, rest),
        _ => None,
    }
}

/// The first of `columns` that has a value in `row`, with its dotted name.
pub fn first_value<'a>(row: &'a Row, columns: &[&[&str]]) -> Option<(String, &'a Field)> {
    columns
        .iter()
        .find_map(|column| value(row, column).map(|field| (column.join("."), field)))
}

/// A string value (UTF-8 bytes are one too).
pub fn text(field: &Field, column: &str) -> Result<String, String> {
    match field {
        Field::Str(text) => Ok(text.clone()),
        Field::Bytes(bytes) => {
            String::from_utf8(bytes.data().to_vec()).map_err(|_| format!("`{column}` is not UTF-8"))
        }
        _ => Err(format!("`{column}` is not a string")),
    }
}

/// A list of strings (or one string, as a list of one).
pub fn texts(field: &Field, column: &str) -> Result<Vec<String>, String> {
    match field {
        Field::ListInternal(list) => list
            .elements()
            .iter()
            .map(|element| match element {
                Field::Null => Err(format!("`{column}` has a null element")),
                element => text(element, column),
            })
            .collect(),
        field => text(field, column).map(|one| vec![one]),
    }
}

/// An id: a string, or an integer written out.
pub fn id(field: &Field, column: &str) -> Result<String, String> {
    match field {
        Field::Int(id) => Ok(id.to_string()),
        Field::Long(id) => Ok(id.to_string()),
        Field::UInt(id) => Ok(id.to_string()),
        Field::ULong(id) => Ok(id.to_string()),
        field => text(field, column),
    }
}

/// The content of the last `user` message in a verl `prompt` value (a list of `{role, content}`
/// chat messages).
pub fn last_user_message(prompt: &Field) -> Result<String, String> {
    let Field::ListInternal(messages) = prompt else {
        return Err("`prompt` is not a list of messages".to_owned());
    };
    messages
        .elements()
        .iter()
        .rev()
        .find_map(|message| match message {
            Field::Group(message)
                if matches!(value(message, &["role"]), Some(Field::Str(role)) if role == "user") =>
            {
                value(message, &["content"]).and_then(|content| text(content, "content").ok())
            }
            _ => None,
        })
        .ok_or_else(|| "`prompt` has no user message with string content".to_owned())
}
