//! `talaria tools list|call`: the tools of every usable plugin, called with no model involved.

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::Subcommand;
use talaria_protocol::ToolError;
use talaria_runtime::ToolContext;

use crate::{Ctx, ui};

#[derive(Subcommand)]
pub enum ToolsCmd {
    /// List every tool the loaded plugins offer
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

async fn list(ctx: &Ctx, json: bool) -> anyhow::Result<ExitCode> {
    let runtime = ctx.runtime(false)?;
    for p in runtime.problems() {
        ui::warn(&p.to_string());
    }
    announce_compiles(&runtime);
    let (tools, problems) = runtime.tools().await;
    for p in &problems {
        ui::warn(&p.to_string());
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&tools)?);
    } else {
        let rows: Vec<Vec<String>> =
            tools.iter().map(|t| vec![t.name.clone(), t.plugin.clone(), ui::first_line(&t.description, 80)]).collect();
        ui::table(&["TOOL", "PLUGIN", "DESCRIPTION"], &rows);
    }
    Ok(ExitCode::SUCCESS)
}

async fn call(ctx: &Ctx, name: &str, args: &str, yolo: bool) -> anyhow::Result<ExitCode> {
    let runtime = ctx.runtime(yolo)?;
    announce_compiles(&runtime);
    let (tools, problems) = runtime.tools().await;
    // Another plugin offering the same name was left out: say so, and whose tool runs.
    let clash = format!("tool `{name}` is already provided by plugin ");
    let left_out: Vec<_> = problems.iter().filter(|p| p.message.starts_with(&clash)).collect();
    if let Some(owner) = tools.iter().find(|t| t.name == name).filter(|_| !left_out.is_empty()) {
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
    if !tools.iter().any(|t| t.name == name) {
        for p in runtime.problems().iter().chain(&problems) {
            ui::warn(&p.to_string());
        }
    } else if let Some(plugin) = tools.iter().find(|t| t.name == name).and_then(|t| runtime.plugin(&t.plugin))
        && std::io::stderr().is_terminal()
        && let Some((outcome, took)) = runtime.prepare(plugin).ok().flatten()
        && matches!(outcome, talaria_runtime::CacheOutcome::Compiled | talaria_runtime::CacheOutcome::Replaced)
    {
        ui::note(&format!("compiled plugin '{}' in {:.1}s (cached for next time)", plugin.name(), took.as_secs_f32()));
    }
    let arguments = match serde_json::from_str(talaria_protocol::arguments_or_empty(args)) {
        Ok(arguments) => arguments,
        Err(e) => {
            ui::error(&ToolError::InvalidArgs(format!("arguments are not valid JSON: {e}")).to_string());
            return Ok(ExitCode::FAILURE);
        }
    };
    match runtime.call(&ToolContext::new(name, arguments).in_workspace(&ctx.workspace)).await {
        Ok(out) => {
            for d in &out.denials {
                ui::warn(&format!("the host refused a request: {d}"));
            }
            if out.output.ends_with('\n') {
                print!("{}", out.output);
            } else {
                println!("{}", out.output);
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            ui::error(&e.to_string());
            Ok(ExitCode::FAILURE)
        }
    }
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
