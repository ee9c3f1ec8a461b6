//! `talaria checkpoints ...`: the files kept before tools changed them, by session.

use std::io::IsTerminal as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Subcommand;
use talaria_agent::checkpoints::{Checkpoints, RestoreError};

use crate::{Ctx, ui};

#[derive(Subcommand)]
#[command(defer = true)]
pub enum CheckpointsCmd {
    /// A session's checkpoints, newest first (or every session that has some, with --all)
    List {
        /// The session: an id (or a unique prefix), a title, or `latest`
        #[arg(long, default_value = "latest", value_name = "ID|TITLE|latest")]
        session: String,
        /// Every session with checkpoints
        #[arg(long)]
        all: bool,
    },
    /// What restoring checkpoint N would change: each kept file against the file now
    Diff {
        /// The checkpoint, as `list` numbers it (1: the newest)
        n: u32,
        #[arg(long, default_value = "latest", value_name = "ID|TITLE|latest")]
        session: String,
    },
    /// Put the files of checkpoint N back as they were before its tool call (asks before
    /// overwriting a file changed since)
    Restore {
        /// The checkpoint, as `list` numbers it (1: the newest)
        n: u32,
        #[arg(long, default_value = "latest", value_name = "ID|TITLE|latest")]
        session: String,
        /// Overwrite files changed since without asking
        #[arg(short, long)]
        yes: bool,
    },
}

pub async fn run(ctx: &Ctx, cmd: CheckpointsCmd) -> anyhow::Result<ExitCode> {
    let store = Checkpoints::open(&ctx.home);
    let sessions = ctx.store_for_reading().await?;
    let resolve = async |key: &str| -> anyhow::Result<String> { Ok(sessions.resolve_session(key).await?.id) };
    match cmd {
        CheckpointsCmd::List { session, all } => {
            if all {
                let everything = store.all()?;
                if everything.is_empty() {
                    println!("no checkpoints");
                }
                for (session, list) in everything {
                    let last = list.last().map(|c| c.what.clone()).unwrap_or_default();
                    println!("{}", ui::for_stdout(&format!("{session}  {} checkpoints  last: {last}", list.len())));
                }
                let size = store.size()?;
                ui::note(&format!("kept contents take {:.1} MiB", size as f64 / 1_048_576.0));
                return Ok(ExitCode::SUCCESS);
            }
            let id = resolve(&session).await?;
            println!("session {id}");
            println!("{}", ui::for_stdout(&talaria_core::rollback::listing(&store.load(&id)?)));
            Ok(ExitCode::SUCCESS)
        }
        CheckpointsCmd::Diff { n, session } => {
            let id = resolve(&session).await?;
            let cp = nth(&store, &id, n)?;
            let workspace = Path::new(&cp.workspace);
            println!("{}", ui::for_stdout(&format!("checkpoint {n} of {id}: before `{}`", cp.what)));
            for f in &cp.files {
                let now = std::fs::read(workspace.join(&f.path)).ok();
                let kept = match &f.before {
                    Some(sha) => Some(
                        store.content(sha).with_context(|| format!("the content of {} is no longer kept", f.path))?,
                    ),
                    None => None,
                };
                match (&kept, &now) {
                    (None, None) => {}
                    (None, Some(_)) => println!("{}: made after; restoring removes it", ui::for_stdout(&f.path)),
                    (Some(_), None) => println!("{}: gone now; restoring puts it back", ui::for_stdout(&f.path)),
                    (Some(a), Some(b)) if a == b => {}
                    (Some(a), Some(b)) => match (std::str::from_utf8(b), std::str::from_utf8(a)) {
                        (Ok(now), Ok(then)) => {
                            let diff = similar::TextDiff::from_lines(now, then);
                            let unified = diff
                                .unified_diff()
                                .header(&format!("{} (now)", f.path), &format!("{} (kept)", f.path))
                                .to_string();
                            print!("{}", ui::for_stdout(&unified));
                        }
                        _ => println!("{}: binary, {} bytes now, {} kept", ui::for_stdout(&f.path), b.len(), a.len()),
                    },
                }
            }
            for s in &cp.skipped {
                println!("not kept: {}", ui::for_stdout(s));
            }
            Ok(ExitCode::SUCCESS)
        }
        CheckpointsCmd::Restore { n, session, yes } => {
            let id = resolve(&session).await?;
            let cp = nth(&store, &id, n)?;
            let done = match store.restore(&id, cp.n, yes) {
                Ok(done) => done,
                Err(RestoreError::Changed(files)) => {
                    if !std::io::stdin().is_terminal() {
                        anyhow::bail!("{} changed since that call: pass --yes to overwrite them", files.join(", "));
                    }
                    eprint!("{} changed since that call; overwrite them? [y/N] ", files.join(", "));
                    let mut answer = String::new();
                    std::io::stdin().read_line(&mut answer).context("cannot read the answer")?;
                    if !matches!(answer.trim(), "y" | "Y" | "yes") {
                        eprintln!("left as they are");
                        return Ok(ExitCode::FAILURE);
                    }
                    store.restore(&id, cp.n, true)?
                }
                Err(e) => return Err(e.into()),
            };
            println!(
                "restored checkpoint {n} (before `{}`): {} written, {} removed",
                ui::for_stdout(&cp.what),
                done.written.len(),
                done.removed.len()
            );
            for f in done.written.iter().chain(&done.removed) {
                println!("  {}", ui::for_stdout(f));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Checkpoint `n` of `session`, counted from the newest (1).
fn nth(store: &Checkpoints, session: &str, n: u32) -> anyhow::Result<talaria_agent::checkpoints::Checkpoint> {
    let list = store.load(session)?;
    let index = usize::try_from(n).ok().filter(|n| *n >= 1 && *n <= list.len()).with_context(|| {
        format!("session {session} has {} checkpoints: N is 1 (the newest) to {}", list.len(), list.len().max(1))
    })?;
    Ok(list[list.len() - index].clone())
}
