//! `talaria skills pack|install`: skills from a marketplace, as signed bundles.
//!
//! A skill bundle is a gzip'd tar of the skill's directory (SKILL.md, an optional README or
//! LICENSE, and its `references/`, `templates/` and `scripts/`), packed reproducibly. It is
//! checked like a plugin bundle: its digest (`sha256:` of the bytes) must be what a trusted
//! publisher signed (`BUNDLE.sig`, from `talaria skills pack --sign KEY`), or `--allow-unsigned`
//! must be given; it is unpacked with the same refusals (paths out of the directory, links,
//! size); its text is screened for prompt injection; and the user sees what it expects (tools,
//! toolsets, its scripts and the commands its text shows) before saying yes. The installed files
//! are recorded in `skills.lock` by sha256 and read only while they match
//! ([`talaria_agent::skills::installed`]).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use talaria_agent::skills::installed::{self, Entry, Lock};
use talaria_agent::skills::{self, Skill, Source as SkillSource};
use talaria_market::bundle::{self, Limits};
use talaria_market::sign::{Signature, TrustStore};
use talaria_market::source::{FetchOptions, Fetched, Source, SourceError};
use talaria_runtime::shown::visible;

use crate::{Ctx, ui};

const MIB: u64 = 1024 * 1024;

/// Limits for a skill bundle: text, a few scripts.
const LIMITS: Limits =
    Limits { max_bundle_bytes: 8 * MIB, max_file_bytes: 2 * MIB, max_unpacked_bytes: 16 * MIB, max_entries: 256 };

/// Switches for `skills install`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct InstallFlags {
    /// Install without asking (what it expects is still shown)
    #[arg(short = 'y', long)]
    pub yes: bool,
    /// Install a bundle that carries no signature
    #[arg(long)]
    pub allow_unsigned: bool,
    /// Replace an installed skill signed by another publisher (or one signed where it was not)
    #[arg(long)]
    pub accept_publisher: bool,
}

pub const SOURCE_HELP: &str = "Sources:
  ./dir                        a skill directory (SKILL.md and its files); never signed
  ./tidy-1.0.0.skill.tar.gz    a bundle; tidy-1.0.0.skill.tar.gz.sig beside it is its signature
  https://host/x.skill.tar.gz  a bundle on the web; <url>.sig is its signature

Signed bundles must be signed by a key you trust (`talaria plugins trust-key`); unsigned ones
need --allow-unsigned. You are shown what the skill expects and asked before it is installed;
without a terminal, --yes says yes.";

/// The skill in `dir`, checked as an install would check it, and its files.
fn read_skill(dir: &Path, source: SkillSource) -> anyhow::Result<(Skill, Vec<String>)> {
    let files = installed::hash_files(dir).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
    let text = std::fs::read_to_string(dir.join("SKILL.md"))
        .with_context(|| format!("{} has no readable SKILL.md", dir.display()))?;
    let dir_name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let skill = skills::parse(&text, &dir_name, "general", source, Some(dir.to_path_buf()))
        .map_err(|e| anyhow::anyhow!("its SKILL.md: {e}"))?;
    for file in files.keys().filter(|f| *f != "SKILL.md") {
        let bytes = std::fs::read(dir.join(file)).with_context(|| file.clone())?;
        if let Some(reason) = std::str::from_utf8(&bytes).ok().and_then(talaria_agent::injection::scan) {
            bail!("its {file} looks like a prompt injection ({reason}); refusing it");
        }
    }
    Ok((skill, files.into_keys().collect()))
}

fn bundle_name(skill: &Skill) -> String {
    match &skill.version {
        Some(v) => format!("{}-{v}.skill.tar.gz", skill.name),
        None => format!("{}.skill.tar.gz", skill.name),
    }
}

