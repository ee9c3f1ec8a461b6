//! Installing, updating and removing a plugin in one scope, as a transaction.
//!
//! 1. the scope is locked (`plugins/.lock`), so two installs never interleave;
//! 2. the bundle's digest is checked against what the source pins, its signature against the
//!    trust store (or `--allow-unsigned` must have been given);
//! 3. it is unpacked into `plugins/.staging/`, its manifest read and checked (name, API, what
//!    an index listed), the version compared with the installed one (no downgrade without
//!    `--allow-downgrade`);
//! 4. the component is compiled into the compile cache and checked against its manifest;
//! 5. the user consents to the capabilities it requests that the installed version did not;
//! 6. the staged directory moves to `plugins/.store/NAME/VERSION-DIGEST/`, and the lockfile is
//!    rewritten to point at it (atomically: this is the switch);
//! 7. anything staged, and versions older than the one replaced, are removed (the replaced one
//!    is kept for `talaria plugins rollback`).
//!
//! Until step 6 nothing the running system reads has changed: a failure, a refusal or a crash
//! (even `kill -9`) leaves the previous version installed and working, and whatever was staged
//! is cleared by the next install in that scope.

// An error is made once per command, so its size does not matter; its fields make the messages.
#![allow(clippy::result_large_err)]

use std::path::{Path, PathBuf};

use talaria_runtime::fsutil::sha256_hex;
use talaria_runtime::{Capability, LockEntry, Lockfile, Manifest, Scope, reinstall_hint, short_digest};

use crate::bundle::{self, BundleError, Limits};
use crate::sign::{Signature, SignatureError, Signer, TrustError, TrustStore};
use crate::source::Fetched;

pub mod consent;

use consent::ConsentError;

const STAGING: &str = ".staging";
const STORE: &str = ".store";

/// Where one scope keeps its plugins.
#[derive(Debug, Clone)]
pub struct Target {
    pub scope: Scope,
    pub plugins_dir: PathBuf,
    pub lock_path: PathBuf,
}

impl Target {
    /// The user's scope, or a project's. Nothing installs into the bundled scope: given it,
    /// this is the user's.
    pub fn new(home: &Path, scope: Scope) -> Self {
        let (scope, (plugins_dir, lock_path)) = match talaria_runtime::scope_paths(home, &scope) {
            Some(paths) => (scope, paths),
            None => (Scope::User, (home.join("plugins"), home.join(talaria_runtime::LOCK_FILE))),
        };
        Self { scope, plugins_dir, lock_path }
    }

    /// Its lockfile.
    ///
    /// # Errors
    /// Unreadable or malformed.
    pub fn lockfile(&self) -> Result<Lockfile, InstallError> {
        Lockfile::load(&self.lock_path).map_err(InstallError::Lockfile)
    }
}

/// Switches for one install.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub allow_unsigned: bool,
    pub allow_downgrade: bool,
    pub limits: Limits,
    /// Names of the plugins built into talaria: installing under one is refused unless
    /// `replace_bundled`.
    pub bundled_names: Vec<String>,
    pub replace_bundled: bool,
    /// Install an update from another publisher (another key, or signed where it was unsigned or
    /// the other way round); it starts with no grants and no data.
    pub accept_publisher: bool,
}

/// What the user is asked to grant.
#[derive(Debug, Clone)]
pub struct Consent {
    pub name: String,
    pub version: semver::Version,
    /// The installed version, for an update.
    pub previous: Option<semver::Version>,
    /// Everything the manifest requests.
    pub requested: Vec<Capability>,
    /// Granted to the installed version and still requested: kept without asking.
    pub kept: Vec<Capability>,
    /// Requested now and not by the installed version: the user decides.
    pub new: Vec<Capability>,
    /// Granted before and no longer requested: dropped.
    pub dropped: Vec<Capability>,
    pub signer: Option<Signer>,
    pub digest: String,
    pub source: String,
}

