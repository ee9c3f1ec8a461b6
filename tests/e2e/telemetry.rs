//! Traces, as a real OTLP receiver gets them: tests/otlp/receiver.py decodes each export with
//! the official `opentelemetry-proto` package (PyPI) and prints its spans.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_mock_llm::{MockLlm, Reply, Script, Step};

use crate::Talaria;

const WAIT: Duration = Duration::from_secs(30);

/// OTLP's span kinds, as the protobuf numbers them.
const INTERNAL: i64 = 1;
const CLIENT: i64 = 3;

/// The receiver, running: the spans it has printed so far.
struct Receiver {
    child: Child,
    port: u16,
    spans: Arc<Mutex<Vec<Value>>>,
}

impl Receiver {
    /// Start it, watching the raw exports for each of `markers`.
    fn start(markers: &[&str]) -> Self {
        let python = crate::mcp::python_with("otlp-venv", "opentelemetry-proto", "1.45.2");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/otlp/receiver.py");
        let mut command = Command::new(python);
        command.arg(script);
        for marker in markers {
            command.args(["--marker", marker]);
        }
        let mut child = command.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("receiver.py");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let port = lines.next().expect("a port line").expect("read").trim().parse().expect("a port");
        let spans = Arc::new(Mutex::new(Vec::new()));
        let kept = spans.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let span: Value = serde_json::from_str(&line).expect("a JSON line");
                kept.lock().expect("spans").push(span);
            }
        });
        Self { child, port, spans }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The spans of the trace of the first span named `root` once one came, and every span
    /// received by then.
    fn trace_of(&self, root: &str) -> (Vec<Value>, Vec<Value>) {
        let start = Instant::now();
        loop {
            let all = self.spans.lock().expect("spans").clone();
            if let Some(found) = all.iter().find(|s| s["name"] == root) {
                let trace = found["trace_id"].clone();
                return (all.iter().filter(|s| s["trace_id"] == trace).cloned().collect(), all);
            }
            assert!(start.elapsed() < WAIT, "no span `{root}` came; got {all:#?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

fn one<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "one span `{name}` in {spans:#?}");
    found[0]
}

fn parent_of<'a>(spans: &'a [Value], span: &Value) -> Option<&'a Value> {
    spans.iter().find(|s| s["span_id"] == span["parent_span_id"])
}

/// Whether `ancestor` is above `span` in `spans`' tree.
fn under(spans: &[Value], span: &Value, ancestor: &Value) -> bool {
    let mut at = parent_of(spans, span);
    while let Some(p) = at {
        if p["span_id"] == ancestor["span_id"] {
            return true;
        }
        at = parent_of(spans, p);
    }
    false
}

