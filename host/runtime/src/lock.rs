//! Lockfiles: what was installed into a scope, from where, with which digests, and what the user
//! granted it.
//!
//! Each scope that installs plugins has one: the user's `$TALARIA_HOME/plugins.lock` and a
//! project's `<project>/.talaria/plugins.lock` (read only when the user trusts the project). An
//! installed plugin lives in a directory of its own version under the scope's plugin directory
//! (`plugins/NAME/VERSION-DIGEST/`), named by its entry; writing the lockfile is what switches
//! from one version to the next, so a crash leaves either the old or the new one.
//!
//! The entry pins the component's sha256: a component changed after install is refused, so a
//! grant always belongs to the code the user consented to.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fsutil::FileError;
use crate::grant::{Capability, Scope};

/// The file name of a scope's lockfile.
pub const LOCK_FILE: &str = "plugins.lock";

const HEADER: &str = "# Plugins installed into this scope by `talaria plugins install`: versions, sources, digests,\n\
# signers and the capabilities granted. Managed by talaria; do not edit by hand.\n\n";

/// A lockfile entry's directory that is not a path inside the scope's plugin directory: absolute,
/// empty, or climbing out ([`LockEntry::resolve_dir`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("its directory `{dir}` is not a path inside {}", plugins_dir.display())]
pub struct DirError {
    /// The directory as the entry records it.
    pub dir: String,
    pub plugins_dir: PathBuf,
}

/// One scope's lockfile.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Lockfile {
    /// Plugin name → what is installed.
    #[serde(default)]
    pub plugins: BTreeMap<String, LockEntry>,
}

/// One installed plugin.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LockEntry {
    pub version: semver::Version,
    /// The WIT API version it was built against.
    pub api: semver::Version,
    /// Where it came from, in the form `talaria plugins update` can fetch again: a directory or
    /// bundle path, an https URL, `registry+URL#NAME`, or `oci://…`.
    pub source: String,
    /// `sha256:<hex>` of the bundle as downloaded (what a signature covers).
    pub digest: String,
    /// sha256 (hex) of the installed component.
    pub wasm_sha256: String,
    /// sha256 (hex) of the installed plugin.toml.
    pub manifest_sha256: String,
    /// The key that signed the bundle (`KEYID` and the name it was trusted under), or none for
    /// a bundle installed with `--allow-unsigned`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
    /// Its directory, relative to the scope's plugin directory.
    pub dir: String,
    /// Capabilities the user granted (a subset of what the manifest requests).
    #[serde(default)]
    pub granted: Vec<String>,
    /// When it was installed or last updated (RFC 3339).
    #[serde(default)]
    pub installed: String,
    /// For a plugin installed unsigned: who it is (`unsigned:<digest of the bundle it was first
    /// installed from>`), kept across its unsigned updates. A signed plugin is its signer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// The version it replaced, kept on disk for `talaria plugins rollback` (one generation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<Box<LockEntry>>,
}

impl LockEntry {
    /// The digest a trusted project's pin records of this entry
    /// ([`crate::pins::PluginPin::lock_entry_sha256`]).
    pub fn pin_sha256(&self) -> String {
        crate::fsutil::sha256_hex(toml::to_string(self).unwrap_or_default().as_bytes())
    }

    /// The granted capabilities that parse (a hand-edited bad one is dropped).
    pub fn granted_caps(&self) -> Vec<Capability> {
        self.granted.iter().filter_map(|s| s.parse().ok()).collect()
    }

    /// Who published it, as its data is filed under: `key:KEYID` for a signed plugin, else
    /// `unsigned:DIGEST12` (see [`crate::identity`]).
    pub fn publisher(&self) -> String {
        match &self.signer {
            Some(signer) => format!("key:{}", signer.split_whitespace().next().unwrap_or_default()),
            None => self.identity.clone().unwrap_or_else(|| format!("unsigned:{}", short_digest(&self.digest))),
        }
    }

    pub fn set_granted(&mut self, caps: &[Capability]) {
        self.granted = caps.iter().map(ToString::to_string).collect();
    }

    /// The plugin's directory under `plugins_dir`, if the entry names one inside it.
    ///
    /// # Errors
    /// The recorded directory is absolute or climbs out (a lockfile in a project is input from
    /// whoever wrote the project).
    pub fn resolve_dir(&self, plugins_dir: &Path) -> Result<PathBuf, DirError> {
        let rel = Path::new(&self.dir);
        if self.dir.is_empty() || !rel.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(DirError { dir: self.dir.clone(), plugins_dir: plugins_dir.to_path_buf() });
        }
        Ok(plugins_dir.join(rel))
    }
}

