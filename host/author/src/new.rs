//! `talaria plugin new`: a tool-plugin project from the templates in `host/cli/templates/`.
//!
//! Every template offers the same tool, `hello` (`{name}` → `Hello, NAME!`, an empty name is an
//! invalid-arguments error), and calls the host's `log` import once. `{{name}}` in a template is
//! replaced by the plugin's name.

use std::path::Path;

use anyhow::{Context as _, bail};

use super::{Lang, WIT};

/// A file of a new project: its path inside the project and its template.
struct File {
    path: &'static str,
    template: &'static str,
}

const fn file(path: &'static str, template: &'static str) -> File {
    File { path, template }
}

/// Files every project has, whatever its language.
const COMMON: &[File] =
    &[file("wit/plugin.wit", WIT), file("plugin-tests.toml", include_str!("../templates/plugin-tests.toml"))];

const RUST: &[File] = &[
    file("plugin.toml", include_str!("../templates/rust/plugin.toml")),
    file("Cargo.toml", include_str!("../templates/rust/Cargo.toml.in")),
    file("src/lib.rs", include_str!("../templates/rust/lib.rs")),
    file("README.md", include_str!("../templates/rust/README.md")),
    file(".gitignore", include_str!("../templates/rust/gitignore")),
];

const JS: &[File] = &[
    file("plugin.toml", include_str!("../templates/js/plugin.toml")),
    file("package.json", include_str!("../templates/js/package.json.in")),
    file("app.js", include_str!("../templates/js/app.js")),
    file("README.md", include_str!("../templates/js/README.md")),
    file(".gitignore", include_str!("../templates/js/gitignore")),
];

const PYTHON: &[File] = &[
    file("plugin.toml", include_str!("../templates/python/plugin.toml")),
    file("app.py", include_str!("../templates/python/app.py")),
    file("README.md", include_str!("../templates/python/README.md")),
    file(".gitignore", include_str!("../templates/python/gitignore")),
];

/// A platform adapter's project (API 0.3.0): its own manifest, README and source, the 0.3.0 WIT
/// with the 0.2.0 host interfaces under `wit/deps/`, and each language's build files.
const ADAPTER_COMMON: &[File] = &[
    file("plugin.toml", include_str!("../templates/adapter/plugin.toml")),
    file("README.md", include_str!("../templates/adapter/README.md")),
    file("wit/plugin.wit", super::ADAPTER_WIT),
    file("wit/deps/talaria-plugin-0.2.0/plugin.wit", WIT),
];

const ADAPTER_RUST: &[File] = &[
    file("Cargo.toml", include_str!("../templates/rust/Cargo.toml.in")),
    file("src/lib.rs", include_str!("../templates/adapter/lib.rs")),
    file(".gitignore", include_str!("../templates/rust/gitignore")),
];

const ADAPTER_JS: &[File] = &[
    file("package.json", include_str!("../templates/js/package.json.in")),
    file("app.js", include_str!("../templates/adapter/app.js")),
    file(".gitignore", include_str!("../templates/js/gitignore")),
];

const ADAPTER_PYTHON: &[File] = &[
    file("app.py", include_str!("../templates/adapter/app.py")),
    file(".gitignore", include_str!("../templates/python/gitignore")),
];

fn adapter_files(lang: Lang) -> impl Iterator<Item = &'static File> {
    let own = match lang {
        Lang::Rust => ADAPTER_RUST,
        Lang::Js => ADAPTER_JS,
        Lang::Python => ADAPTER_PYTHON,
    };
    own.iter().chain(ADAPTER_COMMON)
}

fn files(lang: Lang) -> impl Iterator<Item = &'static File> {
    let own = match lang {
        Lang::Rust => RUST,
        Lang::Js => JS,
        Lang::Python => PYTHON,
    };
    own.iter().chain(COMMON)
}

/// `template` with the plugin's name filled in.
fn render(template: &str, name: &str) -> String {
    template.replace("{{name}}", name)
}

/// Write a working tool-plugin project named `name` into `dir`, which must not exist or be
/// empty. The project builds with [`build`](super::build()) as it is.
///
/// # Errors
/// `name` is not a valid plugin name (1-64 characters of a-z, 0-9, `-` and `_`, starting with a
/// letter: the manifest's rule, checked by parsing the rendered `plugin.toml`); `dir` is a file or
/// a directory with something in it; a file cannot be written.
pub fn new_plugin(dir: &Path, name: &str, lang: Lang) -> anyhow::Result<()> {
    write_project(dir, name, &files(lang).collect::<Vec<_>>())
}

