//! The plugins that ship inside the `talaria` binary: the files, web, terminal and weather tools,
//! the compressor context engine, the journal memory provider, the guard and audit hooks, and
//! the telegram, webhook, matrix, discord and slack platform adapters.
//!
//! `build.rs` compiles each crate under `plugins/` for wasm32-wasip2 as part of the ordinary build
//! and embeds the component with its manifest and sha256, so a fresh checkout needs no extra step.
//! It also compiles each component to native code for the engine configuration the runtime uses
//! (`talaria-engine`) and embeds that too, so the first run in a fresh home compiles nothing: the
//! runtime loads the embedded code when its engine matches, and compiles (and caches) as usual
//! when it does not (another CPU, another wasmtime).
//!
//! ```
//! assert!(talaria_bundled::PLUGINS.iter().any(|p| p.manifest.contains("name = \"files\"")));
//! assert!(talaria_bundled::PLUGINS.iter().all(|p| !p.precompiled.is_empty()));
//! assert!(talaria_bundled::PLUGINS.iter().all(|p| p.precompiled.as_ptr().addr() % 4096 == 0));
//! ```

use talaria_runtime::{Embedded, Precompiled};

/// One embedded plugin.
#[derive(Debug, Clone, Copy)]
pub struct Bundled {
    /// The plugin.toml text.
    pub manifest: &'static str,
    /// The component.
    pub wasm: &'static [u8],
    /// sha256 of `wasm`, hex.
    pub sha256: &'static str,
    /// The component compiled at build time for an engine of fingerprint [`ENGINE`].
    pub precompiled: &'static [u8],
}

impl Bundled {
    /// As the runtime takes it.
    pub fn embedded(&self) -> Embedded {
        Embedded {
            manifest: self.manifest,
            wasm: self.wasm,
            sha256: self.sha256,
            precompiled: Some(Precompiled { code: self.precompiled, fingerprint: ENGINE }),
        }
    }
}

/// Every bundled plugin, as the runtime takes them.
pub fn embedded() -> Vec<Embedded> {
    PLUGINS.iter().map(Bundled::embedded).collect()
}

/// Bytes that start on a page boundary (4 KiB; the runtime copies them out instead where pages
/// are larger).
#[repr(C, align(4096))]
struct PageAligned<T: ?Sized>(T);

include!(concat!(env!("OUT_DIR"), "/bundled.rs"));
