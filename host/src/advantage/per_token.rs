//! [`PerToken`]: one number per response token of each call of a batch — the shape of
//! token-level advantages, of a critic's values and of the returns it learns.

/// One value per response token of each call, `[calls, tokens]` with rows of different
/// lengths, stored flat: call `i`'s values are `values[offsets[i]..offsets[i + 1]]`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PerToken {
    values: Vec<f64>,
    offsets: Vec<usize>,
}

impl PerToken {
    /// The rows, in call order.
    pub fn from_rows<R: AsRef<[f64]>>(rows: impl IntoIterator<Item = R>) -> Self {
        let mut table = Self {
            values: Vec::new(),
            offsets: vec![0],
        };
        for row in rows {
            table.values.extend_from_slice(row.as_ref());
            table.offsets.push(table.values.len());
        }
        table
    }

    /// Each call's one value repeated over its `lengths[i]` tokens: what an outcome estimator's
    /// per-call advantage means token by token.
    ///
    /// # Panics
    /// If `per_call` and `lengths` differ in length.
    pub fn broadcast(per_call: &[f64], lengths: &[usize]) -> Self {
        assert_eq!(per_call.len(), lengths.len(), "one value per call");
        Self::from_rows(
            per_call
                .iter()
                .zip(lengths)
                .map(|(&value, &length)| vec![value; length]),
        )
    }

    /// Calls (rows).
    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    /// Whether there is no call.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Call `i`'s values, one per response token.
    pub fn row(&self, i: usize) -> &[f64] {
        &self.values[self.offsets[i]..self.offsets[i + 1]]
    }

    /// Call `i`'s values, mutable.
    pub fn row_mut(&mut self, i: usize) -> &mut [f64] {
        &mut self.values[self.offsets[i]..self.offsets[i + 1]]
    }

    /// The rows in call order.
    pub fn rows(&self) -> impl ExactSizeIterator<Item = &[f64]> + '_ {
        self.offsets.windows(2).map(|w| &self.values[w[0]..w[1]])
    }

    /// Every value, row after row.
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// The tokens of each row.
    pub fn lengths(&self) -> Vec<usize> {
        self.offsets.windows(2).map(|w| w[1] - w[0]).collect()
    }

    /// Each row's mean (0 for an empty row). A row of one repeated value gives that value
    /// exactly (a float sum would not), so an outcome estimator's broadcast rows give back its
    /// per-call advantages bit for bit.
    pub fn row_means(&self) -> Vec<f64> {
        self.rows()
            .map(|row| match row {
                [] => 0.0,
                [first, rest @ ..] if rest.iter().all(|v| v == first) => *first,
                _ => row.iter().sum::<f64>() / row.len() as f64,
            })
            .collect()
    }

    /// The rows `indices` name, in that order.
    pub fn select(&self, indices: &[usize]) -> Self {
        Self::from_rows(indices.iter().map(|&i| self.row(i)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_repeats_each_calls_value_over_its_tokens() {
        let table = PerToken::broadcast(&[0.5, -1.0, 0.1], &[2, 0, 3]);
        assert_eq!(table.len(), 3);
        assert_eq!(table.row(0), &[0.5, 0.5]);
        assert!(table.row(1).is_empty());
        assert_eq!(table.row(2), &[0.1, 0.1, 0.1]);
        assert_eq!(table.lengths(), vec![2, 0, 3]);
        // 0.1 three times sums to 0.30000000000000004: the mean must still be 0.1 exactly.
        assert_eq!(table.row_means(), vec![0.5, 0.0, 0.1]);
        let mixed = PerToken::from_rows([vec![1.0, 2.0, 6.0]]);
        assert_eq!(mixed.row_means(), vec![3.0]);
    }

    #[test]
    fn select_keeps_the_named_rows_in_order() {
        let table = PerToken::from_rows([vec![1.0], vec![2.0, 3.0], vec![4.0]]);
        let picked = table.select(&[2, 1]);
        assert_eq!(
            picked.rows().collect::<Vec<_>>(),
            vec![&[4.0][..], &[2.0, 3.0]]
        );
        assert_eq!(picked.values(), &[4.0, 2.0, 3.0]);
    }
}