/// Write a working platform-adapter project (API 0.3.0) named `name` into `dir`: it serves a
/// webhook route, each POSTed JSON message going to the agent and the reply back in the HTTP
/// response, and builds with [`build`](super::build()) as it is.
///
/// # Errors
/// As for [`new_plugin`].
pub fn new_adapter(dir: &Path, name: &str, lang: Lang) -> anyhow::Result<()> {
    write_project(dir, name, &adapter_files(lang).collect::<Vec<_>>())
}

fn write_project(dir: &Path, name: &str, files: &[&File]) -> anyhow::Result<()> {
    let manifest_path = dir.join("plugin.toml");
    // The name goes in as a TOML string, so whatever it holds, the manifest's own check judges
    // it (for a valid name this is exactly the file written below).
    let template = files.iter().find(|f| f.path == "plugin.toml").context("the template has no plugin.toml")?;
    let quoted = toml::Value::String(name.to_string()).to_string();
    let manifest = render(&template.template.replace("\"{{name}}\"", &quoted), name);
    let parsed = talaria_runtime::Manifest::parse(&manifest, &manifest_path)
        .with_context(|| format!("cannot create a plugin named `{name}`"))?;
    if parsed.name != name {
        bail!("cannot create a plugin named `{name}`: it must be 1-64 characters of a-z, 0-9, `-` or `_`");
    }
    check_empty(dir)?;
    for f in files {
        let path = dir.join(f.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, render(f.template, name)).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// `dir` must not exist, or be an empty directory.
fn check_empty(dir: &Path) -> anyhow::Result<()> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                bail!("{} is not empty: choose a new directory for the plugin", dir.display());
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(_) if dir.exists() && !dir.is_dir() => bail!("{} is a file, not a directory", dir.display()),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", dir.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LANGS: [Lang; 3] = [Lang::Rust, Lang::Js, Lang::Python];

    fn read(dir: &Path, path: &str) -> String {
        std::fs::read_to_string(dir.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn every_adapter_starter_renders_a_platform_project_with_both_wit_packages() {
        for lang in LANGS {
            let tmp = tempfile::tempdir().expect("tempdir");
            let dir = tmp.path().join("relay");
            new_adapter(&dir, "relay", lang).expect("created");
            let manifest = talaria_runtime::Manifest::load(&dir.join("plugin.toml")).expect("valid plugin.toml");
            assert_eq!((manifest.api.to_string(), manifest.kinds.clone()), ("0.3.0".into(), vec!["platform".into()]));
            assert!(read(&dir, "wit/plugin.wit").contains("package talaria:plugin@0.3.0;"));
            assert_eq!(read(&dir, "wit/deps/talaria-plugin-0.2.0/plugin.wit"), WIT);
            assert!(read(&dir, "README.md").starts_with("# relay\n"));
            assert!(!dir.join("plugin-tests.toml").exists(), "{lang}: adapters are tried in the gateway");
            assert_eq!(crate::detect(&dir).expect("detected"), lang);
        }
    }

    #[test]
    fn every_template_renders_a_valid_project_with_the_name_filled_in() {
        for lang in LANGS {
            let tmp = tempfile::tempdir().expect("tempdir");
            let dir = tmp.path().join("weather-now");
            new_plugin(&dir, "weather-now", lang).expect("created");

            let manifest = talaria_runtime::Manifest::load(&dir.join("plugin.toml")).expect("valid plugin.toml");
            assert_eq!(manifest.name, "weather-now");
            assert_eq!(manifest.version.to_string(), "0.1.0");
            assert_eq!(manifest.api.to_string(), "0.2.0");
            assert_eq!(manifest.wasm, "plugin.wasm");
            assert!(manifest.requests.is_empty(), "{lang}: {:?}", manifest.requests);
            assert!(!manifest.description.is_empty());

            assert_eq!(read(&dir, "wit/plugin.wit"), WIT);
            assert!(WIT.contains("package talaria:plugin@0.2.0;") && WIT.contains("world tool-plugin {"));
            let readme = read(&dir, "README.md");
            assert!(readme.starts_with("# weather-now\n"), "{lang}");
            for command in ["talaria plugin build", "talaria plugin test", "talaria plugin pack"] {
                assert!(readme.contains(command), "{lang}: {command}");
            }
            assert!(readme.contains("talaria plugins install ./ --allow-unsigned"), "{lang}");
            assert!(read(&dir, ".gitignore").contains("/plugin.wasm"), "{lang}");
            for f in files(lang) {
                assert!(!read(&dir, f.path).contains("{{name}}"), "{lang}: {} keeps a placeholder", f.path);
            }

            let tests: toml::Table = toml::from_str(&read(&dir, "plugin-tests.toml")).expect("tests parse");
            let cases = tests["test"].as_array().expect("[[test]]");
            assert_eq!(cases.len(), 2);
            assert!(cases.iter().all(|c| c["tool"].as_str() == Some("hello")));
            assert_eq!(cases[0]["args"]["name"].as_str(), Some("Ada"));
            assert_eq!(cases[0]["expect_contains"].as_str(), Some("Hello, Ada"));
            assert_eq!(cases[1]["expect_error"].as_str(), Some("name"));

            assert_eq!(super::super::detect(&dir).expect("detected"), lang);
        }
    }

    #[test]
    fn language_files_carry_the_name_where_their_tools_need_it() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let rust = tmp.path().join("rust");
        new_plugin(&rust, "my_tool", Lang::Rust).expect("rust");
        let cargo: toml::Table = toml::from_str(&read(&rust, "Cargo.toml")).expect("Cargo.toml");
        assert_eq!(cargo["package"]["name"].as_str(), Some("my_tool"));
        assert_eq!(cargo["lib"]["crate-type"].as_array().map(Vec::len), Some(1));
        assert!(cargo.contains_key("workspace"), "builds outside any workspace");
        assert_eq!(cargo["dependencies"]["wit-bindgen"].as_str(), Some("0.62"));
        assert!(!read(&rust, "Cargo.toml").contains("talaria-sdk"));
        assert!(read(&rust, "src/lib.rs").contains(r#"generate!({ path: "wit", world: "tool-plugin" })"#));

        let js = tmp.path().join("js");
        new_plugin(&js, "my_tool", Lang::Js).expect("js");
        let package: serde_json::Value = serde_json::from_str(&read(&js, "package.json")).expect("package.json");
        assert_eq!(package["name"], "my_tool");
        assert_eq!(package["main"], "app.js");
        assert_eq!(package["devDependencies"]["@bytecodealliance/componentize-js"], "^0.23.0");

        let py = tmp.path().join("py");
        new_plugin(&py, "my_tool", Lang::Python).expect("python");
        assert!(read(&py, "app.py").contains("class Tools(exports.Tools):"));
    }

    #[test]
    fn a_directory_with_something_in_it_is_refused_and_left_alone() {
        let tmp = tempfile::tempdir().expect("tempdir");
        std::fs::write(tmp.path().join("notes.txt"), "mine").expect("write");
        let e = new_plugin(tmp.path(), "hello", Lang::Rust).expect_err("refused").to_string();
        assert_eq!(e, format!("{} is not empty: choose a new directory for the plugin", tmp.path().display()));
        let left: Vec<_> = std::fs::read_dir(tmp.path()).expect("read").collect();
        assert_eq!(left.len(), 1);
        assert_eq!(read(tmp.path(), "notes.txt"), "mine");

        let file = tmp.path().join("notes.txt");
        let e = new_plugin(&file, "hello", Lang::Js).expect_err("a file").to_string();
        assert!(e.ends_with("notes.txt is a file, not a directory"), "{e}");

        let empty = tmp.path().join("empty");
        std::fs::create_dir(&empty).expect("mkdir");
        new_plugin(&empty, "hello", Lang::Python).expect("an empty directory is fine");
        assert!(empty.join("app.py").is_file());
    }

    #[test]
    fn invalid_names_are_refused_before_anything_is_written() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let long = "a".repeat(65);
        for name in ["", "Hello", "1up", "-x", "a b", "a/b", "a.b", "ünï", "a\"b", long.as_str()] {
            let dir = tmp.path().join("p");
            let e = format!("{:#}", new_plugin(&dir, name, Lang::Rust).expect_err(name));
            assert!(e.starts_with(&format!("cannot create a plugin named `{name}`: ")), "{e}");
            assert!(e.contains("field `name`"), "{e}");
            assert!(e.contains("must be 1-64 characters of a-z, 0-9, `-` or `_`, starting with a letter"), "{e}");
            assert!(!dir.exists(), "{name}: nothing is created");
        }
        for name in ["a", "hello-world", "my_tool2", &"a".repeat(64)] {
            new_plugin(&tmp.path().join(name), name, Lang::Js).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        }
    }
}
