//! Where a key sits in a run file: the byte offset of the value at a path such as
//! `worker_groups.shared.learning_rate` or `agents[1].temperature`, so an error about a value the
//! schema accepted (a NaN learning rate, a device the build cannot use) still names its line:col.

use toml_edit::{ImDocument, Item};

/// One step of a path into a run file: a key, or the index in an array of tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step<'a> {
    /// A key of a table (`[run]`, `learning_rate`, a worker group's name).
    Key(&'a str),
    /// An entry of an array of tables (`[[agents]]`), counted from 0.
    Index(usize),
}

impl<'a> From<&'a str> for Step<'a> {
    fn from(key: &'a str) -> Self {
        Step::Key(key)
    }
}

impl From<usize> for Step<'_> {
    fn from(index: usize) -> Self {
        Step::Index(index)
    }
}

/// The byte offset in `text` of the value at `path`, or of the nearest enclosing table the file
/// spells out when the value is left out (a default), or 0 when none of it is written.
pub fn offset_of(text: &str, path: &[Step<'_>]) -> usize {
    let Ok(document) = ImDocument::parse(text) else {
        return 0;
    };
    let mut item: &Item = document.as_item();
    let mut offset = 0;
    for step in path {
        let next = match *step {
            Step::Key(key) => item.get(key),
            Step::Index(index) => item.get(index),
        };
        let Some(next) = next else {
            break;
        };
        if let Some(span) = next.span() {
            offset = span.start;
        }
        item = next;
    }
    offset
}

#[cfg(test)]
mod tests {
    use super::{offset_of, Step};

    const TEXT: &str = "[run]\nseed = 3\n\n[[agents]]\nrole = \"a\"\n\n[[agents]]\nrole = \"b\"\n\
                        top_p = 0\n\n[worker_groups.g]\nlora = { rank = 0 }\n";

    fn line_column(offset: usize) -> (usize, usize) {
        let before = &TEXT[..offset];
        let line = before.matches('\n').count() + 1;
        (line, offset - before.rfind('\n').map_or(0, |i| i + 1) + 1)
    }

    #[test]
    fn a_written_value_is_found_through_tables_arrays_and_inline_tables() {
        let at = |path: &[Step<'_>]| line_column(offset_of(TEXT, path));
        assert_eq!(at(&["run".into(), "seed".into()]), (2, 8));
        assert_eq!(at(&["agents".into(), 1.into(), "top_p".into()]), (9, 9));
        assert_eq!(
            at(&[
                "worker_groups".into(),
                "g".into(),
                "lora".into(),
                "rank".into()
            ]),
            (12, 17)
        );
    }

    #[test]
    fn a_left_out_value_points_at_its_table_or_the_start() {
        let at = |path: &[Step<'_>]| line_column(offset_of(TEXT, path));
        assert_eq!(at(&["agents".into(), 0.into(), "top_p".into()]), (4, 1));
        assert_eq!(at(&["rollout".into(), "top_p".into()]), (1, 1));
    }
}
