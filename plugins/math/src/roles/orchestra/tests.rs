use super::*;
use crate::roles::{SolverAgent, Verdict, VerifierAgent};
use drmas_sdk::{Agent, AgentContext, ChatMessage};

fn task() -> Task {
    Task {
        id: "t".into(),
        prompt: "What is 2 + 3?".into(),
        data_source: "test".into(),
        payload: "5".into(),
    }
}

fn output(raw: &str, action: &str) -> AgentOutput {
    AgentOutput {
        raw: raw.into(),
        action: action.into(),
        valid: true,
    }
}

/// Drives one episode, answering each call from `replies` in order; returns the roles called and
/// the submitted action.
fn drive(orchestra: &dyn Orchestra, replies: &[(&str, &str)]) -> (Vec<String>, String) {
    let mut routing = orchestra.start(&task()).expect("start");
    routing
        .on_observation("What is 2 + 3?")
        .expect("observation");
    let mut called = Vec::new();
    let mut replies = replies.iter();
    loop {
        match routing.next().expect("next") {
            Next::Act { role, context } => {
                assert_eq!(context.question, "What is 2 + 3?");
                let (raw, action) = replies.next().expect("more calls than replies");
                routing
                    .observe(&role, &output(raw, action))
                    .expect("observe");
                called.push(role);
            }
            Next::Submit { action } => return (called, action),
        }
    }
}

#[test]
fn an_approval_on_the_first_loop_ends_the_episode() {
    let orchestra = MathOrchestra::from_config(&"".into()).expect("config");
    let (called, action) = drive(
        &orchestra,
        &[
            ("\\boxed{5}", "\\boxed{5}"),
            ("ok <verify>approve</verify>", "approve"),
        ],
    );
    assert_eq!(called, ["solver", "verifier"]);
    assert_eq!(action, "\\boxed{5}");
}

#[test]
fn rejections_loop_until_max_loops_and_the_verifier_is_skipped_on_the_last() {
    let orchestra = MathOrchestra::from_config(&"max_loops = 3".into()).expect("config");
    let replies = [
        ("\\boxed{4}", "\\boxed{4}"),
        ("<verify>reject</verify>", "reject"),
        ("\\boxed{6}", "\\boxed{6}"),
        ("<verify>reject</verify>", "reject"),
        ("\\boxed{5}", "\\boxed{5}"),
    ];
    let (called, action) = drive(&orchestra, &replies);
    assert_eq!(
        called,
        ["solver", "verifier", "solver", "verifier", "solver"]
    );
    assert_eq!(action, "\\boxed{5}", "the last Solver output is the action");
}

#[test]
fn the_retry_sees_the_team_context() {
    let orchestra = MathOrchestra::from_config(&"".into()).expect("config");
    let mut routing = orchestra.start(&task()).expect("start");
    routing
        .on_observation("What is 2 + 3?")
        .expect("observation");
    let _ = routing.next().expect("solver");
    routing
        .observe("solver", &output("I get \\boxed{4}", "x"))
        .expect("observe");
    let _ = routing.next().expect("verifier");
    routing
        .observe(
            "verifier",
            &output("wrong <verify>reject</verify>", "reject"),
        )
        .expect("observe");
    let Next::Act { role, context } = routing.next().expect("next") else {
        panic!("expected the solver")
    };
    assert_eq!(role, "solver");
    let solver = SolverAgent::from_config(&"".into()).expect("solver");
    let prompt = &solver.messages(&context).expect("messages")[0].content;
    assert!(
        prompt.contains("The output of \"Solver Agent\": I get \\boxed{4}"),
        "{prompt}"
    );
    assert!(
        prompt.contains("The output of \"Verifier Agent\": wrong <verify>reject</verify>"),
        "{prompt}"
    );
}

#[test]
fn solver_only_calls_once() {
    let (called, action) = drive(&SolverOnlyOrchestra, &[("\\boxed{5}", "\\boxed{5}")]);
    assert_eq!(called, ["solver"]);
    assert_eq!(action, "\\boxed{5}");
}

#[test]
fn an_output_for_a_role_that_was_not_called_is_an_error() {
    let orchestra = MathOrchestra::from_config(&"".into()).expect("config");
    let mut routing = orchestra.start(&task()).expect("start");
    let error = routing
        .observe("verifier", &output("x", "approve"))
        .expect_err("must fail");
    assert!(
        error.message().contains("did not ask `verifier`"),
        "{error}"
    );
}

