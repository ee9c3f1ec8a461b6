//! `talaria acp`: serve the Agent Client Protocol on stdin and stdout for an editor (see
//! talaria-acp). Nothing but protocol messages goes to stdout; logs go to stderr.

use std::process::ExitCode;

use clap::Args;
use talaria_core::{Host, HostOptions};
use tokio::io::BufReader;

use crate::Ctx;
use crate::chat::ModelFlags;

#[derive(Args, Debug, Default, Clone)]
pub struct AcpArgs {
    #[command(flatten)]
    pub model: ModelFlags,
    /// Toolsets to enable, comma-separated (files, web, terminal, coding, all, a plugin's name...)
    #[arg(short, long, value_delimiter = ',', value_name = "LIST")]
    pub toolsets: Option<Vec<String>>,
    /// Start every session in `yolo` mode: dangerous commands and new hosts go ahead without
    /// asking (the editor can switch a session back to `ask`)
    #[arg(long)]
    pub yolo: bool,
}

pub async fn run(ctx: &Ctx, args: AcpArgs) -> anyhow::Result<ExitCode> {
    let host = HostOptions { home: ctx.home.clone(), workspace: ctx.workspace.clone() };
    let options = talaria_acp::Options { model: args.model.choice(), toolsets: args.toolsets, yolo: args.yolo };
    tracing::info!("talaria acp: serving the Agent Client Protocol on stdio");
    // The editor's `initialize` is answered while the host opens.
    let (input, output) = (BufReader::new(tokio::io::stdin()), tokio::io::stdout());
    talaria_acp::serve_opening(Host::open(host), options, input, output).await?;
    Ok(ExitCode::SUCCESS)
}
