//! `talaria plugin dev [DIR]`: the author's loop. Build the project (in the command sandbox),
//! run its `plugin-tests.toml`, install it for this user, and tell running `talaria chat`
//! sessions and gateways to reload their plugins; then watch the sources and do it again on
//! every save.
//!
//! - The install is an ordinary one, as `talaria plugins install DIR` makes it
//!   ([`talaria_core::market::install`]): in `plugins.lock`, from the project's directory, unsigned.
//!   So a plugin installed from this very project with `plugins install ./` simply gets the new
//!   build: it keeps its identity, and with it its key-value data, `$PLUGIN_DATA` and grants.
//!   A plugin of that name installed from anywhere else (a bundle, a registry, another
//!   directory), or placed by hand, is left alone: `plugin dev` refuses to start.
//! - **Consent.** The first install grants what the person confirms, as `plugins install` asks
//!   it ([`consent`]): on a terminal they are asked; otherwise `--yes` or `--grant CAP` must say
//!   so, or nothing is installed. Those flags answer for what plugin.toml requests when the
//!   command starts, never for more. A later round whose plugin.toml asks for more than was
//!   granted prints the capability diff and waits for the person's answer on a terminal;
//!   with nobody to ask it installs nothing (`--once` exits 1). Consent comes before the tests,
//!   which run with the plugin granted only what was consented to.
//! - Running hosts compare [`talaria_core::runtime::CHANGED_STAMP`] before each turn; when it moved
//!   they make their plugin runtime again, so the next model call and tool call use the new
//!   component. A changed tool list or schema reaches the model in the next session (`/new`).
//! - A failed build, a failing test or a refusal installs nothing and changes nothing: what was
//!   installed stays as it was, and running sessions keep it (`--skip-tests` installs after a
//!   good build whatever the tests say). What is installed is exactly the build that was
//!   consented to and tested: if the project changes during a round, that round installs
//!   nothing and the next one starts.
//! - Sources are polled twice a second: every file under the project except build outputs
//!   (`target/`, `node_modules/`, `dist/`, `__pycache__/`, `wit_world/`, hidden directories,
//!   `Cargo.lock`, `package-lock.json`) and the component itself. An edit made during a round
//!   starts the next one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, bail};
use owo_colors::OwoColorize as _;
use talaria_core::market::install::consent::{self, GrantFlags, Nobody};
use talaria_core::market::install::{self, Consent, Target, caps_list};
use talaria_core::market::source::Fetched;
use talaria_core::runtime::{Capability, Manifest, Scope};

use crate::build::{BuildOptions, Confine};
use crate::{Lang, Place, ui};

/// How often the sources are looked at.
const POLL: Duration = Duration::from_millis(500);
/// Directories that hold what builds make, never sources.
const SKIPPED: &[&str] = &["target", "node_modules", "dist", "__pycache__", "wit_world"];
/// Files the toolchains write during a build.
const WRITTEN_BY_BUILDS: &[&str] = &["Cargo.lock", "package-lock.json"];

/// What `plugin dev` does each round.
#[derive(Debug, Clone, Default)]
pub struct DevOptions {
    /// Install after a good build even when tests fail.
    pub skip_tests: bool,
    /// One round, then stop (for scripts and tests): the exit code says whether it installed.
    pub once: bool,
    /// `--yes` / `--grant CAP`: consent to (part of) what plugin.toml requests at the start.
    pub grants: GrantFlags,
    /// Where the builds run.
    pub confine: Confine,
}

/// The loop's state: the project, and the consent given on the command line.
struct Dev<'a> {
    ctx: &'a Place<'a>,
    dir: PathBuf,
    lang: Lang,
    options: DevOptions,
    target: Target,
    /// Capabilities the command line consented to (what plugin.toml requested at the start,
    /// for `--yes`).
    preapproved: Vec<Capability>,
}

