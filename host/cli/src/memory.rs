//! `talaria memory status`: the built-in memory files and the external memory provider.

use std::process::ExitCode;

use clap::Subcommand;
use talaria_agent::builtin::memory::{Memory, Target};

use crate::plugin_host::single;
use crate::{Ctx, ui};

#[derive(Subcommand)]
#[command(defer = true)]
pub enum MemoryCmd {
    /// Show MEMORY.md / USER.md fullness and the external memory provider's state
    Status,
}

pub async fn run(ctx: &Ctx, cmd: MemoryCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        MemoryCmd::Status => status(ctx).await,
    }
}

async fn status(ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let memory = Memory::new(ctx.home.join("memories"));
    let snapshot = memory.snapshot();
    println!("built-in memory ({})", memory.dir().display());
    for target in [Target::Memory, Target::User] {
        let (count, chars) = (snapshot.entries(target).len(), snapshot.used(target));
        println!(
            "  {:<10} {count} {}, {chars} / {} chars ({}%)",
            target.file(),
            if count == 1 { "entry" } else { "entries" },
            target.limit(),
            chars * 100 / target.limit()
        );
    }
    let name = ctx.config.memory.provider();
    if name == "none" || name.is_empty() {
        println!("external provider: none ([memory] provider = \"none\")");
        return Ok(ExitCode::SUCCESS);
    }
    let runtime = ctx.runtime(false)?;
    let plugin = match single(&runtime, "memory", name) {
        Ok(p) => p,
        Err(e) => {
            println!("external provider: {name} — not loaded");
            ui::warn(&format!("{e} (set `provider` under [memory] in config.toml, or \"none\")"));
            return Ok(ExitCode::FAILURE);
        }
    };
    println!(
        "external provider: {} ({}, version {}, api {})",
        plugin.name(),
        plugin.scope.label(),
        plugin.manifest.version,
        plugin.manifest.api
    );
    let granted: Vec<String> = plugin.grants.caps.iter().map(ToString::to_string).collect();
    println!("  granted: {}", if granted.is_empty() { "-".to_string() } else { granted.join(", ") });
    let store = ctx.store_for_reading().await?;
    let (keys, bytes) = store.kv_usage(plugin.kv_space()).await?;
    println!("  stored: {keys} keys, {}", human_bytes(bytes));
    Ok(ExitCode::SUCCESS)
}

fn human_bytes(n: u64) -> String {
    match n {
        0..1024 => format!("{n} bytes"),
        1024..1_048_576 => format!("{:.1} KiB", n as f64 / 1024.0),
        _ => format!("{:.1} MiB", n as f64 / 1_048_576.0),
    }
}
