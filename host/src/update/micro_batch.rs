//! [`MicroBatch`]: how an agent's calls are cut into forward/backward passes — a fixed number of
//! calls, or as many as fit a budget of padded tokens (verl's dynamic batch size). A pass has a
//! fixed cost (on a GPU, launching its kernels), so short calls, such as a verifier's few-token
//! verdicts, train in far fewer passes by tokens than by calls; long ones still stay within
//! the memory the budget was set for.

use crate::config::CriticSection;
use crate::rollout::AgentCall;

/// The size of an agent's micro-batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MicroBatch {
    /// This many calls per pass (the last pass may hold fewer).
    Calls(usize),
    /// As many calls per pass as keep `calls × (longest prompt + longest response)` within this
    /// many tokens, and at least one.
    Tokens(usize),
}

impl MicroBatch {
    /// The critic's micro-batches: by tokens when `[algorithm.critic]` sets them, else by calls.
    pub fn for_critic(settings: &CriticSection) -> Self {
        settings
            .micro_batch_tokens
            .map_or(Self::Calls(settings.micro_batch_size), Self::Tokens)
    }

    /// `order` (indices into `calls`, in the order they train: similar lengths side by side)
    /// cut into micro-batches, in that order.
    pub fn cut<'a>(self, order: &'a [usize], calls: &[&AgentCall]) -> Vec<&'a [usize]> {
        match self {
            Self::Calls(size) => order.chunks(size.max(1)).collect(),
            Self::Tokens(budget) => {
                let mut batches = Vec::new();
                let mut start = 0;
                let (mut prompt, mut response) = (0, 0);
                for (position, &call) in order.iter().enumerate() {
                    let grown_prompt = prompt.max(calls[call].prompt.len());
                    let grown_response = response.max(calls[call].response.len());
                    let count = position - start + 1;
                    if count > 1 && count * (grown_prompt + grown_response) > budget {
                        batches.push(&order[start..position]);
                        start = position;
                        prompt = calls[call].prompt.len();
                        response = calls[call].response.len();
                    } else {
                        (prompt, response) = (grown_prompt, grown_response);
                    }
                }
                if start < order.len() {
                    batches.push(&order[start..]);
                }
                batches
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(lengths: &[(usize, usize)]) -> Vec<AgentCall> {
        lengths
            .iter()
            .enumerate()
            .map(|(i, &(prompt, response))| {
                AgentCall::synthetic(i, 0, vec![1; prompt], vec![2; response])
            })
            .collect()
    }

    #[test]
    fn calls_cut_into_fixed_sizes() {
        let owned = calls(&[(4, 1); 7]);
        let refs: Vec<&AgentCall> = owned.iter().collect();
        let order: Vec<usize> = (0..7).collect();
        let sizes: Vec<usize> = MicroBatch::Calls(3)
            .cut(&order, &refs)
            .iter()
            .map(|b| b.len())
            .collect();
        assert_eq!(sizes, [3, 3, 1]);
    }

    #[test]
    fn tokens_cut_where_the_padded_batch_would_pass_the_budget() {
        // Prompt + response: 10, 10, 12, 20, 20, 100 tokens.
        let owned = calls(&[(8, 2), (8, 2), (8, 4), (8, 12), (8, 12), (8, 92)]);
        let refs: Vec<&AgentCall> = owned.iter().collect();
        let order: Vec<usize> = (0..6).collect();
        let batches = MicroBatch::Tokens(40).cut(&order, &refs);
        // 3 × 12 = 36 fits, 4 × 20 does not; 2 × 20 = 40 fits; 100 alone is over but runs.
        assert_eq!(batches, [&[0, 1, 2][..], &[3, 4], &[5]]);
        for batch in &batches {
            let padded = batch.len()
                * batch
                    .iter()
                    .map(|&i| refs[i].prompt.len() + refs[i].response.len())
                    .max()
                    .unwrap_or(0);
            assert!(padded <= 40 || batch.len() == 1, "{batch:?}: {padded}");
        }
        let all: Vec<usize> = batches.concat();
        assert_eq!(all, order, "every call once, in order");
    }

    #[test]
    fn a_budget_for_everything_is_one_pass_and_nothing_is_no_pass() {
        let owned = calls(&[(3, 1), (3, 5), (6, 2)]);
        let refs: Vec<&AgentCall> = owned.iter().collect();
        let order = [2, 0, 1];
        assert_eq!(MicroBatch::Tokens(1000).cut(&order, &refs), [&order[..]]);
        assert!(MicroBatch::Tokens(1000).cut(&[], &refs).is_empty());
        assert_eq!(MicroBatch::Tokens(1).cut(&order, &refs).len(), 3);
    }
}
