//! The compile cache: components compiled once, loaded in well under a millisecond after.
//!
//! An entry is keyed by the sha256 of the wasm and the engine's fingerprint, and lives in
//! `$TALARIA_HOME/cache/plugins` (mode 0700). Beside each compiled file is the blake3 hash it had
//! when written; loading native code is only safe for code this host compiled, so an entry is checked
//! against that hash before it is loaded (and must not be replaced or written while loading); an
//! entry that does not match is compiled again and replaced, never loaded.
//!
//! What a component's `list` export gave is kept beside, by wasm hash, in one listing file
//! per component: either its checked tool specs, or the failure (a trap, a missed deadline, a
//! refused listing) with its text. Either way a later start reads one small file and neither
//! compiles nor instantiates the plugin; a failure is so remembered until the component
//! changes (a new hash) or the limits it was checked under do. A listing that succeeds
//! replaces a remembered failure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use wasmtime::Engine;
use wasmtime::component::Component;

use talaria_protocol::ToolSpec;

use crate::exports::Surface;
use crate::fsutil;
use crate::listing::SpecLimits;

/// Where a component came from this time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded from the cache.
    Hit,
    /// Not cached yet: compiled and stored.
    Compiled,
    /// The cached file did not match its recorded hash: compiled again and replaced.
    Replaced,
    /// Compiled into the binary when it was built (a bundled plugin): nothing compiled or cached.
    Precompiled,
}

/// The on-disk cache.
#[derive(Debug, Clone)]
pub struct CompileCache {
    dir: PathBuf,
}

impl CompileCache {
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The compiled file for a wasm hash and engine fingerprint.
    pub fn entry(&self, wasm_sha256: &str, fingerprint: &str) -> PathBuf {
        self.dir.join(format!("{wasm_sha256}-{fingerprint}.cwasm"))
    }

    fn hash_file(entry: &Path) -> PathBuf {
        entry.with_extension("cwasm.b3")
    }

    /// The listing (tool specs, or a remembered failure) kept for a wasm hash.
    pub fn specs_file(&self, wasm_sha256: &str) -> PathBuf {
        self.dir.join(format!("{wasm_sha256}.tools.json"))
    }

    /// The listing kept for a wasm hash; `None` when there is none or it cannot be read (then
    /// the plugin is listed afresh and the file replaced).
    pub(crate) fn listing(&self, wasm_sha256: &str) -> Option<Listing> {
        let bytes = std::fs::read(self.specs_file(wasm_sha256)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Keep `listing` for a wasm hash, readable only by the user. Not synced to disk: a listing
    /// lost or emptied by a power cut does not read back, and the plugin is listed afresh.
    ///
    /// # Errors
    /// The cache directory or file cannot be written.
    pub(crate) fn keep_listing(&self, wasm_sha256: &str, listing: &Listing) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(listing).map_err(std::io::Error::other)?;
        fsutil::private_dir(&self.dir)
            .and_then(|()| fsutil::write_private_cached(&self.specs_file(wasm_sha256), &bytes))
    }

    /// Load the component from the cache, or compile `wasm` and cache it.
    ///
    /// # Errors
    /// The wasm does not compile (the message is wasmtime's).
    pub fn load_or_compile(
        &self,
        engine: &Engine,
        fingerprint: &str,
        wasm_sha256: &str,
        wasm: impl FnOnce() -> std::io::Result<Vec<u8>>,
    ) -> Result<(Component, CacheOutcome), String> {
        let entry = self.entry(wasm_sha256, fingerprint);
        let outcome = match verified(&entry) {
            Verified::Match(before) => match deserialize_file(engine, &entry) {
                // A file replaced or rewritten between the check and the load changes its
                // inode or its ctime (which no one can set back): then it is not used.
                Ok(component) if identity(&entry).as_ref() == Some(&before) => {
                    return Ok((component, CacheOutcome::Hit));
                }
                Ok(_) => {
                    tracing::warn!("compile cache entry {} changed while loading; compiling again", entry.display());
                    CacheOutcome::Replaced
                }
                Err(e) => {
                    tracing::warn!("compile cache entry {} would not load ({e}); compiling again", entry.display());
                    CacheOutcome::Replaced
                }
            },
            Verified::Mismatch => {
                tracing::warn!(
                    "compile cache entry {} does not match its recorded hash; compiling again",
                    entry.display()
                );
                CacheOutcome::Replaced
            }
            Verified::Missing => CacheOutcome::Compiled,
        };
        let wasm = wasm().map_err(|e| format!("cannot read the component: {e}"))?;
        let started = Instant::now();
        let compiled = engine.precompile_component(&wasm).map_err(|e| format!("{e:#}"))?;
        tracing::debug!("compiled {wasm_sha256} in {:?}", started.elapsed());
        let component = deserialize(engine, &compiled).map_err(|e| format!("{e:#}"))?;
        let stored =
            fsutil::private_dir(&self.dir).and_then(|()| fsutil::write_private(&entry, &compiled)).and_then(|()| {
                fsutil::write_private(&Self::hash_file(&entry), blake3::hash(&compiled).to_hex().as_bytes())
            });
        if let Err(e) = stored {
            not_kept(&e, || format!("could not write the compile cache at {}: {e}", self.dir.display()));
        }
        Ok((component, outcome))
    }
}

/// What a component's `list` gave, kept by wasm hash.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Listing {
    /// What the component exports and imports, to check it against the manifest that names it.
    pub surface: Surface,
    /// The limits it was checked under.
    pub limits: SpecLimits,
    pub listed: Listed,
}

