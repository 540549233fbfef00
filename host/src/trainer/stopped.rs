//! What a run cut short by an error or a stop signal tells its user about continuing it.

use super::Checkpoint;

/// Where a cut-short run can continue from: `checkpoint`, the newest in its run folder.
pub(super) fn resume_hint(checkpoint: Option<&Checkpoint>) -> String {
    match checkpoint {
        Some(checkpoint) => format!(
            "Iteration {} is saved in {}; continue with `drmas-host train --resume` and the same \
             --config and --plugins",
            checkpoint.iteration(),
            checkpoint.dir().display()
        ),
        None => "The run folder holds no checkpoint: the run starts over.".to_owned(),
    }
}