/// What an install did.
#[derive(Debug, Clone)]
pub struct Report {
    pub name: String,
    pub version: semver::Version,
    pub previous: Option<semver::Version>,
    pub granted: Vec<Capability>,
    /// Requested and not granted (the plugin runs without them).
    pub not_granted: Vec<Capability>,
    pub signer: Option<Signer>,
    pub digest: String,
    pub dir: PathBuf,
    /// Nothing changed: this exact bundle is already installed.
    pub unchanged: bool,
    /// Notes worth showing (a same-version reinstall, …).
    pub notes: Vec<String>,
}

/// Why an install was refused or failed. The previous state is intact in every case. A message
/// says what its cause said, so the cause is not given again as the error's source.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error(
        "the bundle from {origin} has digest {actual}, but {pinned_by} pins {expected}: it was changed or corrupted on the way; refusing it"
    )]
    Tampered { origin: String, expected: String, actual: String, pinned_by: String },
    #[error(transparent)]
    Signature(#[from] SignatureError),
    #[error("{origin} is not signed; install it only if you trust where it came from, with --allow-unsigned")]
    Unsigned { origin: String },
    #[error(transparent)]
    Bundle(#[from] BundleError),
    #[error("the bundle's plugin.toml: {0}")]
    Manifest(String),
    #[error("{name} {version} is older than the installed {installed}; to go back to it, pass --allow-downgrade")]
    Downgrade { name: String, version: semver::Version, installed: semver::Version },
    #[error(
        "{name} {version} is installed with digest {installed}, and {origin} offers the same version with digest {offered}: \
         a published version must not change; refusing it (remove the plugin first if you mean to replace it)"
    )]
    Republished { name: String, version: semver::Version, installed: String, offered: String, origin: String },
    #[error(
        "{dir} holds a plugin placed by hand with the same name; move it away or delete it before installing `{name}`"
    )]
    HandPlaced { name: String, dir: String },
    #[error(
        "`{name}` is the name of a plugin built into talaria; another plugin installed under it would replace the bundled one (and would start with none of its data): pass --replace-bundled to do that"
    )]
    BundledName { name: String },
    #[error(
        "{name} is installed from publisher {old}, and this bundle comes from publisher {new}: a new publisher takes over \
         none of the old one's grants or data; install it anyway (starting afresh) with --accept-publisher"
    )]
    PublisherChanged { name: String, old: String, new: String },
    /// The registry index says one thing (`what`: name, version, plugin API, capabilities) and
    /// the bundle's manifest another.
    #[error(
        "the registry index lists {name} with {what} {index}, but the bundle's manifest says {bundle}; refusing it"
    )]
    Mismatch { name: String, what: &'static str, index: String, bundle: String },
    #[error("the component does not load: {0}")]
    Compile(talaria_runtime::ComponentError),
    /// The user (or the caller's [`Decide`]) granted nothing, or could not be asked.
    #[error(transparent)]
    Declined(#[from] ConsentError),
    /// [`Decide`] granted a capability the version does not newly request.
    #[error("{name} does not newly request {cap}; it requests: {}", caps_list(requested))]
    NotNewlyRequested { name: String, cap: Capability, requested: Vec<Capability> },
    #[error("no plugin named `{name}` is installed in the {scope} scope (see `talaria plugins list`)")]
    NotInstalled { name: String, scope: String },
    /// Rollback: no earlier version is kept.
    #[error("no earlier version of `{name}` is kept to roll back to")]
    NoPrevious { name: String },
    /// Rollback: the earlier version's directory is gone.
    #[error("the earlier version's files are gone ({})", dir.display())]
    PreviousGone { dir: PathBuf },
    /// The trust store cannot be read.
    #[error(transparent)]
    Trust(#[from] TrustError),
    /// The scope's lockfile cannot be read or written.
    #[error("{0}")]
    Lockfile(talaria_runtime::FileError),
    /// The scope's lockfile names a directory outside the scope.
    #[error("{0}")]
    LockedDir(talaria_runtime::DirError),
    #[error("{}: {error}", path.display())]
    Io { path: PathBuf, error: std::io::Error },
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> InstallError + '_ {
    move |error| InstallError::Io { path: path.to_path_buf(), error }
}

/// The scope's lock, held while an install or removal runs.
struct ScopeLock(std::fs::File);

impl ScopeLock {
    /// Lock the scope, saying so through `waiting` if another talaria holds it.
    fn take(target: &Target, waiting: &dyn Fn(&str)) -> Result<Self, InstallError> {
        talaria_runtime::fsutil::private_dir(&target.plugins_dir).map_err(io(&target.plugins_dir))?;
        let path = target.plugins_dir.join(".lock");
        let file =
            std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).map_err(io(&path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                waiting("waiting for another install in this scope to finish");
                file.lock().map_err(io(&path))?;
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(&path)(e)),
        }
        Ok(Self(file))
    }
}

impl Drop for ScopeLock {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

/// A staging directory, removed when dropped.
struct Staging(PathBuf);

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Compiles a component into the compile cache and checks it against its manifest.
pub type Check<'a> = dyn Fn(&Manifest, &[u8]) -> Result<(), talaria_runtime::ComponentError> + 'a;

/// Asked which newly requested capabilities to grant.
pub type Decide<'a> = dyn FnMut(&Consent) -> Result<Vec<Capability>, ConsentError> + 'a;

/// Remove what earlier installs left: staged directories, and versions the lockfile no longer
/// names.
fn collect_garbage(target: &Target, lock: &Lockfile) {
    let _ = std::fs::remove_dir_all(target.plugins_dir.join(STAGING));
    let store = target.plugins_dir.join(STORE);
    let Ok(names) = std::fs::read_dir(&store) else { return };
    for name_dir in names.flatten() {
        let name = name_dir.file_name().to_string_lossy().into_owned();
        let keep: Vec<PathBuf> = lock
            .get(&name)
            .map(|e| std::iter::once(e).chain(e.previous.as_deref()).map(|e| target.plugins_dir.join(&e.dir)).collect())
            .unwrap_or_default();
        if let Ok(versions) = std::fs::read_dir(name_dir.path()) {
            for version in versions.flatten() {
                if !keep.contains(&version.path()) {
                    let _ = std::fs::remove_dir_all(version.path());
                }
            }
        }
        let _ = std::fs::remove_dir(name_dir.path()); // only if now empty
    }
}

/// Install (or update to) the fetched bundle. `check` compiles the component into the compile
/// cache and checks it against the manifest; `decide` is asked which of the newly requested
/// capabilities to grant (only when there are any); `progress` hears each step.
///
/// # Errors
/// Every refusal, with what was wrong; the scope is unchanged.
#[allow(clippy::too_many_lines)]
pub fn install(
    home: &Path,
    target: &Target,
    fetched: &Fetched,
    options: &Options,
    check: &Check<'_>,
    decide: &mut Decide<'_>,
    progress: &dyn Fn(&str),
) -> Result<Report, InstallError> {
    let _lock = ScopeLock::take(target, progress)?;
    let mut lock = target.lockfile()?;
    collect_garbage(target, &lock);

    // Integrity and trust, before the bundle is even unpacked.
    let digest = bundle::digest(&fetched.bundle);
    if let Some(pinned) = &fetched.pinned_digest
        && pinned != &digest
    {
        return Err(InstallError::Tampered {
            origin: fetched.source.clone(),
            expected: pinned.clone(),
            actual: digest,
            pinned_by: "the registry index".into(),
        });
    }
    let trust = TrustStore::load(home)?;
    let signer = match &fetched.signature {
        Some(bytes) => Some(trust.verify(&Signature::parse(bytes)?, &digest)?),
        None if options.allow_unsigned => None,
        None => return Err(InstallError::Unsigned { origin: fetched.source.clone() }),
    };

    // Stage.
    progress("unpacking");
    let staging_root = target.plugins_dir.join(STAGING);
    let stamp = jiff::Timestamp::now().as_nanosecond();
    let staging = Staging(staging_root.join(format!("{}-{stamp}", std::process::id())));
    std::fs::create_dir_all(&staging.0).map_err(io(&staging.0))?;
    let root = bundle::unpack(&fetched.bundle, &staging.0, &options.limits)?;
    let manifest_path = root.join("plugin.toml");
    let manifest_bytes = std::fs::read(&manifest_path).map_err(io(&manifest_path))?;
    let manifest_text =
        String::from_utf8(manifest_bytes.clone()).map_err(|_| InstallError::Manifest("not UTF-8".into()))?;
    let manifest =
        Manifest::parse(&manifest_text, Path::new("plugin.toml")).map_err(|e| InstallError::Manifest(e.message))?;
    let name = manifest.name.clone();
    if !Path::new(&manifest.wasm).components().all(|c| matches!(c, std::path::Component::Normal(_))) {
        return Err(InstallError::Manifest(format!(
            "field `wasm`: `{}` must be a path inside the bundle",
            manifest.wasm
        )));
    }
    let wasm_path = root.join(&manifest.wasm);
    let wasm = std::fs::read(&wasm_path)
        .map_err(|_| InstallError::Manifest(format!("field `wasm`: the bundle has no `{}`", manifest.wasm)))?;
    if let Some((listed_name, listed)) = &fetched.listed {
        check_listed(listed_name, listed, &manifest)?;
    }

    // Against what is built in and what is installed.
    if options.bundled_names.contains(&name) && !options.replace_bundled {
        return Err(InstallError::BundledName { name });
    }
    let mut previous = lock.get(&name).cloned();
    let mut notes = Vec::new();
    // The publisher is pinned: data and grants belong to it (see talaria_runtime::identity).
    let publisher = match (&signer, &previous) {
        (Some(s), _) => format!("key:{}", s.key_id),
        (None, Some(prev)) if prev.signer.is_none() => prev.publisher(),
        (None, _) => format!("unsigned:{}", short_digest(&digest)),
    };
    let mut rollback_to = None;
    if let Some(prev) = &previous
        && prev.publisher() != publisher
    {
        if !options.accept_publisher {
            return Err(InstallError::PublisherChanged {
                name,
                old: publisher_text(prev.signer.as_deref()),
                new: publisher_text(signer.as_ref().map(ToString::to_string).as_deref()),
            });
        }
        // A new identity: nothing of the old publisher's grants carries over (its version stays
        // on disk for rollback).
        notes.push(format!(
            "{name} {} from publisher {} is replaced by another publisher's: it starts with no grants and no data \
             (`talaria plugins rollback {name}` goes back)",
            prev.version,
            publisher_text(prev.signer.as_deref())
        ));
        rollback_to = previous.take();
    }
    match &previous {
        None => {
            let by_hand = target.plugins_dir.join(&name);
            if by_hand.join("plugin.toml").exists() {
                return Err(InstallError::HandPlaced { name, dir: by_hand.display().to_string() });
            }
        }
        Some(prev) if prev.digest == digest && !file_problems(target, prev).is_empty() => {
            notes
                .push(format!("repairing {name} {}: its installed files no longer matched the lockfile", prev.version));
        }
        Some(prev) if prev.digest == digest => {
            return Ok(Report {
                name,
                version: manifest.version,
                previous: Some(prev.version.clone()),
                granted: prev.granted_caps(),
                not_granted: Vec::new(),
                signer,
                digest,
                dir: target.plugins_dir.join(&prev.dir),
                unchanged: true,
                notes,
            });
        }
        Some(prev) if manifest.version < prev.version && !options.allow_downgrade => {
            return Err(InstallError::Downgrade { name, version: manifest.version, installed: prev.version.clone() });
        }
        Some(prev) if manifest.version == prev.version => {
            if !fetched.local {
                return Err(InstallError::Republished {
                    name,
                    version: manifest.version,
                    installed: prev.digest.clone(),
                    offered: digest,
                    origin: fetched.source.clone(),
                });
            }
            notes.push(format!("replacing {name} {} with a different build of the same version", prev.version));
        }
        Some(_) => {}
    }

    progress("compiling");
    check(&manifest, &wasm).map_err(InstallError::Compile)?;

    // Consent: only for what the installed version did not request.
    let covered = |cap: &Capability, by: &[Capability]| by.iter().any(|r| r.covers(cap));
    let Split { kept, new, dropped } = split(target, previous.as_ref(), &manifest.requests);
    let mut granted = kept.clone();
    if !new.is_empty() {
        let consent = Consent {
            name: name.clone(),
            version: manifest.version.clone(),
            previous: previous.as_ref().map(|p| p.version.clone()),
            requested: manifest.requests.clone(),
            kept: kept.clone(),
            new: new.clone(),
            dropped,
            signer: signer.clone(),
            digest: digest.clone(),
            source: fetched.source.clone(),
        };
        for cap in decide(&consent)? {
            if !covered(&cap, &new) {
                return Err(InstallError::NotNewlyRequested { name, cap, requested: manifest.requests });
            }
            if !granted.contains(&cap) {
                granted.push(cap);
            }
        }
    }
    let not_granted: Vec<Capability> =
        manifest.requests.iter().filter(|r| !granted.iter().any(|g| r.covers(g))).cloned().collect();

    // Switch.
    let rel = format!("{STORE}/{name}/{}-{}", manifest.version, short_digest(&digest));
    let dir = target.plugins_dir.join(&rel);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(io(&dir))?;
    }
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent).map_err(io(parent))?;
    }
    std::fs::rename(&root, &dir).map_err(io(&dir))?;
    // The replaced version stays on disk, one generation deep, for rollback (and for a running
    // talaria that has not loaded it yet). A repair of the same build keeps what that replaced.
    let kept_previous = previous.clone().or(rollback_to).and_then(|mut p| {
        if p.dir == rel {
            return p.previous;
        }
        p.previous = None;
        Some(Box::new(p))
    });
    let entry = LockEntry {
        version: manifest.version.clone(),
        api: manifest.api.clone(),
        source: fetched.source.clone(),
        digest: digest.clone(),
        wasm_sha256: sha256_hex(&wasm),
        manifest_sha256: sha256_hex(&manifest_bytes),
        signer: signer.as_ref().map(ToString::to_string),
        dir: rel,
        granted: granted.iter().map(ToString::to_string).collect(),
        installed: jiff::Timestamp::now().to_string(),
        identity: signer.is_none().then(|| publisher.clone()),
        previous: kept_previous,
    };
    lock.plugins.insert(name.clone(), entry);
    lock.save(&target.lock_path).map_err(InstallError::Lockfile)?;
    drop(staging);
    collect_garbage(target, &lock);
    Ok(Report {
        name,
        version: manifest.version,
        previous: previous.map(|p| p.version),
        granted,
        not_granted,
        signer,
        digest,
        dir,
        unchanged: false,
        notes,
    })
}

