//! "Did you mean …?": the known names a mistyped one most likely stands for, shared by every
//! lookup by name (advantage estimators, plugin components) so they all suggest alike.

/// The `known` names that `name` is plausibly a slip for, closest first (by edit distance; ties in
/// `known`'s order).
///
/// Compared case-insensitively, a known name is close when a slip of the keyboard could explain the
/// difference — at most one edit per three of its characters, where inserting, deleting or
/// substituting a character or swapping two neighbours is one edit (`grop` for `grpo`) — when the
/// two share most of a prefix (Jaro-Winkler similarity above 0.85), or when one contains the other
/// (`Shout` for `Shout Agent`).
pub fn similar<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let name = name.to_lowercase();
    let mut close: Vec<(usize, &str)> = known
        .into_iter()
        .filter_map(|candidate| {
            let lower = candidate.to_lowercase();
            let distance = strsim::osa_distance(&name, &lower);
            let close = distance * 3 <= lower.chars().count()
                || strsim::jaro_winkler(&name, &lower) > 0.85
                || (!name.is_empty() && (lower.contains(&name) || name.contains(&lower)));
            close.then_some((distance, candidate))
        })
        .collect();
    close.sort_by_key(|&(distance, _)| distance);
    close.into_iter().map(|(_, candidate)| candidate).collect()
}

#[cfg(test)]
mod tests {
    use super::similar;

    const ESTIMATORS: [&str; 4] = ["grpo", "grpo_step", "drmas", "drmas_traj"];

    #[test]
    fn slips_of_the_keyboard_are_close_and_the_closest_comes_first() {
        assert_eq!(similar("grop", ESTIMATORS), ["grpo"]);
        assert_eq!(similar("dr_mas", ESTIMATORS), ["drmas"]);
        assert_eq!(similar("DRMAS_", ESTIMATORS), ["drmas", "drmas_traj"]);
        assert!(similar("ppo", ESTIMATORS).is_empty());
    }

    #[test]
    fn a_shortened_or_lengthened_name_is_close() {
        let agents = ["Shout Agent", "Solver Agent", "Verifier Agent"];
        assert_eq!(similar("Shout", agents), ["Shout Agent"]);
        assert_eq!(similar("the solver agent", agents), ["Solver Agent"]);
        assert!(similar("", agents).is_empty());
    }
}
