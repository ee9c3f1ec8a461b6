//! `talaria usage`: what turns spent over the last days, by day, model and source, and how
//! much of each `[budget]` limit is used (the dashboard's usage page shows the same figures).

use std::process::ExitCode;

use talaria_core::budget::Standing;
use talaria_core::usage::{Report, Sum};
use talaria_protocol::thousands;

use crate::{Ctx, ui};

#[derive(clap::Args)]
pub struct UsageArgs {
    /// Days to sum, today included
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(i64).range(1..=3660))]
    days: i64,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

pub async fn run(ctx: &Ctx, args: UsageArgs) -> anyhow::Result<ExitCode> {
    let store = ctx.store_for_reading().await?;
    let now = jiff::Zoned::now();
    let start = now.start_of_day()?.checked_sub(jiff::SignedDuration::from_hours(24 * (args.days - 1)))?;
    let turns = store.turns_since(start.timestamp().as_millisecond()).await?;
    let report = Report::new(&turns, &ctx.config, args.days, &now);
    let standings = talaria_core::budget::standings(&ctx.config.budget, &store, &now).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json(&report, &standings))?);
        return Ok(ExitCode::SUCCESS);
    }
    let t = &report.total;
    println!(
        "Last {} days: {} turns, {} tokens ({} in, {} out){}",
        args.days,
        t.turns,
        thousands(t.tokens()),
        thousands(t.input),
        thousands(t.output),
        cost_note(t)
    );
    for (title, sums) in [("DAY", &report.by_day), ("MODEL", &report.by_model), ("SOURCE", &report.by_source)] {
        if sums.is_empty() {
            continue;
        }
        println!();
        let rows: Vec<Vec<String>> =
            sums.iter().map(|(k, s)| vec![k.clone(), s.turns.to_string(), thousands(s.tokens()), cost(s)]).collect();
        ui::table(&[title, "TURNS", "TOKENS", "COST"], &rows);
    }
    println!();
    if standings.is_empty() {
        println!("No spending limits are set ([budget] in config.toml; see docs/config.md).");
    } else {
        let rows: Vec<Vec<String>> = standings
            .iter()
            .map(|s| {
                let used = if s.over { format!("{} (reached)", s.used) } else { s.used.clone() };
                vec![s.scope.clone(), format!("{} {}", s.period, s.limit), used, s.resets.clone()]
            })
            .collect();
        ui::table(&["BUDGET", "LIMIT", "USED", "RESETS"], &rows);
    }
    Ok(ExitCode::SUCCESS)
}

fn json(report: &Report, standings: &[Standing]) -> serde_json::Value {
    let sum = |s: &Sum| {
        serde_json::json!({
            "turns": s.turns, "input_tokens": s.input, "output_tokens": s.output,
            "cost_usd": s.cost, "unpriced_turns": s.unpriced,
        })
    };
    let map = |m: &std::collections::BTreeMap<String, Sum>| {
        m.iter().map(|(k, s)| (k.clone(), sum(s))).collect::<serde_json::Map<_, _>>()
    };
    serde_json::json!({
        "total": sum(&report.total),
        "by_day": map(&report.by_day),
        "by_model": map(&report.by_model),
        "by_source": map(&report.by_source),
        "budget": standings.iter().map(|s| serde_json::json!({
            "scope": s.scope, "period": s.period, "limit": s.limit, "used": s.used,
            "reached": s.over, "resets": s.resets,
        })).collect::<Vec<_>>(),
    })
}

/// Dollars, or `-` when none of the turns has a price.
fn cost(s: &Sum) -> String {
    if s.turns > 0 && s.unpriced == s.turns { "-".into() } else { format!("${:.2}", s.cost) }
}

fn cost_note(s: &Sum) -> String {
    match (s.turns, s.unpriced) {
        (0, _) => ".".into(),
        (n, u) if u == n => "; no price is known for their models (set [model] input_price and output_price).".into(),
        (_, 0) => format!(", ${:.2}.", s.cost),
        (_, u) => format!(", ${:.2} ({u} turns of models with no known price are not counted).", s.cost),
    }
}
