//! Properties of the answer checker: a boxed ground truth is always right (every real MATH-500 and
//! GSM8K answer, random integers and fractions), and no input makes it panic.

use std::path::PathBuf;

use drmas_math::answer::{extract_answer, is_equivalent, normalize, score};
use drmas_math::dataset::{load_jsonl, JsonlFormat, LoadOptions};
use proptest::prelude::*;

fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../data")
        .join(rel)
}

#[test]
fn boxed_ground_truth_scores_one_on_every_real_answer() {
    let sets = [
        ("gsm8k/train.jsonl", JsonlFormat::gsm8k(), 7473),
        ("gsm8k/test.jsonl", JsonlFormat::gsm8k(), 1319),
        ("math500/test.jsonl", JsonlFormat::math(), 500),
    ];
    for (file, format, count) in sets {
        let loaded = load_jsonl(&data(file), &format, &LoadOptions::default()).expect("loads");
        assert_eq!(loaded.tasks.len(), count);
        for task in &loaded.tasks {
            let response = format!(
                "Reasoning…\n\nThe final answer is $\\boxed{{{}}}$.",
                task.ground_truth
            );
            assert_eq!(
                score(&response, &task.ground_truth),
                1.0,
                "{file}: {}",
                task.ground_truth
            );
        }
    }
}

proptest! {
    #[test]
    fn boxed_integers_score_one_and_neighbours_zero(n in -1_000_000_000i64..1_000_000_000) {
        let gt = n.to_string();
        prop_assert_eq!(score(&format!("\\boxed{{{n}}}"), &gt), 1.0);
        prop_assert_eq!(score(&format!("\\boxed{{{}}}", n + 1), &gt), 0.0);
    }

    #[test]
    fn fractions_match_their_decimal_and_scaled_forms(p in -999i64..999, q in 1i64..999, k in 2i64..9) {
        let gt = format!("\\frac{{{p}}}{{{q}}}");
        prop_assert_eq!(score(&format!("\\boxed{{{gt}}}"), &gt), 1.0);
        let scaled = format!("\\dfrac{{{}}}{{{}}}", p * k, q * k);
        let slash = format!("{p}/{q}");
        let decimal = format!("{:.12}", p as f64 / q as f64);
        let off_by_one = format!("\\frac{{{}}}{{{q}}}", p + 1);
        prop_assert!(is_equivalent(&scaled, &gt), "{} vs {}", scaled, gt);
        prop_assert!(is_equivalent(&slash, &gt), "{} vs {}", slash, gt);
        prop_assert!(is_equivalent(&decimal, &gt), "{} vs {}", decimal, gt);
        prop_assert!(!is_equivalent(&off_by_one, &gt), "{} vs {}", off_by_one, gt);
    }

    #[test]
    fn never_panics_on_arbitrary_text(a in any::<String>(), b in any::<String>()) {
        let _ = extract_answer(&a);
        let _ = normalize(&a);
        let _ = is_equivalent(&a, &b);
        let _ = score(&a, &b);
    }

    #[test]
    fn never_panics_on_latex_soup(
        a in r"[\\{}()\[\]^_0-9a-z.,=+\-*/ $é]{0,80}",
        b in r"(\\boxed|\\frac|\\sqrt|\\left|\\right|\\text|\\cup|\\pi|[{}()\[\],=^0-9x])*",
    ) {
        let _ = score(&a, &b);
        let _ = score(&format!("\\boxed{{{a}}}"), &b);
        let _ = is_equivalent(&b, &a);
    }
}
