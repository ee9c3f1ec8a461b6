//! One tool pipeline: a call of every kind of tool — the agent's own (`todo`), a plugin's
//! (`read_file`, `write_file` of the bundled files plugin), an MCP server's (the reference
//! `server-everything`'s `echo`) and an editor's overlay (this test standing in for the editor)
//! — passes the same stages. The same script runs for each: a real hook plugin blocks the first
//! call, asks a human about the second (answered here), the third's result is over the cap and
//! is spilled to a file, and a call that writes a workspace file gets a checkpoint first.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use talaria_agent::{BoxFuture, Scope, ToolContext, ToolHandler};
use talaria_core::{Conversation, Offered, Start, ToolOverlay};
use talaria_mock_llm::{MockLlm, Reply, Script, Step};
use talaria_protocol::{Decision, Event, Op, ToolError, ToolFinished, ToolSpec};
use talaria_test_support as support;

use super::{Env, approval_of, model, until};

/// Characters of a result the cap lets through (`max_result_chars`, at its minimum).
const CAP: usize = 1_000;
/// A result this long is over the cap.
const BIG: usize = 4_000;

/// One kind of tool, as the script calls it.
struct Kind {
    /// The tool the hook and cap stages are tried on, and its arguments around a word.
    tool: &'static str,
    args: fn(&str) -> Value,
    /// Whether its calls go to the overlay.
    overlay: bool,
}

const OWN: Kind = Kind {
    tool: "todo",
    args: |word| json!({"todos": [{"id": "1", "content": word, "status": "pending"}]}),
    overlay: false,
};
const PLUGIN: Kind = Kind { tool: "read_file", args: |word| json!({"path": format!("{word}.txt")}), overlay: false };
const MCP: Kind = Kind { tool: "mcp_everything_echo", args: |word| json!({"message": word}), overlay: false };
const OVERLAY: Kind = Kind { tool: "read_file", args: |word| json!({"path": format!("{word}.txt")}), overlay: true };

/// The editor's view of the files: it serves the files plugin's `read_file` and `write_file`,
/// and notes each call it served.
#[derive(Default)]
struct Editor {
    served: Mutex<Vec<String>>,
}

impl ToolOverlay for Editor {
    fn serves(&self, spec: &ToolSpec) -> bool {
        spec.plugin == "files" && (spec.name == "read_file" || spec.name == "write_file")
    }
}

impl ToolHandler for Editor {
    fn call<'a>(&'a self, ctx: &'a ToolContext, _: Scope<'a>) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            self.served.lock().expect("lock").push(ctx.tool.clone());
            let path = ctx.workspace.join(ctx.arguments["path"].as_str().unwrap_or_default());
            let failed = |e: std::io::Error| ToolError::Failed(format!("{}: {e}", path.display()));
            match ctx.tool.as_str() {
                "read_file" => std::fs::read_to_string(&path).map_err(failed),
                _ => std::fs::write(&path, ctx.arguments["content"].as_str().unwrap_or_default())
                    .map(|()| "written".to_string())
                    .map_err(failed),
            }
        })
    }
}

/// The reference MCP server from npm (tests/mcp, installed by `scripts/test`).
fn everything() -> String {
    let js = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(js.exists(), "{} is missing: run `scripts/test` (or `npm ci --prefix tests/mcp`)", js.display());
    js.canonicalize().expect("canonical").display().to_string()
}

/// A home with the probe hook (it blocks a call whose arguments say HOOK-BLOCK and asks a human
/// about one that says HOOK-ASK), the cap at its minimum and the MCP server.
async fn env() -> Env {
    let config = format!(
        "[agent]\nmax_result_chars = {CAP}\n\n[mcp_servers.everything]\ncommand = \"node\"\nargs = [\"{}\", \"stdio\"]\nask = \"never\"\n",
        everything()
    );
    Env::prepared(&config, |home, ws| {
        let manifest = support::manifest_v2("probe", &["hook"], "[hook]\nevents = [\"pre_tool_call\"]\n");
        support::install(home, "probe", Path::new(support::PROBE_HOOK_WASM), &manifest);
        std::fs::write(ws.join("HOOK-ASK.txt"), "asked and read\n").expect("write");
        std::fs::write(ws.join("big.txt"), "b".repeat(BIG)).expect("write");
        std::fs::write(ws.join("w.txt"), "before\n").expect("write");
    })
    .await
}

/// The words the script's calls carry, in order, and what the big call carries for `kind`.
fn script(kind: &Kind) -> Script {
    let big = if kind.tool == "read_file" { "big".to_string() } else { "b".repeat(BIG) };
    let mut steps = vec![
        Step::tool_call(kind.tool, (kind.args)("HOOK-BLOCK")),
        Reply::text("blocked").into(),
        Step::tool_call(kind.tool, (kind.args)("HOOK-ASK")),
        Reply::text("asked").into(),
        Step::tool_call(kind.tool, (kind.args)(&big)),
        Reply::text("capped").into(),
    ];
    if kind.tool == "read_file" {
        steps.push(Step::tool_call("write_file", json!({"path": "w.txt", "content": "after\n"})));
        steps.push(Reply::text("written").into());
    }
    Script::new(steps)
}

