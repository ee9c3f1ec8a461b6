//! `talaria gateway`: serve chat platforms (`run`), and see how a running gateway stands
//! (`status`).

use std::process::ExitCode;
use std::sync::Arc;

use clap::Subcommand;
use owo_colors::OwoColorize as _;
use talaria_core::{Host, HostOptions};
use talaria_gateway::serve::{Options, SESSIONS_SPACE, Scheduler, Status};
use talaria_scheduler::Runner;

use crate::{Ctx, ui};

#[derive(Subcommand, Debug)]
#[command(defer = true)]
pub enum GatewayCmd {
    /// Serve the configured chat platforms ([gateway.platforms.NAME]) in the foreground
    ///
    /// Logs go to stderr. Ctrl-C or SIGTERM stops it cleanly: no new messages are taken,
    /// running turns get 20 seconds to finish (then are interrupted), and queued replies are sent.
    Run {
        /// Serve only this account (repeatable) [default: every configured one]
        #[arg(long, value_name = "NAME")]
        only: Vec<String>,
    },
    /// The accounts of the running gateway, its sessions and the delivery ledger
    ///
    /// Exits 0 when a gateway is running, 3 when none is.
    Status {
        /// As JSON
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(ctx: &Ctx, cmd: GatewayCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        GatewayCmd::Run { only } => serve(ctx, only).await,
        GatewayCmd::Status { json } => status(ctx, json).await,
    }
}

async fn serve(ctx: &Ctx, only: Vec<String>) -> anyhow::Result<ExitCode> {
    // The gateway's own directory is its default workspace: project plugins of wherever it was
    // started never load into it.
    let workspace = ctx.home.join("gateway");
    std::fs::create_dir_all(&workspace)?;
    let host =
        Host::open(HostOptions { home: ctx.home.clone(), workspace: talaria_core::canonical_workspace(&workspace)? })
            .await?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let shutdown = async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
    };
    let host = Arc::new(host);
    // Scheduled jobs run beside the gateway, their answers for chats through its ledger.
    let runner = host.clone();
    let scheduler: Scheduler = Box::new(move |courier, stop| {
        let holder = format!("talaria gateway (pid {})", std::process::id());
        Box::pin(Runner::new(runner, holder, courier).serve(stop))
    });
    match talaria_gateway::serve::run(host, Options { only, scheduler: Some(scheduler) }, shutdown).await {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            ui::error(&e);
            Ok(ExitCode::FAILURE)
        }
    }
}

async fn status(ctx: &Ctx, json: bool) -> anyhow::Result<ExitCode> {
    let store = ctx.store_for_reading().await?;
    let all = Status::read_all(&store).await;
    let counts = store.delivery_counts().await?;
    let troubled = store.deliveries_troubled(TROUBLED_SHOWN).await?;
    let sessions = store.kv_keys(SESSIONS_SPACE, "").await?.len();
    let now = jiff::Timestamp::now().as_millisecond();
    // Each process writes every two seconds: older than ten, it is gone (killed, or the machine).
    let live: Vec<&Status> = all.iter().filter(|s| s.live(now)).collect();
    if json {
        let value = serde_json::json!({
            "running": !live.is_empty(),
            "status": all.first(),
            "processes": live,
            "sessions": sessions,
            "deliveries": {
                "pending": counts.pending,
                "sent": counts.sent,
                "failed": counts.failed,
                "troubled": troubled.iter().map(|t| serde_json::json!({
                    "id": t.id,
                    "account": t.platform,
                    "chat": t.chat_id,
                    "state": trouble(t),
                    "attempts": t.attempts,
                    "last_error": t.last_error,
                    "queued_at": timestamp(t.created_at),
                    "at": timestamp(t.at),
                })).collect::<Vec<_>>(),
            },
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(ExitCode::SUCCESS);
    }
    match (live.as_slice(), all.first()) {
        ([], Some(s)) => {
            anstream::println!("{} (last seen pid {} on {})", "gateway not running".yellow(), s.pid, shown(&s.host))
        }
        ([], None) => anstream::println!("{}", "gateway never ran here".yellow()),
        ([one], _) => {
            anstream::println!("{} (pid {} on {})", "gateway running".green(), one.pid, shown(&one.host));
            print_process(one, "  ");
        }
        (many, _) => {
            anstream::println!("{} ({} processes sharing the store)", "gateway running".green(), many.len());
            for s in many {
                println!("  pid {} on {}", s.pid, shown(&s.host));
                print_process(s, "    ");
            }
        }
    }
    println!("sessions: {sessions} chats known");
    println!("deliveries: {} pending, {} sent, {} failed", counts.pending, counts.sent, counts.failed);
    for t in &troubled {
        let when = if t.state == "failed" { "given up" } else { "tried again" };
        println!(
            "  #{} to {} chat {}: {} after {} attempts ({when} {}): {}",
            t.id,
            shown(&t.platform),
            shown(&t.chat_id),
            trouble(t),
            t.attempts,
            timestamp(t.at),
            shown(&t.last_error)
        );
    }
    let unconfined: Vec<&str> = ctx
        .config
        .gateway
        .platforms
        .keys()
        .filter(|name| ctx.config.gateway.unconfined(name))
        .map(String::as_str)
        .collect();
    if unconfined.is_empty() {
        println!("commands: confined in the OS sandbox");
    } else {
        anstream::println!(
            "commands: {} for {} (as you, with all your files and network); confined elsewhere",
            "UNCONFINED".yellow().bold(),
            unconfined.join(", ")
        );
    }
    Ok(if live.is_empty() { ExitCode::from(3) } else { ExitCode::SUCCESS })
}

/// Deliveries in trouble `gateway status` names (the newest).
const TROUBLED_SHOWN: usize = 20;

/// What became of a delivery in trouble: `failed` (given up) or `retrying`.
fn trouble(t: &talaria_store::delivery::Trouble) -> &'static str {
    if t.state == "failed" { "failed" } else { "retrying" }
}

/// A time in milliseconds since the epoch, as RFC 3339 in UTC.
fn timestamp(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms).map(|t| t.to_string()).unwrap_or_default()
}

/// A text of the status record (a host name, an adapter's state, which may quote a platform's
/// error) on one line, its controls escaped.
fn shown(text: &str) -> String {
    talaria_runtime::visible(text, 500)
}

fn print_process(s: &Status, indent: &str) {
    for (name, state) in &s.accounts {
        println!("{indent}{}: {}", shown(name), shown(&state.to_string()));
    }
    println!("{indent}{} chats active, {} turns running", s.active_sessions, s.busy);
}