/// What a version's requests mean for the grants of the version it replaces.
struct Split {
    /// Granted before and still requested.
    kept: Vec<Capability>,
    /// Requested now and not by the installed version (everything, for a first install).
    new: Vec<Capability>,
    /// Granted before and no longer requested.
    dropped: Vec<Capability>,
}

fn split(target: &Target, previous: Option<&LockEntry>, requests: &[Capability]) -> Split {
    let previously_requested = previous.map(|prev| old_requests(target, prev));
    let granted_before = previous.map(LockEntry::granted_caps).unwrap_or_default();
    let covered = |cap: &Capability| requests.iter().any(|r| r.covers(cap));
    Split {
        kept: granted_before.iter().filter(|g| covered(g)).cloned().collect(),
        dropped: granted_before.iter().filter(|g| !covered(g)).cloned().collect(),
        new: requests
            .iter()
            .filter(|r| previously_requested.as_ref().is_none_or(|old| !old.contains(r)))
            .cloned()
            .collect(),
    }
}

/// What installing `manifest` from `source` over what `target` holds would ask the user, before
/// anything is built into a bundle or staged (`talaria plugin dev` asks before it runs the
/// plugin's tests). `new` is empty when nothing needs consent. As [`install`] decides it for an
/// unsigned local source: the installed entry of that name is the one replaced.
///
/// # Errors
/// The lockfile cannot be read.
pub fn pending(target: &Target, manifest: &Manifest, source: &str) -> Result<Consent, InstallError> {
    let lock = target.lockfile()?;
    let previous = lock.get(&manifest.name);
    let Split { kept, new, dropped } = split(target, previous, &manifest.requests);
    Ok(Consent {
        name: manifest.name.clone(),
        version: manifest.version.clone(),
        previous: previous.map(|p| p.version.clone()),
        requested: manifest.requests.clone(),
        kept,
        new,
        dropped,
        signer: None,
        digest: String::new(),
        source: source.to_string(),
    })
}