/// Run the loop on the project in `dir` (relative to the workspace).
///
/// # Errors
/// `dir` is not a plugin project, a plugin of its name is installed from elsewhere, or a
/// `--grant` names what plugin.toml does not request.
pub async fn run(ctx: &Place<'_>, dir: &Path, lang: Option<Lang>, options: DevOptions) -> anyhow::Result<ExitCode> {
    let dir = ctx.workspace.join(dir);
    let dir = dir.canonicalize().with_context(|| format!("cannot open {}", dir.display()))?;
    let lang = match lang {
        Some(l) => l,
        None => crate::detect(&dir)?,
    };
    let manifest = Manifest::load(&dir.join("plugin.toml"))?;
    let target = Target::new(ctx.home, Scope::User);
    check_not_installed_elsewhere(&target, &manifest.name, &dir)?;
    let preapproved = preapproved(&manifest, &options.grants)?;
    let once = options.once;
    let dev = Dev { ctx, dir, lang, options, target, preapproved };
    let mut seen = sources(&dev.dir, &manifest.wasm);
    loop {
        let installed = dev.round().await;
        if once {
            return Ok(if installed { ExitCode::SUCCESS } else { ExitCode::FAILURE });
        }
        anstream::eprintln!("{} for changes in {} (Ctrl-C stops)", "watching".cyan().bold(), dev.dir.display());
        loop {
            tokio::time::sleep(POLL).await;
            if sources(&dev.dir, &manifest.wasm) != seen {
                // An editor may write in several steps: let it finish.
                tokio::time::sleep(POLL).await;
                let now = sources(&dev.dir, &manifest.wasm);
                let file = first_change(&seen, &now).unwrap_or_default();
                anstream::eprintln!("{} {file}", "changed".cyan().bold());
                seen = now;
                break;
            }
        }
    }
}

/// The capabilities `--yes` and `--grant` consent to, read against plugin.toml as it is now.
fn preapproved(manifest: &Manifest, flags: &GrantFlags) -> anyhow::Result<Vec<Capability>> {
    if flags.yes || flags.grants.iter().any(|g| g == "all") {
        return Ok(manifest.requests.clone());
    }
    let mut out = Vec::new();
    for g in &flags.grants {
        let cap: Capability = g.parse()?;
        if !manifest.requests.iter().any(|r| r.covers(&cap)) {
            bail!(
                "--grant {cap}: {} does not request it (it requests: {}); a grant can only allow what plugin.toml asks for",
                manifest.name,
                caps_list(&manifest.requests)
            );
        }
        out.push(cap);
    }
    Ok(out)
}

/// A round stopped short of installing, and said why; nothing changed.
struct Stopped;

