//! `talaria plugin build`: compile a plugin project into the component its `plugin.toml` names.
//!
//! | language | compiler | command |
//! |---|---|---|
//! | Rust | cargo | `cargo build --release --target wasm32-wasip2 --target-dir target`, then the `.wasm` is copied |
//! | JavaScript | componentize-js | `componentize-js app.js --wit wit -n WORLD -d fetch-event http -o plugin.wasm` |
//! | Python | componentize-py | `componentize-py -d wit -w WORLD componentize app -o plugin.wasm` |
//!
//! WORLD follows the manifest's `kind` (`tool-plugin` for a tool). A JavaScript build keeps
//! `fetch()` (the `http` feature) when the manifest requests `network` or `secrets`; it always
//! keeps clocks and randomness, without which `Date.now()` and `Math.random()` trap.
//!
//! `talaria plugin build` and `plugin dev` run every one of these programs in the command
//! sandbox ([`Confine`], [`BuildSandbox`]): a build runs the project's own code (`build.rs`,
//! `app.py`), so it gets no more than a command the model runs would.

mod confine;

use std::path::{Path, PathBuf};
use std::time::Instant;

pub use confine::{BuildSandbox, Confine, REGISTRIES};
use confine::{Runner, Step};

use anyhow::{Context as _, bail};
use owo_colors::OwoColorize as _;
use talaria_core::runtime::{Capability, Kind, Manifest};

use super::Lang;

/// The Rust target plugins are built for: its output is a component.
const RUST_TARGET: &str = "wasm32-wasip2";

/// Lines of a failed compiler's output kept in the error.
const OUTPUT_LINES: usize = 40;

const INSTALL_RUST_TARGET: &str = "rustup target add wasm32-wasip2";
const INSTALL_COMPONENTIZE_JS: &str = "npm install -g @bytecodealliance/componentize-js@0.23";
const INSTALL_COMPONENTIZE_PY: &str = "pip install componentize-py==0.25.1";

/// How to build, beyond the project itself.
#[derive(Clone, Debug, Default)]
pub struct BuildOptions {
    /// An optimised build: cargo's `--release` profile (JavaScript and Python builds are the same
    /// either way).
    pub release: bool,
    /// Rust: cargo's target directory [default: `$CARGO_TARGET_DIR`, else the project's `target/`].
    pub target_dir: Option<PathBuf>,
    /// Where the compilers run [default: as the user; the `talaria` commands confine them].
    pub confine: Confine,
}

/// Build the project in `dir` into the component its plugin.toml names (`wasm`, default
/// `plugin.wasm`); returns its path.
///
/// # Errors
/// As for [`build_with`].
pub fn build(dir: &Path, lang: Lang, release: bool) -> anyhow::Result<PathBuf> {
    build_with(dir, lang, &BuildOptions { release, ..BuildOptions::default() })
}

/// [`build`] with every option.
///
/// # Errors
/// No valid plugin.toml in `dir`; the language's compiler (or Rust's `wasm32-wasip2` target) is
/// not installed, with the command that installs it; the compiler failed (its last 40 lines of
/// output are in the error); the result is not a WebAssembly component.
pub fn build_with(dir: &Path, lang: Lang, options: &BuildOptions) -> anyhow::Result<PathBuf> {
    let manifest_path = dir.join("plugin.toml");
    if !manifest_path.is_file() {
        bail!(
            "{} has no plugin.toml, so it is not a plugin project (`talaria plugin new NAME` makes one)",
            dir.display()
        );
    }
    let manifest = Manifest::load(&manifest_path)?;
    let root = std::path::absolute(dir).with_context(|| format!("cannot resolve {}", dir.display()))?;
    let out = root.join(&manifest.wasm);
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let started = Instant::now();
    match lang {
        Lang::Rust => rust(&root, &manifest, options, &out)?,
        Lang::Js => javascript(&Runner::new(&options.confine, &root, &[]), &root, &manifest, &out)?,
        Lang::Python => python(&Runner::new(&options.confine, &root, &[]), &root, &manifest, &out)?,
    }
    check_component(&out)?;
    let size = std::fs::metadata(&out).map(|m| m.len()).unwrap_or_default();
    anstream::eprintln!(
        "{} {} ({}) in {:.1}s",
        "built".green().bold(),
        dir.join(&manifest.wasm).display(),
        human_size(size),
        started.elapsed().as_secs_f32()
    );
    Ok(out)
}

