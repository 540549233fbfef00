//! Training: the policy loss on per-token log-probabilities (PPO clipped surrogate with DAPO's
//! decoupled clip and dual clip, token aggregation modes, entropy bonus, KL to a reference), and
//! the critic of estimators that have one.

mod adamw;
mod aggregate;
mod batch;
mod chunked_head;
mod critic;
mod fused_adamw;
mod grad_norm;
mod gradient_lists;
mod kl;
mod loss;
mod lr_schedule;
mod micro_batch;
mod mini_batch;
mod reference_kl;
mod rollout_correction;
mod step;
mod value_loss;

pub use adamw::AdamW;
pub use aggregate::{Aggregation, BatchTotals};
pub use batch::{padded_rows, prompts_run_once, TrainingBatch};
pub use chunked_head::ChunkedHead;
pub use critic::{Critic, CriticReport};
pub use grad_norm::{global_norm, GradientLedger};
pub use kl::kl_penalty;
pub use loss::{policy_loss, LossInputs, LossStats};
pub use lr_schedule::LrSchedule;
pub use micro_batch::MicroBatch;
pub use reference_kl::{reference_kl, ReferenceKl};
pub use rollout_correction::{
    recompute_old_logprobs, tis_weights, Mismatch, RolloutCorrection, MISMATCH_THRESHOLD,
};
pub use step::{
    update_group, AgentTraining, NonFinite, Reference, UpdateInputs, UpdateReport, UpdateSettings,
};
pub use value_loss::{value_loss, ValueLossStats};