/// The tool call a turn made, as it finished.
async fn finished(c: &mut Conversation, text: &str) -> ToolFinished {
    let id = c.submit(Op::UserTurn { text: text.into(), images: Vec::new(), sender: None, trace: None });
    let events = until(c, |s| s.op == id && matches!(s.event, Event::TurnEnd(_))).await;
    events
        .into_iter()
        .find_map(|s| match s.event {
            Event::ToolFinished(t) => Some(t),
            _ => None,
        })
        .expect("a tool finished")
}

/// Every stage, for one kind of tool.
async fn stages(kind: Kind) {
    let env = env().await;
    let mock = MockLlm::start(script(&kind));
    let editor = Arc::new(Editor::default());
    let offered = Offered { tools: kind.overlay.then(|| editor.clone() as Arc<dyn ToolOverlay>), ..Offered::default() };
    let start = Start { interactive: true, model: model(&mock), offered, ..Start::default() };
    let mut c = env.host.start(start).await.expect("conversation starts");
    assert!(c.info().tools.iter().any(|t| t.name == kind.tool), "{} is offered", kind.tool);

    // 1. A hook's deny: the handler never runs, the model reads why.
    let blocked = finished(&mut c, "block").await;
    assert!(!blocked.ok, "{blocked:?}");
    assert!(blocked.result.contains("blocked by hook 'probe'"), "{}", blocked.result);

    // 2. A hook asks for a human: the call waits for the answer, then runs.
    let id = c.submit(Op::UserTurn { text: "ask".into(), images: Vec::new(), sender: None, trace: None });
    let asked = approval_of(&mut c).await;
    assert!(asked.reason.contains("a human should look") || asked.command.contains(kind.tool), "{asked:?}");
    c.submit(Op::Approve { id: asked.id, decision: Decision::Once });
    let events = until(&mut c, |s| s.op == id && matches!(s.event, Event::TurnEnd(_))).await;
    let ran = events.iter().find_map(|s| match &s.event {
        Event::ToolFinished(t) => Some(t.clone()),
        _ => None,
    });
    let ran = ran.expect("the approved call finished");
    assert!(ran.ok, "{ran:?}");
    assert_eq!(ran.call_id, asked.call_id, "the approval was for this call");

    // 3. The cap: the model reads a preview and where the whole result is.
    let big = finished(&mut c, "big").await;
    assert!(big.ok, "{big:?}");
    let session = c.info().session_id;
    let sent = last_tool_message(&mock);
    assert!(sent.contains("[output cut after"), "{}", &sent[sent.len().saturating_sub(300)..]);
    let saved: PathBuf = env.host.home().join("results").join(&session).join(format!("{}.txt", big.call_id));
    let whole = std::fs::read_to_string(&saved).expect("the whole result was saved");
    assert!(whole.chars().count() > CAP && sent.len() < whole.len(), "{} of {} chars sent", sent.len(), whole.len());

    // 4. A call that writes a workspace file is checkpointed first (the files tools say which
    //    path they write; the agent's own tools and MCP tools name none).
    let checkpoints = talaria_agent::checkpoints::Checkpoints::open(env.host.home());
    if kind.tool == "read_file" {
        let wrote = finished(&mut c, "write").await;
        assert!(wrote.ok, "{wrote:?}");
        assert_eq!(std::fs::read_to_string(env.workspace().join("w.txt")).expect("read"), "after\n");
        let kept = checkpoints.load(&session).expect("checkpoints");
        let kept = kept.iter().find(|k| k.call_id == wrote.call_id).expect("a checkpoint of the write");
        assert_eq!(kept.tool, "write_file");
    } else {
        assert!(checkpoints.load(&session).unwrap_or_default().is_empty());
    }
    let served = editor.served.lock().expect("lock").clone();
    if kind.overlay {
        assert_eq!(served, ["read_file", "read_file", "write_file"], "the editor served the files tools");
    } else {
        assert!(served.is_empty(), "{served:?}");
    }
    c.shutdown().await;
}

/// The last tool result the model was sent.
fn last_tool_message(mock: &MockLlm) -> String {
    let requests = mock.requests();
    let body = &requests.last().expect("a request").body;
    body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "tool"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_own_tools_pass_every_stage() {
    stages(OWN).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_tools_pass_every_stage() {
    stages(PLUGIN).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_tools_pass_every_stage() {
    stages(MCP).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_editors_overlay_passes_every_stage() {
    stages(OVERLAY).await;
}