/// Say what is being built, with what.
fn announce(manifest: &Manifest, lang: Lang, with: &str) {
    anstream::eprintln!("{} {} ({lang}) with {with}…", "building".cyan().bold(), manifest.name);
}

fn rust(dir: &Path, manifest: &Manifest, options: &BuildOptions, out: &Path) -> anyhow::Result<()> {
    let cargo_toml = dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&cargo_toml).with_context(|| format!("cannot read {}", cargo_toml.display()))?;
    let lib = lib_name(&text).with_context(|| format!("in {}", cargo_toml.display()))?;
    let target_dir = match &options.target_dir {
        Some(t) => t.clone(),
        None => std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| dir.join("target"), PathBuf::from),
    };
    let target_dir = std::path::absolute(&target_dir).unwrap_or(target_dir);
    // A target directory outside the project is written too; it must exist to be shown, and
    // cargo is given its real path: the sandbox shows it there, and a path through a link
    // (a `target` that links elsewhere) would lead nowhere inside it, the build's output lost.
    let (target_dir, outside) = if target_dir.starts_with(dir) {
        (target_dir, Vec::new())
    } else {
        std::fs::create_dir_all(&target_dir).with_context(|| format!("cannot create {}", target_dir.display()))?;
        let real = target_dir.canonicalize().with_context(|| format!("cannot resolve {}", target_dir.display()))?;
        (real.clone(), vec![real])
    };
    let runner = Runner::new(&options.confine, dir, &outside);
    check_rust_target(&runner, dir)?;
    let profile = if options.release { "release" } else { "debug" };
    announce(manifest, Lang::Rust, &format!("cargo ({profile})"));
    let cargo =
        std::env::var_os("CARGO").map_or_else(|| on_path("cargo").unwrap_or_else(|| "cargo".into()), PathBuf::from);
    let mut step = Step::new(cargo, dir);
    step.args(["build", "--quiet", "--color", "never", "--target", RUST_TARGET, "--target-dir"]).arg(&target_dir);
    if options.release {
        step.arg("--release");
    }
    // Quiet, cargo writes only the compiler's warnings and errors: show the warnings.
    let missing = format!("install Rust from https://rustup.rs, then run `{INSTALL_RUST_TARGET}`");
    let warnings = run(&runner, &step, "cargo", &missing)?;
    if !warnings.trim().is_empty() {
        anstream::eprintln!("{}", warnings.trim_end());
    }
    let built = target_dir.join(RUST_TARGET).join(profile).join(format!("{lib}.wasm"));
    std::fs::copy(&built, out)
        .with_context(|| format!("cargo built no {} (is `crate-type = [\"cdylib\"]` set?)", built.display()))?;
    Ok(())
}

/// The file stem of the library cargo builds: `[lib] name`, else the package name with `-`
/// replaced by `_`.
fn lib_name(cargo_toml: &str) -> anyhow::Result<String> {
    let table: toml::Table = toml::from_str(cargo_toml)?;
    let lib = table.get("lib").and_then(|l| l.get("name")).and_then(toml::Value::as_str);
    let package = table.get("package").and_then(|p| p.get("name")).and_then(toml::Value::as_str);
    match lib.or(package) {
        Some(name) => Ok(name.replace('-', "_")),
        None => bail!("no [package] name: the plugin must be a package of its own, not a workspace"),
    }
}

/// The wasm32-wasip2 standard library must be installed for the toolchain `dir` uses (which
/// its `rust-toolchain.toml` may choose: so this runs where the build does).
fn check_rust_target(runner: &Runner<'_>, dir: &Path) -> anyhow::Result<()> {
    let rustc =
        std::env::var_os("RUSTC").map_or_else(|| on_path("rustc").unwrap_or_else(|| "rustc".into()), PathBuf::from);
    let mut step = Step::new(rustc, dir);
    step.args(["--print", "sysroot"]);
    let output = match runner.output(&step) {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!(
                "Rust is not installed (no rustc): install it from https://rustup.rs, then run `{INSTALL_RUST_TARGET}`"
            )
        }
        Err(e) => return Err(e).context("cannot run rustc"),
    };
    if !output.exit.success() {
        return Ok(()); // cargo will say what is wrong
    }
    let sysroot = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    if !sysroot.join("lib/rustlib").join(RUST_TARGET).is_dir() {
        bail!(
            "the Rust target {RUST_TARGET} is not installed for the toolchain in {}: run `{INSTALL_RUST_TARGET}`",
            sysroot.display()
        );
    }
    Ok(())
}

