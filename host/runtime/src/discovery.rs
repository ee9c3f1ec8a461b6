//! Finding plugins: bundled (in the binary), user (`$TALARIA_HOME/plugins`), project
//! (`<workspace>/.talaria/plugins`, only when the user trusts the project). A later scope
//! replaces an earlier plugin of the same name. Nothing here compiles anything: a broken plugin
//! becomes a [`Problem`] and the others load.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::grant::{GrantFile, Scope};
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
            }),
            Err(err) => problems.push(Problem { plugin: None, location: "bundled".into(), message: err.message }),
        }
    }
    scan_dir(&home.join("plugins"), Scope::User, &mut all, &mut problems);

    let mut untrusted_project = None;
    let project_dir = project_plugin_dir(workspace);
    if project_dir.is_dir() {
        let root = workspace.canonicalize().unwrap_or_else(|_| workspace.to_path_buf());
        if grants.is_trusted(&root) {
            scan_dir(&project_dir, Scope::Project(root), &mut all, &mut problems);
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

/// Each subdirectory of `dir` holding a plugin.toml is a plugin.
fn scan_dir(dir: &Path, scope: Scope, out: &mut Vec<Found>, problems: &mut Vec<Problem>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut dirs: Vec<PathBuf> = entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
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
        out.push(Found { manifest, scope: scope.clone(), location, source: WasmSource::File(wasm) });
    }
}
