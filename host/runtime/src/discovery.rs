//! Finding plugins: bundled (in the binary), user (`$TALARIA_HOME/plugins`), project
//! (`<workspace>/.talaria/plugins`, only when the user trusts the project). Nothing here compiles
//! anything: a broken plugin becomes a [`Problem`] and the others load.
//!
//! In the user and project scopes, plugins installed by `talaria plugins install` are found
//! through the scope's lockfile (see [`crate::lock`]), which names each one's directory and pins
//! its digests; every other subdirectory holding a plugin.toml is a plugin placed by hand.
//!
//! Invariants:
//! 1. A project's files are read beneath the project's own directory handle: a link leading out
//!    of the project is refused, never followed (the user's home is read as it is: links there
//!    are the user's own).
//! 2. A trusted project's plugins load only as the user reviewed them (see [`crate::trust`]): one
//!    that is new, or whose manifest, component or lockfile entry changed since `talaria trust`,
//!    is not loaded, and the problem says so.
//! 3. A later scope replaces an earlier plugin of the same name, except that a project plugin
//!    replaces a bundled or user plugin only when the user accepted exactly that at trust time.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use talaria_beneath::Root;

use crate::grant::{Capability, GrantFile, Scope};
use crate::lock::{LOCK_FILE, LockEntry, Lockfile};
use crate::manifest::Manifest;
use crate::pins::ProjectPins;

/// Largest plugin.toml or lockfile read.
const MAX_TOML_BYTES: u64 = 1024 * 1024;

/// A plugin compiled into the binary.
#[derive(Debug, Clone, Copy)]
pub struct Embedded {
    pub manifest: &'static str,
    pub wasm: &'static [u8],
    /// sha256 of `wasm`, hex.
    pub sha256: &'static str,
    /// The component compiled at build time, if it was.
    pub precompiled: Option<Precompiled>,
}

/// Native code of a component, compiled when the binary was built (part of the binary, so
/// trusted as its code is).
#[derive(Debug, Clone, Copy)]
pub struct Precompiled {
    pub code: &'static [u8],
    /// The fingerprint of the engine it was compiled for (`talaria_engine::fingerprint`).
    pub fingerprint: &'static str,
}

/// Where a plugin's component is.
#[derive(Debug, Clone)]
pub enum WasmSource {
    Embedded {
        wasm: &'static [u8],
        sha256: &'static str,
        precompiled: Option<Precompiled>,
    },
    /// A file of the user's (read as it is).
    File(PathBuf),
    /// A file of a project's, read beneath the plugin's directory handle.
    Beneath {
        dir: Arc<Root>,
        file: PathBuf,
    },
}

impl WasmSource {
    /// The component's bytes, from wherever they are.
    pub(crate) fn read(&self) -> std::io::Result<Vec<u8>> {
        match self {
            WasmSource::Embedded { wasm, .. } => Ok(wasm.to_vec()),
            WasmSource::File(path) => std::fs::read(path),
            WasmSource::Beneath { dir, file } => match dir.read(file, crate::MAX_COMPONENT_BYTES) {
                Ok(Some(bytes)) => Ok(bytes),
                Ok(None) => Err(std::io::Error::new(std::io::ErrorKind::NotFound, "no such file")),
                Err(e) => Err(std::io::Error::other(e.to_string())),
            },
        }
    }

    /// The component's path, if it is not embedded.
    pub(crate) fn path(&self) -> Option<PathBuf> {
        match self {
            WasmSource::Embedded { .. } => None,
            WasmSource::File(path) => Some(path.clone()),
            WasmSource::Beneath { dir, file } => Some(dir.path().join(file)),
        }
    }
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

/// What the component must still hash to, and what to say when it does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WasmPin {
    pub sha256: String,
    /// Ends the sentence "its component changed since ...": when and how to repair it.
    pub since: String,
}

/// A plugin found on disk or in the binary, before compiling.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    pub manifest: Manifest,
    /// sha256 (hex) of the plugin.toml as read.
    pub manifest_sha256: String,
    pub scope: Scope,
    pub location: String,
    pub source: WasmSource,
    /// What its scope's lockfile says, for an installed plugin.
    pub installed: Option<Installed>,
    /// The lockfile entry itself, for an installed plugin.
    pub lock_entry: Option<LockEntry>,
    /// What the component must hash to (an install's or a trust's pin).
    pub wasm_pin: Option<WasmPin>,
}

