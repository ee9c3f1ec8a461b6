//! A turn's outcome under what real servers do: answers cut at the output-token limit, broken
//! streams, no usage, a small window mostly taken by the fixed prompt.

use super::*;

#[tokio::test]
async fn an_answer_cut_at_the_limit_is_told_kept_marked_and_ends_truncated() {
    for mode in Mode::ALL {
        let mock = mode.start(Script::new([Reply::text("Once upon a").truncated().into(), Step::text("the end")]));
        let mut rig = setup(&mock, |_| {}, None).await;
        let end = rig.agent.run_turn("tell me a story", &CancellationToken::new()).await;
        assert_eq!(end.outcome, Outcome::Truncated, "{mode:?}");
        assert_eq!(end.text, "Once upon a", "{mode:?}: the answer as it arrived");
        let events = rig.drain();
        let warnings = Rig::warnings(&events);
        assert!(
            warnings.iter().any(|w| w.contains("cut off at the output-token limit (stop reason `length`")),
            "{mode:?}: the user is told: {warnings:?}"
        );
        let history = stored(&rig.shared.store, rig.agent.session_id()).await;
        let last = history.last().expect("stored");
        assert!(
            last.content().starts_with("Once upon a") && last.content().contains("cut off at the output-token limit"),
            "{mode:?}: kept, marked: {last:?}"
        );
        // The next turn carries it, marker and all, so the model knows.
        let end = rig.agent.run_turn("go on", &CancellationToken::new()).await;
        assert_eq!(end.outcome, Outcome::Completed);
        let sent = mock.requests()[1].body.to_string();
        assert!(sent.contains("Once upon a") && sent.contains("cut off at the output-token limit"), "{sent}");
    }
}

#[tokio::test]
async fn a_broken_stream_fails_the_turn_with_its_partial_and_keeps_nothing() {
    let mock = MockLlm::start(Script::new([Step::cut("I was saying that"), Step::cut("I was saying that")]));
    let mut rig = setup(&mock, |_| {}, None).await;
    let end = rig.agent.run_turn("talk", &CancellationToken::new()).await;
    let Outcome::Failed(why) = &end.outcome else { panic!("{end:?}") };
    assert!(why.contains("was cut off") && why.contains(&mock.base_url()), "{why}");
    assert_eq!(end.partial, "I was saying that");
    assert!(end.text.is_empty());
    let history = stored(&rig.shared.store, rig.agent.session_id()).await;
    assert!(history.iter().all(|m| !m.content().contains("I was saying")), "never in history: {history:?}");
    let events = rig.drain();
    let sent = events.iter().position(|e| matches!(e, Event::RequestSent { .. })).expect("request announced");
    let first_text = events.iter().position(|e| matches!(e, Event::TextDelta { .. })).expect("text streamed");
    assert!(sent < first_text, "the waiting indicator starts before the first token");
    assert!(matches!(&events[sent], Event::RequestSent { model } if model == "custom/mock-model"));
}

#[tokio::test]
async fn usage_without_a_usage_chunk_is_estimated_and_marked() {
    let mock = Mode::Strict.start(Script::new([Step::text("hello there")]));
    let mut rig = setup(&mock, |_| {}, None).await;
    let end = rig.agent.run_turn("hi", &CancellationToken::new()).await;
    assert_eq!(end.outcome, Outcome::Completed);
    assert!(end.usage.estimated && end.usage.input_tokens > 0 && end.usage.output_tokens > 0, "{:?}", end.usage);
    let events = rig.drain();
    assert!(events.iter().any(|e| matches!(e, Event::Usage { usage, .. } if usage.estimated)));
    let info = rig.shared.store.session(rig.agent.session_id()).await.expect("store").expect("session");
    assert!(info.usage.estimated, "the session's totals are marked as estimates");

    // A provider that reports usage: not estimated.
    let mock = MockLlm::start(Script::new([Reply::text("hello").usage(40, 2).into()]));
    let mut rig = setup(&mock, |_| {}, None).await;
    let end = rig.agent.run_turn("hi", &CancellationToken::new()).await;
    assert_eq!((end.usage.input_tokens, end.usage.estimated), (40, false));
}

#[tokio::test]
async fn the_engine_measures_only_the_conversation_against_the_room_left() {
    // A system prompt of ≈2,400 tokens and more in a 4,096-token window.
    let mock = MockLlm::start(Script::new([Step::text("one"), Step::text("two"), Step::text("three")]));
    let recorder = Arc::new(Recorder::default());
    let system = "Follow the house style. ".repeat(400);
    let mut rig = setup(
        &mock,
        |c| {
            c.context_length = 4_096;
            c.system_message = Some(system);
        },
        Some(recorder.clone()),
    )
    .await;
    for prompt in ["a", "b", "c"] {
        let end = rig.agent.run_turn(prompt, &CancellationToken::new()).await;
        assert_eq!(end.outcome, Outcome::Completed);
    }
    let seen = recorder.seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 3, "asked before every call");
    let budget = rig.agent.context_budget();
    assert!(budget.fixed_tokens > 2_400 && budget.fixed_tokens < 4_096, "{budget:?}");
    for status in &seen {
        assert!(status.prompt_tokens < 100, "the system prompt is not counted: {status:?}");
        assert!(status.context_length < 1_700, "measured against the room left, not 4,096: {status:?}");
    }
    assert!(Rig::warnings(&rig.drain()).is_empty(), "nothing to warn about");
}

#[tokio::test]
async fn a_fixed_prompt_larger_than_the_window_is_said_once_and_never_compressed() {
    let mock = MockLlm::start(Script::new([Step::text("one"), Step::text("two")]));
    let recorder = Arc::new(Recorder::default());
    let mut rig = setup(
        &mock,
        |c| {
            c.context_length = 2_000;
            c.system_message = Some("Follow the house style. ".repeat(500));
        },
        Some(recorder.clone()),
    )
    .await;
    for prompt in ["a", "b"] {
        rig.agent.run_turn(prompt, &CancellationToken::new()).await;
    }
    let warnings = Rig::warnings(&rig.drain());
    let fixed: Vec<&String> = warnings.iter().filter(|w| w.contains("alone take")).collect();
    assert_eq!(fixed.len(), 1, "said once: {warnings:?}");
    assert!(
        fixed[0].contains("more than the model's context window of 2000 tokens (context_length under [model])")
            && fixed[0].contains("compressing the conversation cannot help"),
        "{}",
        fixed[0]
    );
    assert!(recorder.seen.lock().expect("lock").is_empty(), "the engine is not asked to do the impossible");
}
