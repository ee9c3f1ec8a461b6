//! `talaria plugin dev [DIR]`: the author's loop. Build the project, run its
//! `plugin-tests.toml`, install it for this user, and tell running `talaria chat` sessions and
//! gateways to reload their plugins; then watch the sources and do it again on every save.
//!
//! - The install is a development one: `plugin.toml` and the component are copied to
//!   `$TALARIA_HOME/plugins/NAME/`, granted what the manifest requests (printed), with no
//!   lockfile entry. A plugin of that name installed from a bundle or registry is left alone:
//!   remove it first.
//! - Running hosts compare [`talaria_runtime::CHANGED_STAMP`] before each turn; when it moved
//!   they make their plugin runtime again, so the next model call and tool call use the new
//!   component. A changed tool list or schema reaches the model in the next session (`/new`).
//! - A failed build or failing test installs nothing: the running sessions keep the last good
//!   component (`--skip-tests` installs after a good build whatever the tests say).
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
use talaria_runtime::{GrantFile, Lockfile, Manifest, Scope};

use crate::{Lang, Place, ui};

/// How often the sources are looked at.
const POLL: Duration = Duration::from_millis(500);
/// Directories that hold what builds make, never sources.
const SKIPPED: &[&str] = &["target", "node_modules", "dist", "__pycache__", "wit_world"];
/// Files the toolchains write during a build.
const WRITTEN_BY_BUILDS: &[&str] = &["Cargo.lock", "package-lock.json"];

/// What `plugin dev` does each round.
#[derive(Debug, Clone, Copy)]
pub struct DevOptions {
    /// Install after a good build even when tests fail.
    pub skip_tests: bool,
    /// One round, then stop (for scripts and tests): the exit code says whether it installed.
    pub once: bool,
}

/// Run the loop on the project in `dir` (relative to the workspace).
///
/// # Errors
/// `dir` is not a plugin project, or a plugin of its name is installed from elsewhere.
pub async fn run(ctx: &Place<'_>, dir: &Path, lang: Option<Lang>, options: DevOptions) -> anyhow::Result<ExitCode> {
    let dir = ctx.workspace.join(dir);
    let dir = dir.canonicalize().with_context(|| format!("cannot open {}", dir.display()))?;
    let lang = match lang {
        Some(l) => l,
        None => crate::detect(&dir)?,
    };
    let manifest = Manifest::load(&dir.join("plugin.toml"))?;
    check_not_installed_elsewhere(ctx.home, &manifest.name, &dir)?;
    let mut seen = sources(&dir, &manifest.wasm);
    loop {
        let installed = round(ctx, &dir, lang, options).await;
        if options.once {
            return Ok(if installed { ExitCode::SUCCESS } else { ExitCode::FAILURE });
        }
        anstream::eprintln!("{} for changes in {} (Ctrl-C stops)", "watching".cyan().bold(), dir.display());
        loop {
            tokio::time::sleep(POLL).await;
            if sources(&dir, &manifest.wasm) != seen {
                // An editor may write in several steps: let it finish.
                tokio::time::sleep(POLL).await;
                let now = sources(&dir, &manifest.wasm);
                let file = first_change(&seen, &now).unwrap_or_default();
                anstream::eprintln!("{} {file}", "changed".cyan().bold());
                seen = now;
                break;
            }
        }
    }
}

/// Build, test, install, signal. Whether it installed.
async fn round(ctx: &Place<'_>, dir: &Path, lang: Lang, options: DevOptions) -> bool {
    let built = {
        let dir = dir.to_path_buf();
        tokio::task::spawn_blocking(move || crate::build(&dir, lang, true)).await
    };
    match built {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            ui::error(&format!("{e:#}"));
            ui::note("not installed: the running sessions keep the last good build");
            return false;
        }
        Err(e) => {
            ui::error(&format!("the build stopped: {e}"));
            return false;
        }
    }
    match crate::plugin_test::run(ctx, dir, false).await {
        Ok(code) if code == ExitCode::SUCCESS => {}
        Ok(_) if options.skip_tests => ui::warn("tests failed; installing anyway (--skip-tests)"),
        Ok(_) => {
            ui::note("not installed: fix the failing tests (or pass --skip-tests)");
            return false;
        }
        Err(e) => {
            ui::error(&format!("{e:#}"));
            return false;
        }
    }
    match install(ctx.home, dir) {
        Ok(line) => {
            anstream::eprintln!("{} {line}", "installed".green().bold());
            true
        }
        Err(e) => {
            ui::error(&format!("{e:#}"));
            false
        }
    }
}