/// `talaria skills pack DIR [-o FILE] [--sign KEY]`.
pub fn pack(ctx: &Ctx, dir: &Path, output: Option<PathBuf>, key: Option<&str>) -> anyhow::Result<ExitCode> {
    let (skill, files) = read_skill(dir, SkillSource::User)?;
    let bytes = bundle::pack_files(dir, files)?;
    let out = output.unwrap_or_else(|| PathBuf::from(bundle_name(&skill)));
    std::fs::write(&out, &bytes).with_context(|| out.display().to_string())?;
    let digest = bundle::digest(&bytes);
    println!("packed skill {} into {} ({digest})", skill.name, out.display());
    if let Some(key) = key {
        let place = talaria_author::Place { home: &ctx.home, workspace: &ctx.workspace, config: &ctx.config };
        let signature = talaria_author::commands::load_key(&place, key)?.sign(&digest);
        let sig_path = PathBuf::from(format!("{}.sig", out.display()));
        std::fs::write(&sig_path, signature.to_json()).with_context(|| sig_path.display().to_string())?;
        println!("signed with key {}: {}", signature.key_id, sig_path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// A staging directory, removed when dropped.
struct Staging(PathBuf);

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn fetch(spec: &str) -> anyhow::Result<Fetched> {
    let source = Source::parse(spec, &[]).map_err(|e| match e {
        SourceError::NoRegistry { .. } => anyhow::anyhow!(
            "`{spec}` is not a file or directory here; skills install from a directory, a .tar.gz or an https URL"
        ),
        other => other.into(),
    })?;
    if let Source::Dir(dir) = &source {
        let (_, files) = read_skill(dir, SkillSource::User)?;
        return Ok(Fetched {
            bundle: bundle::pack_files(dir, files)?,
            signature: None,
            pinned_digest: None,
            source: dir.display().to_string(),
            listed: None,
            local: true,
        });
    }
    if matches!(source, Source::Registry { .. } | Source::Oci(_)) {
        bail!(
            "`{spec}`: skills install from a directory, a .tar.gz or an https URL (not yet from a registry index or OCI)"
        );
    }
    let options = FetchOptions { registries: &[], max_bundle_bytes: LIMITS.max_bundle_bytes, progress: &|_, _| {} };
    Ok(source.fetch(&options).await?)
}

/// Commands shown in the skill's shell code blocks, for the consent.
fn shown_commands(body: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_shell = None;
    for line in body.lines() {
        let trimmed = line.trim();
        if let Some(lang) = trimmed.strip_prefix("```") {
            in_shell = match in_shell {
                Some(_) => None,
                None => Some(matches!(lang.trim(), "bash" | "sh" | "shell" | "console" | "zsh" | "")),
            };
            continue;
        }
        if in_shell == Some(true) && !trimmed.is_empty() && !trimmed.starts_with('#') {
            let command = trimmed.strip_prefix("$ ").unwrap_or(trimmed).to_string();
            if !out.contains(&command) {
                out.push(command);
            }
        }
    }
    out
}

/// `talaria skills install SOURCE`.
#[allow(clippy::too_many_lines)]
pub async fn install(ctx: &Ctx, spec: &str, flags: &InstallFlags) -> anyhow::Result<ExitCode> {
    anstream::eprintln!("  fetching {spec}…");
    let fetched = fetch(spec).await?;
    let digest = bundle::digest(&fetched.bundle);
    let trust = TrustStore::load(&ctx.home)?;
    let signer = match &fetched.signature {
        Some(bytes) => Some(trust.verify(&Signature::parse(bytes)?, &digest)?),
        None if flags.allow_unsigned => None,
        None => bail!(
            "{} is not signed; install it only if you trust where it came from, with --allow-unsigned",
            fetched.source
        ),
    };

    let skills_dir = ctx.home.join("skills");
    let staging = Staging(skills_dir.join(format!(".staging-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&staging.0);
    std::fs::create_dir_all(&staging.0).with_context(|| staging.0.display().to_string())?;
    let root = bundle::unpack_rooted(&fetched.bundle, &staging.0, &LIMITS, "SKILL.md")?;
    let (skill, _) = read_skill(&root, SkillSource::Installed).context("refusing the bundle")?;
    let name = skill.name.clone();

    let mut lock = Lock::load(&ctx.home)?;
    let signed_by = signer.as_ref().map(ToString::to_string);
    if let Some(prev) = lock.skills.get(&name) {
        if prev.digest == digest {
            println!("skill {name} is already installed from this bundle ({digest}); nothing to do");
            return Ok(ExitCode::SUCCESS);
        }
        let key = |s: &Option<String>| s.as_ref().map(|s| s.split_whitespace().next().unwrap_or_default().to_string());
        if key(&prev.signer) != key(&signed_by) && !flags.accept_publisher {
            bail!(
                "skill {name} is installed from publisher {}, and this bundle comes from {}: install it anyway with --accept-publisher",
                prev.signer.as_deref().unwrap_or("nobody (unsigned)"),
                signed_by.as_deref().unwrap_or("nobody (unsigned)")
            );
        }
    }

    // What it expects, then the user's yes. Every field is the bundle's own text: one line
    // each, its controls shown escaped.
    let one = |text: &str| visible(text, usize::MAX);
    let version = skill.version.as_deref().map(|v| format!(" {}", one(v))).unwrap_or_default();
    eprintln!("skill {}{version}: {}", one(&name), one(&skill.description));
    eprintln!(
        "  from:      {} ({})",
        one(&fetched.source.to_string()),
        signed_by.as_deref().map_or("unsigned".into(), |s| format!("signed by {}", one(s)))
    );
    eprintln!("  digest:    {digest}");
    let list = |items: &[String]| if items.is_empty() { "none".to_string() } else { one(&items.join(", ")) };
    eprintln!("  tools:     {}", list(&skill.requires_tools));
    eprintln!("  toolsets:  {}", list(&skill.requires_toolsets));
    let files = skill.files();
    let scripts: Vec<String> = files.iter().filter(|f| f.starts_with("scripts/")).cloned().collect();
    eprintln!("  scripts:   {} (they run only through the agent's tools, with their approvals)", list(&scripts));
    let commands = shown_commands(&skill.body);
    if !commands.is_empty() {
        eprintln!("  commands its text shows:");
        for c in commands.iter().take(12) {
            eprintln!("    {}", one(c));
        }
        if commands.len() > 12 {
            eprintln!(
                "    … and {} more (read it with `talaria skills show {name}` once installed)",
                commands.len() - 12
            );
        }
    }
    if !flags.yes {
        if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
            bail!("nothing was installed: nobody here can say yes; pass --yes to install {name}");
        }
        if !matches!(crate::market::ask("Install it? [y/N] ")?.as_str(), "y" | "yes") {
            println!("not installed");
            return Ok(ExitCode::FAILURE);
        }
    }

    // Place it: the new files in, the lockfile switched, the old files out.
    let dir = installed::skill_dir(&ctx.home, &name);
    let old = staging.0.join("replaced");
    if dir.exists() {
        std::fs::rename(&dir, &old).with_context(|| dir.display().to_string())?;
    }
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent).with_context(|| parent.display().to_string())?;
    }
    std::fs::rename(&root, &dir).with_context(|| dir.display().to_string())?;
    let entry = Entry {
        version: skill.version.clone(),
        source: fetched.source.clone(),
        digest: digest.clone(),
        signer: signed_by.clone(),
        installed: jiff::Timestamp::now().to_string(),
        files: installed::hash_files(&dir)?,
    };
    lock.skills.insert(name.clone(), entry);
    lock.save(&ctx.home)?;
    println!(
        "installed skill {name}{version} ({}) into {}",
        signed_by.map_or("unsigned".into(), |s| format!("signed by {s}")),
        dir.display()
    );
    let found = skills::discover(&ctx.home, &ctx.workspace, &talaria_core::project_skills(&ctx.home, &ctx.workspace));
    if let Some(other) = found.skills.iter().find(|s| s.name == name && s.source != SkillSource::Installed) {
        ui::warn(&format!(
            "your {} skill {name} ({}) replaces the installed one of that name",
            other.source.name(),
            other.dir.as_ref().map(|d| d.display().to_string()).unwrap_or_default()
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// Remove the installed skill `name`; whether there was one.
///
/// # Errors
/// Its files or the lockfile cannot be changed.
pub fn uninstall(home: &Path, name: &str) -> anyhow::Result<Option<Entry>> {
    let mut lock = Lock::load(home)?;
    let Some(entry) = lock.skills.remove(name) else { return Ok(None) };
    lock.save(home)?;
    let dir = installed::skill_dir(home, name);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| dir.display().to_string())?;
    }
    Ok(Some(entry))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_come_from_shell_blocks_only() {
        let body = "Intro `not this`\n```bash\n# comment\n$ make ship\ncurl -s x\n```\n```python\nprint(1)\n```\n";
        assert_eq!(shown_commands(body), ["make ship", "curl -s x"]);
    }
}
