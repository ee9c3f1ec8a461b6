//! Builds the guest plugins the runtime and end-to-end tests load.

use std::path::Path;

fn main() {
    // Read at run time: a build script compiled for one checkout may run for another.
    let root = Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR")).join("../..");
    let guests = [
        "tests/plugins/evil",
        "tests/plugins/not-a-tool",
        "tests/plugins/legacy-v1",
        "tests/plugins/probe-hook",
        "tests/plugins/probe-memory",
        "tests/plugins/probe-context",
        "tests/plugins/sly-hook",
        "tests/plugins/flood",
        "tests/plugins/flaky-adapter",
    ];
    for g in talaria_guest_build::build(&root, &guests) {
        let var = g.package.trim_start_matches("talaria-test-").replace('-', "_").to_uppercase();
        println!("cargo:rustc-env=TALARIA_TEST_{var}_WASM={}", g.wasm.display());
    }
}