/// An installed plugin's lockfile entry, as far as loading it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// The component must still hash to this (hex sha256).
    pub wasm_sha256: String,
    pub granted: Vec<Capability>,
    pub source: String,
    pub signer: Option<String>,
    /// Who published it (see [`crate::identity`]).
    pub publisher: String,
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
    let mut all = bundled(embedded, &mut problems);
    scan_scope(home, &Scope::User, &mut all, &mut problems);

    let mut untrusted_project = None;
    let mut project = Vec::new();
    let project_dir = project_plugin_dir(workspace);
    let root = workspace.canonicalize().unwrap_or_else(|_| workspace.to_path_buf());
    if project_dir.is_dir() || project_dir.with_file_name(LOCK_FILE).is_file() {
        if grants.is_trusted(&root) {
            let scope = Scope::Project(root.clone());
            scan_scope(home, &scope, &mut project, &mut problems);
            let pins = grants.project_pins(&root);
            project.retain_mut(|found| match check_pin(found, pins, &root) {
                Ok(()) => true,
                Err(message) => {
                    problems.push(Problem {
                        plugin: Some(found.manifest.name.clone()),
                        location: found.location.clone(),
                        message,
                    });
                    false
                }
            });
        } else {
            untrusted_project = Some(project_dir);
        }
    }
    // A project plugin replaces a plugin of the user's only as the user accepted at trust time.
    for found in project {
        let name = &found.manifest.name;
        if let Some(earlier) = all.iter().rev().find(|f| &f.manifest.name == name) {
            let accepted =
                grants.project_pins(&root).and_then(|p| p.plugins.get(name)).and_then(|pin| pin.replaces.as_deref());
            if accepted != Some(earlier.scope.label()) {
                problems.push(Problem {
                    plugin: Some(name.clone()),
                    location: found.location.clone(),
                    message: format!(
                        "this project plugin would replace the {} plugin '{name}' ({}); it was not loaded, because you did not accept that when you trusted {} (review it with `talaria trust --replace {name}`)",
                        earlier.scope.label(),
                        earlier.location,
                        root.display()
                    ),
                });
                continue;
            }
        }
        all.push(found);
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

/// The plugins compiled into the binary.
pub(crate) fn bundled(embedded: &[Embedded], problems: &mut Vec<Problem>) -> Vec<Found> {
    let mut out = Vec::new();
    for e in embedded {
        match Manifest::parse(e.manifest, Path::new("bundled plugin.toml")) {
            Ok(manifest) => out.push(Found {
                location: format!("bundled:{}", manifest.name),
                manifest_sha256: crate::fsutil::sha256_hex(e.manifest.as_bytes()),
                manifest,
                scope: Scope::Bundled,
                source: WasmSource::Embedded { wasm: e.wasm, sha256: e.sha256, precompiled: e.precompiled },
                installed: None,
                lock_entry: None,
                wasm_pin: None,
            }),
            Err(err) => problems.push(Problem { plugin: None, location: "bundled".into(), message: err.message }),
        }
    }
    out
}

/// Whether a trusted project's plugin is exactly what the user reviewed; on success its
/// component is pinned to the digest the user saw.
fn check_pin(found: &mut Found, pins: Option<&ProjectPins>, root: &Path) -> Result<(), String> {
    let review = format!("review it with `talaria trust` in {}", root.display());
    let Some(pin) = pins.and_then(|p| p.plugins.get(&found.manifest.name)) else {
        return Err(format!(
            "this project plugin is new since you trusted {}; it is not loaded until you {review}",
            root.display()
        ));
    };
    let changed = |what: &str| {
        format!("its {what} changed since you trusted {}; it is not loaded until you {review}", root.display())
    };
    if pin.manifest_sha256 != found.manifest_sha256 {
        return Err(changed("plugin.toml"));
    }
    if pin.lock_entry_sha256 != found.lock_entry.as_ref().map(LockEntry::pin_sha256) {
        return Err(changed("lockfile entry (version, digests or grants)"));
    }
    found.wasm_pin =
        Some(WasmPin { sha256: pin.wasm_sha256.clone(), since: format!("you trusted {}; {review}", root.display()) });
    Ok(())
}

/// Where a scope's files are read from: the user's home as it is (links there are the user's
/// own), a project beneath its directory handle (no link leads out of it).
#[derive(Debug, Clone)]
enum Tree {
    Plain(PathBuf),
    Beneath(Arc<Root>),
}

impl Tree {
    fn path(&self) -> PathBuf {
        match self {
            Tree::Plain(p) => p.clone(),
            Tree::Beneath(root) => root.path().to_path_buf(),
        }
    }

    /// A file's bytes, `None` when it does not exist.
    fn read(&self, rel: &Path) -> Result<Option<Vec<u8>>, String> {
        match self {
            Tree::Plain(dir) => match std::fs::read(dir.join(rel)) {
                Ok(bytes) => Ok(Some(bytes)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(format!("{}: {e}", dir.join(rel).display())),
            },
            Tree::Beneath(root) => root.read(rel, MAX_TOML_BYTES).map_err(|e| e.to_string()),
        }
    }

    fn is_file(&self, rel: &Path) -> Result<bool, String> {
        match self {
            Tree::Plain(dir) => Ok(dir.join(rel).is_file()),
            Tree::Beneath(root) => root.is_file(rel).map_err(|e| e.to_string()),
        }
    }

    /// The directory `rel` below, `None` when there is none.
    fn child(&self, rel: &Path) -> Result<Option<Tree>, String> {
        match self {
            Tree::Plain(dir) => Ok(dir.join(rel).is_dir().then(|| Tree::Plain(dir.join(rel)))),
            Tree::Beneath(root) => match root.dir(rel) {
                Ok(Some(dir)) => Ok(Some(Tree::Beneath(Arc::new(dir)))),
                Ok(None) => Ok(None),
                Err(e) => Err(e.to_string()),
            },
        }
    }

    /// Names of the subdirectories (for a project, real directories only).
    fn subdirs(&self) -> Vec<String> {
        match self {
            Tree::Plain(dir) => {
                let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
                let mut names: Vec<String> = entries
                    .flatten()
                    .filter(|e| e.path().is_dir())
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect();
                names.sort();
                names
            }
            Tree::Beneath(root) => {
                root.entries().unwrap_or_default().into_iter().filter(|e| e.is_dir).map(|e| e.name).collect()
            }
        }
    }

    /// Where the component `rel` of a plugin in this directory is read from.
    fn source(&self, rel: &Path) -> WasmSource {
        match self {
            Tree::Plain(dir) => WasmSource::File(dir.join(rel)),
            Tree::Beneath(root) => WasmSource::Beneath { dir: root.clone(), file: rel.to_path_buf() },
        }
    }
}

/// A scope's directory (holding `plugins/` and the lockfile): the user's home, or a project's
/// `.talaria` opened beneath the project.
fn scope_tree(home: &Path, scope: &Scope) -> Result<Option<Tree>, String> {
    match scope {
        Scope::Bundled => Ok(None),
        Scope::User => Ok(Some(Tree::Plain(home.to_path_buf()))),
        Scope::Project(root) => {
            let project = Root::open(root).map_err(|e| format!("{}: {e}", root.display()))?;
            match project.dir(Path::new(".talaria")) {
                Ok(Some(dot)) => Ok(Some(Tree::Beneath(Arc::new(dot)))),
                Ok(None) => Ok(None),
                Err(e) => Err(e.to_string()),
            }
        }
    }
}

/// A scope's installed plugins (from its lockfile), then the ones placed by hand.
pub(crate) fn scan_scope(home: &Path, scope: &Scope, out: &mut Vec<Found>, problems: &mut Vec<Problem>) {
    let tree = match scope_tree(home, scope) {
        Ok(Some(tree)) => tree,
        Ok(None) => return,
        Err(message) => {
            problems.push(Problem { plugin: None, location: scope.label().to_string(), message });
            return;
        }
    };
    let lock_path = tree.path().join(LOCK_FILE);
    let lock = tree
        .read(Path::new(LOCK_FILE))
        .and_then(|bytes| match bytes {
            Some(bytes) => Lockfile::parse(&String::from_utf8_lossy(&bytes), &lock_path).map_err(|e| e.to_string()),
            None => Ok(Lockfile::default()),
        })
        .unwrap_or_else(|message| {
            problems.push(Problem {
                plugin: None,
                location: lock_path.display().to_string(),
                message: format!("{message}; its installed plugins are not loaded"),
            });
            Lockfile::default()
        });
    let plugins = match tree.child(Path::new("plugins")) {
        Ok(plugins) => plugins,
        Err(message) => {
            problems.push(Problem {
                plugin: None,
                location: tree.path().join("plugins").display().to_string(),
                message,
            });
            return;
        }
    };
    for (name, entry) in &lock.plugins {
        let loaded = match &plugins {
            Some(plugins) => load_installed(plugins, name, entry),
            None => Err(format!("{} is missing", tree.path().join("plugins").display())),
        };
        match loaded {
            Ok(found) => out.push(Found { scope: scope.clone(), ..found }),
            Err(message) => problems.push(Problem {
                plugin: Some(name.clone()),
                location: lock_path.display().to_string(),
                message: format!("installed plugin '{name}': {message}"),
            }),
        }
    }
    if let Some(plugins) = plugins {
        scan_dir(&plugins, scope, &lock, out, problems);
    }
}

/// An installed plugin, checked against its lockfile entry.
fn load_installed(plugins: &Tree, name: &str, entry: &LockEntry) -> Result<Found, String> {
    let rel = entry.resolve_dir(Path::new("")).map_err(|e| e.to_string())?;
    let dir = plugins.child(&rel)?.ok_or_else(|| format!("{} is missing", plugins.path().join(&rel).display()))?;
    let manifest_path = dir.path().join("plugin.toml");
    let text = dir.read(Path::new("plugin.toml"))?.ok_or_else(|| format!("{} is missing", manifest_path.display()))?;
    let reinstall = crate::lock::reinstall_hint(&entry.source);
    let manifest_sha256 = crate::fsutil::sha256_hex(&text);
    if manifest_sha256 != entry.manifest_sha256 {
        return Err(format!("{} changed since it was installed; {reinstall}", manifest_path.display()));
    }
    let text = String::from_utf8(text).map_err(|_| format!("{} is not UTF-8", manifest_path.display()))?;
    let manifest = Manifest::parse(&text, &manifest_path).map_err(|e| e.message)?;
    if manifest.name != name {
        return Err(format!("its plugin.toml names `{}`", manifest.name));
    }
    if !dir.is_file(Path::new(&manifest.wasm))? {
        return Err(format!("{} is missing; {reinstall}", dir.path().join(&manifest.wasm).display()));
    }
    Ok(Found {
        source: dir.source(Path::new(&manifest.wasm)),
        manifest_sha256,
        manifest,
        scope: Scope::User,
        location: dir.path().display().to_string(),
        installed: Some(Installed {
            wasm_sha256: entry.wasm_sha256.clone(),
            granted: entry.granted_caps(),
            source: entry.source.clone(),
            signer: entry.signer.clone(),
            publisher: entry.publisher(),
        }),
        wasm_pin: Some(WasmPin {
            sha256: entry.wasm_sha256.clone(),
            since: format!("it was installed (the lockfile pins it); {reinstall}, or see `talaria plugins verify`"),
        }),
        lock_entry: Some(entry.clone()),
    })
}

/// Each subdirectory of `dir` holding a plugin.toml is a plugin, except the directories of
/// installed plugins and hidden ones (an install's staging area and store).
fn scan_dir(dir: &Tree, scope: &Scope, lock: &Lockfile, out: &mut Vec<Found>, problems: &mut Vec<Problem>) {
    for name in dir.subdirs() {
        if name.starts_with('.') || lock.get(&name).is_some() {
            continue;
        }
        let location = dir.path().join(&name);
        let manifest_path = location.join("plugin.toml");
        let problem = |problems: &mut Vec<Problem>, plugin: Option<String>, at: &Path, message: String| {
            problems.push(Problem { plugin, location: at.display().to_string(), message });
        };
        let plugin_dir = match dir.child(Path::new(&name)) {
            Ok(Some(d)) => d,
            Ok(None) => continue,
            Err(message) => {
                problem(problems, None, &location, message);
                continue;
            }
        };
        let text = match plugin_dir.read(Path::new("plugin.toml")) {
            Ok(Some(text)) => text,
            Ok(None) => {
                problem(problems, None, &location, "no plugin.toml in this plugin directory".into());
                continue;
            }
            Err(message) => {
                problem(problems, None, &manifest_path, message);
                continue;
            }
        };
        let manifest_sha256 = crate::fsutil::sha256_hex(&text);
        let manifest = match Manifest::parse(&String::from_utf8_lossy(&text), &manifest_path) {
            Ok(m) => m,
            Err(e) => {
                problem(problems, None, &manifest_path, e.message);
                continue;
            }
        };
        if name != manifest.name {
            let message = format!("field `name`: `{}` must match its directory name `{name}`", manifest.name);
            problem(problems, Some(manifest.name.clone()), &manifest_path, message);
            continue;
        }
        match plugin_dir.is_file(Path::new(&manifest.wasm)) {
            Ok(true) => {}
            Ok(false) => {
                let message = format!("field `wasm`: {} does not exist", location.join(&manifest.wasm).display());
                problem(problems, Some(manifest.name.clone()), &manifest_path, message);
                continue;
            }
            Err(message) => {
                problem(problems, Some(manifest.name.clone()), &manifest_path, message);
                continue;
            }
        }
        out.push(Found {
            source: plugin_dir.source(Path::new(&manifest.wasm)),
            manifest,
            manifest_sha256,
            scope: scope.clone(),
            location: location.display().to_string(),
            installed: None,
            lock_entry: None,
            wasm_pin: None,
        });
    }
}