/// A publisher as the user knows it: the signing key, or "nobody".
fn publisher_text(signer: Option<&str>) -> String {
    match signer {
        Some(s) => format!("key {s}"),
        None => "nobody (unsigned)".to_string(),
    }
}

/// What the installed version requested (from its manifest; its grants if that is unreadable).
fn old_requests(target: &Target, prev: &LockEntry) -> Vec<Capability> {
    prev.resolve_dir(&target.plugins_dir)
        .ok()
        .and_then(|dir| Manifest::load(&dir.join("plugin.toml")).ok())
        .map_or_else(|| prev.granted_caps(), |m| m.requests)
}

/// An index must describe the bundle it points at.
fn check_listed(name: &str, listed: &crate::index::IndexVersion, manifest: &Manifest) -> Result<(), InstallError> {
    let mismatch = |what: &'static str, index: String, bundle: String| InstallError::Mismatch {
        name: name.to_string(),
        what,
        index,
        bundle,
    };
    if manifest.name != name {
        return Err(mismatch("name", name.to_string(), manifest.name.clone()));
    }
    if manifest.version != listed.version {
        return Err(mismatch("version", listed.version.to_string(), manifest.version.to_string()));
    }
    if manifest.api != listed.api {
        return Err(mismatch("plugin API", listed.api.to_string(), manifest.api.to_string()));
    }
    let mut listed_caps: Vec<String> = listed.capabilities.clone();
    let mut manifest_caps: Vec<String> = manifest.requests.iter().map(ToString::to_string).collect();
    listed_caps.sort();
    manifest_caps.sort();
    if listed_caps != manifest_caps {
        return Err(mismatch(
            "capabilities",
            format!("[{}]", listed_caps.join(", ")),
            format!("[{}]", manifest_caps.join(", ")),
        ));
    }
    Ok(())
}

