//! The compile cache: components compiled once, loaded in well under a millisecond after.
//!
//! An entry is keyed by the sha256 of the wasm and the engine's fingerprint, and lives in
//! `$TALARIA_HOME/cache/plugins` (mode 0700). Beside each compiled file is the blake3 hash it had
//! when written; loading native code is only safe for code this host compiled, so an entry is read
//! once and its bytes are checked against that hash before they are loaded; an entry that does not
//! match is compiled again and replaced, never loaded. Tool specs are
//! cached beside, by wasm hash, so listing tools needs no compile at all.

use std::path::{Path, PathBuf};
use std::time::Instant;

use wasmtime::Engine;
use wasmtime::component::Component;

use crate::fsutil;

/// Where a component came from this time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded from the cache.
    Hit,
    /// Not cached yet: compiled and stored.
    Compiled,
    /// The cached file did not match its recorded hash: compiled again and replaced.
    Replaced,
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

    /// The cached specs for a wasm hash.
    pub fn specs_file(&self, wasm_sha256: &str) -> PathBuf {
        self.dir.join(format!("{wasm_sha256}.tools.json"))
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
        // Read once: the bytes that are checked are the bytes that are loaded.
        let outcome = match read_verified(&entry) {
            Verified::Match(bytes) => match deserialize(engine, &bytes) {
                Ok(component) => return Ok((component, CacheOutcome::Hit)),
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
            tracing::warn!("could not write the compile cache at {}: {e}", self.dir.display());
        }
        Ok((component, outcome))
    }
}

enum Verified {
    Match(Vec<u8>),
    Mismatch,
    Missing,
}

/// The entry's bytes, if they hash to what was recorded when it was written.
fn read_verified(entry: &Path) -> Verified {
    let Ok(bytes) = std::fs::read(entry) else { return Verified::Missing };
    let Ok(recorded) = std::fs::read_to_string(CompileCache::hash_file(entry)) else { return Verified::Mismatch };
    if blake3::hash(&bytes).to_hex().as_str() == recorded.trim() { Verified::Match(bytes) } else { Verified::Mismatch }
}

/// Load compiled code this host produced.
#[allow(unsafe_code)]
fn deserialize(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: wasmtime requires that the bytes came from `precompile_component` of a compatible
    // engine. They were either produced just now by this engine, or read from the cache
    // directory (0700, our own) where they were written by such an engine — the key includes the
    // engine's compatibility fingerprint — and verified against the hash recorded at write time.
    unsafe { Component::deserialize(engine, bytes) }
}
