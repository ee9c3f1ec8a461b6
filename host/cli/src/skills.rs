//! `talaria skills ...`: the skills a session here would see, and where each comes from.

use std::process::ExitCode;

use clap::Subcommand;
use talaria_agent::skills::{self, Skill};

use crate::{Ctx, ui};

#[derive(Subcommand)]
pub enum SkillsCmd {
    /// Every skill found here (bundled, yours in ~/.talaria/skills, a trusted project's), by category
    List {
        /// As JSON
        #[arg(long)]
        json: bool,
    },
    /// A skill's whole SKILL.md, where it lives and its files
    Show { name: String },
}

pub fn run(ctx: &Ctx, cmd: SkillsCmd) -> anyhow::Result<ExitCode> {
    let trusted = talaria_runtime::GrantFile::load(&ctx.home.join("grants.toml"))
        .map(|g| g.is_trusted(&ctx.workspace))
        .unwrap_or(false);
    let found = skills::discover(&ctx.home, &ctx.workspace, trusted);
    for w in &found.warnings {
        ui::warn(w);
    }
    if let Some(dir) = &found.untrusted_project {
        ui::note(&format!(
            "{} holds skills this project brings; they are read only after `talaria trust` (review them first)",
            dir.display()
        ));
    }
    match cmd {
        SkillsCmd::List { json } => {
            if json {
                let items: Vec<serde_json::Value> = found.skills.iter().map(skill_json).collect();
                println!("{}", serde_json::to_string_pretty(&items)?);
                return Ok(ExitCode::SUCCESS);
            }
            if found.skills.is_empty() {
                println!("no skills");
            }
            let rows: Vec<Vec<String>> = found
                .skills
                .iter()
                .map(|s| {
                    vec![
                        s.category.clone(),
                        s.name.clone(),
                        s.source.name().to_string(),
                        ui::first_line(&s.description, 70),
                    ]
                })
                .collect();
            ui::table(&["CATEGORY", "NAME", "FROM", "DESCRIPTION"], &rows);
            Ok(ExitCode::SUCCESS)
        }
        SkillsCmd::Show { name } => {
            let Some(skill) = found.skills.iter().find(|s| s.name == name) else {
                let names: Vec<&str> = found.skills.iter().map(|s| s.name.as_str()).collect();
                anyhow::bail!(
                    "no skill named `{name}` here (skills: {})",
                    if names.is_empty() { "none".into() } else { names.join(", ") }
                );
            };
            let place =
                skill.dir.as_ref().map_or_else(|| "bundled with talaria".to_string(), |d| d.display().to_string());
            println!("{} ({}, {})  {place}", skill.name, skill.category, skill.source.name());
            println!("{}", skill.description);
            if !skill.requires_tools.is_empty() || !skill.requires_toolsets.is_empty() {
                println!("needs tools: {}; toolsets: {}", none(&skill.requires_tools), none(&skill.requires_toolsets));
            }
            println!("\n{}", skill.body.trim_end());
            let files = skill.files();
            if !files.is_empty() {
                println!("\nfiles: {}", files.join(", "));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn none(items: &[String]) -> String {
    if items.is_empty() { "none".into() } else { items.join(", ") }
}

fn skill_json(s: &Skill) -> serde_json::Value {
    serde_json::json!({
        "name": s.name,
        "description": s.description,
        "category": s.category,
        "version": s.version,
        "tags": s.tags,
        "platforms": s.platforms,
        "requires_tools": s.requires_tools,
        "requires_toolsets": s.requires_toolsets,
        "source": s.source.name(),
        "dir": s.dir,
        "files": s.files(),
    })
}
