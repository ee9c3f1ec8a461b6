//! Builds the misbehaving guest plugins the sandbox tests load.

use std::path::Path;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for g in talaria_guest_build::build(&root, &["tests/plugins/evil", "tests/plugins/not-a-tool"]) {
        let var = g.package.trim_start_matches("talaria-test-").replace('-', "_").to_uppercase();
        println!("cargo:rustc-env=TALARIA_TEST_{var}_WASM={}", g.wasm.display());
    }
}