fn javascript(runner: &Runner<'_>, dir: &Path, manifest: &Manifest, out: &Path) -> anyhow::Result<()> {
    let entry = js_entry(dir)?;
    let local = dir.join("node_modules/.bin/componentize-js");
    let Some(program) = on_path("componentize-js").or_else(|| is_executable(&local).then_some(local)) else {
        bail!(
            "componentize-js is not installed: run `{INSTALL_COMPONENTIZE_JS}` (or `npm install` in {})",
            dir.display()
        );
    };
    let wit = wit_dir(dir)?;
    // stdio stays: an uncaught exception's message and stack go to stderr, where the host finds
    // them for the error (stdout goes nowhere).
    let mut disabled = vec!["fetch-event"];
    if !wants_network(manifest) {
        disabled.push("http");
    }
    announce(manifest, Lang::Js, "componentize-js");
    let mut step = Step::new(program, dir);
    step.arg(&entry).arg("--wit").arg(&wit).args(["-n", world(manifest), "-d"]).args(&disabled).arg("-o").arg(out);
    let missing = format!("it needs Node.js 18 or later; reinstall it with `{INSTALL_COMPONENTIZE_JS}`");
    match run(runner, &step, "componentize-js", &missing) {
        Ok(_) => Ok(()),
        // componentize-js does not say where the syntax error is; node does.
        Err(e) if e.to_string().contains("failed to parse JS source") => match syntax_error(runner, dir, &entry) {
            Some(why) => bail!("{entry} is not valid JavaScript:\n{why}"),
            None => Err(e),
        },
        Err(e) => Err(e),
    }
}

/// What `node --check` says about `entry`, when node is there and finds an error.
fn syntax_error(runner: &Runner<'_>, dir: &Path, entry: &str) -> Option<String> {
    let mut step = Step::new(on_path("node")?, dir);
    step.args(["--check", entry]);
    let output = runner.output(&step).ok()?;
    let text = String::from_utf8_lossy(&output.stderr);
    (!output.exit.success() && !text.trim().is_empty()).then(|| tail(&text, OUTPUT_LINES))
}

/// The module componentize-js compiles: package.json's `main`, else `app.js`.
fn js_entry(dir: &Path) -> anyhow::Result<String> {
    let package = dir.join("package.json");
    let main = match std::fs::read_to_string(&package) {
        Ok(text) => {
            let json: serde_json::Value =
                serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", package.display()))?;
            json.get("main").and_then(serde_json::Value::as_str).map(str::to_string)
        }
        Err(_) => None,
    };
    let entry = main.unwrap_or_else(|| "app.js".to_string());
    if !dir.join(&entry).is_file() {
        bail!("{} has no {entry}, the plugin's module (set `main` in package.json to use another file)", dir.display());
    }
    Ok(entry)
}

/// Whether the manifest requests anything that needs outgoing HTTP.
fn wants_network(manifest: &Manifest) -> bool {
    manifest.requests.iter().any(|c| matches!(c, Capability::Net(_) | Capability::Secret { .. }))
}

fn python(runner: &Runner<'_>, dir: &Path, manifest: &Manifest, out: &Path) -> anyhow::Result<()> {
    if !dir.join("app.py").is_file() {
        bail!("{} has no app.py, the plugin's module", dir.display());
    }
    let Some(program) = on_path("componentize-py") else {
        bail!("componentize-py is not installed: run `{INSTALL_COMPONENTIZE_PY}`");
    };
    let wit = wit_dir(dir)?;
    announce(manifest, Lang::Python, "componentize-py");
    let mut step = Step::new(program, dir);
    step.arg("-d").arg(&wit).args(["-w", world(manifest), "componentize", "app", "-o"]).arg(out);
    // Its errors come first; a Rust backtrace after them would push them out of the tail.
    step.env("RUST_BACKTRACE", "0").env_remove("RUST_LIB_BACKTRACE");
    run(runner, &step, "componentize-py", &format!("reinstall it with `{INSTALL_COMPONENTIZE_PY}`")).map(drop)
}

