use super::*;

fn task() -> Task {
    Task {
        id: "q".into(),
        prompt: "who wrote hamlet".into(),
        data_source: "nq".into(),
        payload: String::new(),
    }
}

fn output(action: &str) -> AgentOutput {
    AgentOutput {
        raw: format!("raw {action}"),
        action: action.into(),
        valid: true,
    }
}

/// Runs one environment turn: feeds the observation, answers calls with `replies`, returns the
/// roles called and the submitted action.
fn turn(routing: &mut dyn Routing, observation: &str, replies: &[&str]) -> (Vec<String>, String) {
    routing.on_observation(observation).expect("observation");
    let mut called = Vec::new();
    let mut replies = replies.iter();
    loop {
        match routing.next().expect("next") {
            Next::Act { role, .. } => {
                routing
                    .observe(&role, &output(replies.next().expect("a reply")))
                    .expect("observe");
                called.push(role);
            }
            Next::Submit { action } => return (called, action),
        }
    }
}

#[test]
fn the_verifier_routes_to_search_then_to_answer() {
    let orchestra = SearchOrchestra::from_config(&"max_turns = 4".into()).expect("config");
    let mut routing = orchestra.start(&task()).expect("start");
    let (called, action) = turn(
        routing.as_mut(),
        "who wrote hamlet",
        &["no", "hamlet author"],
    );
    assert_eq!(called, ["verifier", "search"]);
    assert_eq!(action, "<search>hamlet author</search>");

    let (called, action) = turn(
        routing.as_mut(),
        "<information>Doc 1 …</information>",
        &["yes", "Shakespeare"],
    );
    assert_eq!(called, ["verifier", "answer"]);
    assert_eq!(action, "<answer>Shakespeare</answer>");
}

#[test]
fn the_last_turn_goes_straight_to_the_answer_agent() {
    let orchestra = SearchOrchestra::from_config(&"max_turns = 2".into()).expect("config");
    let mut routing = orchestra.start(&task()).expect("start");
    let _ = turn(routing.as_mut(), "who wrote hamlet", &["no", "q1"]);
    let (called, action) = turn(
        routing.as_mut(),
        "<information>docs</information>",
        &["Shakespeare"],
    );
    assert_eq!(called, ["answer"]);
    assert_eq!(action, "<answer>Shakespeare</answer>");
}

#[test]
fn later_agents_see_the_retrieved_documents() {
    let orchestra = SearchOrchestra::from_config(&"".into()).expect("config");
    let mut routing = orchestra.start(&task()).expect("start");
    let _ = turn(routing.as_mut(), "who wrote hamlet", &["no", "q1"]);
    routing
        .on_observation("<information>Doc 1(Title: Hamlet) by Shakespeare</information>")
        .expect("obs");
    let Next::Act { role, context } = routing.next().expect("next") else {
        panic!("expected the verifier")
    };
    assert_eq!(role, "verifier");
    let roles: Vec<&str> = context.history.iter().map(|t| t.role.as_str()).collect();
    assert_eq!(roles, ["Verifier Agent", "Search Agent", "Search Engine"]);
    assert!(context.observation.contains("by Shakespeare"));
}

#[test]
fn an_unexpected_role_is_an_error() {
    let orchestra = SearchOrchestra::from_config(&"".into()).expect("config");
    let mut routing = orchestra.start(&task()).expect("start");
    routing.on_observation("q").expect("obs");
    assert!(routing.observe("answer", &output("x")).is_err());
}
