//! `talaria profile ...`: separate homes. The default profile is the base home
//! (`$TALARIA_HOME`, else `~/.talaria`); every other one is `profiles/NAME/` below it, with its own
//! config, keys (`.env`), memories, sessions, skills, plugins and grants. `-p NAME` or
//! `TALARIA_PROFILE` picks one for a command; `talaria profile use NAME` makes it the default.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Subcommand;
use owo_colors::OwoColorize as _;
use talaria_core::config::{self, ACTIVE_PROFILE_FILE, DEFAULT_PROFILE};

/// What a copy leaves out: the sessions and what is made again (caches, logs, status).
const NOT_COPIED: &[&str] = &[
    "state.db",
    "state.db-wal",
    "state.db-shm",
    "cache",
    "logs",
    "profiles",
    ACTIVE_PROFILE_FILE,
    talaria_runtime::CHANGED_STAMP,
    "gateway",
    "cron",
    "results",
    "checkpoints",
];

#[derive(Subcommand)]
#[command(defer = true)]
pub enum ProfileCmd {
    /// The profiles, with the one in use marked
    List,
    /// Make an empty profile (then `talaria -p NAME setup`)
    Create {
        /// Its name: a-z, 0-9, `-`, `_`
        name: String,
    },
    /// Make profile TO from FROM's config, keys, memories, skills, plugins and grants (not its
    /// sessions)
    Copy { from: String, to: String },
    /// Delete a profile and everything in it: sessions, memories, keys
    Remove {
        name: String,
        /// Do not ask
        #[arg(long)]
        yes: bool,
    },
    /// Use this profile from now on when no -p or TALARIA_PROFILE says otherwise (`default`: the
    /// base home)
    Use { name: String },
}

/// Run a profile command over the base home.
///
/// # Errors
/// A bad or unknown name, an existing profile to create, or a file that cannot be written.
pub fn run(cmd: ProfileCmd) -> anyhow::Result<ExitCode> {
    let base = config::base_home()?;
    match cmd {
        ProfileCmd::List => list(&base),
        ProfileCmd::Create { name } => {
            let home = new_home(&base, &name)?;
            private_dir(&home)?;
            println!("created profile {name} in {}", home.display());
            println!("next: talaria -p {name} setup   (or `talaria profile use {name}`)");
            Ok(ExitCode::SUCCESS)
        }
        ProfileCmd::Copy { from, to } => {
            let source = existing(&base, &from)?;
            let target = new_home(&base, &to)?;
            private_dir(&target)?;
            copy_tree(&source, &target, true)?;
            println!("copied profile {from} to {to} ({}), without its sessions", target.display());
            Ok(ExitCode::SUCCESS)
        }
        ProfileCmd::Remove { name, yes } => {
            if name == DEFAULT_PROFILE {
                bail!("the default profile is the base home ({}); it cannot be removed", base.display());
            }
            let home = existing(&base, &name)?;
            if !yes {
                if !std::io::stdin().is_terminal() {
                    bail!("removing profile {name} deletes its sessions, memories and keys: pass --yes to confirm");
                }
                eprint!("delete profile {name} ({}) with its sessions, memories and keys? [y/N] ", home.display());
                let mut answer = String::new();
                std::io::stdin().read_line(&mut answer).context("cannot read the answer")?;
                if !matches!(answer.trim(), "y" | "Y" | "yes") {
                    eprintln!("kept");
                    return Ok(ExitCode::FAILURE);
                }
            }
            std::fs::remove_dir_all(&home).with_context(|| format!("cannot remove {}", home.display()))?;
            if active(&base) == name {
                let _ = std::fs::remove_file(base.join(ACTIVE_PROFILE_FILE));
                println!("removed profile {name}; the default profile is in use again");
            } else {
                println!("removed profile {name}");
            }
            Ok(ExitCode::SUCCESS)
        }
        ProfileCmd::Use { name } => {
            let home = existing(&base, &name)?;
            let file = base.join(ACTIVE_PROFILE_FILE);
            if name == DEFAULT_PROFILE {
                match std::fs::remove_file(&file) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e).with_context(|| format!("cannot remove {}", file.display())),
                }
            } else {
                std::fs::write(&file, format!("{name}\n"))
                    .with_context(|| format!("cannot write {}", file.display()))?;
            }
            println!("using profile {name} ({}) from now on", home.display());
            if std::env::var("TALARIA_PROFILE").is_ok_and(|p| !p.trim().is_empty()) {
                println!("note: TALARIA_PROFILE is set in this shell and still comes first");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The profile `talaria profile use` chose ("default" when none).
fn active(base: &Path) -> String {
    std::fs::read_to_string(base.join(ACTIVE_PROFILE_FILE))
        .ok()
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| DEFAULT_PROFILE.to_string())
}

/// The home of an existing profile `name`.
fn existing(base: &Path, name: &str) -> anyhow::Result<PathBuf> {
    config::check_profile_name(name)?;
    let home = config::profile_home(base, name);
    if name != DEFAULT_PROFILE && !home.is_dir() {
        bail!("there is no profile named `{name}`: see `talaria profile list`");
    }
    Ok(home)
}

/// The home a new profile `name` would have: it must not exist yet.
fn new_home(base: &Path, name: &str) -> anyhow::Result<PathBuf> {
    config::check_profile_name(name)?;
    if name == DEFAULT_PROFILE {
        bail!("`default` is the base home's profile; choose another name");
    }
    let home = config::profile_home(base, name);
    if home.exists() {
        bail!("profile {name} exists already ({})", home.display());
    }
    Ok(home)
}

fn private_dir(dir: &Path) -> anyhow::Result<()> {
    talaria_runtime::fsutil::private_dir(dir).with_context(|| format!("cannot create {}", dir.display()))
}

/// Copy `from` into `to`; at the top level, leave out [`NOT_COPIED`]. Links are not followed.
fn copy_tree(from: &Path, to: &Path, top: bool) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))? {
        let entry = entry?;
        let name = entry.file_name();
        if top && NOT_COPIED.iter().any(|n| name == *n) {
            continue;
        }
        let (src, dst) = (entry.path(), to.join(&name));
        let kind = entry.file_type()?;
        if kind.is_dir() {
            private_dir(&dst)?;
            copy_tree(&src, &dst, false)?;
        } else if kind.is_file() {
            std::fs::copy(&src, &dst).with_context(|| format!("cannot copy {}", src.display()))?;
        }
    }
    Ok(())
}

fn list(base: &Path) -> anyhow::Result<ExitCode> {
    let (current, chosen_by) = config::profile(base);
    let mut names = vec![DEFAULT_PROFILE.to_string()];
    if let Ok(entries) = std::fs::read_dir(base.join("profiles")) {
        let mut others: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|n| config::check_profile_name(n).is_ok())
            .collect();
        others.sort();
        names.extend(others);
    }
    for name in names {
        let home = config::profile_home(base, &name);
        let mark = if name == current { format!("{}", "*".green().bold()) } else { " ".to_string() };
        anstream::println!("{mark} {name:<16} {}", home.display());
    }
    if chosen_by != "default" {
        anstream::println!("(in use: {current}, chosen by {chosen_by})");
    }
    Ok(ExitCode::SUCCESS)
}
