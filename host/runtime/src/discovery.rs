//! Finding plugins: bundled (in the binary), user (`$TALARIA_HOME/plugins`), project
//! (`<workspace>/.talaria/plugins`, only when the user trusts the project). A later scope
//! replaces an earlier plugin of the same name. Nothing here compiles anything: a broken plugin
//! becomes a [`Problem`] and the others load.
//!
//! In the user and project scopes, plugins installed by `talaria plugins install` are found
//! through the scope's lockfile (see [`crate::lock`]), which names each one's directory and pins
//! its digests; every other subdirectory holding a plugin.toml is a plugin placed by hand.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::grant::{Capability, GrantFile, Scope};
use crate::lock::{Lockfile, scope_paths};
use crate::manifest::Manifest;

/// A plugin compiled into the binary.
#[derive(Debug, Clone, Copy)]
pub struct Embedded {
    pub manifest: &'static str,
    pub wasm: &'static [u8],
    /// sha256 of `wasm`, hex.
    pub sha256: &'static str,
}

/// Where a plugin's component is.
#[derive(Debug, Clone)]
pub enum WasmSource {
    Embedded { wasm: &'static [u8], sha256: &'static str },
    File(PathBuf),
}

/// A plugin that could not be used, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The plugin's name, when known.
    pub plugin: Option<String>,
    /// What the message is about: a file, a directory, or `bundled:NAME`.
    pub location: String,
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}

/// A plugin hidden by a later scope's plugin of the same name.
#[derive(Debug, Clone)]
pub struct Shadowed {
    pub name: String,
    pub hidden: Scope,
    pub hidden_location: String,
    pub by: Scope,
}

/// A plugin found on disk or in the binary, before compiling.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    pub manifest: Manifest,
    pub scope: Scope,
    pub location: String,
    pub source: WasmSource,
    /// What its scope's lockfile says, for an installed plugin.
    pub installed: Option<Installed>,
}

/// An installed plugin's lockfile entry, as far as loading it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// The component must still hash to this (hex sha256).
    pub wasm_sha256: String,
    pub granted: Vec<Capability>,
    pub source: String,
    pub signer: Option<String>,
}

/// Everything discovery saw.
pub(crate) struct Discovery {
    pub found: Vec<Found>,
    pub shadowed: Vec<Shadowed>,
    pub problems: Vec<Problem>,
    /// A project plugin directory that was skipped because the project is not trusted.
    pub untrusted_project: Option<PathBuf>,
}

/// The project plugin directory of a workspace.
pub fn project_plugin_dir(workspace: &Path) -> PathBuf {
    workspace.join(".talaria").join("plugins")
}

pub(crate) fn discover(embedded: &[Embedded], home: &Path, workspace: &Path, grants: &GrantFile) -> Discovery {
    let mut problems = Vec::new();
    let mut all = Vec::new();
    for e in embedded {
        match Manifest::parse(e.manifest, Path::new("bundled plugin.toml")) {
            Ok(manifest) => all.push(Found {
                location: format!("bundled:{}", manifest.name),
                manifest,
                scope: Scope::Bundled,
                source: WasmSource::Embedded { wasm: e.wasm, sha256: e.sha256 },
                installed: None,
            }),
            Err(err) => problems.push(Problem { plugin: None, location: "bundled".into(), message: err.message }),
        }
    }
    scan_scope(home, Scope::User, &mut all, &mut problems);

    let mut untrusted_project = None;
    let project_dir = project_plugin_dir(workspace);
    if project_dir.is_dir() {
        let root = workspace.canonicalize().unwrap_or_else(|_| workspace.to_path_buf());
        if grants.is_trusted(&root) {
            scan_scope(home, Scope::Project(root), &mut all, &mut problems);
        } else {
            untrusted_project = Some(project_dir);
        }
    }

    // Later scopes replace earlier ones by name.
    let mut by_name: BTreeMap<String, usize> = BTreeMap::new();
    let mut shadowed = Vec::new();
    let mut active: Vec<Option<Found>> = Vec::new();
    for found in all {
        let name = found.manifest.name.clone();
        if let Some(&i) = by_name.get(&name)
            && let Some(old) = active[i].take()
        {
            shadowed.push(Shadowed {
                name: name.clone(),
                hidden: old.scope,
                hidden_location: old.location,
                by: found.scope.clone(),
            });
        }
        by_name.insert(name, active.len());
        active.push(Some(found));
    }
    Discovery { found: active.into_iter().flatten().collect(), shadowed, problems, untrusted_project }
}