impl Dev<'_> {
    /// Build, consent, test, install, signal. Whether it installed.
    async fn round(&self) -> bool {
        match self.try_round().await {
            Ok(line) => {
                anstream::eprintln!("{} {line}", "installed".green().bold());
                true
            }
            Err(Stopped) => {
                ui::note("not installed: what was installed stays as it was, and running sessions keep it");
                false
            }
        }
    }

    async fn try_round(&self) -> Result<String, Stopped> {
        let fail = |e: anyhow::Error| {
            ui::error(&format!("{e:#}"));
            Stopped
        };
        let built = {
            let (dir, lang) = (self.dir.clone(), self.lang);
            let options = BuildOptions { release: true, target_dir: None, confine: self.options.confine.clone() };
            tokio::task::spawn_blocking(move || crate::build::build_with(&dir, lang, &options)).await
        };
        match built {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(fail(e)),
            Err(e) => return Err(fail(anyhow::anyhow!("the build stopped: {e}"))),
        }
        // What is consented to, tested and installed: this bundle, packed once.
        let (bundle, manifest) = talaria_core::market::bundle::pack(&self.dir).map_err(|e| fail(e.into()))?;
        let digest = talaria_core::market::bundle::digest(&bundle);
        let source = self.dir.display().to_string();
        // Installed from elsewhere since the loop started (or plugin.toml renamed it)?
        check_not_installed_elsewhere(&self.target, &manifest.name, &self.dir).map_err(fail)?;
        let consent = install::pending(&self.target, &manifest, &source).map_err(|e| fail(e.into()))?;
        let answered = self.consent(&consent).map_err(fail)?;
        let granted: Vec<Capability> = consent.kept.iter().chain(&answered).cloned().collect();

        let tested = crate::plugin_test::run_granted(self.ctx, &self.dir, false, Some(&granted)).await;
        match tested {
            Ok(code) if code == ExitCode::SUCCESS => {}
            Ok(_) if self.options.skip_tests => ui::warn("tests failed; installing anyway (--skip-tests)"),
            Ok(_) => {
                ui::error("the tests failed: fix them (or pass --skip-tests)");
                return Err(Stopped);
            }
            Err(e) => return Err(fail(e)),
        }
        match talaria_core::market::bundle::pack(&self.dir) {
            Ok((again, _)) if talaria_core::market::bundle::digest(&again) == digest => {}
            _ => {
                return Err(fail(anyhow::anyhow!(
                    "the project changed during this round (plugin.toml or the component): the next round builds it again"
                )));
            }
        }
        let fetched = Fetched { bundle, signature: None, pinned_digest: None, source, listed: None, local: true };
        let report = self.install(&fetched, &consent, &answered).map_err(fail)?;
        if let Err(e) = talaria_core::runtime::mark_plugins_changed(self.ctx.home) {
            ui::warn(&format!("cannot tell running sessions to reload: {e}"));
        }
        if !report.not_granted.is_empty() {
            ui::warn(&format!(
                "not granted: {} — the plugin runs without them; grant later with `talaria plugins grant {} CAP`",
                caps_list(&report.not_granted),
                report.name
            ));
        }
        Ok(format!(
            "{} {} from {} (granted: {}); running sessions reload it before their next turn",
            report.name,
            report.version,
            self.dir.display(),
            caps_list(&report.granted)
        ))
    }

    /// Which of the capabilities `consent` asks for anew to grant: those the command line
    /// consented to, and the person's answer for the rest (none asked: a refusal).
    fn consent(&self, consent: &Consent) -> anyhow::Result<Vec<Capability>> {
        let (mut granted, rest): (Vec<Capability>, Vec<Capability>) =
            consent.new.iter().cloned().partition(|c| self.preapproved.iter().any(|p| p.covers(c)));
        if rest.is_empty() {
            return Ok(granted);
        }
        let widening = consent.previous.is_some() || !granted.is_empty();
        if widening {
            ui::warn(&format!(
                "plugin.toml asks for more than `{}` was granted: {}",
                consent.name,
                if consent::interactive() { "answer to go on" } else { "not installed" }
            ));
        }
        let rest = Consent { new: rest, ..consent.clone() };
        let grant_flags: Vec<String> = rest.new.iter().map(|c| format!("--grant {c}")).collect();
        let how = if self.options.once {
            format!(
                "nobody is here to consent (no terminal): run `talaria plugin dev --once` with {} (or --yes to grant everything plugin.toml requests), or change plugin.toml back",
                grant_flags.join(" ")
            )
        } else {
            format!(
                "nobody is here to consent (no terminal): the loop waits for plugin.toml to change; or restart it with {} (or --yes)",
                grant_flags.join(" ")
            )
        };
        let answered = consent::decide(&rest, &GrantFlags::default(), &Nobody::Refuse(how))?;
        granted.extend(answered);
        Ok(granted)
    }

    /// Install `fetched` into the user's plugins, granting what was kept and `answered`.
    fn install(&self, fetched: &Fetched, asked: &Consent, answered: &[Capability]) -> anyhow::Result<install::Report> {
        let runtime = talaria_core::unattended_runtime(self.ctx.home, self.ctx.workspace, self.ctx.config, false)?;
        let check = |manifest: &Manifest, wasm: &[u8]| runtime.check_component(manifest, wasm).map(drop);
        let bundled_names = talaria_core::bundled()
            .iter()
            .filter_map(|b| Manifest::parse(b.manifest, Path::new("bundled plugin.toml")).ok())
            .map(|m| m.name)
            .collect();
        let options = install::Options { allow_unsigned: true, bundled_names, ..install::Options::default() };
        let mut decide = |consent: &Consent| {
            // The install asks again under the scope's lock: it must ask nothing else.
            if consent.new.iter().any(|c| !asked.new.contains(c)) {
                return Err(consent::ConsentError::Refused(format!(
                    "`{}` changed what it asks for during this round; the next round asks again",
                    consent.name
                )));
            }
            Ok(answered.iter().filter(|c| consent.new.iter().any(|n| n.covers(c))).cloned().collect())
        };
        let report = install::install(self.ctx.home, &self.target, fetched, &options, &check, &mut decide, &|_| {})?;
        for note in &report.notes {
            tracing::debug!("{note}");
        }
        Ok(report)
    }
}