/// A plugin of this name installed from a bundle or registry must not be overwritten. One
/// installed from this very project (`talaria plugins install ./`) becomes the development
/// install: its lockfile entry goes.
fn check_not_installed_elsewhere(home: &Path, name: &str, project: &Path) -> anyhow::Result<()> {
    let Some((_, lock_path)) = talaria_runtime::scope_paths(home, &Scope::User) else { return Ok(()) };
    let mut lock = Lockfile::load(&lock_path).map_err(anyhow::Error::msg)?;
    if let Some(entry) = lock.get(name) {
        let from_here = Path::new(&entry.source).canonicalize().is_ok_and(|source| source == project);
        if from_here {
            lock.plugins.remove(name);
            lock.save(&lock_path).map_err(anyhow::Error::msg)?;
            ui::note(&format!("`{name}` was installed from this project: it is now its development install"));
            return Ok(());
        }
        bail!(
            "a plugin named `{name}` is installed from {} ({}): `talaria plugin dev` would replace it. Remove it first (`talaria plugins remove {name}`), or rename this project",
            entry.source,
            lock_path.display()
        );
    }
    Ok(())
}

/// Copy the project's manifest and component into the user's plugins, grant what the manifest
/// requests, and mark the plugins changed. The line to print.
fn install(home: &Path, dir: &Path) -> anyhow::Result<String> {
    let manifest = Manifest::load(&dir.join("plugin.toml"))?;
    check_not_installed_elsewhere(home, &manifest.name, dir)?;
    let target = home.join("plugins").join(&manifest.name);
    std::fs::create_dir_all(&target).with_context(|| format!("cannot create {}", target.display()))?;
    let wasm = target.join(&manifest.wasm);
    if let Some(parent) = wasm.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    }
    // The component first, then the manifest, each replaced whole: a host reading them meanwhile
    // sees the old plugin or the new one.
    replace(&dir.join(&manifest.wasm), &wasm)?;
    replace(&dir.join("plugin.toml"), &target.join("plugin.toml"))?;
    let grants_path = home.join("grants.toml");
    let mut grants = GrantFile::load(&grants_path).map_err(anyhow::Error::msg)?;
    grants.record(&Scope::User, &manifest.name, &manifest.requests);
    grants.save(&grants_path).map_err(anyhow::Error::msg)?;
    talaria_runtime::mark_plugins_changed(home).context("cannot tell running sessions to reload")?;
    let granted: Vec<String> = manifest.requests.iter().map(ToString::to_string).collect();
    let granted = if granted.is_empty() { "nothing".to_string() } else { granted.join(", ") };
    Ok(format!(
        "{} {} into {} (granted: {granted}); running sessions reload it before their next turn",
        manifest.name,
        manifest.version,
        target.display()
    ))
}

/// Copy `from` over `to` through a temporary file beside it.
fn replace(from: &Path, to: &Path) -> anyhow::Result<()> {
    let tmp = to.with_extension("dev-tmp");
    std::fs::copy(from, &tmp).with_context(|| format!("cannot copy {} to {}", from.display(), tmp.display()))?;
    std::fs::rename(&tmp, to).with_context(|| format!("cannot replace {}", to.display()))?;
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
        check_not_installed_elsewhere(home.path(), "weather", &project).expect("nothing installed");
        let entry = |source: &str| talaria_runtime::LockEntry {
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
        let lock_path = home.path().join("plugins.lock");
        let mut lock = Lockfile::default();
        lock.plugins.insert("weather".into(), entry("oci://ghcr.io/x/weather:1.0.0"));
        lock.save(&lock_path).expect("save");
        let e = check_not_installed_elsewhere(home.path(), "weather", &project).expect_err("refused").to_string();
        assert!(e.starts_with("a plugin named `weather` is installed from oci://ghcr.io/x/weather:1.0.0"), "{e}");
        assert!(e.contains("`talaria plugins remove weather`"), "{e}");
        // Installed from this very project: taken over.
        lock.plugins.insert("weather".into(), entry(&project.display().to_string()));
        lock.save(&lock_path).expect("save");
        check_not_installed_elsewhere(home.path(), "weather", &project).expect("taken over");
        assert!(Lockfile::load(&lock_path).expect("load").get("weather").is_none());
    }
}