/// The first 12 hex digits of a digest (`sha256:` dropped), enough to tell two apart in a
/// message or a directory name.
pub fn short_digest(digest: &str) -> &str {
    let hex = digest.trim_start_matches("sha256:");
    hex.get(..12).unwrap_or(hex)
}

/// What to tell the user about an installed plugin from `source` whose files changed.
pub fn reinstall_hint(source: &str) -> String {
    format!("reinstall it with `talaria plugins install {source}`")
}

/// Where a scope keeps its plugins and lockfile; `None` for bundled plugins.
pub fn scope_paths(home: &Path, scope: &Scope) -> Option<(PathBuf, PathBuf)> {
    match scope {
        Scope::Bundled => None,
        Scope::User => Some((home.join("plugins"), home.join(LOCK_FILE))),
        Scope::Project(root) => {
            let dot = root.join(".talaria");
            Some((dot.join("plugins"), dot.join(LOCK_FILE)))
        }
    }
}

impl Lockfile {
    /// Read a lockfile; a missing one is empty.
    ///
    /// # Errors
    /// Unreadable or malformed, with the path.
    pub fn load(path: &Path) -> Result<Self, FileError> {
        crate::fsutil::load_toml(path)
    }

    /// Read a lockfile's text; `path` is only used in messages.
    ///
    /// # Errors
    /// Malformed, with the path.
    pub fn parse(text: &str, path: &Path) -> Result<Self, FileError> {
        crate::fsutil::parse_toml(text, path)
    }

    /// Write atomically: a temporary file beside it, flushed to disk, then renamed over it.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn save(&self, path: &Path) -> Result<(), FileError> {
        crate::fsutil::save_toml(path, HEADER, self)
    }

    pub fn get(&self, name: &str) -> Option<&LockEntry> {
        self.plugins.get(name)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is the test failing
mod tests {
    use super::*;

    fn entry(dir: &str) -> LockEntry {
        LockEntry {
            version: "1.2.0".parse().unwrap(),
            api: "0.2.0".parse().unwrap(),
            source: "oci://127.0.0.1:5000/plugins/weather:1".into(),
            digest: "sha256:00".into(),
            wasm_sha256: "11".into(),
            manifest_sha256: "22".into(),
            signer: Some("0123456789abcdef (acme)".into()),
            dir: dir.into(),
            granted: vec!["net:api.example.com".into(), "not a capability".into()],
            installed: "2026-11-22T10:00:00Z".into(),
            identity: None,
            previous: None,
        }
    }

    #[test]
    fn round_trips_and_keeps_only_parsable_grants() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOCK_FILE);
        let mut lock = Lockfile::default();
        let mut current = entry("weather/1.2.0-00");
        current.previous = Some(Box::new(entry("weather/1.1.0-00")));
        lock.plugins.insert("weather".into(), current);
        lock.save(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("# Plugins installed"), "{text}");
        let back = Lockfile::load(&path).unwrap();
        assert_eq!(back, lock);
        assert_eq!(back.get("weather").unwrap().granted_caps(), vec!["net:api.example.com".parse().unwrap()]);
        assert_eq!(Lockfile::load(&dir.path().join("missing")).unwrap(), Lockfile::default());
    }

    #[test]
    fn a_directory_outside_the_plugin_directory_is_refused() {
        let plugins = Path::new("/home/me/.talaria/plugins");
        assert_eq!(entry("weather/1.2.0-00").resolve_dir(plugins).unwrap(), plugins.join("weather/1.2.0-00"));
        for bad in ["../../etc", "/etc", "", "weather/../../x", "./weather"] {
            let err = entry(bad).resolve_dir(plugins).unwrap_err();
            assert_eq!(err.dir, bad);
            assert!(err.to_string().contains("is not a path inside"), "{bad}: {err}");
        }
    }

    #[test]
    fn unknown_fields_are_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOCK_FILE);
        std::fs::write(&path, "[plugins.x]\nversion = \"1.0.0\"\nbogus = 1\n").unwrap();
        let err = Lockfile::load(&path).unwrap_err();
        assert!(matches!(&err, FileError::Malformed { path: p, .. } if *p == path), "{err:?}");
        let err = err.to_string();
        assert!(err.contains(&path.display().to_string()) && err.contains("bogus"), "{err}");
    }

    /// Fuzzed: any text as a lockfile is one or an error, never a panic.
    #[test]
    fn fuzz_the_lockfile() {
        talaria_fuzz::text("lockfile", |text| {
            let _ = Lockfile::parse(text, Path::new("plugins.lock"));
        });
    }
}