/// A plugin of this name installed from a bundle, a registry or another directory, or placed
/// by hand, must not be replaced. One installed from this very project (`talaria plugins
/// install ./`) is the one the loop updates, keeping its grants and data.
fn check_not_installed_elsewhere(target: &Target, name: &str, project: &Path) -> anyhow::Result<()> {
    let lock = target.lockfile()?;
    if let Some(entry) = lock.get(name) {
        let from_here = Path::new(&entry.source).canonicalize().is_ok_and(|source| source == project);
        if from_here {
            return Ok(());
        }
        bail!(
            "a plugin named `{name}` is installed from {} ({}): `talaria plugin dev` would replace it. Remove it first (`talaria plugins remove {name}`), or rename this project",
            entry.source,
            target.lock_path.display()
        );
    }
    let by_hand = target.plugins_dir.join(name);
    if by_hand.join("plugin.toml").exists() {
        bail!(
            "{} holds a plugin `{name}` placed by hand (earlier versions of `talaria plugin dev` installed that way): move it away first. \
             Its key-value data and $PLUGIN_DATA belong to `user/{name}@local` and do not carry over to the new install",
            by_hand.display()
        );
    }
    Ok(())
}

/// Every source file under `dir` with its size and modification time.
fn sources(dir: &Path, wasm: &str) -> BTreeMap<PathBuf, (u64, Option<SystemTime>)> {
    let mut out = BTreeMap::new();
    let output = dir.join(wasm);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else { continue };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                if !name.starts_with('.') && !SKIPPED.contains(&name.as_ref()) {
                    stack.push(path);
                }
            } else if path != output && !name.ends_with(".dev-tmp") && !WRITTEN_BY_BUILDS.contains(&name.as_ref()) {
                out.insert(path, (meta.len(), meta.modified().ok()));
            }
        }
    }
    out
}

