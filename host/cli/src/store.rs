//! `talaria store migrate --to URL`: copy this home's `state.db` into an empty PostgreSQL
//! database, counting every table on both sides (see docs/scale-out.md).

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Subcommand;
use talaria_store::{Location, Store};

use crate::{Ctx, ui};

#[derive(Subcommand)]
#[command(defer = true)]
pub enum StoreCmd {
    /// Copy this home's state.db into an empty PostgreSQL database, then count both sides
    Migrate {
        /// The database: postgres://USER:PASSWORD@HOST:PORT/DATABASE
        #[arg(long, value_name = "URL")]
        to: String,
    },
}

pub async fn run(ctx: &Ctx, cmd: StoreCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        StoreCmd::Migrate { to } => {
            let file = ctx.home.join("state.db");
            anyhow::ensure!(file.is_file(), "{} does not exist: there is nothing to copy", file.display());
            let from = Store::open(&file)?;
            let target = Location::Postgres(to.clone());
            let dest = Store::connect(&to).await.with_context(|| format!("cannot open {target}"))?;
            let counted = from.copy_into(&dest, &|table, rows| ui::note(&format!("{table}: {rows} rows"))).await?;
            println!("copied {} into {target}; every table has the same rows on both sides:", file.display());
            for (table, rows) in &counted {
                println!("  {table:<14} {rows}");
            }
            println!(
                "to use it, set `url` under [store] in config.toml (or TALARIA_STORE_URL) on every machine; \
                 {} is left as it was",
                file.display()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}
