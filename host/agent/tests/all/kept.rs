//! A turn whose message is kept upstream ([`AgentConfig::message_kept`], the gateway's inbox):
//! the message is committed with the turn's first other write, not on its own ahead of the
//! model call, and a turn that writes nothing else still stores it when it ends.

use talaria_protocol::Message;

use super::*;

fn roles(history: &[Message]) -> Vec<&'static str> {
    history
        .iter()
        .map(|m| match m {
            Message::User { .. } => "user",
            Message::Assistant { .. } => "assistant",
            Message::Tool { .. } => "tool",
            _ => "other",
        })
        .collect()
}

#[tokio::test]
async fn the_message_waits_for_the_model_and_is_stored_when_the_turn_is_cut_short() {
    let mock = MockLlm::start(Script::new([Step::text("first answer"), Step::hang()]));
    let mut rig = setup(&mock, |c| c.message_kept = true, None).await;
    let end = rig.agent.run_turn("hello", &CancellationToken::new()).await;
    assert_eq!(end.outcome, Outcome::Completed);
    let session = rig.agent.session_id().to_string();
    let history = stored(&rig.shared.store, &session).await;
    assert_eq!(roles(&history), ["user", "assistant"], "{history:?}");
    assert_eq!(history[0].content(), "hello");

    // While the model is asked, the store holds only what earlier turns committed.
    let cancel = CancellationToken::new();
    let store = rig.shared.store.clone();
    let watch = async {
        while mock.requests().len() < 2 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let during = stored(&store, &session).await;
        cancel.cancel();
        during
    };
    let (end, during) = tokio::join!(rig.agent.run_turn("are you there?", &cancel), watch);
    assert_eq!(roles(&during), ["user", "assistant"], "not committed yet: {during:?}");
    assert_eq!(end.outcome, Outcome::Interrupted);
    // Cut short, the turn still leaves its message, as a turn that committed it first would.
    let history = stored(&rig.shared.store, &session).await;
    assert_eq!(roles(&history), ["user", "assistant", "user"], "{history:?}");
    assert_eq!(history[2].content(), "are you there?");
    assert_eq!(rig.shared.store.session(&session).await.expect("store").expect("session").message_count, 3);
}

#[tokio::test]
async fn a_tool_turn_commits_its_message_ahead_of_the_tools_request_once() {
    let mock = MockLlm::start(Script::new([
        Step::tool_call("todo", serde_json::json!({"todos": [{"id": "1", "content": "write", "status": "pending"}]})),
        Step::text("noted"),
    ]));
    let mut rig = setup(&mock, |c| c.message_kept = true, None).await;
    let end = rig.agent.run_turn("plan it", &CancellationToken::new()).await;
    assert_eq!(end.outcome, Outcome::Completed);
    let history = stored(&rig.shared.store, rig.agent.session_id()).await;
    assert_eq!(roles(&history), ["user", "assistant", "tool", "assistant"], "{history:?}");
    assert_eq!(history[0].content(), "plan it");
    assert_eq!(history[3].content(), "noted");
}

#[tokio::test]
async fn a_failed_turn_stores_its_message_and_the_next_turn_sees_it() {
    let mock = MockLlm::start(Script::new([Step::cut("half"), Step::cut("half"), Step::text("back again")]));
    let mut rig = setup(&mock, |c| c.message_kept = true, None).await;
    let end = rig.agent.run_turn("first", &CancellationToken::new()).await;
    assert!(matches!(end.outcome, Outcome::Failed(_)), "{end:?}");
    let session = rig.agent.session_id().to_string();
    assert_eq!(roles(&stored(&rig.shared.store, &session).await), ["user"]);
    let end = rig.agent.run_turn("second", &CancellationToken::new()).await;
    assert_eq!(end.outcome, Outcome::Completed);
    let history = stored(&rig.shared.store, &session).await;
    assert_eq!(roles(&history), ["user", "user", "assistant"], "{history:?}");
    let sent = mock.requests().last().expect("a request").body.to_string();
    assert!(sent.contains("first") && sent.contains("second"), "{sent}");
}