/// The first file that differs between two looks, relative to nothing in particular.
fn first_change(
    before: &BTreeMap<PathBuf, (u64, Option<SystemTime>)>,
    after: &BTreeMap<PathBuf, (u64, Option<SystemTime>)>,
) -> Option<String> {
    after
        .iter()
        .find(|(path, stamp)| before.get(*path) != Some(stamp))
        .map(|(path, _)| path.display().to_string())
        .or_else(|| before.keys().find(|p| !after.contains_key(*p)).map(|p| format!("{} (removed)", p.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_skip_build_outputs_and_see_edits() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        for d in ["src", "target/wasm32-wasip2", "node_modules/x", ".git", "wit/deps"] {
            std::fs::create_dir_all(root.join(d)).expect("mkdir");
        }
        for f in [
            "src/lib.rs",
            "target/wasm32-wasip2/out.wasm",
            "node_modules/x/i.js",
            ".git/HEAD",
            "wit/deps/a.wit",
            "plugin.wasm",
            "plugin.toml",
        ] {
            std::fs::write(root.join(f), "x").expect("write");
        }
        let seen = sources(root, "plugin.wasm");
        let names: Vec<String> =
            seen.keys().map(|p| p.strip_prefix(root).expect("inside").display().to_string()).collect();
        assert_eq!(names, ["plugin.toml", "src/lib.rs", "wit/deps/a.wit"]);
        std::fs::write(root.join("src/lib.rs"), "xy").expect("edit");
        let now = sources(root, "plugin.wasm");
        assert_ne!(seen, now);
        assert_eq!(first_change(&seen, &now), Some(root.join("src/lib.rs").display().to_string()));
        std::fs::remove_file(root.join("plugin.toml")).expect("rm");
        let gone = sources(root, "plugin.wasm");
        assert_eq!(first_change(&now, &gone), Some(format!("{} (removed)", root.join("plugin.toml").display())));
    }

    #[test]
    fn a_plugin_installed_from_elsewhere_is_left_alone() {
        let home = tempfile::tempdir().expect("home");
        let project = tempfile::tempdir().expect("project");
        let project = project.path().canonicalize().expect("canonical");
        let target = Target::new(home.path(), Scope::User);
        check_not_installed_elsewhere(&target, "weather", &project).expect("nothing installed");
        let entry = |source: &str| talaria_core::runtime::LockEntry {
            version: "1.0.0".parse().expect("version"),
            api: "0.2.0".parse().expect("api"),
            source: source.into(),
            digest: "sha256:00".into(),
            wasm_sha256: "11".into(),
            manifest_sha256: "22".into(),
            signer: None,
            dir: "weather".into(),
            granted: Vec::new(),
            installed: "2026-11-26T10:00:00Z".into(),
            identity: None,
            previous: None,
        };
        let mut lock = talaria_core::runtime::Lockfile::default();
        lock.plugins.insert("weather".into(), entry("oci://ghcr.io/x/weather:1.0.0"));
        lock.save(&target.lock_path).expect("save");
        let e = check_not_installed_elsewhere(&target, "weather", &project).expect_err("refused").to_string();
        assert!(e.starts_with("a plugin named `weather` is installed from oci://ghcr.io/x/weather:1.0.0"), "{e}");
        assert!(e.contains("`talaria plugins remove weather`"), "{e}");
        // Installed from this very project: the loop updates it, and the lockfile keeps it.
        lock.plugins.insert("weather".into(), entry(&project.display().to_string()));
        lock.save(&target.lock_path).expect("save");
        check_not_installed_elsewhere(&target, "weather", &project).expect("this project's");
        assert!(target.lockfile().expect("load").get("weather").is_some());
        // Placed by hand (an earlier dev install): refused, saying its data does not carry over.
        std::fs::create_dir_all(target.plugins_dir.join("notes")).expect("mkdir");
        std::fs::write(target.plugins_dir.join("notes/plugin.toml"), "").expect("write");
        let e = check_not_installed_elsewhere(&target, "notes", &project).expect_err("by hand").to_string();
        assert!(e.contains("placed by hand") && e.contains("user/notes@local"), "{e}");
    }

    #[test]
    fn flags_consent_only_to_what_plugin_toml_requests_at_the_start() {
        let text = "name = \"p\"\nversion = \"0.1.0\"\napi = \"0.2.0\"\n[capabilities]\nkv = true\nprocess = true\n";
        let manifest = Manifest::parse(text, Path::new("plugin.toml")).expect("manifest");
        let yes = GrantFlags { yes: true, grants: Vec::new() };
        assert_eq!(preapproved(&manifest, &yes).expect("yes"), manifest.requests);
        let kv = GrantFlags { yes: false, grants: vec!["kv".into()] };
        assert_eq!(preapproved(&manifest, &kv).expect("kv"), vec![Capability::Kv]);
        let wide = GrantFlags { yes: false, grants: vec!["fs:rw:/".into()] };
        let e = preapproved(&manifest, &wide).expect_err("not requested").to_string();
        assert!(e.starts_with("--grant fs:rw:/: p does not request it"), "{e}");
    }
}
