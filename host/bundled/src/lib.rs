//! The plugins that ship inside the `talaria` binary: files, web, terminal and weather.
//!
//! `build.rs` compiles each crate under `plugins/` for wasm32-wasip2 as part of the ordinary build
//! and embeds the component with its manifest and sha256, so a fresh checkout needs no extra step.
//!
//! ```
//! assert!(talaria_bundled::PLUGINS.iter().any(|p| p.manifest.contains("name = \"files\"")));
//! ```

/// One embedded plugin.
#[derive(Debug, Clone, Copy)]
pub struct Bundled {
    /// The plugin.toml text.
    pub manifest: &'static str,
    /// The component.
    pub wasm: &'static [u8],
    /// sha256 of `wasm`, hex.
    pub sha256: &'static str,
}

include!(concat!(env!("OUT_DIR"), "/bundled.rs"));
