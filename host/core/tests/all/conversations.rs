//! Conversations through `Host`: what their event streams carry and what the store keeps, and
//! that two conversations in one process never cross.

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use talaria_core::{Conversation, Host, HostOptions, ModelChoice, Start};
use talaria_mock_llm::{MockLlm, Reply, Script, Step};
use talaria_protocol::{Decision, Event, Message, Op, Outcome, SessionReason, Stamped, TurnEnd};

/// A home with no config, a workspace, and a host on them.
pub(crate) struct Env {
    _dir: tempfile::TempDir,
    pub(crate) host: Host,
}

impl Env {
    pub(crate) async fn new() -> Self {
        Self::with_config("").await
    }

    /// A home whose config.toml is `config`. Commands run unconfined: these tests are about how
    /// conversations keep apart (the OS sandbox needs talaria's own binary as its helper, and is
    /// tested with it, in tests/e2e/sandbox.rs).
    pub(crate) async fn with_config(config: &str) -> Self {
        Self::prepared(config, |_, _| {}).await
    }

    /// As [`Env::with_config`], with `prepare(home, workspace)` run before the host opens.
    pub(crate) async fn prepared(config: &str, prepare: impl FnOnce(&Path, &Path)) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let (home, workspace) = (dir.path().join("home"), dir.path().join("work"));
        std::fs::create_dir_all(&home).expect("home");
        let config = if config.contains("[sandbox]") {
            config.to_string()
        } else {
            format!("[sandbox]\ncommands = \"unconfined\"\n{config}")
        };
        std::fs::write(home.join("config.toml"), config).expect("config");
        std::fs::create_dir_all(&workspace).expect("workspace");
        let workspace = workspace.canonicalize().expect("canonical");
        prepare(&home, &workspace);
        let host = Host::open(HostOptions { home, workspace }).await.expect("host opens");
        Self { _dir: dir, host }
    }

    /// A conversation talking to `mock`, answering approvals when `interactive`.
    async fn start(&self, mock: &MockLlm, interactive: bool) -> Conversation {
        let start = Start { interactive, model: model(mock), ..Start::default() };
        self.host.start(start).await.expect("conversation starts")
    }

    pub(crate) fn workspace(&self) -> &Path {
        self.host.workspace()
    }
}

pub(crate) fn model(mock: &MockLlm) -> ModelChoice {
    ModelChoice {
        provider: Some("custom".into()),
        model: Some("mock".into()),
        base_url: Some(mock.base_url()),
        api_mode: None,
    }
}

/// Events until `pred` holds for one (which is returned last); fails after 60 s, showing what
/// came.
pub(crate) async fn until(c: &mut Conversation, mut pred: impl FnMut(&Stamped) -> bool) -> Vec<Stamped> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match tokio::time::timeout_at(deadline, c.next_event()).await {
            Ok(Some(s)) => {
                let done = pred(&s);
                seen.push(s);
                if done {
                    return seen;
                }
            }
            Ok(None) => panic!("the conversation stopped; seen: {seen:#?}"),
            Err(_) => panic!("no such event within 60 s; seen: {seen:#?}"),
        }
    }
}

/// Run a user turn to its end: (its events, how it ended).
async fn turn(c: &mut Conversation, text: &str) -> (Vec<Stamped>, TurnEnd) {
    let id = c.submit(Op::UserTurn { text: text.into(), images: Vec::new(), sender: None, trace: None });
    let events = until(c, |s| s.op == id && matches!(s.event, Event::TurnEnd(_))).await;
    let Some(Stamped { event: Event::TurnEnd(end), .. }) = events.last().cloned() else { unreachable!() };
    (events, end)
}