#[test]
fn verdicts_parse_and_unparseable_ones_follow_the_config() {
    assert_eq!(
        Verdict::find("fine. <verify> Approve </verify>"),
        Some(Verdict::Approve)
    );
    assert_eq!(
        Verdict::find("<verify>approve</verify> no wait <verify>reject</verify>"),
        Some(Verdict::Reject)
    );
    assert_eq!(Verdict::find("<verify>maybe</verify>"), None);
    assert_eq!(Verdict::find("<verify>reject"), None);

    let default = VerifierAgent::from_config(&"".into()).expect("config");
    let parsed = default.parse("looks fine").expect("parse");
    assert_eq!((parsed.action.as_str(), parsed.valid), ("approve", false));
    let strict = VerifierAgent::from_config(&"unparseable = \"reject\"".into()).expect("config");
    assert_eq!(strict.parse("looks fine").expect("parse").action, "reject");
    assert!(
        VerifierAgent::from_config(&"unparsable = \"reject\"".into()).is_err(),
        "typos are errors"
    );
}

#[test]
fn a_response_prefix_ends_the_verifier_messages_as_an_assistant_turn() {
    let context = AgentContext {
        question: "1+1?".into(),
        ..AgentContext::default()
    };
    let plain = VerifierAgent::from_config(&"".into()).expect("config");
    let messages = plain.messages(&context).expect("messages");
    assert_eq!(messages.last().map(|m| m.role.as_str()), Some("user"));

    let prefixed =
        VerifierAgent::from_config(&"response_prefix = \"<verify>\"".into()).expect("config");
    let messages = prefixed.messages(&context).expect("messages");
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[1], ChatMessage::assistant("<verify>"));
    // The host hands `parse` the prefix with the continuation.
    let parsed = prefixed.parse("<verify>reject</verify>").expect("parse");
    assert_eq!((parsed.action.as_str(), parsed.valid), ("reject", true));
}

#[test]
fn the_solver_is_valid_only_with_a_final_answer() {
    let solver = SolverAgent::from_config(&"".into()).expect("config");
    assert!(solver.parse("so \\boxed{5}").expect("parse").valid);
    assert!(!solver.parse("I think five").expect("parse").valid);
}

#[test]
fn max_loops_zero_is_refused() {
    let error = MathOrchestra::from_config(&"max_loops = 0".into())
        .err()
        .expect("must fail");
    assert!(error.message().contains("max_loops must be at least 1"));
}

#[test]
fn a_verdict_outside_the_contract_ends_the_loop_only_when_marked_invalid() {
    let orchestra = MathOrchestra::from_config(&"".into()).expect("config");
    let roles = orchestra.roles().expect("roles");
    assert_eq!(roles[1], Role::one_of(VERIFIER, ["approve", "reject"]));
    let verifier = VerifierAgent::from_config(&"".into()).expect("verifier");
    assert!(roles[1].actions.refused(&verifier.actions()).is_empty());

    let mut routing = orchestra.start(&task()).expect("start");
    routing
        .on_observation("What is 2 + 3?")
        .expect("observation");
    routing.next().expect("solver's turn");
    routing
        .observe(SOLVER, &output("\\boxed{5}", "\\boxed{5}"))
        .expect("observe");
    routing.next().expect("verifier's turn");
    // As the host delivers it: `approved` is outside the contract, so the call is invalid.
    let invalid = AgentOutput {
        valid: false,
        ..output("approved", "approved")
    };
    let mut checked = orchestra.start(&task()).expect("start");
    checked.on_observation("q").expect("observation");
    checked.next().expect("solver's turn");
    checked
        .observe(SOLVER, &output("\\boxed{5}", "\\boxed{5}"))
        .expect("observe");
    checked.next().expect("verifier's turn");
    checked.observe(VERIFIER, &invalid).expect("observe");
    assert_eq!(
        checked.next().expect("next"),
        Next::Submit {
            action: "\\boxed{5}".into()
        }
    );
    // Marked valid, it can only come from a host that skipped the contract: an error.
    let error = routing
        .observe(VERIFIER, &output("approved", "approved"))
        .expect_err("refused");
    assert!(
        error.message().contains("neither `approve` nor `reject`"),
        "{error}"
    );
}