/// Capabilities for a message: `a, b`, or `nothing`.
pub fn caps_list(caps: &[Capability]) -> String {
    if caps.is_empty() { "nothing".into() } else { caps.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ") }
}

/// Remove an installed plugin; returns its entry. Its data (`$PLUGIN_DATA`, key-value store)
/// is kept.
///
/// # Errors
/// It is not installed in this scope, or the lockfile cannot be written.
pub fn remove(target: &Target, name: &str) -> Result<LockEntry, InstallError> {
    let _lock = ScopeLock::take(target, &|_| {})?;
    let mut lock = target.lockfile()?;
    let entry = lock.plugins.remove(name).ok_or_else(|| InstallError::NotInstalled {
        name: name.to_string(),
        scope: target.scope.label().to_string(),
    })?;
    lock.save(&target.lock_path).map_err(InstallError::Lockfile)?;
    collect_garbage(target, &lock);
    Ok(entry)
}

/// Switch an installed plugin back to the version it replaced (which becomes the one kept).
/// It keeps only the grants it had that the current version still has: a rollback never grants
/// what was revoked since. Returns (from, to).
///
/// # Errors
/// It is not installed, no previous version is kept, or its files are gone.
pub fn rollback(target: &Target, name: &str) -> Result<(semver::Version, semver::Version), InstallError> {
    let _lock = ScopeLock::take(target, &|_| {})?;
    let mut lock = target.lockfile()?;
    let scope = target.scope.label().to_string();
    let current = lock
        .plugins
        .get_mut(name)
        .ok_or_else(|| InstallError::NotInstalled { name: name.to_string(), scope: scope.clone() })?;
    let Some(mut previous) = current.previous.take() else {
        return Err(InstallError::NoPrevious { name: name.to_string() });
    };
    let dir = previous.resolve_dir(&target.plugins_dir).map_err(InstallError::LockedDir)?;
    if !dir.join("plugin.toml").is_file() {
        return Err(InstallError::PreviousGone { dir });
    }
    previous.granted.retain(|g| current.granted.contains(g));
    let from = current.version.clone();
    let to = previous.version.clone();
    let replaced = std::mem::replace(current, *previous);
    current.previous = Some(Box::new(replaced));
    current.installed = jiff::Timestamp::now().to_string();
    lock.save(&target.lock_path).map_err(InstallError::Lockfile)?;
    Ok((from, to))
}

/// Change an installed plugin's grants in its lockfile.
///
/// # Errors
/// It is not installed here, or the lockfile cannot be written.
pub fn set_grants(target: &Target, name: &str, caps: &[Capability]) -> Result<(), InstallError> {
    let _lock = ScopeLock::take(target, &|_| {})?;
    let mut lock = target.lockfile()?;
    let entry = lock.plugins.get_mut(name).ok_or_else(|| InstallError::NotInstalled {
        name: name.to_string(),
        scope: target.scope.label().to_string(),
    })?;
    entry.set_granted(caps);
    lock.save(&target.lock_path).map_err(InstallError::Lockfile)
}

/// One installed plugin checked against its lockfile.
#[derive(Debug, Clone)]
pub struct Verification {
    pub name: String,
    pub version: semver::Version,
    pub signer: Option<String>,
    /// Empty when everything matches.
    pub problems: Vec<String>,
}

/// Check every plugin installed in `target`: its files still hash to what the lockfile pins,
/// and its signer is still trusted.
///
/// # Errors
/// The lockfile or trust store cannot be read.
pub fn verify(home: &Path, target: &Target) -> Result<Vec<Verification>, InstallError> {
    let lock = target.lockfile()?;
    let trust = TrustStore::load(home)?;
    let mut out = Vec::new();
    for (name, entry) in &lock.plugins {
        let mut problems = file_problems(target, entry);
        if let Some(signer) = &entry.signer {
            let key_id = signer.split_whitespace().next().unwrap_or_default();
            if !trust.keys.contains_key(key_id) {
                problems.push(format!("its signer {signer} is no longer in your trust store"));
            }
        }
        out.push(Verification {
            name: name.clone(),
            version: entry.version.clone(),
            signer: entry.signer.clone(),
            problems,
        });
    }
    Ok(out)
}

/// How an installed plugin's files differ from what its entry pins (empty: they match).
fn file_problems(target: &Target, entry: &LockEntry) -> Vec<String> {
    let dir = match entry.resolve_dir(&target.plugins_dir) {
        Ok(dir) => dir,
        Err(e) => return vec![e.to_string()],
    };
    let manifest_path = dir.join("plugin.toml");
    let bytes = match std::fs::read(&manifest_path) {
        Ok(bytes) => bytes,
        Err(e) => return vec![format!("{}: {e}", manifest_path.display())],
    };
    if sha256_hex(&bytes) != entry.manifest_sha256 {
        return vec![format!("{} changed since it was installed", manifest_path.display())];
    }
    let wasm_name = std::str::from_utf8(&bytes)
        .ok()
        .and_then(|t| Manifest::parse(t, &manifest_path).ok())
        .map_or_else(|| "plugin.wasm".to_string(), |m| m.wasm);
    let wasm_path = dir.join(wasm_name);
    match std::fs::read(&wasm_path) {
        Err(e) => vec![format!("{}: {e}", wasm_path.display())],
        Ok(wasm) if sha256_hex(&wasm) != entry.wasm_sha256 => vec![format!(
            "{} changed since it was installed (it no longer has the pinned sha256 {}); {}",
            wasm_path.display(),
            short_digest(&entry.wasm_sha256),
            reinstall_hint(&entry.source)
        )],
        Ok(_) => Vec::new(),
    }
}
