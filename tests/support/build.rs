//! Builds the guest plugins the runtime and end-to-end tests load.

use std::path::Path;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let guests = [
        "tests/plugins/evil",
        "tests/plugins/not-a-tool",
        "tests/plugins/legacy-v1",
        "tests/plugins/probe-hook",
        "tests/plugins/probe-memory",
        "tests/plugins/probe-context",
        "tests/plugins/sly-hook",
        "tests/plugins/flood",
    ];
    for g in talaria_guest_build::build(&root, &guests) {
        let var = g.package.trim_start_matches("talaria-test-").replace('-', "_").to_uppercase();
        println!("cargo:rustc-env=TALARIA_TEST_{var}_WASM={}", g.wasm.display());
    }
}
