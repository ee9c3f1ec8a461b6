//! `talaria pairing`: the chat-platform users paired with the gateway, and the codes strangers
//! were given. The owner approves a code a user passed on (`approve CODE`) and takes a pairing
//! back (`revoke PLATFORM USER_ID`).

use std::process::ExitCode;

use clap::Subcommand;
use owo_colors::OwoColorize as _;
use talaria_store::Store;

use crate::{Ctx, ui};

#[derive(Subcommand, Debug)]
#[command(defer = true)]
pub enum PairingCmd {
    /// The paired users and the codes waiting for approval
    List {
        /// As JSON
        #[arg(long)]
        json: bool,
    },
    /// Approve the code a user was given: they are answered from now on
    Approve {
        /// The 8-character code (any letter case)
        code: String,
    },
    /// Take a pairing (or a waiting code) back
    Revoke {
        /// telegram, matrix, discord, slack, ...
        platform: String,
        /// The user's id on that platform (as `pairing list` shows it)
        user_id: String,
    },
}

pub async fn run(ctx: &Ctx, cmd: PairingCmd) -> anyhow::Result<ExitCode> {
    let store = match cmd {
        PairingCmd::List { .. } => ctx.store_for_reading().await?,
        PairingCmd::Approve { .. } | PairingCmd::Revoke { .. } => ctx.store().await?,
    };
    match cmd {
        PairingCmd::List { json } => list(&store, json).await,
        PairingCmd::Approve { code } => {
            let p = store.pairing_approve(&code).await?;
            let who = talaria_runtime::visible(&p.user_name, 80);
            println!("paired {who} ({} user {}): they are answered from now on", p.platform, p.user_id);
            Ok(ExitCode::SUCCESS)
        }
        PairingCmd::Revoke { platform, user_id } => {
            if store.pairing_revoke(&platform, &user_id).await? {
                println!("revoked {platform} user {user_id}");
                Ok(ExitCode::SUCCESS)
            } else {
                ui::error(&format!("{platform} user {user_id} is not paired: `talaria pairing list` shows who is"));
                Ok(ExitCode::FAILURE)
            }
        }
    }
}

async fn list(store: &Store, json: bool) -> anyhow::Result<ExitCode> {
    let now = jiff::Timestamp::now().as_millisecond();
    let all = store.pairings().await?;
    if json {
        let rows: Vec<serde_json::Value> = all
            .iter()
            .map(|p| {
                serde_json::json!({
                    "platform": p.platform, "user_id": p.user_id, "user_name": p.user_name,
                    "state": p.state(now), "code": p.code, "requested_at": p.requested_at,
                    "expires_at": p.expires_at, "approved_at": p.approved_at,
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(rows));
        return Ok(ExitCode::SUCCESS);
    }
    if all.is_empty() {
        ui::note("nobody is paired and no code is waiting");
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = all
        .iter()
        .map(|p| {
            let state = p.state(now);
            let code = match (state, &p.code) {
                ("pending", Some(code)) => code.clone(),
                _ => String::new(),
            };
            // Names come from strangers: shown, never obeyed.
            let name = talaria_runtime::visible(&p.user_name, 40);
            vec![p.platform.clone(), talaria_runtime::visible(&p.user_id, 40), name, state.to_string(), code]
        })
        .collect();
    ui::table(&["PLATFORM", "USER ID", "NAME", "STATE", "CODE"], &rows);
    if all.iter().any(|p| p.state(now) == "pending") {
        putln!(anstream::stdout(), "{}", "approve a code with: talaria pairing approve CODE".dimmed());
    }
    Ok(ExitCode::SUCCESS)
}