/// A scope's installed plugins (from its lockfile), then the ones placed by hand.
fn scan_scope(home: &Path, scope: Scope, out: &mut Vec<Found>, problems: &mut Vec<Problem>) {
    let Some((dir, lock_path)) = scope_paths(home, &scope) else { return };
    let lock = Lockfile::load(&lock_path).unwrap_or_else(|message| {
        problems.push(Problem {
            plugin: None,
            location: lock_path.display().to_string(),
            message: format!("{message}; its installed plugins are not loaded"),
        });
        Lockfile::default()
    });
    for (name, entry) in &lock.plugins {
        match load_installed(&dir, name, entry) {
            Ok(found) => out.push(Found { scope: scope.clone(), ..found }),
            Err(message) => problems.push(Problem {
                plugin: Some(name.clone()),
                location: lock_path.display().to_string(),
                message: format!("installed plugin '{name}': {message}"),
            }),
        }
    }
    scan_dir(&dir, &scope, &lock, out, problems);
}

/// An installed plugin, checked against its lockfile entry.
fn load_installed(plugins_dir: &Path, name: &str, entry: &crate::lock::LockEntry) -> Result<Found, String> {
    let plugin_dir = entry.resolve_dir(plugins_dir)?;
    let manifest_path = plugin_dir.join("plugin.toml");
    let text = std::fs::read(&manifest_path).map_err(|e| format!("{}: {e}", manifest_path.display()))?;
    let reinstall = crate::lock::reinstall_hint(&entry.source);
    if crate::fsutil::sha256_hex(&text) != entry.manifest_sha256 {
        return Err(format!("{} changed since it was installed; {reinstall}", manifest_path.display()));
    }
    let text = String::from_utf8(text).map_err(|_| format!("{} is not UTF-8", manifest_path.display()))?;
    let manifest = Manifest::parse(&text, &manifest_path).map_err(|e| e.message)?;
    if manifest.name != name {
        return Err(format!("its plugin.toml names `{}`", manifest.name));
    }
    let wasm = plugin_dir.join(&manifest.wasm);
    if !wasm.is_file() {
        return Err(format!("{} is missing; {reinstall}", wasm.display()));
    }
    Ok(Found {
        manifest,
        scope: Scope::User,
        location: plugin_dir.display().to_string(),
        source: WasmSource::File(wasm),
        installed: Some(Installed {
            wasm_sha256: entry.wasm_sha256.clone(),
            granted: entry.granted_caps(),
            source: entry.source.clone(),
            signer: entry.signer.clone(),
        }),
    })
}

/// Each subdirectory of `dir` holding a plugin.toml is a plugin, except the directories of
/// installed plugins and hidden ones (an install's staging area).
fn scan_dir(dir: &Path, scope: &Scope, lock: &Lockfile, out: &mut Vec<Found>, problems: &mut Vec<Problem>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut dirs: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            !name.starts_with('.') && lock.get(&name).is_none()
        })
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    for plugin_dir in dirs {
        let manifest_path = plugin_dir.join("plugin.toml");
        let location = plugin_dir.display().to_string();
        if !manifest_path.is_file() {
            problems.push(Problem {
                plugin: None,
                location,
                message: "no plugin.toml in this plugin directory".into(),
            });
            continue;
        }
        let manifest = match Manifest::load(&manifest_path) {
            Ok(m) => m,
            Err(e) => {
                problems.push(Problem {
                    plugin: None,
                    location: manifest_path.display().to_string(),
                    message: e.message,
                });
                continue;
            }
        };
        let dir_name = plugin_dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if dir_name != manifest.name {
            problems.push(Problem {
                plugin: Some(manifest.name.clone()),
                location: manifest_path.display().to_string(),
                message: format!("field `name`: `{}` must match its directory name `{dir_name}`", manifest.name),
            });
            continue;
        }
        let wasm = plugin_dir.join(&manifest.wasm);
        if !wasm.is_file() {
            problems.push(Problem {
                plugin: Some(manifest.name.clone()),
                location: manifest_path.display().to_string(),
                message: format!("field `wasm`: {} does not exist", wasm.display()),
            });
            continue;
        }
        out.push(Found { manifest, scope: scope.clone(), location, source: WasmSource::File(wasm), installed: None });
    }
}
