//! [`PanelBuffer`]: one panel of a row-major weight `W [N, K]`, transposed on the fly into the
//! `k`-major layout the [`super::broadcast_inputs`] kernel streams.
//!
//! A panel is [`PANEL`] consecutive outputs: `PANEL` consecutive rows of `W`, one contiguous
//! block of libtorch's own storage. That kernel wants, per `k`, the panel's `PANEL` weights
//! side by side (one broadcast input meets them in two FMAs), so each thread transposes the
//! panel it is about to compute into a small buffer of its own (`K × PANEL` floats: 72 KiB for
//! `K = 576`, in L2) and runs every tile of a block of rows from there. Prefills
//! amortise the transposition over a block of ~200 rows; no copy of the weights is kept.

use std::cell::RefCell;

use super::isa::Isa;
use super::transpose::{transpose_group, Line, GROUP};

/// Output columns per panel: two 16-lane AVX-512 registers.
pub const PANEL: usize = 32;

/// A thread's buffer for one transposed panel: `K × PANEL` floats, `k`-major, 64-byte aligned.
#[derive(Default)]
pub struct PanelBuffer {
    lines: Vec<Line>,
    inputs: usize,
}

thread_local! {
    /// The panel buffer of this thread (grown to the widest `K` seen, then reused).
    static BUFFER: RefCell<PanelBuffer> = RefCell::default();
}

impl PanelBuffer {
    /// Runs `work` with this thread's buffer, sized for `inputs` (`K`) values per output.
    ///
    /// # Panics
    /// When called again from inside `work` on the same thread (the buffer is borrowed).
    pub fn with<T>(inputs: usize, work: impl FnOnce(&mut Self) -> T) -> T {
        BUFFER.with(|buffer| {
            let mut buffer = buffer.borrow_mut();
            let lines = inputs * PANEL / 16;
            if buffer.lines.len() < lines {
                buffer.lines.resize(lines, Line([0.0; 16]));
            }
            buffer.inputs = inputs;
            work(&mut buffer)
        })
    }

    /// Fills the buffer with rows `first..first + columns` of `weight` (`N × K`, row-major,
    /// `K` = the buffer's `inputs`), transposed by the `isa` version of [`transpose_group`]:
    /// float `k * PANEL + c` is `W[first + c][k]`. Columns `columns..PANEL` are zero.
    ///
    /// # Panics
    /// When `columns` is not in `1..=PANEL`, the rows are not inside `weight`, or the CPU does
    /// not support `isa`.
    pub fn load(&mut self, weight: &[f32], first: usize, columns: usize, isa: Isa) {
        let k = self.inputs;
        assert!((1..=PANEL).contains(&columns), "panel columns");
        let lines = &mut self.lines[..k * PANEL / 16];
        for half in 0..PANEL / GROUP {
            let start = (first + half * GROUP).min(first + columns);
            let count = (first + columns - start).min(GROUP);
            let rows = &weight[start * k..(start + count) * k];
            transpose_group(rows, count, k, lines, PANEL, half, isa);
        }
    }

    /// The transposed panel: `K × PANEL` floats, `k`-major, 64-byte aligned.
    pub fn panel(&self) -> &[f32] {
        let lines = &self.lines[..self.inputs * PANEL / 16];
        // SAFETY: `Line` is `repr(C)` around `[f32; 16]` with no padding (64 bytes, align 64),
        // so the lines are `16 * lines.len()` initialised, contiguous floats borrowed with
        // `self`.
        unsafe { std::slice::from_raw_parts(lines.as_ptr().cast::<f32>(), lines.len() * 16) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every panel of odd shapes (a `k` tail, a partial last panel) against the definition.
    #[test]
    fn holds_the_panels_rows_k_major_with_zero_columns_after_the_last() {
        for isa in Isa::supported() {
            for (n, k) in [(35, 3), (32, 16), (70, 37), (1, 1), (64, 576)] {
                let weight: Vec<f32> = (0..n * k).map(|i| i as f32).collect();
                PanelBuffer::with(k, |buffer| {
                    for first in (0..n).step_by(PANEL) {
                        let columns = PANEL.min(n - first);
                        buffer.load(&weight, first, columns, isa);
                        let floats = buffer.panel();
                        assert_eq!(floats.len(), k * PANEL);
                        assert_eq!(floats.as_ptr() as usize % 64, 0);
                        for kk in 0..k {
                            for c in 0..PANEL {
                                let expected = if c < columns {
                                    weight[(first + c) * k + kk]
                                } else {
                                    0.0
                                };
                                assert_eq!(
                                    floats[kk * PANEL + c],
                                    expected,
                                    "{isa}: n {n} k {k} panel at {first}, k {kk}, column {c}"
                                );
                            }
                        }
                    }
                });
            }
        }
    }
}
