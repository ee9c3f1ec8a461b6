//! Link options for the `talaria` binary: how its code and data are laid out, for a fast start
//! in little memory. None of them changes what the binary does.

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os != "linux" || env != "gnu" {
        return;
    }
    // The binary is position-independent (ASLR), so the loader patches every pointer in its
    // data at start: about 100,000 of them. Packed (DT_RELR, glibc 2.36 and later) their table
    // is a few kilobytes instead of 2.4 MB, which each start read page by page.
    println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");

    // The functions common runs execute, side by side (see scripts/hot-symbols): a start then
    // maps those few megabytes instead of pages all over the 100 MB file. The linker (LLD, rustc's
    // default here) skips names it does not find.
    let order = Path::new(env!("CARGO_MANIFEST_DIR")).join("hot-symbols.txt");
    println!("cargo:rerun-if-changed={}", order.display());
    if order.is_file() && uses_lld(&std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default()) {
        println!("cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}", order.display());
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}

/// Whether the binary is linked by LLD, which reads a symbol ordering file (GNU ld does not):
/// rustc's own LLD is the default on x86_64 Linux since Rust 1.90, unless another linker is
/// configured; elsewhere only when the flags name it.
fn uses_lld(arch: &str) -> bool {
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let linker = std::env::vars().any(|(k, _)| k.starts_with("CARGO_TARGET_") && k.ends_with("_LINKER"));
    let default = arch == "x86_64" && !linker && !flags.contains("linker");
    default || flags.contains("lld")
}
