//! Build-script helper: compiles guest plugin crates of this workspace for `wasm32-wasip2`.
//!
//! Bundled plugins (`host/bundled`) and the misbehaving test plugins (`tests/support`) are built
//! the same way, as part of the ordinary `cargo build`: their build scripts call [`build`], which
//! runs a nested cargo with the workspace's `plugin` profile into a target directory of its own
//! (so it never waits on the outer cargo's lock) and reports where each component landed.
//!
//! ```no_run
//! // build.rs
//! let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
//! let built = talaria_guest_build::build(&root, &["files", "web"]);
//! for guest in &built {
//!     println!("cargo:rustc-env=WASM_{}={}", guest.package.to_uppercase(), guest.wasm.display());
//! }
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;

/// The target every guest is built for.
pub const TARGET: &str = "wasm32-wasip2";

/// One built guest.
#[derive(Debug, Clone)]
pub struct Guest {
    /// The cargo package name.
    pub package: String,
    /// The package directory (holds plugin.toml for plugins).
    pub dir: PathBuf,
    /// The built component.
    pub wasm: PathBuf,
}

/// Build `packages` (paths relative to the workspace `root`, e.g. `plugins/files`) and return
/// where each component is. Panics with cargo's own output if the build fails: this runs in
/// build scripts, where a panic is how a failure is reported.
pub fn build(root: &Path, packages: &[&str]) -> Vec<Guest> {
    let root = root.canonicalize().unwrap_or_else(|e| panic!("workspace root {}: {e}", root.display()));
    println!("cargo:rerun-if-changed={}", root.join("sdk").display());
    // Host crates guests share (the files plugin's text editing).
    println!("cargo:rerun-if-changed={}", root.join("host/edit").display());
    println!("cargo:rerun-if-changed={}", root.join("wit").display());
    println!("cargo:rerun-if-changed={}", root.join("Cargo.lock").display());

    let guests: Vec<Guest> = packages
        .iter()
        .map(|rel| {
            let dir = root.join(rel);
            println!("cargo:rerun-if-changed={}", dir.display());
            let package = package_name(&dir);
            // A library (cdylib) guest's file uses underscores; a binary keeps its package name.
            let out = target_dir(&root).join(TARGET).join("plugin");
            let lib = out.join(format!("{}.wasm", package.replace('-', "_")));
            let wasm = if dir.join("src/main.rs").exists() { out.join(format!("{package}.wasm")) } else { lib };
            Guest { package, dir, wasm }
        })
        .collect();

    ensure_target();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args(["build", "--profile", "plugin", "--target", TARGET, "--target-dir"])
        .arg(target_dir(&root));
    for g in &guests {
        cmd.args(["-p", &g.package]);
    }
    // The outer build's flags and target are for the host, not for guests.
    for var in
        ["RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS", "CARGO_TARGET_DIR", "CARGO_BUILD_TARGET", "RUSTC_WORKSPACE_WRAPPER"]
    {
        cmd.env_remove(var);
    }
    let out = cmd.output().unwrap_or_else(|e| panic!("could not run cargo for the guest plugins: {e}"));
    if !out.status.success() {
        panic!(
            "building guest plugins for {TARGET} failed (is the target installed? `rustup target add {TARGET}`):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for g in &guests {
        assert!(g.wasm.exists(), "cargo reported success but {} is missing", g.wasm.display());
    }
    guests
}

/// rust-toolchain.toml lists the target, but rustup only honours that when it installs the
/// toolchain; a machine that already had 1.95.0 lacks it. Add it once, so no manual step is needed.
fn ensure_target() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let sysroot = Command::new(rustc).args(["--print", "sysroot"]).output().ok();
    let sysroot = sysroot.map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if sysroot.is_some_and(|root| root.join("lib/rustlib").join(TARGET).exists()) {
        return;
    }
    let added = Command::new("rustup").args(["target", "add", TARGET]).status();
    if !added.is_ok_and(|s| s.success()) {
        println!("cargo:warning=could not add the {TARGET} target; run `rustup target add {TARGET}`");
    }
}

/// Guests get a target directory of their own beside the host's (or `TALARIA_GUEST_TARGET_DIR`,
/// for checkouts that share one host target directory).
fn target_dir(root: &Path) -> PathBuf {
    println!("cargo:rerun-if-env-changed=TALARIA_GUEST_TARGET_DIR");
    if let Some(dir) = std::env::var_os("TALARIA_GUEST_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir).join("guests"),
        None => root.join("target").join("guests"),
    }
}

/// The `name` in a package's Cargo.toml `[package]` table.
fn package_name(dir: &Path) -> String {
    let manifest = dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    let mut in_package = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package && let Some(rest) = line.strip_prefix("name") {
            let value = rest.trim_start().trim_start_matches('=').trim().trim_matches('"');
            return value.to_string();
        }
    }
    panic!("{}: no [package] name", manifest.display());
}
