//! Held-out splits of a QA file that has none: every task falls in `train` or `test` by a stable
//! hash of its id, so the two never share a task, and a task with an `id` field stays in its split
//! when the file grows or is reordered (without one its id is `<file stem>:<line>`, which moves).

use super::QaTask;

/// One task in this many is in `test` (10 %).
const TEST_ONE_IN: u64 = 10;

/// Which tasks a run file's `split` selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// `split` not given: every task.
    All,
    /// `split = "train"`: the ~90 % of tasks not in `test`.
    Train,
    /// `split = "test"` (or `eval`, `validation`, as the math environment accepts): ~10 % of
    /// tasks, chosen by the hash of their id.
    Test,
}

impl Split {
    /// The split a run file names, or an error listing the accepted names.
    pub fn from_name(name: &str) -> Result<Self, String> {
        match name {
            "" => Ok(Self::All),
            "train" => Ok(Self::Train),
            "test" | "eval" | "validation" => Ok(Self::Test),
            other => Err(format!(
                "unknown split {other:?}: the search environment splits a QA file into \"train\" \
                 and \"test\" (also called \"eval\" or \"validation\"; one task in {TEST_ONE_IN}, by \
                 the hash of its id); leave `split` out to use every task"
            )),
        }
    }

    /// Whether `task` belongs to this split.
    pub fn contains(self, task: &QaTask) -> bool {
        let in_test = fnv1a(task.id.as_bytes()).is_multiple_of(TEST_ONE_IN);
        match self {
            Self::All => true,
            Self::Train => !in_test,
            Self::Test => in_test,
        }
    }
}

/// 64-bit FNV-1a: stable across platforms and releases, unlike `std`'s hasher.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str) -> QaTask {
        QaTask {
            id: id.into(),
            question: "q".into(),
            golden_answers: vec!["a".into()],
            data_source: None,
            gold_doc_ids: Vec::new(),
        }
    }

    #[test]
    fn train_and_test_partition_the_tasks_about_nine_to_one() {
        let tasks: Vec<QaTask> = (0..2000).map(|i| task(&format!("nq-{i}"))).collect();
        let test = tasks.iter().filter(|t| Split::Test.contains(t)).count();
        let train = tasks.iter().filter(|t| Split::Train.contains(t)).count();
        assert_eq!(test + train, tasks.len());
        assert!((150..250).contains(&test), "{test} of 2000 in test");
        assert!(tasks.iter().all(|t| Split::All.contains(t)));
    }

    #[test]
    fn the_hash_is_fnv1a() {
        // Reference values of 64-bit FNV-1a.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn an_unknown_split_names_the_accepted_ones() {
        let error = Split::from_name("dev").expect_err("not a split");
        assert!(
            error.contains("\"train\"") && error.contains("\"test\""),
            "{error}"
        );
    }
}
