//! A tool round (its request when the tools only read, and its results) is committed while the
//! next model call is out, not before the request: what each case stores, and when.

use talaria_protocol::Message;

use super::*;

fn todo_call() -> Step {
    Step::tool_call("todo", serde_json::json!({"todos": [{"id": "1", "content": "write", "status": "pending"}]}))
}

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
async fn each_round_is_stored_once_in_order_with_each_model_calls_usage() {
    let mock = MockLlm::start(Script::new([todo_call(), todo_call(), Step::text("planned")]));
    let mut rig = setup(&mock, |_| {}, None).await;
    let end = rig.agent.run_turn("plan it", &CancellationToken::new()).await;
    assert_eq!(end.outcome, Outcome::Completed);
    let session = rig.agent.session_id().to_string();
    let history = stored(&rig.shared.store, &session).await;
    assert_eq!(roles(&history), ["user", "assistant", "tool", "assistant", "tool", "assistant"], "{history:?}");
    assert_eq!(history[5].content(), "planned");
    let row = rig.shared.store.session(&session).await.expect("store").expect("session");
    assert_eq!(row.message_count, 6);
    assert_eq!(row.tool_call_count, 2);
    // The usage of all three model calls is stored: the first two with the rounds, the last
    // with the answer.
    assert_eq!(row.api_call_count, 3);
    // The model saw each round's result.
    let last = mock.requests().last().expect("a request").body.to_string();
    assert_eq!(last.matches("\"role\":\"tool\"").count(), 2, "{last}");
}

#[tokio::test]
async fn a_model_call_cut_short_still_leaves_the_round_it_went_out_with_once() {
    let mock = MockLlm::start(Script::new([todo_call(), Step::hang()]));
    let mut rig = setup(&mock, |_| {}, None).await;
    let session = rig.agent.session_id().to_string();
    let store = rig.shared.store.clone();
    let cancel = CancellationToken::new();
    let watch = async {
        while mock.requests().len() < 2 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        // The round is written while the model works on the request that carries it.
        let mut during = stored(&store, &session).await;
        for _ in 0..400 {
            if during.len() >= 3 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            during = stored(&store, &session).await;
        }
        cancel.cancel();
        during
    };
    let (end, during) = tokio::join!(rig.agent.run_turn("plan it", &cancel), watch);
    assert_eq!(roles(&during), ["user", "assistant", "tool"], "{during:?}");
    assert_eq!(end.outcome, Outcome::Interrupted);
    let history = stored(&rig.shared.store, &session).await;
    assert_eq!(roles(&history), ["user", "assistant", "tool"], "{history:?}");
    assert_eq!(rig.shared.store.session(&session).await.expect("store").expect("session").message_count, 3);
}

#[tokio::test]
async fn with_the_message_kept_the_round_carries_it_and_nothing_is_stored_twice() {
    let mock = MockLlm::start(Script::new([todo_call(), todo_call(), Step::text("noted")]));
    let mut rig = setup(&mock, |c| c.message_kept = true, None).await;
    let end = rig.agent.run_turn("plan it", &CancellationToken::new()).await;
    assert_eq!(end.outcome, Outcome::Completed);
    let session = rig.agent.session_id().to_string();
    let history = stored(&rig.shared.store, &session).await;
    assert_eq!(roles(&history), ["user", "assistant", "tool", "assistant", "tool", "assistant"], "{history:?}");
    assert_eq!(history[0].content(), "plan it");
    let row = rig.shared.store.session(&session).await.expect("store").expect("session");
    assert_eq!((row.message_count, row.api_call_count), (6, 3));
}