/// The outcome of a `list` call.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Listed {
    /// The checked specs.
    Tools(Vec<ToolSpec>),
    /// It trapped, missed its deadline or was refused: the refusal as it was reported.
    Failed(String),
}

enum Verified {
    /// The hash matched; the file's identity when it was hashed.
    Match(Identity),
    Mismatch,
    Missing,
}

/// What changes whenever a file is replaced or written: device, inode, size, ctime.
type Identity = (u64, u64, u64, i64, i64);

fn identity_of(meta: &std::fs::Metadata) -> Identity {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino(), meta.size(), meta.ctime(), meta.ctime_nsec())
}

fn identity(path: &Path) -> Option<Identity> {
    std::fs::metadata(path).ok().map(|m| identity_of(&m))
}

/// Whether the entry's bytes hash to what was recorded when it was written.
#[allow(unsafe_code)]
fn verified(entry: &Path) -> Verified {
    let Ok(file) = std::fs::File::open(entry) else { return Verified::Missing };
    let Ok(recorded) = std::fs::read_to_string(CompileCache::hash_file(entry)) else { return Verified::Mismatch };
    let Ok(meta) = file.metadata() else { return Verified::Mismatch };
    // SAFETY: a read-only private mapping of our own cache file, dropped before this returns;
    // if the file changes underneath, the hash or the identity check after loading catches it.
    let Ok(map) = (unsafe { memmap2::MmapOptions::new().populate().map(&file) }) else { return Verified::Mismatch };
    if blake3::hash(&map).to_hex().as_str() == recorded.trim() {
        Verified::Match(identity_of(&meta))
    } else {
        Verified::Mismatch
    }
}

/// Load a compiled file this host produced, by mapping it rather than copying it.
#[allow(unsafe_code)]
fn deserialize_file(engine: &Engine, path: &Path) -> wasmtime::Result<Component> {
    // SAFETY: as for `deserialize`: the file was written by `precompile_component` of an engine
    // with this fingerprint into our 0700 cache directory (which no plugin can see), and was just
    // verified against the hash recorded when it was written; the caller checks it was not
    // replaced or written while loading.
    unsafe { Component::deserialize_file(engine, path) }
}

