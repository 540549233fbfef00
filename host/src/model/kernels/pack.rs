//! [`PackedWeights`]: a weight matrix `W [N, K]` rearranged into column panels, the layout the
//! decode microkernel streams.

/// Output columns per panel: two 16-lane AVX-512 registers.
pub const PANEL: usize = 32;

/// Sixteen floats on a 64-byte boundary, so panel loads are aligned whole cache lines.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// `W [N, K]` (row `n` holds output `n`'s weights, HF's `Linear` layout) as `ceil(N / PANEL)`
/// panels, each `K × PANEL` floats with the `PANEL` outputs of one `k` side by side: a panel is
/// read front to back, once per step, while one broadcast input value meets `PANEL` weights per
/// FMA pair. The last panel is padded with zero columns.
pub struct PackedWeights {
    lines: Vec<Line>,
    outputs: usize,
    inputs: usize,
}

impl PackedWeights {
    /// Packs `weight`, `outputs × inputs` floats in row-major order.
    ///
    /// # Panics
    /// When `weight.len() != outputs * inputs` (a caller bug: the tensor glue checks shapes).
    pub fn pack(weight: &[f32], outputs: usize, inputs: usize) -> Self {
        assert_eq!(weight.len(), outputs * inputs, "weight is outputs × inputs");
        let panels = outputs.div_ceil(PANEL);
        let lines_per_k = PANEL / 16;
        let mut lines = vec![Line([0.0; 16]); panels * inputs * lines_per_k];
        for (panel, chunk) in lines.chunks_exact_mut(inputs * lines_per_k).enumerate() {
            let first = panel * PANEL;
            let columns = PANEL.min(outputs - first);
            for column in 0..columns {
                let row = &weight[(first + column) * inputs..][..inputs];
                let (line, lane) = (column / 16, column % 16);
                for (k, &value) in row.iter().enumerate() {
                    chunk[k * lines_per_k + line].0[lane] = value;
                }
            }
        }
        Self {
            lines,
            outputs,
            inputs,
        }
    }

    /// `N`: outputs (rows of the original matrix).
    pub fn outputs(&self) -> usize {
        self.outputs
    }

    /// `K`: inputs (columns of the original matrix).
    pub fn inputs(&self) -> usize {
        self.inputs
    }

    /// Number of panels.
    pub fn panels(&self) -> usize {
        self.outputs.div_ceil(PANEL)
    }

    /// Panel `index`: `K × PANEL` floats, `k`-major, 64-byte aligned.
    pub fn panel(&self, index: usize) -> &[f32] {
        let per_panel = self.inputs * PANEL / 16;
        let lines = &self.lines[index * per_panel..][..per_panel];
        // SAFETY: `Line` is `repr(C)` around `[f32; 16]` with no padding (64 bytes, align 64),
        // so `per_panel` lines are exactly `16 * per_panel` initialised, contiguous floats
        // borrowed for the lifetime of `self`.
        unsafe { std::slice::from_raw_parts(lines.as_ptr().cast::<f32>(), per_panel * 16) }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.lines.len() * size_of::<Line>()
    }
}

impl std::fmt::Debug for PackedWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedWeights")
            .field("outputs", &self.outputs)
            .field("inputs", &self.inputs)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panels_hold_columns_k_major_and_pad_with_zeros() {
        let (n, k) = (35, 3);
        let weight: Vec<f32> = (0..n * k).map(|i| i as f32).collect();
        let packed = PackedWeights::pack(&weight, n, k);
        assert_eq!(packed.panels(), 2);
        for panel in 0..2 {
            let floats = packed.panel(panel);
            assert_eq!(floats.len(), k * PANEL);
            assert_eq!(floats.as_ptr() as usize % 64, 0);
            for kk in 0..k {
                for c in 0..PANEL {
                    let column = panel * PANEL + c;
                    let expected = if column < n {
                        weight[column * k + kk]
                    } else {
                        0.0
                    };
                    assert_eq!(
                        floats[kk * PANEL + c],
                        expected,
                        "panel {panel} k {kk} c {c}"
                    );
                }
            }
        }
    }
}
