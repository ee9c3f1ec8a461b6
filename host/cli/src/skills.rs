//! `talaria skills ...`: the skills a session here would see, and where each comes from; editing
//! and removing them; packing and installing them ([`crate::skill_install`]).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Subcommand;
use talaria_agent::skills::{self, Skill, Source};

use crate::skill_install::{self, InstallFlags};
use crate::{Ctx, ui};

#[derive(Subcommand)]
pub enum SkillsCmd {
    /// Every skill found here (bundled, installed, yours in ~/.talaria/skills, a trusted project's), by category
    List {
        /// As JSON
        #[arg(long)]
        json: bool,
    },
    /// A skill's whole SKILL.md, where it lives and its files
    Show { name: String },
    /// Edit one of your skills' SKILL.md in $VISUAL or $EDITOR (checked again afterwards)
    Edit { name: String },
    /// Remove one of your skills, or an installed one
    Remove { name: String },
    /// Install a skill from a marketplace bundle (signed), a URL or a directory
    #[command(after_help = skill_install::SOURCE_HELP)]
    Install {
        /// ./dir, ./bundle.skill.tar.gz or https://…
        source: String,
        #[command(flatten)]
        flags: InstallFlags,
    },
    /// Pack a skill directory into a bundle to publish (.skill.tar.gz), optionally signed
    Pack {
        /// The skill's directory (holding SKILL.md)
        dir: PathBuf,
        /// Where to write the bundle (default: NAME[-VERSION].skill.tar.gz here)
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Sign it with this key (a name from `talaria plugin keygen`, or a key file): writes BUNDLE.sig
        #[arg(long, value_name = "KEY")]
        sign: Option<String>,
    },
}

pub async fn run(ctx: &Ctx, cmd: SkillsCmd) -> anyhow::Result<ExitCode> {
    let cmd = match cmd {
        SkillsCmd::Install { source, flags } => return skill_install::install(ctx, &source, &flags).await,
        SkillsCmd::Pack { dir, output, sign } => return skill_install::pack(ctx, &dir, output, sign.as_deref()),
        other => other,
    };
    let found = skills::discover(&ctx.home, &ctx.workspace, &talaria_core::project_skills(&ctx.home, &ctx.workspace));
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
            let skill = find(&found.skills, &name)?;
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
        SkillsCmd::Edit { name } => edit(find(&found.skills, &name)?),
        SkillsCmd::Remove { name } => remove(ctx, &found.skills, &name),
        SkillsCmd::Install { .. } | SkillsCmd::Pack { .. } => unreachable!("handled above"),
    }
}

fn find<'a>(skills: &'a [Skill], name: &str) -> anyhow::Result<&'a Skill> {
    skills.iter().find(|s| s.name == name).ok_or_else(|| {
        let names: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
        anyhow::anyhow!(
            "no skill named `{name}` here (skills: {})",
            if names.is_empty() { "none".into() } else { names.join(", ") }
        )
    })
}

/// Where a skill that is not the user's can be changed instead.
fn not_yours(skill: &Skill, what: &str) -> anyhow::Error {
    let dir = skill.dir.as_ref().map(|d| d.display().to_string()).unwrap_or_default();
    match skill.source {
        Source::Bundled => anyhow::anyhow!(
            "`{}` is bundled with talaria, so it cannot be {what}; a skill of yours with the same name in ~/.talaria/skills replaces it",
            skill.name
        ),
        Source::Project => anyhow::anyhow!(
            "`{}` is the project's ({dir}); change it in the project (and review it with `talaria trust`)",
            skill.name
        ),
        Source::Installed => anyhow::anyhow!(
            "`{}` was installed, and its files are pinned by digest; copy {dir} into ~/.talaria/skills to make your own version",
            skill.name
        ),
        Source::User => anyhow::anyhow!("`{}` is yours", skill.name),
    }
}

/// `skills edit`: the user's editor on SKILL.md, then the same checks discovery makes.
fn edit(skill: &Skill) -> anyhow::Result<ExitCode> {
    let (Source::User, Some(dir)) = (skill.source, &skill.dir) else { return Err(not_yours(skill, "edited")) };
    let file = dir.join("SKILL.md");
    let editor = std::env::var("VISUAL").or_else(|_| std::env::var("EDITOR")).unwrap_or_else(|_| "vi".into());
    let mut words = shlex::split(&editor).filter(|w| !w.is_empty()).with_context(|| {
        format!("$VISUAL/$EDITOR `{editor}` is not a command line; set it to your editor, like `nano` or `code --wait`")
    })?;
    let program = words.remove(0);
    let status = std::process::Command::new(&program)
        .args(&words)
        .arg(&file)
        .status()
        .with_context(|| format!("cannot start the editor `{program}` (set $VISUAL or $EDITOR)"))?;
    if !status.success() {
        bail!("the editor `{program}` exited with {status}; {} is as the editor left it", file.display());
    }
    match skills::read_one(dir, Source::User) {
        Ok(s) if s.name == skill.name => println!("{} saved; it reads well", file.display()),
        Ok(s) => ui::warn(&format!(
            "{} now names the skill `{}` (it was `{}`); that is its name from now on",
            file.display(),
            s.name,
            skill.name
        )),
        Err(e) => {
            ui::warn(&e);
            bail!(
                "{} was saved, but the skill is left out of sessions until it is fixed (`talaria skills edit {}`)",
                file.display(),
                skill.name
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `skills remove`: the user's own, or an installed one.
fn remove(ctx: &Ctx, found: &[Skill], name: &str) -> anyhow::Result<ExitCode> {
    let skill = found.iter().find(|s| s.name == name);
    match skill {
        Some(s) if s.source == Source::User => {
            let dir = s.dir.clone().unwrap_or_default();
            std::fs::remove_dir_all(&dir).with_context(|| dir.display().to_string())?;
            skills::manage::mark(&ctx.home, name, false).map_err(anyhow::Error::msg)?;
            println!("removed your skill {name} ({})", dir.display());
        }
        Some(s) if s.source != Source::Installed => return Err(not_yours(s, "removed")),
        // Installed: also when it is left out (changed on disk), or shadowed by another.
        _ => match skill_install::uninstall(&ctx.home, name)? {
            Some(entry) => println!("removed the installed skill {name} (from {})", entry.source),
            None => return Err(find(found, name).err().unwrap_or_else(|| anyhow::anyhow!("no skill named `{name}`"))),
        },
    }
    if let Some(other) =
        skills::discover(&ctx.home, &ctx.workspace, &talaria_core::project_skills(&ctx.home, &ctx.workspace))
            .skills
            .iter()
            .find(|s| s.name == name)
    {
        ui::note(&format!("the {} skill {name} of that name is used now", other.source.name()));
    }
    Ok(ExitCode::SUCCESS)
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