/// Load compiled code this host produced.
#[allow(unsafe_code)]
pub(crate) fn deserialize(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: wasmtime requires that the bytes came from `precompile_component` of a compatible
    // engine. They were either produced just now by this engine, read from the cache directory
    // (0700, our own) where they were written by such an engine — the key includes the engine's
    // compatibility fingerprint — and verified against the hash recorded at write time, or they
    // are part of this binary, compiled by its build script with the same engine configuration
    // (talaria-engine) for the fingerprint checked before this call. wasmtime itself refuses code
    // of another version, configuration or CPU.
    unsafe { Component::deserialize(engine, bytes) }
}

/// Load compiled code that is part of this binary from where it lies, when it starts on a page
/// boundary (the bundled plugins' does): no copy, and only the pages a call runs are read in.
/// Otherwise, or when wasmtime will not run it there, it is copied out ([`deserialize`]).
///
/// wasmtime registers code by its address, once per process: the component made from a given
/// static is kept here and shared by every runtime of the process's engine (the process has
/// one); another engine gets a copy.
#[allow(unsafe_code)]
pub(crate) fn deserialize_static(engine: &Engine, bytes: &'static [u8]) -> wasmtime::Result<Component> {
    static IN_PLACE: std::sync::Mutex<BTreeMap<usize, Component>> = std::sync::Mutex::new(BTreeMap::new());
    let at = bytes.as_ptr().addr();
    if !at.is_multiple_of(talaria_engine::page_size()) {
        return deserialize(engine, bytes);
    }
    let mut loaded = IN_PLACE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(component) = loaded.get(&at) {
        return if Engine::same(component.engine(), engine) {
            Ok(component.clone())
        } else {
            deserialize(engine, bytes)
        };
    }
    // SAFETY: as for `deserialize` (these bytes are part of this binary); and the memory lives
    // as long as the process and is never written: a static of the binary's read-only data,
    // of which the engine only makes the text executable (see `talaria_engine::config`). It
    // is loaded once (the map above), as wasmtime's registry of code by address requires.
    match unsafe { Component::deserialize_raw(engine, std::ptr::NonNull::from(bytes)) } {
        Ok(component) => {
            loaded.insert(at, component.clone());
            Ok(component)
        }
        Err(e) => {
            tracing::debug!("compiled code cannot run where the binary holds it ({e}): copying it");
            drop(loaded);
            deserialize(engine, bytes)
        }
    }
}

/// Report a cache write that failed. In a home that cannot be written (a read-only mount,
/// another user's home) every write fails the same way: that is said once, not per plugin.
pub(crate) fn not_kept(e: &std::io::Error, what: impl FnOnce() -> String) {
    static TOLD: std::sync::Once = std::sync::Once::new();
    if matches!(e.kind(), std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem) {
        TOLD.call_once(|| {
            tracing::warn!("talaria's home cannot be written ({e}): compiled plugins are not cached, so each start compiles them again");
        });
    } else {
        tracing::warn!("{}", what());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_listing_reads_back_and_one_a_power_cut_emptied_is_no_listing() {
        let dir = tempfile::tempdir().expect("dir");
        let cache = CompileCache::new(dir.path().join("plugins"));
        let listing = Listing {
            surface: Surface { exports: vec!["talaria:plugin/tools@0.2.0".into()], imports: Vec::new() },
            limits: SpecLimits { max_tools: 8, max_spec_bytes: 1024 },
            listed: Listed::Failed("trapped".into()),
        };
        cache.keep_listing("abc", &listing).expect("keep");
        let back = cache.listing("abc").expect("read back");
        assert!(matches!(back.listed, Listed::Failed(ref why) if why == "trapped"));
        assert_eq!(back.surface, listing.surface);
        // Unsynced: after a power cut the renamed file may be there but empty.
        std::fs::write(cache.specs_file("abc"), b"").expect("empty it");
        assert!(cache.listing("abc").is_none(), "listed afresh");
    }
}
