//! `talaria context status`, and the context lines `/context` prints.

use std::fmt::Write as _;
use std::process::ExitCode;

use talaria_agent::{Agent, ContextBudget};
use talaria_protocol::{ContextStatus, Message, PluginSession};

use crate::plugin_host::single;
use crate::{Ctx, ui};

/// The context window's fill and the engine's own lines, for people.
pub fn status_lines(engine: &str, status: &ContextStatus, lines: &[(String, String)]) -> String {
    let pct = if status.context_length == 0 {
        0.0
    } else {
        status.prompt_tokens as f64 * 100.0 / status.context_length as f64
    };
    let mut out = format!(
        "context engine: {engine}\nprompt: ≈{} of {} tokens ({pct:.1}%), {}, {} so far",
        status.prompt_tokens,
        status.context_length,
        ui::count(status.message_count, "message", "messages"),
        ui::count(status.compressions, "compression", "compressions")
    );
    let width = lines.iter().map(|(k, _)| k.chars().count()).max().unwrap_or(0);
    for (key, value) in lines {
        let _ = write!(out, "\n  {key:<width$}  {value}");
    }
    out
}

/// `talaria context ...`
#[derive(clap::Subcommand)]
#[command(defer = true)]
pub enum ContextCmd {
    /// The context engine, its threshold, and how full a session's context is
    Status {
        /// The session to measure: an id, a title or `latest`
        #[arg(long, default_value = "latest")]
        session: String,
    },
}

pub async fn run(ctx: &Ctx, cmd: ContextCmd) -> anyhow::Result<ExitCode> {
    let ContextCmd::Status { session } = cmd;
    let name = ctx.config.context.engine();
    let context_length =
        ctx.config.model.as_ref().and_then(|m| m.context_length).unwrap_or(talaria_agent::DEFAULT_CONTEXT_LENGTH);
    if name == "none" || name.is_empty() {
        println!("context engine: none ([context] engine = \"none\"): long conversations are not compressed");
        return Ok(ExitCode::SUCCESS);
    }
    let runtime = ctx.runtime(false)?;
    let plugin = match single(&runtime, "context-engine", name) {
        Ok(p) => p,
        Err(e) => {
            println!("context engine: {name} — not loaded");
            ui::warn(&format!("{e} (set `engine` under [context] in config.toml, or \"none\")"));
            return Ok(ExitCode::FAILURE);
        }
    };
    let store = ctx.store_for_reading().await?;
    let found = match store.resolve_session(&session).await {
        Ok(info) => Some(info),
        Err(e) if session == "latest" => {
            tracing::debug!("no session to measure: {e}");
            None
        }
        Err(e) => return Err(e.into()),
    };
    let (status, plugin_session, budget) = match &found {
        Some(info) => {
            let messages: Vec<Message> = store.messages(&info.id).await?.into_iter().map(|m| m.message).collect();
            let system = store.system_prompt(&info.id).await?;
            let (mut tools, _) = runtime.tools().await;
            tools.extend(talaria_agent::builtin::specs().into_iter().map(std::sync::Arc::new));
            let count = u32::try_from(messages.len()).unwrap_or(u32::MAX);
            let compressions = Agent::compressions_before(&store, info).await;
            let budget = ContextBudget::estimate(&system, &tools, &messages, context_length);
            let status = ContextStatus {
                prompt_tokens: talaria_agent::estimate_tokens(&system, &tools, &messages),
                context_length,
                message_count: count,
                compressions,
            };
            let session = PluginSession {
                session_id: info.id.clone(),
                platform: info.source.clone(),
                workspace: info.cwd.clone(),
                model: info.model.clone(),
            };
            (status, session, Some((budget, count, compressions)))
        }
        None => (ContextStatus { context_length, ..ContextStatus::default() }, PluginSession::default(), None),
    };
    // The engine measures what it can shrink: the conversation, against the room the fixed
    // part of the prompt leaves (as in a chat).
    let (engine_status, mut lines) = match budget {
        Some((budget, count, compressions)) => {
            (budget.engine_status(count, compressions), vec![("fixed prompt".to_string(), budget.describe())])
        }
        None => (status, Vec::new()),
    };
    lines
        .extend(runtime.context_report(&plugin, engine_status, &plugin_session).await.map_err(|e| anyhow::anyhow!(e))?);
    let label = format!("{} ({}, version {})", plugin.name(), plugin.scope.label(), plugin.manifest.version);
    println!("{}", status_lines(&label, &status, &lines));
    match &found {
        Some(info) => {
            println!("session: {}{}", info.id, info.title.as_ref().map(|t| format!(" \"{t}\"")).unwrap_or_default())
        }
        None => println!("session: none yet"),
    }
    Ok(ExitCode::SUCCESS)
}
