//! Project trust: what a trusted project brings, pinned as the user reviewed it.
//!
//! A project's `.talaria/` is input from whoever wrote the project (or from a plugin that was
//! granted `fs:rw` on it before `.talaria` was protected). `talaria trust` surveys it
//! ([`survey`]): each project plugin's name and version, the digests of its manifest, component
//! and lockfile entry, what it requests, what the project's lockfile grants it, and the bundled
//! or user plugin it would replace. What the user accepts is recorded ([`ProjectPins`], in
//! grants.toml beside the list of trusted projects).
//!
//! Invariants (enforced by discovery):
//! 1. A project plugin loads only if it has a pin and its manifest and lockfile entry match it;
//!    its component must hash to the pinned digest before it is compiled or run.
//! 2. Anything new or changed is not loaded; the problem says what changed and that
//!    `talaria trust` reviews it again.
//! 3. A project plugin replaces a bundled or user plugin only when its pin records that the user
//!    accepted exactly that replacement.
//!
//! ```no_run
//! # fn demo() -> Result<(), String> {
//! use std::path::Path;
//! let survey = talaria_runtime::trust::survey(&[], Path::new("/home/me/.talaria"), Path::new("/home/me/project"));
//! for brought in &survey.plugins {
//!     println!("{} {}: replaces {:?}", brought.name, brought.version, brought.replaces);
//! }
//! let pins = survey.pins(&[]); // accept no replacement
//! # let _ = pins; Ok(()) }
//! ```

use std::path::Path;

use crate::discovery::{self, Embedded, Found, Problem};
use crate::fsutil::FileError;
use crate::grant::{Capability, GrantFile, Scope};
use crate::lock::LockEntry;
pub use crate::pins::{PluginPin, ProjectPins};

/// One plugin a project brings, as [`survey`] found it.
#[derive(Debug, Clone)]
pub struct Brought {
    pub name: String,
    pub version: String,
    pub location: String,
    pub manifest_sha256: String,
    /// The component's digest, or why it could not be read.
    pub wasm_sha256: Result<String, String>,
    pub lock_entry_sha256: Option<String>,
    pub requested: Vec<Capability>,
    /// What the project grants it: its lockfile entry, or (placed by hand) grants.toml.
    pub granted: Vec<Capability>,
    /// Where it was installed from and who signed it, when installed.
    pub source: Option<(String, Option<String>)>,
    /// The scope and location of the bundled or user plugin it would replace.
    pub replaces: Option<(Scope, String)>,
}

/// Everything a project brings.
#[derive(Debug, Clone, Default)]
pub struct Survey {
    pub plugins: Vec<Brought>,
    /// What could not be read (a link out of the project, a broken manifest...).
    pub problems: Vec<Problem>,
}

impl Survey {
    /// The pins for what was surveyed, accepting the replacements named in `replace` (plugins
    /// whose component could not be read are left out: they will not load).
    pub fn pins(&self, replace: &[String]) -> ProjectPins {
        let plugins = self
            .plugins
            .iter()
            .filter_map(|b| {
                let wasm_sha256 = b.wasm_sha256.clone().ok()?;
                let replaces = b
                    .replaces
                    .as_ref()
                    .filter(|_| replace.contains(&b.name))
                    .map(|(scope, _)| scope.label().to_string());
                Some((
                    b.name.clone(),
                    PluginPin {
                        version: b.version.clone(),
                        manifest_sha256: b.manifest_sha256.clone(),
                        wasm_sha256,
                        lock_entry_sha256: b.lock_entry_sha256.clone(),
                        replaces,
                    },
                ))
            })
            .collect();
        ProjectPins { trusted: jiff::Timestamp::now().to_string(), plugins, skills: None }
    }
}

/// What the project at `root` (canonical) brings, read beneath it, with what each plugin would
/// replace among the bundled plugins and the user's.
pub fn survey(embedded: &[Embedded], home: &Path, root: &Path) -> Survey {
    let mut problems = Vec::new();
    let mut earlier = discovery::bundled(embedded, &mut problems);
    discovery::scan_scope(home, &Scope::User, &mut earlier, &mut problems);
    problems.clear(); // the user's own problems are not the project's
    let mut found: Vec<Found> = Vec::new();
    let scope = Scope::Project(root.to_path_buf());
    discovery::scan_scope(home, &scope, &mut found, &mut problems);
    let grant_file = GrantFile::load(&home.join("grants.toml")).unwrap_or_default();
    let plugins = found
        .into_iter()
        .map(|f| {
            let replaces = earlier
                .iter()
                .rev()
                .find(|e| e.manifest.name == f.manifest.name)
                .map(|e| (e.scope.clone(), e.location.clone()));
            let wasm_sha256 = f
                .source
                .read()
                .map(|bytes| crate::fsutil::sha256_hex(&bytes))
                .map_err(|e| format!("{}: {e}", f.source.path().unwrap_or_default().display()));
            let granted = match &f.installed {
                Some(installed) => installed.granted.clone(),
                None => grant_file.recorded(&scope, &f.manifest.name).unwrap_or_default(),
            };
            Brought {
                name: f.manifest.name.clone(),
                version: f.manifest.version.to_string(),
                location: f.location.clone(),
                manifest_sha256: f.manifest_sha256.clone(),
                wasm_sha256,
                lock_entry_sha256: f.lock_entry.as_ref().map(LockEntry::pin_sha256),
                requested: f.manifest.requests.clone(),
                granted,
                source: f.installed.as_ref().map(|i| (i.source.clone(), i.signer.clone())),
                replaces,
            }
        })
        .collect();
    Survey { plugins, problems }
}

/// Pin plugin `name` of a trusted project again as it is now, after the user changed it
/// themselves (`talaria plugins install|update|remove|rollback|grant --project`), keeping the
/// other pins and the replacement it was accepted for. Does nothing for an untrusted project.
///
/// # Errors
/// grants.toml cannot be read or written.
pub fn repin(embedded: &[Embedded], home: &Path, root: &Path, name: &str) -> Result<(), FileError> {
    let path = home.join("grants.toml");
    let mut file = GrantFile::load(&path)?;
    if !file.is_trusted(root) {
        return Ok(());
    }
    let survey = survey(embedded, home, root);
    let mut pins = file.project_pins(root).cloned().unwrap_or_default();
    let accepted: Vec<String> =
        pins.plugins.get(name).filter(|p| p.replaces.is_some()).map(|_| vec![name.to_string()]).unwrap_or_default();
    let now = survey.pins(&accepted);
    match now.plugins.get(name) {
        Some(pin) => pins.plugins.insert(name.to_string(), pin.clone()),
        None => pins.plugins.remove(name),
    };
    file.set_project_pins(root, pins);
    file.save(&path)
}
