//! The chain: retries with Retry-After, fallback with notices, sticky state within a turn.

use super::*;

fn fast_chain(providers: Vec<Provider>) -> Chain {
    Chain { providers, retries: 3, base_delay: Duration::from_millis(1), max_delay: Duration::from_millis(20) }
}

async fn run_chain(chain: &Chain, state: &mut ChainState) -> (Result<ModelReply, ModelError>, Vec<String>) {
    let notices = Arc::new(Mutex::new(Vec::new()));
    let sink = notices.clone();
    let messages = [Message::user("hi")];
    let request = ModelRequest { system: "", messages: &messages, tools: &[], stream: true };
    let result =
        chain.complete(&Client::new(), state, &request, &|_| {}, &move |n| sink.lock().expect("lock").push(n)).await;
    let notices = notices.lock().expect("lock").clone();
    (result, notices)
}

#[tokio::test]
async fn chain_retries_then_falls_back_and_stays_there_for_the_turn() {
    let boom = || Canned::json(500, json!({"error": {"message": "upstream overloaded"}}));
    let primary = Server::start(vec![boom(), boom(), boom(), boom(), ok_chat("primary again")]).await;
    let fallback = Server::start(vec![ok_chat("from fallback"), ok_chat("still fallback")]).await;
    let chain = fast_chain(vec![
        provider(ApiMode::ChatCompletions, &primary.url, "gpt-main"),
        provider(ApiMode::ChatCompletions, &fallback.url, "backup-model"),
    ]);
    let mut state = ChainState::new();
    let (reply, notices) = run_chain(&chain, &mut state).await;
    assert_eq!(assistant(&reply.expect("fallback answers")).0, "from fallback");
    assert_eq!(primary.requests().len(), 4, "one attempt and three retries");
    assert_eq!(notices.len(), 4, "{notices:#?}");
    for (n, notice) in notices[..3].iter().enumerate() {
        assert!(notice.starts_with("HTTP 500 from custom/gpt-main, retrying in 0.0"), "{notice}");
        assert!(notice.ends_with(&format!("({}/3)", n + 1)), "{notice}");
    }
    assert_eq!(
        notices[3],
        "custom/gpt-main failed (HTTP 500: upstream overloaded); falling back to custom/backup-model"
    );
    assert_eq!(state.active_index(), 1);
    assert_eq!(chain.active(&state).model, "backup-model");

    // The rest of the turn goes straight to the fallback.
    let (reply, notices) = run_chain(&chain, &mut state).await;
    assert_eq!(assistant(&reply.expect("reply")).0, "still fallback");
    assert!(notices.is_empty());
    assert_eq!(primary.requests().len(), 4);

    // A new turn starts at the primary again.
    state.new_turn();
    let (reply, _) = run_chain(&chain, &mut state).await;
    assert_eq!(assistant(&reply.expect("reply")).0, "primary again");
    assert_eq!(state.active_index(), 0);
}

#[tokio::test]
async fn chain_moves_on_at_once_after_401() {
    let primary =
        Server::start(vec![Canned::json(401, json!({"error": {"message": "Incorrect API key provided"}}))]).await;
    let fallback = Server::start(vec![ok_chat("hello")]).await;
    let chain = fast_chain(vec![
        provider(ApiMode::ChatCompletions, &primary.url, "gpt-main"),
        provider(ApiMode::ChatCompletions, &fallback.url, "claude-backup"),
    ]);
    let mut state = ChainState::new();
    let (reply, notices) = run_chain(&chain, &mut state).await;
    assert_eq!(assistant(&reply.expect("reply")).0, "hello");
    assert_eq!(primary.requests().len(), 1, "no retry after 401");
    assert_eq!(
        notices,
        vec!["custom/gpt-main failed (HTTP 401: Incorrect API key provided); falling back to custom/claude-backup"]
    );
}

#[tokio::test]
async fn chain_honours_retry_after_and_returns_the_last_error() {
    let primary = Server::start(vec![
        Canned::json(429, json!({"error": {"message": "slow down"}})).header("retry-after", "0.01"),
        ok_chat("after waiting"),
    ])
    .await;
    let chain = fast_chain(vec![provider(ApiMode::ChatCompletions, &primary.url, "gpt-main")]);
    let mut state = ChainState::new();
    let started = Instant::now();
    let (reply, notices) = run_chain(&chain, &mut state).await;
    assert_eq!(assistant(&reply.expect("reply")).0, "after waiting");
    assert!(started.elapsed() >= Duration::from_millis(10), "waited for Retry-After");
    assert_eq!(notices, vec!["HTTP 429 from custom/gpt-main, retrying in 0.0s (1/3)"]);

    // Both providers fail for good: the last error comes back.
    let a = Server::start(vec![Canned::json(404, json!({"error": {"message": "no such model"}}))]).await;
    let b = Server::start(vec![Canned::json(403, json!({"error": {"message": "forbidden"}}))]).await;
    let chain = fast_chain(vec![
        provider(ApiMode::ChatCompletions, &a.url, "m1"),
        provider(ApiMode::ChatCompletions, &b.url, "m2"),
    ]);
    let mut state = ChainState::new();
    let (reply, notices) = run_chain(&chain, &mut state).await;
    assert!(
        matches!(reply, Err(ModelError::Http { status: 403, ref message, .. }) if message == "forbidden"),
        "{reply:?}"
    );
    assert_eq!(
        notices,
        vec![
            "custom/m1 failed (HTTP 404: no such model (talaria posted to this URL because api_mode is \
             `chat_completions`: check base_url and api_mode)); falling back to custom/m2"
                .to_string(),
            "giving up after 2 attempts over 0.0s (HTTP 403)".to_string(),
        ]
    );
}

#[tokio::test]
async fn chain_without_providers_is_a_config_error() {
    let chain = fast_chain(Vec::new());
    let (reply, _) = run_chain(&chain, &mut ChainState::new()).await;
    assert!(matches!(reply, Err(ModelError::Config(_))), "{reply:?}");
}
