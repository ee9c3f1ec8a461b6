//! `talaria serve`: the HTTP front door (`talaria-serve`): an OpenAI-compatible API, A2A and
//! a web dashboard on this home's agent. Its token is `TALARIA_SERVE_TOKEN`, or the one kept in the home's
//! `serve-token` (made on first use, readable by you alone); `talaria serve token` prints it.

use std::io::Write as _;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use talaria_core::config::ServeApprovals;
use tokio::sync::OnceCell;

use crate::{Ctx, ui};

/// Where it listens unless told.
const DEFAULT_LISTEN: &str = "127.0.0.1:8642";
/// The environment variable that holds the token, over the home's file.
const TOKEN_ENV: &str = "TALARIA_SERVE_TOKEN";

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ServeArgs {
    #[command(subcommand)]
    command: Option<ServeCmd>,
    /// Where to listen [default: `[serve] listen`, else 127.0.0.1:8642]
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Let it listen beyond loopback. It speaks plain HTTP: put TLS in front of it (a reverse
    /// proxy), and give that proxy's host name with --allow-host
    #[arg(long)]
    allow_remote: bool,
    /// A host name the server answers to besides its address and loopback's: the name a
    /// reverse proxy forwards (repeatable; `[serve] hosts` adds more)
    #[arg(long = "allow-host", value_name = "NAME")]
    hosts: Vec<String>,
}

#[derive(Subcommand)]
enum ServeCmd {
    /// Print the API's bearer token (made if there is none yet), or make a new one
    Token {
        /// Replace the token with a new one (clients with the old one are refused)
        #[arg(long)]
        new: bool,
    },
}

impl ServeArgs {
    /// Whether this runs the server (not `serve token`).
    pub fn serves(&self) -> bool {
        self.command.is_none()
    }
}

pub async fn run(ctx: &Ctx, args: ServeArgs) -> anyhow::Result<ExitCode> {
    if let Some(ServeCmd::Token { new }) = args.command {
        let file = token_file(&ctx.home);
        if new {
            write_token(&file)?;
        }
        let (token, _) = token(&ctx.home)?;
        println!("{token}");
        return Ok(ExitCode::SUCCESS);
    }
    let listen = match (args.listen, &ctx.config.serve.listen) {
        (Some(addr), _) => addr,
        (None, Some(text)) => text
            .parse()
            .with_context(|| format!("[serve] listen = {text:?} is not an address such as {DEFAULT_LISTEN}"))?,
        (None, None) => DEFAULT_LISTEN.parse().context("the default address")?,
    };
    let (token, from) = token(&ctx.home)?;
    let host = talaria_core::Host::open(talaria_core::HostOptions {
        home: ctx.home.clone(),
        workspace: talaria_core::canonical_workspace(&ctx.workspace)?,
    })
    .await?;
    let approvals = approvals_of(ctx.config.serve.approvals);
    let mut hosts = ctx.config.serve.hosts.clone();
    hosts.extend(args.hosts);
    let jobs: Arc<dyn talaria_serve::JobRunner> = Arc::new(Jobs { home: ctx.home.clone(), runner: OnceCell::new() });
    let mut more_tokens = Vec::new();
    for more in &ctx.config.serve.tokens {
        let value = std::env::var(&more.env).unwrap_or_default();
        if value.trim().len() < 16 {
            anyhow::bail!(
                "[[serve.tokens]] `{}` reads its token from ${}, which is {}: set it to a long random value (`openssl rand -hex 32` makes one)",
                more.name,
                more.env,
                if value.trim().is_empty() { "not set" } else { "shorter than 16 characters" }
            );
        }
        more_tokens
            .push(talaria_serve::Token { token: value.trim().to_string(), approvals: approvals_of(more.approvals) });
    }
    let options = talaria_serve::Options {
        listen,
        token,
        hosts,
        allow_remote: args.allow_remote,
        approvals,
        more_tokens,
        jobs: Some(jobs),
        gateway: Some(Arc::new(Gateway { store: host.store().clone() })),
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let stopping = stop.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        stopping.cancel();
    });
    let ready = |ready: talaria_serve::Ready| {
        let bound = ready.bound;
        ui::note(&format!(
            "serving the OpenAI-compatible API at http://{bound}/v1 (model `{}`) and A2A (its card at http://{bound}/.well-known/agent-card.json); their bearer token is {from}",
            talaria_serve::openai::MODEL
        ));
        ui::note(&format!("the dashboard: open {} to log in (the link works once)", ready.login));
    };
    match talaria_serve::serve(Arc::new(host), options, ready, stop).await {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            ui::error(&e.to_string());
            Ok(ExitCode::from(2))
        }
    }
}