/// The project's WIT directory.
fn wit_dir(dir: &Path) -> anyhow::Result<PathBuf> {
    let wit = dir.join("wit");
    if !wit.is_dir() {
        bail!(
            "{} has no wit/ directory: the plugin builds against a copy of talaria's WIT (`talaria plugin new` writes wit/plugin.wit)",
            dir.display()
        );
    }
    Ok(wit)
}

/// The WIT world a component of the manifest's kinds targets.
fn world(manifest: &Manifest) -> &'static str {
    let kinds = manifest.kind_list();
    if kinds.contains(&Kind::Memory) {
        return "memory-plugin";
    }
    match kinds.first().copied() {
        Some(Kind::Tool) | None => "tool-plugin",
        Some(Kind::Memory) => "memory-plugin",
        Some(Kind::ContextEngine) => "context-engine-plugin",
        Some(Kind::Hook) => "hook-plugin",
        Some(Kind::Platform) => "platform-plugin",
    }
}

/// Run a compiler to the end; its output is shown only when it fails, and its stderr returned
/// when it succeeds. `missing` says how to install it when it cannot be started.
fn run(runner: &Runner<'_>, step: &Step, tool: &str, missing: &str) -> anyhow::Result<String> {
    let output = match runner.output(step) {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!("cannot run {tool} ({e}): {missing}"),
        Err(e) => return Err(e).with_context(|| format!("cannot run {tool}")),
    };
    if output.exit.success() {
        return Ok(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let text = if stderr.trim().is_empty() { String::from_utf8_lossy(&output.stdout) } else { stderr };
    bail!("{tool} failed ({}); its output ends:\n{}", output.exit, tail(&text, OUTPUT_LINES))
}

/// The last `max` lines of `text`, saying how many came before.
fn tail(text: &str, max: usize) -> String {
    let lines: Vec<&str> = text.trim_end().lines().collect();
    let skip = lines.len().saturating_sub(max);
    let kept = lines[skip..].join("\n");
    if skip == 0 { kept } else { format!("[… {skip} earlier lines]\n{kept}") }
}

/// A WebAssembly component starts with `\0asm` and the component layer's version; a core
/// module (from wasm32-wasip1, say) has version 1 and cannot be loaded as a plugin.
fn check_component(path: &Path) -> anyhow::Result<()> {
    use std::io::Read as _;
    let mut head = [0u8; 8];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .with_context(|| format!("cannot read the built {}", path.display()))?;
    match head {
        [0, b'a', b's', b'm', _, _, 1, 0] => Ok(()),
        [0, b'a', b's', b'm', ..] => bail!(
            "{} is a core WebAssembly module, not a component: a plugin must be built for {RUST_TARGET}",
            path.display()
        ),
        _ => bail!("{} is not WebAssembly", path.display()),
    }
}

/// An executable called `name` on `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `bytes` as B, KB or MB (powers of 1000, like `ls -h --si`).
fn human_size(bytes: u64) -> String {
    match bytes {
        0..1_000 => format!("{bytes} B"),
        1_000..1_000_000 => format!("{} KB", bytes.div_ceil(1_000)),
        _ => format!("{:.1} MB", bytes as f64 / 1e6),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(extra: &str) -> Manifest {
        let text = format!("name = \"p\"\nversion = \"0.1.0\"\napi = \"0.2.0\"\n{extra}");
        Manifest::parse(&text, Path::new("plugin.toml")).expect("manifest")
    }

    #[test]
    fn the_world_follows_the_manifest_kind() {
        assert_eq!(world(&manifest("")), "tool-plugin");
        assert_eq!(world(&manifest("kind = [\"tool\", \"memory\"]")), "memory-plugin");
        assert_eq!(world(&manifest("kind = [\"context-engine\"]")), "context-engine-plugin");
        assert_eq!(world(&manifest("kind = [\"hook\"]\n[hook]\nevents = [\"pre_tool_call\"]")), "hook-plugin");
    }

    #[test]
    fn javascript_keeps_fetch_only_for_plugins_that_request_the_network() {
        assert!(!wants_network(&manifest("[capabilities]\nkv = true")));
        assert!(wants_network(&manifest("[capabilities]\nnetwork = [\"api.example.com\"]")));
        assert!(wants_network(&manifest("[capabilities]\nsecrets = [{ name = \"KEY\", host = \"api.example.com\" }]")));
    }

    #[test]
    fn the_rust_library_name_comes_from_cargo_toml() {
        assert_eq!(lib_name("[package]\nname = \"weather-now\"").expect("name"), "weather_now");
        assert_eq!(lib_name("[package]\nname = \"a\"\n[lib]\nname = \"b-c\"").expect("name"), "b_c");
        let e = lib_name("[workspace]\nmembers = []").expect_err("no package").to_string();
        assert!(e.starts_with("no [package] name"), "{e}");
    }

    #[test]
    fn the_javascript_entry_is_package_main_or_app_js() {
        let dir = tempfile::tempdir().expect("tempdir");
        let e = js_entry(dir.path()).expect_err("nothing there").to_string();
        assert!(e.ends_with("has no app.js, the plugin's module (set `main` in package.json to use another file)"));
        std::fs::write(dir.path().join("app.js"), "").expect("write");
        assert_eq!(js_entry(dir.path()).expect("app.js"), "app.js");
        std::fs::write(dir.path().join("package.json"), r#"{"main": "src/tool.js"}"#).expect("write");
        assert!(js_entry(dir.path()).expect_err("missing main").to_string().contains("has no src/tool.js"));
        std::fs::create_dir(dir.path().join("src")).expect("mkdir");
        std::fs::write(dir.path().join("src/tool.js"), "").expect("write");
        assert_eq!(js_entry(dir.path()).expect("main"), "src/tool.js");
    }

    #[test]
    fn a_failed_build_keeps_the_end_of_its_output() {
        let text: String = (1..=100).map(|i| format!("line {i}\n")).collect();
        let kept = tail(&text, 40);
        assert!(kept.starts_with("[… 60 earlier lines]\nline 61\n"), "{kept}");
        assert!(kept.ends_with("line 100"), "{kept}");
        assert_eq!(tail("one\ntwo\n\n", 40), "one\ntwo");
    }

    #[test]
    fn a_failing_compiler_is_reported_with_its_output() {
        let runner = Runner::new(&Confine::Unconfined, Path::new("."), &[]);
        let mut step = Step::new("sh", Path::new("."));
        step.args(["-c", "echo progress; echo 'error: it broke' >&2; exit 3"]);
        let e = run(&runner, &step, "fake", "install it").expect_err("fails").to_string();
        assert_eq!(e, "fake failed (exit status: 3); its output ends:\nerror: it broke");
        let missing = Step::new("/nonexistent/compiler", Path::new("."));
        let e = run(&runner, &missing, "compiler", "install it with `x`").expect_err("missing");
        assert!(e.to_string().starts_with("cannot run compiler ("), "{e}");
        assert!(e.to_string().ends_with("): install it with `x`"), "{e}");
    }

    #[test]
    fn only_a_component_passes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("p.wasm");
        std::fs::write(&path, b"\0asm\x0d\0\x01\0rest").expect("write");
        check_component(&path).expect("a component");
        std::fs::write(&path, b"\0asm\x01\0\0\0rest").expect("write");
        assert!(check_component(&path).expect_err("core").to_string().contains("is a core WebAssembly module"));
        std::fs::write(&path, b"#!/bin/sh\necho").expect("write");
        assert!(check_component(&path).expect_err("text").to_string().ends_with("is not WebAssembly"));
    }

    #[test]
    fn a_project_without_plugin_toml_is_not_built() {
        let dir = tempfile::tempdir().expect("tempdir");
        let e = build(dir.path(), Lang::Python, true).expect_err("no manifest").to_string();
        assert!(e.ends_with("has no plugin.toml, so it is not a plugin project (`talaria plugin new NAME` makes one)"));
    }

    #[test]
    fn sizes_read_like_ls() {
        assert_eq!(human_size(512), "512 B");
        assert_eq!(human_size(98_103), "99 KB");
        assert_eq!(human_size(18_469_601), "18.5 MB");
    }
}
