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
#[command(defer = true)]
pub enum SkillsCmd {
    /// Every skill found here (bundled, installed, yours in ~/.talaria/skills, a trusted project's), by category
    List {
        /// As JSON
        #[arg(long)]
        json: bool,
    },
    /// A skill's whole SKILL.md, where it lives and its files
    Show { name: String },
    /// Read the skills the agent wrote or changed since you last saw them, and let sessions use
    /// them (none is in a session's index before)
    Review {
        /// Only this skill
        name: Option<String>,
        /// Mark each as seen once printed, without asking (for scripts)
        #[arg(long)]
        yes: bool,
    },
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
    // `show`, `edit` and `remove` reach the agent's skills waiting for review too.
    let all: Vec<Skill> = found.skills.iter().chain(&found.pending).cloned().collect();
    match cmd {
        SkillsCmd::List { json } => {
            if json {
                let items: Vec<serde_json::Value> = found.skills.iter().map(skill_json).collect();
                println!("{}", serde_json::to_string_pretty(&items)?);
                return Ok(ExitCode::SUCCESS);
            }
            if found.skills.is_empty() && found.pending.is_empty() {
                println!("no skills");
            }
            let mut rows: Vec<Vec<String>> = found
                .skills
                .iter()
                .map(|s| (s, s.source.name()))
                .chain(found.pending.iter().map(|s| (s, "agent, not reviewed")))
                .map(|(s, from)| {
                    vec![s.category.clone(), s.name.clone(), from.to_string(), ui::first_line(&s.description, 70)]
                })
                .collect();
            rows.sort_by(|a, b| (&a[0], &a[1]).cmp(&(&b[0], &b[1])));
            ui::table(&["CATEGORY", "NAME", "FROM", "DESCRIPTION"], &rows);
            Ok(ExitCode::SUCCESS)
        }
        SkillsCmd::Show { name } => {
            let skill = find(&all, &name)?;
            if found.pending.iter().any(|p| p.name == name) {
                ui::note(&format!(
                    "the agent wrote `{name}` and you have not reviewed it: no session uses it until `talaria skills review {name}`"
                ));
            }
            let place =
                skill.dir.as_ref().map_or_else(|| "bundled with talaria".to_string(), |d| d.display().to_string());
            let header = format!("{} ({}, {})  {place}", skill.name, skill.category, skill.source.name());
            println!("{}", talaria_runtime::visible(&header, usize::MAX));
            println!("{}", talaria_runtime::visible(&skill.description, usize::MAX));
            if !skill.requires_tools.is_empty() || !skill.requires_toolsets.is_empty() {
                println!("needs tools: {}; toolsets: {}", none(&skill.requires_tools), none(&skill.requires_toolsets));
            }
            println!("\n{}", ui::for_stdout(skill.body.trim_end()));
            let files = skill.files();
            if !files.is_empty() {
                println!("\nfiles: {}", files.join(", "));
            }
            Ok(ExitCode::SUCCESS)
        }
        SkillsCmd::Review { name, yes } => review(ctx, &found.pending, name.as_deref(), yes),
        SkillsCmd::Edit { name } => edit(ctx, find(&all, &name)?),
        SkillsCmd::Remove { name } => remove(ctx, &all, &name),
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
        Source::User | Source::Agent => anyhow::anyhow!("`{}` is yours", skill.name),
    }
}