/// The dashboard's "Run now": the scheduler's runner on this home, made when first used.
struct Jobs {
    home: PathBuf,
    runner: OnceCell<talaria_scheduler::Runner>,
}

impl talaria_serve::JobRunner for Jobs {
    fn run_now<'a>(&'a self, id: &'a str) -> talaria_serve::Later<'a, Result<String, String>> {
        Box::pin(async move {
            let runner = self
                .runner
                .get_or_try_init(|| crate::cron::runner(&self.home))
                .await
                .map_err(|e| format!("the scheduler cannot start: {e}"))?;
            let report = runner.run_now(id).await?;
            Ok(crate::cron::report_line(&report))
        })
    }
}

/// The dashboard's view of the gateway: what its processes last wrote in the store.
struct Gateway {
    store: Arc<talaria_core::store::Store>,
}

impl talaria_serve::GatewayView for Gateway {
    fn status(&self) -> talaria_serve::Later<'_, (Vec<talaria_serve::GatewayProcess>, Vec<String>)> {
        Box::pin(async move {
            use talaria_gateway::serve::{SESSIONS_SPACE, Status};
            let now = jiff::Timestamp::now().as_millisecond();
            let processes = Status::read_all(&self.store)
                .await
                .into_iter()
                .map(|s| talaria_serve::GatewayProcess {
                    pid: s.pid,
                    live: s.live(now),
                    machine: s.host,
                    at: s.at,
                    accounts: s.accounts.into_iter().collect(),
                    busy: s.busy,
                })
                .collect();
            let chats = self.store.kv_keys(SESSIONS_SPACE, "").await.unwrap_or_default();
            (processes, chats)
        })
    }
}

/// `[serve] approvals` (or a token's) as the server takes it.
fn approvals_of(configured: ServeApprovals) -> talaria_serve::Approvals {
    match configured {
        ServeApprovals::Deny => talaria_serve::Approvals::Deny,
        ServeApprovals::Allow => talaria_serve::Approvals::Allow,
    }
}

fn token_file(home: &Path) -> PathBuf {
    home.join("serve-token")
}

/// The token, and where it came from (for the start's note).
fn token(home: &Path) -> anyhow::Result<(String, String)> {
    if let Some(token) = std::env::var(TOKEN_ENV).ok().filter(|t| !t.trim().is_empty()) {
        return Ok((token.trim().to_string(), format!("{TOKEN_ENV}'s")));
    }
    let file = token_file(home);
    if !file.exists() {
        write_token(&file)?;
    }
    let token = std::fs::read_to_string(&file).with_context(|| format!("cannot read {}", file.display()))?;
    let token = token.trim().to_string();
    anyhow::ensure!(
        token.len() >= 32,
        "{} holds no usable token (32 characters at least): `talaria serve token --new` makes one",
        file.display()
    );
    Ok((token, format!("in {} (`talaria serve token` prints it)", ui::tilde(&file))))
}

/// A new token in `file`, readable by its owner alone.
fn write_token(file: &Path) -> anyhow::Result<()> {
    let token = talaria_serve::new_token().map_err(anyhow::Error::msg)?;
    let _ = std::fs::remove_file(file);
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)
        .with_context(|| format!("cannot write {}", file.display()))?;
    writeln!(out, "{token}").with_context(|| format!("cannot write {}", file.display()))?;
    Ok(())
}