#[test]
fn a_turn_with_a_tool_call_is_one_trace_of_spans_with_their_attributes_and_no_prompt_text() {
    const PROMPT: &str = "PROMPT-MARKER-5X3 read notes.txt";
    const NOTE: &str = "NOTE-CONTENT-Q7Z";
    let receiver = Receiver::start(&["PROMPT-MARKER-5X3", NOTE]);
    let t = Talaria::new();
    std::fs::write(t.ws().join("notes.txt"), NOTE).expect("notes");
    let mock = MockLlm::start(Script::new([
        Step::Reply(Reply::text("Let me read it.").tool_call("read_file", json!({"path": "notes.txt"}))),
        Reply::text("It says hello.").into(),
    ]));
    // The bundled audit hook observes each tool call.
    let telemetry = format!(
        "\n[plugins.audit]\nenabled = true\n\n[telemetry]\nendpoint = \"{}\"\nheaders = {{ \"x-api-key\" = \"${{OTLP_KEY}}\" }}\nservice_name = \"e2e-talaria\"\n",
        receiver.endpoint()
    );
    t.use_mock(&mock, "chat_completions", &telemetry);
    std::fs::write(t.home.path().join(".env"), "OTLP_KEY=otlp-key-123\n").expect(".env");

    let out = t.chat(&["-q", PROMPT]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (spans, all) = receiver.trace_of("turn");
    // The exit sent them: nothing comes after (the process is gone), and nothing of the run
    // started a trace of its own.
    assert_eq!(all.len(), spans.len(), "every span is the turn's: {all:#?}");

    let turn = one(&spans, "turn");
    let a = &turn["attributes"];
    assert_eq!(turn["parent_span_id"], "", "the turn is the root: {turn:#}");
    assert_eq!(turn["kind"], INTERNAL);
    assert_eq!(a["talaria.source"], "cli");
    assert_eq!(a["talaria.outcome"], "completed");
    assert_eq!(a["talaria.api_calls"], 2);
    assert!(a["gen_ai.usage.input_tokens"].as_i64().is_some_and(|n| n > 0), "{a:#}");
    assert!(a["gen_ai.conversation.id"].as_str().is_some_and(|s| !s.is_empty()), "{a:#}");
    assert_eq!(turn["resource"]["service.name"], "e2e-talaria");
    assert_eq!(turn["headers"]["x-api-key"], "otlp-key-123", "the secret filled the header");

    let chats = named(&spans, "chat mock-model");
    assert_eq!(chats.len(), 2, "two model calls: {spans:#?}");
    for chat in &chats {
        let a = &chat["attributes"];
        assert_eq!(chat["parent_span_id"], turn["span_id"]);
        assert_eq!(chat["kind"], CLIENT);
        assert_eq!(a["gen_ai.operation.name"], "chat");
        assert_eq!(a["gen_ai.provider.name"], "custom");
        assert_eq!(a["gen_ai.request.model"], "mock-model");
        assert!(a["gen_ai.usage.output_tokens"].as_i64().is_some(), "{a:#}");
    }

    let tool = one(&spans, "execute_tool read_file");
    let a = &tool["attributes"];
    assert_eq!(tool["parent_span_id"], turn["span_id"]);
    assert_eq!(a["gen_ai.operation.name"], "execute_tool");
    assert_eq!(a["gen_ai.tool.name"], "read_file");
    assert_eq!(a["talaria.outcome"], "ok");
    assert!(a["gen_ai.tool.call.id"].as_str().is_some_and(|s| !s.is_empty()), "{a:#}");
    let (first, second) = (chats[0]["start"].as_u64(), chats[1]["start"].as_u64());
    let ran = tool["start"].as_u64();
    assert!(first < ran && ran < second, "the tool ran between the two model calls");

    // The plugin that serves read_file ran in the sandbox, under the tool call.
    let plugin = spans
        .iter()
        .find(|s| s["parent_span_id"] == tool["span_id"])
        .unwrap_or_else(|| panic!("a span under the tool call: {spans:#?}"));
    assert_eq!(plugin["name"], format!("plugin {}", a["talaria.plugin"].as_str().expect("a plugin")));
    assert_eq!(plugin["attributes"]["talaria.plugin.instance"], "fresh");
    assert_eq!(plugin["attributes"]["talaria.outcome"], "ok");
    assert_eq!(plugin["attributes"]["talaria.denials"], 0);

    // The hook that observed the call, inside it.
    let hook = one(&spans, "hook post_tool_call");
    assert_eq!(hook["parent_span_id"], tool["span_id"]);
    assert_eq!(hook["attributes"]["talaria.plugin"], "audit");
    assert_eq!(hook["attributes"]["talaria.hook.decision"], "proceed");
    assert!(spans.iter().any(|s| s["name"] == "plugin audit" && s["parent_span_id"] == hook["span_id"]), "{spans:#?}");

    // The memory provider and the context engine, resident, are asked by the turn itself.
    let residents: Vec<&Value> =
        spans.iter().filter(|s| s["attributes"]["talaria.plugin.instance"] == "resident").collect();
    assert!(residents.iter().any(|s| s["name"] == "plugin journal"), "{residents:#?}");
    assert!(residents.iter().all(|s| s["parent_span_id"] == turn["span_id"]), "{residents:#?}");

    // The store's transactions of the turn are in it: its messages and its answer.
    let stores: Vec<&Value> =
        spans.iter().filter(|s| s["name"].as_str().is_some_and(|n| n.starts_with("store "))).collect();
    assert!(stores.iter().any(|s| s["attributes"]["db.operation.name"] == "append_with"), "{stores:#?}");
    for store in &stores {
        assert_eq!(store["attributes"]["db.system.name"], "sqlite");
        assert_eq!(store["kind"], CLIENT);
        assert!(under(&spans, store, turn), "{store:#}");
    }

    // No text: neither the prompt nor what the tool read, anywhere in what was sent.
    for span in &all {
        assert_eq!(span["markers"]["PROMPT-MARKER-5X3"], false, "the prompt was exported: {span:#}");
        assert_eq!(span["markers"][NOTE], false, "the tool's result was exported: {span:#}");
        let attributes = span["attributes"].as_object().expect("attributes");
        for text in ["talaria.prompt", "talaria.answer", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result"] {
            assert!(!attributes.contains_key(text), "{text} without content = true: {span:#}");
        }
    }
}

/// One chat completion from `serve`'s API, with `traceparent`: the status and the answer.
fn ask(serve: &crate::serve::Serve, text: &str, traceparent: &str) -> (u16, String) {
    let body = json!({"model": "talaria", "messages": [{"role": "user", "content": text}]});
    let headers = [
        ("Host", format!("127.0.0.1:{}", serve.port)),
        ("Authorization", format!("Bearer {}", crate::serve::TOKEN)),
        ("Content-Type", "application/json".to_string()),
        ("traceparent", traceparent.to_string()),
    ];
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    serve.raw("POST", "/v1/chat/completions", &headers, &body.to_string())
}

#[test]
fn an_api_request_s_traceparent_is_continued_and_content_is_exported_when_asked() {
    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const PARENT: &str = "00f067aa0ba902b7";
    let receiver = Receiver::start(&[]);
    let t = Talaria::new();
    std::fs::write(t.ws().join("notes.txt"), "the note").expect("notes");
    let mock = MockLlm::start(Script::new([
        Step::Reply(Reply::text("").tool_call("read_file", json!({"path": "notes.txt"}))),
        Reply::text("It says: the note.").into(),
        Step::tool_call("terminal", json!({"command": "rm -rf build"})),
        Reply::text("I could not delete it.").into(),
    ]));
    std::fs::create_dir(t.ws().join("build")).expect("mkdir");
    t.use_mock(&mock, "chat_completions", "\n[telemetry]\ncontent = true\n");
    // The standard variables, as every OpenTelemetry SDK reads them; exported every 200 ms.
    let endpoint = receiver.endpoint();
    let env = [("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()), ("OTEL_BSP_SCHEDULE_DELAY", "200")];
    let serve = crate::serve::Serve::start_with(&t, &[], &env);
    let (status, answer) = ask(&serve, "what does notes.txt say?", &format!("00-{TRACE}-{PARENT}-01"));
    assert_eq!(status, 200, "{answer}");

    let (spans, _) = receiver.trace_of("turn");
    let turn = one(&spans, "turn");
    assert_eq!(turn["trace_id"], TRACE, "the turn continues the caller's trace");
    assert_eq!(turn["parent_span_id"], PARENT);
    assert_eq!(turn["attributes"]["talaria.source"], "api");
    assert_eq!(turn["resource"]["service.name"], "talaria");
    assert_eq!(
        turn["attributes"]["talaria.prompt"].as_str().map(|p| p.contains("what does notes.txt say?")),
        Some(true)
    );
    assert_eq!(turn["attributes"]["talaria.answer"], "It says: the note.");
    let tool = one(&spans, "execute_tool read_file");
    assert_eq!(tool["attributes"]["gen_ai.tool.call.arguments"], r#"{"path":"notes.txt"}"#);
    assert!(tool["attributes"]["gen_ai.tool.call.result"].as_str().is_some_and(|r| r.contains("the note")), "{tool:#}");

    // A malformed traceparent is not taken: the next turn starts a trace of its own.
    let (status, answer) = ask(&serve, "delete the build directory", "00-ZZZ-not-a-trace-01");
    assert_eq!(status, 200, "{answer}");
    let start = Instant::now();
    let second = loop {
        let all = receiver.spans.lock().expect("spans").clone();
        let turns: Vec<Value> = all.into_iter().filter(|s| s["name"] == "turn").collect();
        if turns.len() == 2 {
            break turns[1].clone();
        }
        assert!(start.elapsed() < WAIT, "no second turn: {turns:#?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_ne!(second["trace_id"], TRACE);
    assert_eq!(second["parent_span_id"], "");
    // The API answers approvals with `deny` unless its token allows them: asked and answered,
    // inside the tool call.
    // (A turn ends after its spans: they came with it or before.)
    let all = receiver.spans.lock().expect("spans").clone();
    let spans: Vec<Value> = all.into_iter().filter(|s| s["trace_id"] == second["trace_id"]).collect();
    let approval = one(&spans, "approval");
    let tool = one(&spans, "execute_tool terminal");
    assert!(under(&spans, approval, tool), "{spans:#?}");
    assert_eq!(approval["attributes"]["talaria.approval.decision"], "deny");
    assert_eq!(approval["attributes"]["talaria.plugin"], "terminal");
    assert!(approval["attributes"]["talaria.approval.wait_ms"].as_i64().is_some(), "{approval:#}");
    assert_eq!(tool["attributes"]["talaria.outcome"], "error");
    assert!(t.ws().join("build").is_dir(), "the refused command ran");
}

#[test]
fn a_chat_message_s_trace_holds_its_turn_and_the_sending_of_its_reply() {
    use talaria_test_support::telegram::TelegramFake;
    let receiver = Receiver::start(&["hello from Ana"]);
    let fake = TelegramFake::start(crate::gateway::TOKEN);
    let mock = MockLlm::start(Script::new([Reply::text("Hi Ana, nice to meet you.").into()]));
    let telegram = format!("allowed_users = [\"42\"]\n[telemetry]\nendpoint = \"{}\"\n", receiver.endpoint());
    let t = crate::gateway::setup(&mock, &fake, "", &telegram);
    let mut gw = crate::gateway::Gateway::start(&t);
    fake.wait_polling(WAIT);
    fake.dm(42, "Ana", "hello from Ana");
    fake.wait_for(42, WAIT, |m| m.text == "Hi Ana, nice to meet you.");
    // Stopping sends what is left.
    assert!(gw.terminate().success(), "{}", gw.log());

    let (spans, all) = receiver.trace_of("receive telegram");
    let receive = one(&spans, "receive telegram");
    assert_eq!(receive["parent_span_id"], "", "a message from a chat starts the trace: {receive:#}");
    assert_eq!(receive["attributes"]["messaging.system"], "telegram");
    let turn = one(&spans, "turn");
    assert_eq!(turn["parent_span_id"], receive["span_id"], "the turn answers the message: {spans:#?}");
    assert_eq!(turn["attributes"]["talaria.source"], "gateway");
    assert_eq!(turn["attributes"]["talaria.outcome"], "completed");
    let sends = named(&spans, "send telegram");
    assert!(!sends.is_empty(), "the reply's sending is in the message's trace: {spans:#?}");
    for send in sends {
        assert_eq!(send["parent_span_id"], receive["span_id"]);
        assert_eq!(send["attributes"]["talaria.outcome"], "sent");
    }
    // The gateway's polls and ledger ticks started no trace of their own.
    let traces: std::collections::BTreeSet<&str> = all.iter().filter_map(|s| s["trace_id"].as_str()).collect();
    assert_eq!(traces.len(), 1, "{all:#?}");
    assert!(all.iter().all(|s| s["markers"]["hello from Ana"] == false), "the message's text was exported");
}

#[test]
fn a_signed_webhook_s_traceparent_and_an_acp_prompt_s_are_continued() {
    const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
    const PARENT: &str = "b7ad6b7169203331";
    let receiver = Receiver::start(&[]);
    let mock = MockLlm::start(Script::new([Step::text("Rerun test x."), Step::text("Looked.")]));
    let t = Talaria::new();
    let addr = format!("127.0.0.1:{}", crate::gateway::free_port());
    let extra = format!(
        "[gateway]\nworkspaces = \"{}\"\nlisten = \"{addr}\"\n\
         [gateway.platforms.hooks]\nplugin = \"webhook\"\nallow_all = true\n\
         [gateway.platforms.hooks.routes.ci]\nauth = \"hmac\"\nheader = \"X-Signature-256\"\nsecret = \"CI_HOOK_KEY\"\n\
         prompt = \"CI says {{status}}\"\n[telemetry]\nendpoint = \"{}\"\n",
        t.workspace.path().join("chats").display(),
        receiver.endpoint()
    );
    t.use_mock(&mock, "chat_completions", &extra);
    std::fs::write(t.home.path().join(".env"), "CI_HOOK_KEY=hook-s3cret\n").expect(".env");
    let mut gw = crate::gateway::Gateway::start(&t);
    crate::gateway::wait_listening(&addr, &gw);
    let body = br#"{"status": "failed"}"#;
    let signed = crate::gateway::sign(b"hook-s3cret", body);
    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    let headers =
        [("X-Signature-256", signed.as_str()), ("Content-Type", "application/json"), ("traceparent", &traceparent)];
    let (status, answer) = crate::gateway::post(&addr, "/webhooks/hooks/ci", &headers, body);
    assert_eq!(status, 200, "{answer}\n{}", gw.log());
    assert!(gw.terminate().success(), "{}", gw.log());

    let (spans, _) = receiver.trace_of("receive hooks");
    let receive = one(&spans, "receive hooks");
    assert_eq!(receive["trace_id"], TRACE, "the webhook's caller's trace goes on");
    assert_eq!(receive["parent_span_id"], PARENT);
    let turn = one(&spans, "turn");
    assert_eq!(turn["parent_span_id"], receive["span_id"]);
    assert_eq!(turn["attributes"]["talaria.source"], "gateway");

    // ACP: `_meta.traceparent` of session/prompt, sent by the official TypeScript SDK.
    const ACP_TRACE: &str = "5b8efff798038103d269b633813fc60c";
    const ACP_PARENT: &str = "eee19b7ec3c1b174";
    let ws = t.ws();
    let cwd = ws.to_str().expect("utf8");
    let seen = t.acp(&json!({"steps": [
        {"do": "new", "as": "a", "cwd": cwd},
        {"do": "prompt", "session": "a", "text": "look", "meta": {"traceparent": format!("00-{ACP_TRACE}-{ACP_PARENT}-01")}},
    ]}));
    assert_eq!(seen["results"][1]["stopReason"], "end_turn", "{seen:#}");
    let start = Instant::now();
    let acp_turn = loop {
        let all = receiver.spans.lock().expect("spans").clone();
        if let Some(turn) = all.into_iter().find(|s| s["name"] == "turn" && s["trace_id"] == ACP_TRACE) {
            break turn;
        }
        assert!(start.elapsed() < WAIT, "no ACP turn in the trace {ACP_TRACE}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(acp_turn["parent_span_id"], ACP_PARENT);
    assert_eq!(acp_turn["attributes"]["talaria.source"], "acp");
}
