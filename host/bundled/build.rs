//! Builds the bundled plugins for wasm32-wasip2, compiles each for the runtime's engine, and
//! generates the table that embeds both.

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
    "plugins/telegram",
    "plugins/webhook",
    "plugins/matrix",
    "plugins/discord",
    "plugins/slack",
];

fn main() {
    // Read at run time: a build script compiled for one checkout may run for another.
    let root = Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR")).join("../..");
    let guests = talaria_guest_build::build(&root, BUNDLED);
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap_or_else(|_| panic!("OUT_DIR is not set")));
    // The runtime's engine configuration: code compiled here loads there without compiling.
    let engine = talaria_engine::wasmtime::Engine::new(&talaria_engine::config())
        .unwrap_or_else(|e| panic!("cannot make the engine that precompiles the bundled plugins: {e}"));
    let mut table = format!(
        "/// The engine fingerprint the embedded code was compiled for.\npub static ENGINE: &str = {:?};\n\npub static PLUGINS: &[Bundled] = &[\n",
        talaria_engine::fingerprint(&engine)
    );
    // Each plugin's compiled code starts on a page of its own, so the runtime can run it from
    // the binary's pages rather than copy it out (its text section is page-aligned inside).
    let mut codes = String::new();
    for g in &guests {
        let wasm = std::fs::read(&g.wasm).unwrap_or_else(|e| panic!("{}: {e}", g.wasm.display()));
        let sha = hex::encode(sha2::Sha256::digest(&wasm));
        let manifest = g.dir.join("plugin.toml");
        println!("cargo:rerun-if-changed={}", g.wasm.display());
        let code = engine
            .precompile_component(&wasm)
            .unwrap_or_else(|e| panic!("{}: does not compile for the runtime's engine: {e:?}", g.wasm.display()));
        let cwasm = out_dir.join(format!("{sha}.cwasm"));
        std::fs::write(&cwasm, code).unwrap_or_else(|e| panic!("{}: {e}", cwasm.display()));
        let n = codes.lines().count();
        writeln!(codes, "static CODE_{n}: &PageAligned<[u8]> = &PageAligned(*include_bytes!({cwasm:?}));")
            .unwrap_or_default();
        writeln!(
            table,
            "    Bundled {{ manifest: include_str!({:?}), wasm: include_bytes!({:?}), sha256: {sha:?}, precompiled: &CODE_{n}.0 }},",
            manifest.canonicalize().unwrap_or(manifest.clone()),
            g.wasm,
        )
        .unwrap_or_default();
    }
    table.push_str("];\n\n");
    table.push_str(&codes);
    let out = out_dir.join("bundled.rs");
    std::fs::write(&out, table).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
}
