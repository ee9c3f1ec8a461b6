//! Plugin authoring, the `talaria plugin` commands ([`commands`]): `new` writes a working
//! project of any kind (tool, memory provider, context engine, hook, platform adapter) in Rust,
//! JavaScript or Python, `build` compiles one into the component its
//! `plugin.toml` names, `test` runs it in the sandbox against its `plugin-tests.toml`
//! ([`plugin_test`]), and `pack`, `keygen`, `sign` and `publish` ship it.
//!
//! Each project carries its own copy of the WIT contract (`wit/plugin.wit`: the host's
//! `wit/v0.2.0`, or `wit/v0.3.0` for a platform adapter), a `plugin.toml`, a README with the next
//! commands and a `plugin-tests.toml` for `talaria plugin test`. Rust projects build with plain
//! cargo and wit-bindgen for `wasm32-wasip2`; JavaScript with componentize-js; Python with
//! componentize-py. Each compiler runs as a child process, in the command sandbox when a `talaria`
//! command builds ([`build::Confine`]: a build runs the project's own code), and its output ends up
//! in the error when it fails. `dev` builds, tests and installs on every save, asking before it
//! grants anything ([`dev`]).
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use std::path::Path;
//! let dir = Path::new("greet");
//! talaria_author::new_plugin(dir, "greet", talaria_author::Lang::Python)?;
//! let lang = talaria_author::detect(dir)?; // Lang::Python: there is an app.py
//! let wasm = talaria_author::build(dir, lang, true)?; // greet/plugin.wasm
//! # Ok(()) }
//! ```

/// `writeln!` that never panics (a closed pipe is not worth a crash).
macro_rules! putln {
    ($out:expr $(, $($arg:tt)*)?) => {{
        use std::io::Write as _;
        let _ = writeln!($out $(, $($arg)*)?);
    }};
}

pub mod build;
pub mod commands;
pub mod dev;
mod new;
pub mod plugin_test;
pub mod ui;

use std::path::Path;

use anyhow::bail;
use talaria_core::ConfigToml;

pub use build::build;
pub use commands::{PluginCmd, run};
pub use new::{Starter, new_adapter, new_plugin, new_project};

/// Where a command runs: talaria's home, the directory it was started in, and the config.
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
    pub home: &'a Path,
    pub workspace: &'a Path,
    pub config: &'a ConfigToml,
}

/// The language a plugin project is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// Rust, with wit-bindgen, built by cargo for wasm32-wasip2
    Rust,
    /// JavaScript, built by componentize-js
    #[value(alias = "javascript")]
    Js,
    /// Python, built by componentize-py
    #[value(alias = "py")]
    Python,
}

impl Lang {
    /// The name `--lang` takes.
    pub fn name(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Js => "js",
            Lang::Python => "python",
        }
    }
}

impl std::fmt::Display for Lang {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The WIT contract every new project builds against (`wit/plugin.wit` in the project).
const WIT: &str = include_str!("../../../wit/v0.2.0/plugin.wit");

/// The contract of platform adapters (API 0.3.0); a project has it as `wit/plugin.wit` and
/// [`WIT`] under `wit/deps/`.
const ADAPTER_WIT: &str = include_str!("../../../wit/v0.3.0/plugin.wit");

/// Which language the project in `dir` is written in: a `Cargo.toml` makes it Rust, a
/// `package.json` or a `.js` file JavaScript, an `app.py` Python (checked in that order).
///
/// # Errors
/// None of those files is there; the message names them and says to pass `--lang`.
pub fn detect(dir: &Path) -> anyhow::Result<Lang> {
    if dir.join("Cargo.toml").is_file() {
        return Ok(Lang::Rust);
    }
    if dir.join("package.json").is_file() || has_js_file(dir) {
        return Ok(Lang::Js);
    }
    if dir.join("app.py").is_file() {
        return Ok(Lang::Python);
    }
    bail!(
        "cannot tell which language the plugin in {} is written in: it has no Cargo.toml (Rust), package.json or .js file (JavaScript), or app.py (Python); pass --lang rust|js|python",
        dir.display()
    )
}

/// Whether `dir` holds a `.js` file (not looking into subdirectories).
fn has_js_file(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    entries.filter_map(Result::ok).any(|e| {
        let path = e.path();
        path.extension().is_some_and(|x| x == "js" || x == "mjs") && path.is_file()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project(files: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        for f in files {
            std::fs::write(dir.path().join(f), "").expect("write");
        }
        dir
    }

    #[test]
    fn the_language_is_told_by_its_project_file() {
        let cases: [(&[&str], Lang); 6] = [
            (&["Cargo.toml", "plugin.toml"], Lang::Rust),
            (&["Cargo.toml", "package.json"], Lang::Rust),
            (&["package.json"], Lang::Js),
            (&["main.js", "plugin.toml"], Lang::Js),
            (&["app.py", "plugin.toml"], Lang::Python),
            (&["app.py", "tool.mjs"], Lang::Js),
        ];
        for (files, lang) in cases {
            assert_eq!(detect(project(files).path()).expect("detected"), lang, "{files:?}");
        }
    }

    #[test]
    fn an_unknown_project_says_how_to_tell() {
        let dir = project(&["plugin.toml", "main.py"]);
        let e = detect(dir.path()).expect_err("unknown").to_string();
        assert!(e.contains("no Cargo.toml (Rust), package.json or .js file (JavaScript), or app.py (Python)"), "{e}");
        assert!(e.ends_with("pass --lang rust|js|python"), "{e}");
        // A directory called `x.js` is not a JavaScript file.
        std::fs::create_dir(dir.path().join("x.js")).expect("dir");
        assert!(detect(dir.path()).is_err());
    }

    #[test]
    fn lang_names_match_the_cli_values() {
        use clap::ValueEnum as _;
        for lang in Lang::value_variants() {
            let value = lang.to_possible_value().expect("value");
            assert_eq!(value.get_name(), lang.name());
            assert_eq!(Lang::from_str(lang.name(), false), Ok(*lang));
        }
        assert_eq!(Lang::from_str("javascript", false), Ok(Lang::Js));
        assert_eq!(Lang::from_str("py", false), Ok(Lang::Python));
    }
}
