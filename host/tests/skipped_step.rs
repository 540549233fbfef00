//! A worker group's optimizer step on a non-finite loss is skipped, leaves every weight as it
//! was, and says why: which agent's loss (or which parameter's gradient) was not finite.

use std::path::Path;

use drmas_host::advantage::PerToken;
use drmas_host::config::LossSection;
use drmas_host::model::pretrained::Pretrained;
use drmas_host::rollout::AgentCall;
use drmas_host::update::{
    update_group, AdamW, AgentTraining, MicroBatch, NonFinite, Reference, RolloutCorrection,
    UpdateInputs, UpdateSettings,
};
use tch::{Device, Kind};

#[test]
fn a_nan_advantage_skips_the_step_naming_the_agent_and_keeps_the_weights() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/llama");
    let model = Pretrained::load(&path, Device::Cpu, Kind::Float)
        .expect("fixture loads")
        .model;
    let mut params: Vec<(String, tch::Tensor)> =
        model.var_store().variables().into_iter().collect();
    params.sort_by(|a, b| a.0.cmp(&b.0));
    let before: Vec<tch::Tensor> = params.iter().map(|(_, t)| t.copy()).collect();
    let mut optimizer = AdamW::new(params, 0.01);
    let calls: Vec<AgentCall> = (0..2)
        .map(|agent| AgentCall {
            logprobs: vec![-1.0; 2],
            ..AgentCall::synthetic(0, agent, vec![5, 17, 3], vec![7, 1])
        })
        .collect();
    let refs: Vec<&AgentCall> = calls.iter().collect();
    let training = AgentTraining {
        loss: LossSection::default(),
        micro_batch: MicroBatch::Calls(4),
        adapter: None,
        activation_checkpointing: false,
        correction: RolloutCorrection::default(),
    };
    let report = update_group(
        &model,
        Reference::None,
        &mut optimizer,
        &UpdateInputs::new(
            &refs,
            &PerToken::broadcast(
                &[0.5, f64::NAN],
                &calls.iter().map(|c| c.response.len()).collect::<Vec<_>>(),
            ),
        ),
        &[training.clone(), training],
        &UpdateSettings::one_step(1.0, 1e-3),
    )
    .expect("the update runs");
    assert_eq!(report.skipped, Some(NonFinite::Loss { agent: 1 }));
    assert_eq!(optimizer.steps(), 0, "no optimizer step was taken");
    let mut after: Vec<(String, tch::Tensor)> = model.var_store().variables().into_iter().collect();
    after.sort_by(|a, b| a.0.cmp(&b.0));
    for ((name, now), was) in after.iter().zip(&before) {
        assert!(now.equal(was), "{name} changed in a skipped step");
    }
}