/// `skills edit`: the user's editor on SKILL.md, then the same checks discovery makes. A skill
/// the agent wrote counts as reviewed once the user has edited it.
fn edit(ctx: &Ctx, skill: &Skill) -> anyhow::Result<ExitCode> {
    let (Source::User | Source::Agent, Some(dir)) = (skill.source, &skill.dir) else {
        return Err(not_yours(skill, "edited"));
    };
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
    let read = skills::read_one(dir, Source::User);
    if skill.source == Source::Agent && read.is_ok() {
        skills::manage::mark_reviewed(&ctx.home, &skill.name, Some(dir))?;
    }
    match read {
        Ok(s) if s.name == skill.name => println!("{} saved; it reads well", file.display()),
        Ok(s) => ui::warn(&format!(
            "{} now names the skill `{}` (it was `{}`); that is its name from now on",
            file.display(),
            s.name,
            skill.name
        )),
        Err(e) => {
            ui::warn(&e.to_string());
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
        Some(s) if matches!(s.source, Source::User | Source::Agent) => {
            let dir = s.dir.clone().unwrap_or_default();
            std::fs::remove_dir_all(&dir).with_context(|| dir.display().to_string())?;
            skills::manage::mark(&ctx.home, name, false)?;
            skills::manage::mark_reviewed(&ctx.home, name, None)?;
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

/// `skills review`: each skill the agent wrote or changed since the user last saw it, printed
/// whole (SKILL.md and every file, controls escaped), then the user's answer: use it, delete
/// it, or not now.
fn review(ctx: &Ctx, pending: &[Skill], only: Option<&str>, yes: bool) -> anyhow::Result<ExitCode> {
    use std::io::IsTerminal as _;
    let chosen: Vec<&Skill> = pending.iter().filter(|s| only.is_none_or(|n| s.name == n)).collect();
    if chosen.is_empty() {
        match only {
            Some(name) => {
                println!("`{name}` has nothing to review (it is not a skill the agent changed since you saw it)")
            }
            None => println!("nothing to review: every skill the agent wrote has been seen as it is"),
        }
        return Ok(ExitCode::SUCCESS);
    }
    let can_ask = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    if !yes && !can_ask {
        for s in &chosen {
            print_whole(s);
        }
        bail!("nothing was marked as seen: nobody here can answer; pass --yes to let sessions use what was printed");
    }
    for s in chosen {
        print_whole(s);
        let dir = s.dir.clone().unwrap_or_default();
        let answer = if yes {
            "y".to_string()
        } else {
            crate::market::ask("Let sessions use it? [y]es, [d]elete it, [N]ot now ")?
        };
        match answer.as_str() {
            "y" | "yes" => {
                skills::manage::mark_reviewed(&ctx.home, &s.name, Some(&dir))?;
                println!("sessions use `{}` from now on", s.name);
            }
            "d" | "delete" => {
                std::fs::remove_dir_all(&dir).with_context(|| dir.display().to_string())?;
                skills::manage::mark(&ctx.home, &s.name, false)?;
                skills::manage::mark_reviewed(&ctx.home, &s.name, None)?;
                println!("deleted `{}`", s.name);
            }
            _ => println!("left for later: `{}` stays out of sessions", s.name),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A skill as a reviewer reads it: where it is, SKILL.md, then each of its files.
fn print_whole(s: &Skill) {
    let dir = s.dir.clone().unwrap_or_default();
    println!();
    println!("── {} (written by the agent) in {}", talaria_runtime::visible(&s.name, 64), ui::tilde(&dir));
    match std::fs::read_to_string(dir.join("SKILL.md")) {
        Ok(text) => println!("{}", ui::for_stdout(text.trim_end())),
        Err(e) => ui::warn(&format!("cannot read its SKILL.md: {e}")),
    }
    for file in s.files() {
        println!("── {file}");
        match std::fs::read(dir.join(&file)) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => println!("{}", ui::for_stdout(text.trim_end())),
                Err(e) => println!("(binary, {} bytes)", e.as_bytes().len()),
            },
            Err(e) => ui::warn(&format!("cannot read {file}: {e}")),
        }
    }
    println!("──");
}

/// Most lines of a skill the REPL shows at its start in place of a review.
const SHOWN_AT_START: usize = 60;

/// At the REPL's start: the skills the agent wrote since the user last looked, each shown. One
/// that fits on the screen whole (SKILL.md alone, at most [`SHOWN_AT_START`] lines) counts as
/// reviewed; a longer one, or one with files, is named with the command that reviews it.
pub fn show_new_at_start(ctx: &Ctx) {
    let found = skills::discover(&ctx.home, &ctx.workspace, &talaria_core::project_skills(&ctx.home, &ctx.workspace));
    for s in &found.pending {
        let Some(dir) = &s.dir else { continue };
        let text = std::fs::read_to_string(dir.join("SKILL.md")).unwrap_or_default();
        let files = s.files();
        if files.is_empty() && text.lines().count() <= SHOWN_AT_START {
            ui::note(&format!(
                "the agent wrote the skill `{}` in an earlier session; here it is (`talaria skills remove {}` deletes it):",
                s.name, s.name
            ));
            print_whole(s);
            if let Err(e) = skills::manage::mark_reviewed(&ctx.home, &s.name, Some(dir)) {
                ui::warn(&e.to_string());
            }
        } else {
            ui::note(&format!(
                "the agent wrote the skill `{}` ({}); no session uses it until you read it: `talaria skills review {}`",
                s.name,
                ui::count(files.len() + 1, "file", "files"),
                s.name
            ));
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
