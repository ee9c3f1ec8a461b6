//! `talaria acp`: serve the Agent Client Protocol on stdin and stdout for an editor (see
//! talaria-acp). Nothing but protocol messages goes to stdout; logs go to stderr.

use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use talaria_core::{Host, HostOptions, ModelChoice};
use tokio::io::BufReader;

use crate::Ctx;

#[derive(Args, Debug, Default, Clone)]
pub struct AcpArgs {
    /// The model's name as the provider knows it [default: from config.toml]
    #[arg(short, long)]
    pub model: Option<String>,
    /// openai | openrouter | anthropic | ollama | custom
    #[arg(long)]
    pub provider: Option<String>,
    /// The provider's base URL, e.g. http://localhost:11434/v1
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// chat_completions | anthropic_messages | responses [default: from the provider]
    #[arg(long, value_name = "MODE")]
    pub api_mode: Option<String>,
    /// Toolsets to enable, comma-separated (files, web, terminal, coding, all, a plugin's name...)
    #[arg(short, long, value_delimiter = ',', value_name = "LIST")]
    pub toolsets: Option<Vec<String>>,
    /// Start every session in `yolo` mode: dangerous commands and new hosts go ahead without
    /// asking (the editor can switch a session back to `ask`)
    #[arg(long)]
    pub yolo: bool,
}

pub async fn run(ctx: &Ctx, args: AcpArgs) -> anyhow::Result<ExitCode> {
    let host = Host::open(HostOptions { home: ctx.home.clone(), workspace: ctx.workspace.clone() })?;
    let options = talaria_acp::Options {
        model: ModelChoice {
            provider: args.provider,
            model: args.model,
            base_url: args.base_url,
            api_mode: args.api_mode,
        },
        toolsets: args.toolsets,
        yolo: args.yolo,
    };
    tracing::info!("talaria acp: serving the Agent Client Protocol on stdio");
    talaria_acp::serve(Arc::new(host), options, BufReader::new(tokio::io::stdin()), tokio::io::stdout()).await?;
    Ok(ExitCode::SUCCESS)
}