fn kinds(events: &[Stamped]) -> Vec<&'static str> {
    events
        .iter()
        .filter_map(|s| match &s.event {
            Event::SessionStarted(_) => Some("session_started"),
            Event::TurnStarted { .. } => Some("turn_started"),
            Event::ToolStarted(_) => Some("tool_started"),
            Event::ToolFinished(_) => Some("tool_finished"),
            Event::TurnEnd(_) => Some("turn_end"),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_turn_is_stamped_with_its_session_and_turn_and_committed_in_order() {
    let env = Env::new().await;
    let mock = MockLlm::start(Script::new([
        Step::tool_call("todo", json!({"todos": [{"id": "1", "content": "write tests", "status": "in_progress"}]})),
        Reply::text("Planned.").into(),
    ]));
    let mut c = env.start(&mock, false).await;
    let started = until(&mut c, |s| matches!(s.event, Event::SessionStarted(_))).await;
    let Some(Event::SessionStarted(session)) = started.last().map(|s| s.event.clone()) else { unreachable!() };
    assert_eq!(session.reason, SessionReason::New);

    let (events, end) = turn(&mut c, "plan my work").await;
    assert_eq!(end.outcome, Outcome::Completed);
    assert_eq!(end.text, "Planned.");
    assert_eq!(kinds(&events), ["turn_started", "tool_started", "tool_finished", "turn_end"]);
    let turn_id = events[0].op;
    for e in &events {
        assert_eq!((e.session_id.as_str(), e.turn_id, e.op), (session.session_id.as_str(), Some(turn_id), turn_id));
    }
    let finished = events.iter().find_map(|s| match &s.event {
        Event::ToolFinished(t) => Some(t.clone()),
        _ => None,
    });
    let finished = finished.expect("tool finished");
    assert!(finished.ok && finished.result.contains("write tests"), "the full result: {}", finished.result);

    // Committed in order: the user's message, the call, its result, the answer.
    let stored: Vec<Message> =
        env.host.store().messages(&session.session_id).await.expect("read").into_iter().map(|m| m.message).collect();
    let roles: Vec<&str> = stored
        .iter()
        .map(|m| match m {
            Message::User { .. } => "user",
            Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => "assistant+tools",
            Message::Assistant { .. } => "assistant",
            Message::Tool { .. } => "tool",
            Message::System { .. } => "system",
        })
        .collect();
    assert_eq!(roles, ["user", "assistant+tools", "tool", "assistant"]);
    c.shutdown().await;
    let info = env.host.store().session(&session.session_id).await.expect("read").expect("stored");
    assert_eq!(info.end_reason.as_deref(), Some("exit"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_turn_keeps_nothing_of_the_call_in_flight() {
    let env = Env::new().await;
    let mock = MockLlm::start(Script::new([Step::stall("half an ans"), Reply::text("Second.").into()]));
    let mut c = env.start(&mock, false).await;
    let id = c.submit(Op::UserTurn { text: "first".into(), images: Vec::new(), sender: None, trace: None });
    until(&mut c, |s| matches!(s.event, Event::TextDelta { .. })).await;
    c.submit(Op::Interrupt);
    let events = until(&mut c, |s| s.op == id && matches!(s.event, Event::TurnEnd(_))).await;
    let Some(Event::TurnEnd(end)) = events.last().map(|s| s.event.clone()) else { unreachable!() };
    assert_eq!(end.outcome, Outcome::Interrupted);
    let session = c.info().session_id;
    let stored = env.host.store().messages(&session).await.expect("read");
    assert_eq!(stored.len(), 1, "only the user's message is kept: {stored:?}");

    // The conversation goes on.
    let (_, end) = turn(&mut c, "again").await;
    assert_eq!((end.outcome, end.text.as_str()), (Outcome::Completed, "Second."));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_budget_ends_with_a_summary() {
    let env = Env::new().await;
    let todo = || Step::tool_call("todo", json!({"todos": []}));
    let mock = MockLlm::start(Script::new([todo(), todo(), Reply::text("I listed nothing twice.").into()]));
    let start = Start { max_turns: Some(2), model: model(&mock), ..Start::default() };
    let mut c = env.host.start(start).await.expect("starts");
    let (_, end) = turn(&mut c, "loop").await;
    assert_eq!(end.outcome, Outcome::BudgetExhausted);
    assert_eq!(end.text, "I listed nothing twice.");
    assert_eq!(end.api_calls, 3, "two calls with tools, then one for the summary");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_are_answered_in_the_stream_and_errors_say_what_to_do() {
    let env = Env::new().await;
    let mock = MockLlm::start(Script::new([Reply::text("Hello.").into()]));
    let mut c = env.start(&mock, false).await;
    let title = c.run(Op::SetTitle { title: "trip".into() }, |_| {}).await.expect("answered");
    assert_eq!(title.event, Event::Error { text: "this session is not saved yet: send a message first".into() });
    turn(&mut c, "hi").await;
    let title = c.run(Op::SetTitle { title: "trip".into() }, |_| {}).await.expect("answered");
    assert_eq!(title.event, Event::TitleChanged { title: "trip".into() });
    let undone = c.run(Op::Undo, |_| {}).await.expect("answered");
    assert_eq!(undone.event, Event::Undone { text: Some("hi".into()) });
    let compact = c.run(Op::Compact { focus: None }, |_| {}).await.expect("answered");
    assert_eq!(compact.event, Event::Error { text: "there is nothing to compress yet".into() });
    let old = c.info().session_id;
    let new = c.run(Op::NewSession, |_| {}).await.expect("answered");
    let Event::SessionStarted(s) = &new.event else { panic!("{new:?}") };
    assert_ne!(s.session_id, old);
    assert_eq!(new.session_id, s.session_id, "stamped with the new session");
    let model = c.run(Op::SetModel { model: "other".into() }, |_| {}).await.expect("answered");
    assert_eq!(model.event, Event::ModelChanged { model: "custom/other".into() });
    c.shutdown().await;
}

/// A conversation in full flow keeps its session from op to op; one that waited
/// [`Start::rest_after`] lets go of it, and its next turn reads it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_rests_only_once_no_op_came_for_a_while() {
    let env = Env::new().await;
    let mock = MockLlm::start(Script::new([Reply::text("One.").into(), Reply::text("Two.").into()]));
    let after = Duration::from_millis(400);
    let start = Start { rest_after: Some(after), model: model(&mock), ..Start::default() };
    let mut c = env.host.start(start).await.expect("starts");
    let (_, end) = turn(&mut c, "first").await;
    let ended = tokio::time::Instant::now();
    assert_eq!(end.text, "One.");
    let info = settled(&c, |info| info.messages == 2).await;
    assert!(!info.resting, "the session is kept right after its turn");
    settled(&c, |info| info.resting).await;
    assert!(ended.elapsed() >= after, "rested after {:?}", ended.elapsed());
    let (_, end) = turn(&mut c, "second").await;
    assert_eq!(end.text, "Two.");
    let info = settled(&c, |info| info.messages == 4).await;
    assert!(!info.resting, "read back for the turn, and kept after it");
    let said: Vec<String> = mock.requests()[1].body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .skip(1)
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(said, ["first", "One.", "second"]);
}

/// Conversations in full flow keep their histories only while they keep less than their
/// front door's limit together ([`Start::kept`]); past it, one rests as soon as its turn is
/// done, and what one held is given back when it goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_limit_of_what_flowing_conversations_keep_together_one_rests_at_once() {
    let env = Env::new().await;
    let mock = MockLlm::start(Script::new([Reply::text("One.").into(), Reply::text("Two.").into()]));
    // Longer than the test: a conversation that rests here rests because of the limit.
    let after = Duration::from_secs(120);
    // Room for one conversation's history (its system prompt and two messages), not two.
    let first = {
        let start = Start { rest_after: Some(after), model: model(&mock), ..Start::default() };
        let mut c = env.host.start(start).await.expect("starts");
        turn(&mut c, "measure").await;
        settled(&c, |info| info.messages == 2).await;
        c.shutdown().await;
        mock.requests()[0].body["messages"][0]["content"].as_str().expect("system prompt").len()
    };
    let kept = talaria_core::kept::Kept::new(first * 3 / 2);
    let mock = MockLlm::start(Script::new([Reply::text("One.").into(), Reply::text("Two.").into()]));
    let start = || Start { rest_after: Some(after), kept: Some(kept.clone()), model: model(&mock), ..Start::default() };
    let (mut a, mut b) = (env.host.start(start()).await.expect("a"), env.host.start(start()).await.expect("b"));
    turn(&mut a, "first").await;
    let info = settled(&a, |info| info.messages == 2).await;
    assert!(!info.resting, "within the limit: kept right after its turn");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while kept.held() == 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let held = kept.held();
    assert!(held > first, "its history is counted: {held} bytes");
    turn(&mut b, "second").await;
    settled(&b, |info| info.messages == 2 && info.resting).await;
    assert_eq!(kept.held(), held, "the second rested at once and holds nothing");
    assert!(!a.info().resting, "the first keeps its history");
    a.shutdown().await;
    assert_eq!(kept.held(), 0, "what a conversation held is given back when it ends");
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resting_conversation_reads_its_history_and_prompt_back_for_each_op() {
    let env = Env::new().await;
    let mock = MockLlm::start(Script::new([Reply::text("One.").into(), Reply::text("Two.").into()]));
    let start = Start { rest_after: Some(Duration::ZERO), model: model(&mock), ..Start::default() };
    let mut c = env.host.start(start).await.expect("starts");
    let (_, end) = turn(&mut c, "first").await;
    assert_eq!(end.text, "One.");
    // The info is updated once the op is over, just after its last event.
    let info = settled(&c, |info| info.messages == 2).await;
    assert!(info.tail.is_empty(), "no tail is kept while resting: {:?}", info.tail);

    // The next turn sends the model what the first left, under the same system prompt.
    let (_, end) = turn(&mut c, "second").await;
    assert_eq!(end.text, "Two.");
    let requests = mock.requests();
    let sent = |i: usize| -> Vec<(String, String)> {
        requests[i].body["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .map(|m| (m["role"].as_str().unwrap_or("").to_string(), m["content"].as_str().unwrap_or("").to_string()))
            .collect()
    };
    let (first, second) = (sent(0), sent(1));
    assert_eq!(first[0].0, "system");
    assert!(first[0].1.len() > 100, "a real system prompt: {:?}", first[0].1);
    assert_eq!(second[0], first[0], "the prompt read back is the one the session began with");
    let said: Vec<&str> = second[1..].iter().map(|(_, text)| text.as_str()).collect();
    assert_eq!(said, ["first", "One.", "second"]);

    // Ops other than turns read it back too.
    let undone = c.run(Op::Undo, |_| {}).await.expect("answered");
    assert_eq!(undone.event, Event::Undone { text: Some("second".into()) });
    settled(&c, |info| info.messages == 2).await;
    let session = c.info().session_id;
    c.shutdown().await;
    let info = env.host.store().session(&session).await.expect("read").expect("stored");
    assert_eq!(info.end_reason.as_deref(), Some("exit"));
}

/// The conversation's info once `done` holds for it; fails after 10 s, showing it.
async fn settled(c: &Conversation, done: impl Fn(&talaria_core::Info) -> bool) -> talaria_core::Info {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let info = c.info();
        if done(&info) {
            return info;
        }
        assert!(tokio::time::Instant::now() < deadline, "the info never settled: {info:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The terminal tool, asked to run a dangerous command.
fn rm(dir: &str) -> Step {
    Step::tool_call("terminal", json!({"command": format!("rm -rf {dir}")}))
}

/// The question a conversation asks.
async fn question_of(c: &mut Conversation) -> talaria_protocol::ClarifyNeeded {
    let events = until(c, |s| matches!(s.event, Event::ClarifyNeeded(_))).await;
    match events.last().map(|s| s.event.clone()) {
        Some(Event::ClarifyNeeded(q)) => q,
        _ => unreachable!(),
    }
}

/// The approval a conversation asks.
pub(crate) async fn approval_of(c: &mut Conversation) -> talaria_protocol::ApprovalNeeded {
    let events = until(c, |s| matches!(s.event, Event::ApprovalNeeded(_))).await;
    match events.last().map(|s| s.event.clone()) {
        Some(Event::ApprovalNeeded(a)) => a,
        _ => unreachable!(),
    }
}

fn tool_result(events: &[Stamped]) -> String {
    events
        .iter()
        .find_map(|s| match &s.event {
            Event::ToolFinished(t) => Some(t.result.clone()),
            _ => None,
        })
        .expect("a tool finished")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_conversations_get_their_own_approvals_and_questions() {
    let env = Env::new().await;
    for d in ["a-build", "b-build"] {
        std::fs::create_dir_all(env.workspace().join(d)).expect("dir");
    }
    let ma = MockLlm::start(Script::new([
        rm("a-build"),
        Reply::text("A done.").into(),
        rm("a-build"),
        Reply::text("A again.").into(),
        Step::tool_call("clarify", json!({"question": "Which colour, A?"})),
        Reply::text("A asked.").into(),
    ]));
    let mb = MockLlm::start(Script::new([
        rm("b-build"),
        Reply::text("B done.").into(),
        Step::tool_call("clarify", json!({"question": "Which colour, B?"})),
        Reply::text("B asked.").into(),
    ]));
    let mut a = env.start(&ma, true).await;
    let mut b = env.start(&mb, true).await;
    let ta = a.submit(Op::UserTurn { text: "clean a".into(), images: Vec::new(), sender: None, trace: None });
    let tb = b.submit(Op::UserTurn { text: "clean b".into(), images: Vec::new(), sender: None, trace: None });
    let (qa, qb) = tokio::join!(approval_of(&mut a), approval_of(&mut b));
    assert_eq!(qa.command, "rm -rf a-build");
    assert_eq!(qb.command, "rm -rf b-build");
    assert!(!qa.call_id.is_empty() && !qb.call_id.is_empty(), "approvals name the tool call that asked");
    // A allows for its session; B denies. Each answer reaches only its own conversation.
    a.submit(Op::Approve { id: qa.id, decision: Decision::Session });
    b.submit(Op::Approve { id: qb.id, decision: Decision::Deny });
    let ea = until(&mut a, |s| s.op == ta && matches!(s.event, Event::TurnEnd(_))).await;
    let eb = until(&mut b, |s| s.op == tb && matches!(s.event, Event::TurnEnd(_))).await;
    assert!(!env.workspace().join("a-build").exists(), "A's command ran");
    assert!(env.workspace().join("b-build").exists(), "B's command was denied");
    assert!(tool_result(&eb).contains("the user denied `rm -rf b-build`"), "{}", tool_result(&eb));
    assert!(!tool_result(&ea).contains("denied"), "{}", tool_result(&ea));
    for (events, other) in [(&ea, &qb), (&eb, &qa)] {
        assert!(
            !events.iter().any(|s| matches!(&s.event, Event::ApprovalNeeded(x) if x.command == other.command)),
            "an approval showed in the other conversation"
        );
    }

    // A's "session" answer covers A's session: asked again, nothing is asked.
    std::fs::create_dir_all(env.workspace().join("a-build")).expect("dir");
    let (events, end) = turn(&mut a, "clean a again").await;
    assert_eq!(end.text, "A again.");
    assert!(!events.iter().any(|s| matches!(s.event, Event::ApprovalNeeded(_))), "not asked again in A's session");
    assert!(!env.workspace().join("a-build").exists());

    // Questions: each answer goes to the conversation that asked.
    let ta = a.submit(Op::UserTurn { text: "ask a".into(), images: Vec::new(), sender: None, trace: None });
    let tb = b.submit(Op::UserTurn { text: "ask b".into(), images: Vec::new(), sender: None, trace: None });
    let (qa, qb) = tokio::join!(question_of(&mut a), question_of(&mut b));
    assert_eq!((qa.question.as_str(), qb.question.as_str()), ("Which colour, A?", "Which colour, B?"));
    b.submit(Op::Answer { id: qb.id, text: "blue".into() });
    a.submit(Op::Answer { id: qa.id, text: "red".into() });
    let ea = until(&mut a, |s| s.op == ta && matches!(s.event, Event::TurnEnd(_))).await;
    let eb = until(&mut b, |s| s.op == tb && matches!(s.event, Event::TurnEnd(_))).await;
    assert!(tool_result(&ea).contains("red") && !tool_result(&ea).contains("blue"), "{}", tool_result(&ea));
    assert!(tool_result(&eb).contains("blue") && !tool_result(&eb).contains("red"), "{}", tool_result(&eb));
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compression_moves_the_conversation_into_a_child_session_and_its_approvals_follow() {
    let mock = MockLlm::start(Script::new([
        Reply::text("one").into(),
        Reply::text("two").into(),
        Reply::text("three").into(),
        Reply::text("SUMMARY of one and two").into(),
        rm("build"),
        Reply::text("cleaned").into(),
    ]));
    // The compressor's summary goes to the configured model (the auxiliary default).
    let env = Env::with_config(&format!(
        "[model]\nprovider = \"custom\"\nname = \"mock\"\nbase_url = \"{}\"\n\n[plugins.compressor.config]\nmin_tokens = 0\nprotect_first_n = 1\nprotect_last_n = 2\ntail_ratio = 0.0\n\n[memory]\nprovider = \"none\"\n",
        mock.base_url()
    )).await;
    let mut c = env.start(&mock, true).await;
    for text in ["first", "second", "third"] {
        assert_eq!(turn(&mut c, text).await.1.outcome, Outcome::Completed);
    }
    let parent = c.info().session_id;

    let compact = c.submit(Op::Compact { focus: None });
    let events = until(&mut c, |s| s.op == compact && matches!(s.event, Event::Compacted { .. })).await;
    let moved = events.iter().find_map(|s| match &s.event {
        Event::SessionStarted(started) => Some((s.clone(), started.clone())),
        _ => None,
    });
    let (stamped, started) = moved.expect("the conversation moved to another session");
    assert_eq!(started.reason, SessionReason::Compressed { from: parent.clone() });
    let child = started.session_id.clone();
    assert_ne!(child, parent);
    assert_eq!(stamped.session_id, child, "stamped with the session it starts");
    let Some(Event::Compacted { session_id, .. }) = events.last().map(|s| &s.event) else { unreachable!() };
    assert_eq!(session_id, &child);
    let stored = env.host.store().session(&child).await.expect("read").expect("the child is stored");
    assert_eq!(stored.parent_id.as_deref(), Some(parent.as_str()));
    let old = env.host.store().session(&parent).await.expect("read").expect("the parent is kept");
    assert_eq!(old.end_reason.as_deref(), Some("compressed"));

    // The next turn runs in the child, and its approval still reaches this conversation.
    std::fs::create_dir_all(env.workspace().join("build")).expect("dir");
    let id = c.submit(Op::UserTurn { text: "clean the build".into(), images: Vec::new(), sender: None, trace: None });
    let asked = approval_of(&mut c).await;
    assert_eq!(asked.command, "rm -rf build");
    c.submit(Op::Approve { id: asked.id, decision: Decision::Once });
    let events = until(&mut c, |s| s.op == id && matches!(s.event, Event::TurnEnd(_))).await;
    assert!(events.iter().all(|s| s.session_id == child), "every event of the turn is the child's");
    assert!(
        !events.iter().any(|s| matches!(&s.event, Event::Notice { text, .. } if text.contains("continued elsewhere"))),
        "what compression wrote is not taken for another process's work: {events:#?}"
    );
    assert!(!env.workspace().join("build").exists(), "approved and run");
    let summary_request = mock.requests()[3].body.to_string();
    assert!(summary_request.contains("first") || summary_request.contains("second"), "{summary_request}");
    let after = mock.requests()[4].body.to_string();
    assert!(after.contains("SUMMARY of one and two"), "the child starts from the summary: {after}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupting_one_conversation_leaves_the_other_running() {
    let env = Env::new().await;
    let mock_a = MockLlm::start(Script::new([Step::stall("A is thinking")]));
    let mock_b = MockLlm::start(Script::new([Step::text("B finished").delayed(300)]));
    let mut a = env.start(&mock_a, false).await;
    let mut b = env.start(&mock_b, false).await;
    let ta = a.submit(Op::UserTurn { text: "long task".into(), images: Vec::new(), sender: None, trace: None });
    let tb = b.submit(Op::UserTurn { text: "short task".into(), images: Vec::new(), sender: None, trace: None });
    until(&mut a, |s| matches!(&s.event, Event::TextDelta { text } if text.contains("thinking"))).await;
    a.submit(Op::Interrupt);
    let ea = until(&mut a, |s| s.op == ta && matches!(s.event, Event::TurnEnd(_))).await;
    let eb = until(&mut b, |s| s.op == tb && matches!(s.event, Event::TurnEnd(_))).await;
    let end = |events: &[Stamped]| match events.last().map(|s| &s.event) {
        Some(Event::TurnEnd(end)) => end.clone(),
        _ => unreachable!(),
    };
    assert_eq!(end(&ea).outcome, Outcome::Interrupted);
    assert_eq!((end(&eb).outcome, end(&eb).text.as_str()), (Outcome::Completed, "B finished"), "B was not stopped");
    a.shutdown().await;
    b.shutdown().await;
}
