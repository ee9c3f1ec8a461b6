//! `talaria tools list|call`: every tool the agent has here (its own, the plugins', the MCP
//! servers'), called with no model involved but through the same stages as the model's calls:
//! hooks, approval (none is given here: `--yolo` lets dangerous commands run), checkpoint.

use std::io::IsTerminal as _;
use std::process::ExitCode;

use std::sync::Arc;

use clap::Subcommand;
use talaria_core::{Conversation, Host, HostOptions, Start};
use talaria_protocol::{Event, NoticeLevel, Op, ToolError};

use crate::{Ctx, ui};

#[derive(Subcommand)]
#[command(defer = true)]
pub enum ToolsCmd {
    /// List every tool the agent has here: its own, the plugins', the MCP servers'
    List {
        /// Print the tool specs as JSON (name, description, parameters, plugin)
        #[arg(long)]
        json: bool,
    },
    /// Call a tool with JSON arguments and print its result (exit 1 if the tool fails)
    Call {
        /// The tool's name, as `tools list` shows it
        name: String,
        /// Arguments as a JSON object
        #[arg(default_value = "{}")]
        args: String,
        /// Allow dangerous shell commands, and hosts a plugin reaches only through a wildcard
        /// network grant, without asking (forbidden commands and internal addresses stay refused)
        #[arg(long)]
        yolo: bool,
    },
}

pub async fn run(ctx: &Ctx, cmd: ToolsCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        ToolsCmd::List { json } => list(ctx, json).await,
        ToolsCmd::Call { name, args, yolo } => call(ctx, &name, &args, yolo).await,
    }
}

/// A conversation that never calls the model, holding every tool the agent would have here
/// (its own, the plugins', the MCP servers'), with what the plugins said when they loaded.
struct Tools {
    conversation: Conversation,
    runtime: Arc<talaria_runtime::Runtime>,
    /// What listing the plugins' tools found (a name two plugins offer).
    problems: Vec<talaria_runtime::Problem>,
}

impl Tools {
    async fn open(ctx: &Ctx, yolo: bool) -> anyhow::Result<Self> {
        let host = Host::open(HostOptions { home: ctx.home.clone(), workspace: ctx.workspace.clone() }).await?;
        let (plugins, _) = host.plugins(host.workspace())?;
        let pending = plugins.to_compile();
        if !pending.is_empty() && std::io::stderr().is_terminal() {
            ui::note(&format!("compiling {} on first use (cached afterwards)...", pending.join(", ")));
        }
        let runtime = plugins.runtime();
        let start = Start { source: "tools".into(), yolo, no_model: true, ..Start::default() };
        let mut conversation = host.start(start).await?;
        for w in conversation.start_warnings().await {
            ui::warn(&w);
        }
        let (_, problems) = runtime.tools().await;
        Ok(Self { conversation, runtime, problems })
    }
}

async fn list(ctx: &Ctx, json: bool) -> anyhow::Result<ExitCode> {
    let tools = Tools::open(ctx, false).await?;
    for p in &tools.problems {
        ui::warn(&p.to_string());
    }
    let specs = tools.conversation.info().tools;
    if json {
        println!("{}", serde_json::to_string_pretty(&specs)?);
    } else {
        let rows: Vec<Vec<String>> =
            specs.iter().map(|t| vec![t.name.clone(), t.plugin.clone(), ui::first_line(&t.description, 80)]).collect();
        ui::table(&["TOOL", "PLUGIN", "DESCRIPTION"], &rows);
    }
    Ok(ExitCode::SUCCESS)
}

async fn call(ctx: &Ctx, name: &str, args: &str, yolo: bool) -> anyhow::Result<ExitCode> {
    let Tools { mut conversation, runtime, problems } = Tools::open(ctx, yolo).await?;
    let specs = conversation.info().tools;
    // Another plugin offering the same name was left out: say so, and whose tool runs.
    let clash = format!("tool `{name}` is already provided by plugin ");
    let left_out: Vec<_> = problems.iter().filter(|p| p.message.starts_with(&clash)).collect();
    if let Some(owner) = specs.iter().find(|t| t.name == name).filter(|_| !left_out.is_empty()) {
        for p in &left_out {
            ui::warn(&p.to_string());
        }
        ui::note(&format!(
            "running `{name}` of plugin '{}' ({} left out; `talaria plugins list` shows who offers what)",
            owner.plugin,
            left_out
                .iter()
                .filter_map(|p| p.plugin.as_deref())
                .map(|n| format!("'{n}'"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !specs.iter().any(|t| t.name == name) {
        for p in &problems {
            ui::warn(&p.to_string());
        }
        let mut names: Vec<&str> = specs.iter().map(|t| t.name.as_str()).collect();
        names.sort_unstable();
        ui::error(&ToolError::UnknownTool(format!("{name} (available: {})", names.join(", "))).to_string());
        return Ok(ExitCode::FAILURE);
    }
    if let Err(e) = serde_json::from_str::<serde_json::Value>(talaria_protocol::arguments_or_empty(args)) {
        ui::error(&ToolError::InvalidArgs(format!("arguments are not valid JSON: {e}")).to_string());
        return Ok(ExitCode::FAILURE);
    }
    if let Some(plugin) = specs.iter().find(|t| t.name == name).and_then(|t| runtime.plugin(&t.plugin))
        && std::io::stderr().is_terminal()
        && let Some((outcome, took)) = runtime.prepare(plugin).ok().flatten()
        && matches!(outcome, talaria_runtime::CacheOutcome::Compiled | talaria_runtime::CacheOutcome::Replaced)
    {
        ui::note(&format!("compiled plugin '{}' in {:.1}s (cached for next time)", plugin.name(), took.as_secs_f32()));
    }
    let op = Op::CallTool { name: name.to_string(), arguments: args.to_string() };
    let last = conversation
        .run(op, |stamped| {
            if let Event::Notice { level: NoticeLevel::Warn, text } = &stamped.event {
                ui::warn(text);
            }
        })
        .await;
    conversation.shutdown().await;
    match last.map(|s| s.event) {
        Some(Event::ToolFinished(done)) if done.ok => {
            if done.result.ends_with('\n') {
                print!("{}", done.result);
            } else {
                println!("{}", done.result);
            }
            Ok(ExitCode::SUCCESS)
        }
        Some(Event::ToolFinished(done)) => {
            ui::error(&error_text(&done.result));
            Ok(ExitCode::FAILURE)
        }
        Some(Event::Error { text }) => {
            ui::error(&text);
            Ok(ExitCode::FAILURE)
        }
        _ => {
            ui::error("the tool call stopped before it finished");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// A failed call's result (`{"error": "..."}`, as the model gets it) as the person reads it.
fn error_text(result: &str) -> String {
    serde_json::from_str::<serde_json::Value>(result)
        .ok()
        .and_then(|v| v.get("error").and_then(serde_json::Value::as_str).map(str::to_string))
        .unwrap_or_else(|| result.to_string())
}

/// On a terminal, say that a first use compiles plugins (it takes a second or so each).
pub fn announce_compiles(runtime: &talaria_runtime::Runtime) {
    if !std::io::stderr().is_terminal() {
        return;
    }
    let pending: Vec<&str> = runtime.plugins().iter().filter(|p| runtime.needs_compile(p)).map(|p| p.name()).collect();
    if !pending.is_empty() {
        ui::note(&format!("compiling {} on first use (cached afterwards)...", pending.join(", ")));
    }
}
