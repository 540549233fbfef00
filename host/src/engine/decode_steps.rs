//! [`DecodeSteps`]: how [`super::generate()`] runs its decode steps: eagerly, operator by
//! operator, or on a CUDA device as one CUDA graph replayed per step ([`CudaDecode`]).
//!
//! A decode step of a Llama-family model is a few hundred small operators (about 30 per layer),
//! each a kernel launch on a GPU, and the device finishes most of them faster than the host
//! issues them: the step is bound by issuing. Captured once as a graph, a step is one launch.
//! For that a step must look the same every time: the KV cache's next slot is held on the
//! device and every step attends to all of the cache's slots through the mask
//! ([`KvCache::hold_slot_on_device`]), the step's token ids are copied into one input tensor,
//! and its logits come out in one output tensor that every replay overwrites. Finished rows stay
//! in the batch (compacting it would change the step's shapes). The first step runs eagerly on
//! the side stream the capture uses, the second is captured and replayed, the others replayed.

use std::sync::OnceLock;

use tch::{Device, TchError, Tensor};

use super::cuda_graph::CudaGraph;
use crate::model::error::ModelError;
use crate::model::layers::{AdapterRows, KvCache};
use crate::model::llama::Llama;
use crate::model::process_setting::ProcessSetting;

/// The environment variable that chooses [`CudaDecode`].
pub const CUDA_DECODE_VAR: &str = "DRMAS_CUDA_DECODE";

/// How decode steps run on a CUDA device (see the module docs). CPU models always run eagerly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CudaDecode {
    /// Operator by operator, finished rows dropped from the batch (the default).
    Eager,
    /// One CUDA graph per `generate` call, captured at its second step and replayed after.
    Graphs,
}

impl ProcessSetting for CudaDecode {
    const VAR: &'static str = CUDA_DECODE_VAR;
    const CHOICES: &'static [(&'static str, Self)] =
        &[("eager", Self::Eager), ("graphs", Self::Graphs)];

    fn cell() -> &'static OnceLock<Self> {
        static CHOSEN: OnceLock<CudaDecode> = OnceLock::new();
        &CHOSEN
    }
}

/// The decode steps of one `generate` call.
#[derive(Debug)]
pub enum DecodeSteps {
    /// Each step's operators issued one by one; the batch may shrink between steps.
    Eager,
    /// Steps replayed from a CUDA graph; the batch keeps its rows.
    Graph(GraphSteps),
}

impl DecodeSteps {
    /// The steps for a model on `device`, as the process's [`CudaDecode`] says.
    pub fn for_device(device: Device) -> Result<Self, ModelError> {
        match device {
            Device::Cuda(index) if CudaDecode::for_process()? == CudaDecode::Graphs => {
                Ok(Self::Graph(GraphSteps::new(index)?))
            }
            _ => Ok(Self::Eager),
        }
    }

    /// Whether finished rows may leave the batch between steps.
    pub fn may_compact(&self) -> bool {
        matches!(self, Self::Eager)
    }

    /// Logits `[B, 1, vocab]` of the step that feeds `tokens` `[B, 1]` (the sampler's draws)
    /// to `model` after what `cache` holds, adding them to it. Under a graph the logits are the
    /// graph's output: the next step overwrites them.
    pub fn step(
        &mut self,
        model: &Llama,
        tokens: &Tensor,
        cache: &mut KvCache,
        rows: &AdapterRows,
    ) -> Result<Tensor, ModelError> {
        let forward = |input: &Tensor, cache: &mut KvCache| {
            tch::no_grad(|| model.forward_last_sampled(input, cache, rows))
        };
        match self {
            Self::Eager => forward(tokens, cache),
            Self::Graph(graph) => graph.step(tokens, cache, forward).map_err(|e| {
                ModelError::Torch(TchError::Torch(format!(
                    "{e} (decode steps as CUDA graphs, {CUDA_DECODE_VAR}=graphs; \
                     {CUDA_DECODE_VAR}=eager runs them operator by operator)"
                )))
            }),
        }
    }
}

/// The state of [`DecodeSteps::Graph`].
#[derive(Debug)]
pub struct GraphSteps {
    graph: CudaGraph,
    /// After the capture: the step's input token ids and output logits, which every replay
    /// reads and writes.
    captured: Option<(Tensor, Tensor)>,
}

impl GraphSteps {
    fn new(device: usize) -> Result<Self, ModelError> {
        Ok(Self {
            graph: CudaGraph::new(device)?,
            captured: None,
        })
    }

    /// The step of `tokens`: `forward` run eagerly (the first step), captured and replayed (the
    /// second), or the capture replayed (the others).
    fn step(
        &mut self,
        tokens: &Tensor,
        cache: &mut KvCache,
        forward: impl FnOnce(&Tensor, &mut KvCache) -> Result<Tensor, ModelError>,
    ) -> Result<Tensor, ModelError> {
        if let Some((input, logits)) = &mut self.captured {
            // The capture checked nothing on the host: a replay past the cache's end would
            // write out of bounds on the device.
            if cache.len() >= cache.max_len() {
                return Err(ModelError::Input(format!(
                    "a decode step past the cache's {} slots",
                    cache.max_len()
                )));
            }
            tch::no_grad(|| input.copy_(tokens));
            self.graph.replay()?;
            cache.note_replayed_step();
            return Ok(logits.shallow_clone());
        }
        if !cache.holds_slot_on_device() {
            cache.hold_slot_on_device();
            return self.graph.warm_up(|| forward(tokens, cache));
        }
        let input = tokens.copy();
        let logits = self.graph.capture(|| forward(&input, cache))?;
        self.graph.replay()?;
        self.captured = Some((input, logits.shallow_clone()));
        Ok(logits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_names_one_of_two_choices() {
        assert_eq!(CudaDecode::parse(None).expect("unset"), CudaDecode::Eager);
        assert_eq!(
            CudaDecode::parse(Some("graphs")).expect("graphs"),
            CudaDecode::Graphs
        );
        assert_eq!(
            CudaDecode::parse(Some("graph"))
                .expect_err("a typo")
                .to_string(),
            "DRMAS_CUDA_DECODE=\"graph\": expected eager (the default) or graphs"
        );
    }

    #[test]
    fn cpu_models_decode_eagerly() {
        let steps = DecodeSteps::for_device(Device::Cpu).expect("cpu");
        assert!(matches!(steps, DecodeSteps::Eager) && steps.may_compact());
    }
}
