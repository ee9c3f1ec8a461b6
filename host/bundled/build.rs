//! Builds the bundled plugins for wasm32-wasip2 and generates the table that embeds them.

use std::fmt::Write as _;
use std::path::Path;

use sha2::Digest;

const BUNDLED: &[&str] = &[
    "plugins/files",
    "plugins/web",
    "plugins/terminal",
    "plugins/weather",
    "plugins/compressor",
    "plugins/guard",
    "plugins/audit",
    "plugins/journal",
];

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let guests = talaria_guest_build::build(&root, BUNDLED);
    let mut table = String::from("pub static PLUGINS: &[Bundled] = &[\n");
    for g in &guests {
        let wasm = std::fs::read(&g.wasm).unwrap_or_else(|e| panic!("{}: {e}", g.wasm.display()));
        let sha = hex::encode(sha2::Sha256::digest(&wasm));
        let manifest = g.dir.join("plugin.toml");
        println!("cargo:rerun-if-changed={}", g.wasm.display());
        writeln!(
            table,
            "    Bundled {{ manifest: include_str!({:?}), wasm: include_bytes!({:?}), sha256: {sha:?} }},",
            manifest.canonicalize().unwrap_or(manifest.clone()),
            g.wasm
        )
        .unwrap_or_default();
    }
    table.push_str("];\n");
    let out = Path::new(&std::env::var("OUT_DIR").unwrap_or_else(|_| panic!("OUT_DIR is not set"))).join("bundled.rs");
    std::fs::write(&out, table).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
}
