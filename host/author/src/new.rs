//! `talaria plugin new`: a working project of any kind (tool, memory provider, context engine,
//! hook, platform adapter) in Rust, JavaScript or Python, from the templates in
//! `host/author/templates/`.
//!
//! A project is the kind's source (`KIND/lib.rs`, `app.js` or `app.py`), manifest, test cases
//! and README, the language's build files, and the WIT its toolchain needs:
//! - Rust and JavaScript: talaria's contract as `wit/plugin.wit` (for an adapter, 0.3.0 there and
//!   0.2.0 under `wit/deps/`). JavaScript's `fetch()` is built into componentize-js.
//! - Python: a world of the project's own (`wit/world.wit`) that adds `wasi:http` to talaria's,
//!   with talaria's contracts and the WASI 0.2 packages under `wit/deps/`, so `talaria.py`'s
//!   `fetch` builds with nothing fetched from elsewhere.
//!
//! JavaScript and Python projects also get a helper module (`talaria.js`, `talaria.py`) that
//! wraps the host interfaces: exceptions carrying talaria's message, typed kv, config values,
//! secrets' placeholders and (Python) HTTP. Placeholders: `{{name}}` is the plugin's name;
//! `{{capabilities}}` the commented capability table; the language's words (`{{language}}`,
//! `{{needs}}`, ...) come from [`Words`].

use std::path::Path;

use anyhow::{Context as _, bail};

use super::{ADAPTER_WIT, Lang, WIT};

/// What `talaria plugin new --kind` makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Starter {
    /// A tool plugin with one tool, `hello`
    Tool,
    /// A memory provider that recalls earlier turns sharing words with a new message
    Memory,
    /// A context engine that keeps the last messages of a long conversation
    #[value(alias = "context-engine")]
    Context,
    /// A hook that blocks tool calls whose arguments contain a listed phrase
    Hook,
    /// A platform adapter for the gateway (API 0.3.0), serving a webhook route
    #[value(alias = "platform")]
    Adapter,
}

impl Starter {
    /// The name `--kind` takes.
    pub fn name(self) -> &'static str {
        match self {
            Starter::Tool => "tool",
            Starter::Memory => "memory",
            Starter::Context => "context",
            Starter::Hook => "hook",
            Starter::Adapter => "adapter",
        }
    }

    /// The WIT world the project targets.
    fn world(self) -> &'static str {
        match self {
            Starter::Tool => "tool-plugin",
            Starter::Memory => "memory-plugin",
            Starter::Context => "context-engine-plugin",
            Starter::Hook => "hook-plugin",
            Starter::Adapter => "platform-plugin",
        }
    }

    /// The plugin API the project is built against.
    fn api(self) -> &'static str {
        if self == Starter::Adapter { "0.3.0" } else { "0.2.0" }
    }

    /// The kind's own templates: manifest, test cases, README, and the source in each language.
    fn templates(self) -> KindFiles {
        macro_rules! kind {
            ($dir:literal) => {
                KindFiles {
                    manifest: include_str!(concat!("../templates/", $dir, "/plugin.toml")),
                    tests: include_str!(concat!("../templates/", $dir, "/plugin-tests.toml")),
                    readme: include_str!(concat!("../templates/", $dir, "/README.md")),
                    rust: include_str!(concat!("../templates/", $dir, "/lib.rs")),
                    js: include_str!(concat!("../templates/", $dir, "/app.js")),
                    python: include_str!(concat!("../templates/", $dir, "/app.py")),
                }
            };
        }
        match self {
            Starter::Tool => kind!("tool"),
            Starter::Memory => kind!("memory"),
            Starter::Context => kind!("context"),
            Starter::Hook => kind!("hook"),
            Starter::Adapter => kind!("adapter"),
        }
    }
}

impl std::fmt::Display for Starter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

struct KindFiles {
    manifest: &'static str,
    tests: &'static str,
    readme: &'static str,
    rust: &'static str,
    js: &'static str,
    python: &'static str,
}

/// The commented `[capabilities]` table most manifests start with.
const CAPABILITIES: &str = include_str!("../templates/common/capabilities.toml");
const TALARIA_JS: &str = include_str!("../templates/common/talaria.js");
const TALARIA_PY: &str = include_str!("../templates/common/talaria.py");
const PYTHON_WORLD: &str = include_str!("../templates/common/world.wit");

/// WASI 0.2.12's WIT packages, for Python projects' `wit/deps/` (see `wit/wasi-0.2.12/README.md`).
const WASI: &[(&str, &str)] = &[
    ("cli.wit", include_str!("../../../wit/wasi-0.2.12/cli.wit")),
    ("clocks.wit", include_str!("../../../wit/wasi-0.2.12/clocks.wit")),
    ("filesystem.wit", include_str!("../../../wit/wasi-0.2.12/filesystem.wit")),
    ("http.wit", include_str!("../../../wit/wasi-0.2.12/http.wit")),
    ("io.wit", include_str!("../../../wit/wasi-0.2.12/io.wit")),
    ("random.wit", include_str!("../../../wit/wasi-0.2.12/random.wit")),
    ("sockets.wit", include_str!("../../../wit/wasi-0.2.12/sockets.wit")),
];

/// What a language's templates say in its own words.
struct Words {
    language: &'static str,
    compiler: &'static str,
    needs: &'static str,
    build_comment: &'static str,
    doc: &'static str,
    http_note: &'static str,
    memory_note: &'static str,
    add_tool: &'static str,
    lang_note: &'static str,
    /// The README's table rows for the language's own files.
    files: &'static str,
}

fn words(lang: Lang) -> Words {
    match lang {
        Lang::Rust => Words {
            language: "Rust",
            compiler: "cargo",
            needs: "You need Rust with the WebAssembly target: `rustup target add wasm32-wasip2` (once).",
            build_comment: "cargo build --release --target wasm32-wasip2 → plugin.wasm",
            doc: "rust.md",
            http_note: "HTTP(S) to these hosts",
            memory_note: "",
            add_tool: "write its function, add its `ToolSpec` to `list` and its name to the `match` in `call`, then rebuild.",
            lang_note: "",
            files: "| `src/lib.rs` | the plugin |\n| `Cargo.toml` | the crate: wit-bindgen, serde |\n| `wit/` | the contract with the host, from talaria |\n",
        },
        Lang::Js => Words {
            language: "JavaScript",
            compiler: "componentize-js",
            needs: "You need componentize-js: `npm install` here, or `npm install -g @bytecodealliance/componentize-js@0.23`.",
            build_comment: "componentize-js app.js → plugin.wasm (5-20 s)",
            doc: "javascript.md",
            http_note: "fetch() to these hosts (the build keeps fetch when set)",
            memory_note: "",
            add_tool: "add an entry to `TOOLS` in `app.js`, then rebuild.",
            lang_note: "\n\nThe plugin runs in a sandbox, not in Node: there is no `require`, `process` or file system\nmodule. `talaria.js` wraps the host's interfaces; `fetch()` works when `plugin.toml` requests\n`network`.",
            files: "| `app.js` | the plugin |\n| `talaria.js` | the host's interfaces, the JavaScript way (log, config, kv, secrets, ...) |\n| `package.json` | lists componentize-js, the compiler, for `npm install` |\n| `wit/` | the contract with the host, from talaria |\n",
        },
        Lang::Python => Words {
            language: "Python",
            compiler: "componentize-py",
            needs: "You need componentize-py: `pip install componentize-py==0.25.1`.",
            build_comment: "componentize-py … componentize app → plugin.wasm (7-10 s)",
            doc: "python.md",
            http_note: "talaria.fetch() to these hosts",
            memory_note: "               # CPython takes about 16 MiB of it before your code runs",
            add_tool: "write its function and add it to `TOOLS` in `app.py`, then rebuild.",
            lang_note: "\n\nImport every module you use at the top of `app.py`. `talaria.py` wraps the host's interfaces\n(with `talaria.fetch` for HTTP). For your editor, `componentize-py -d wit -w {{world}} bindings .`\nwrites the `wit_world` package `app.py` imports.",
            files: "| `app.py` | the plugin |\n| `talaria.py` | the host's interfaces, the Python way (log, config, kv, fetch, secrets, ...) |\n| `wit/world.wit` | the project's world: talaria's, plus outgoing HTTP |\n| `wit/deps/` | talaria's contract and WASI 0.2's interfaces, for componentize-py |\n",
        },
    }
}

/// One file of a new project: its path inside the project and its text before rendering.
struct File {
    path: String,
    template: &'static str,
}

fn file(path: impl Into<String>, template: &'static str) -> File {
    File { path: path.into(), template }
}

/// Every file of a `kind` project in `lang`.
fn files(kind: Starter, lang: Lang) -> Vec<File> {
    let own = kind.templates();
    let mut files =
        vec![file("plugin.toml", own.manifest), file("plugin-tests.toml", own.tests), file("README.md", own.readme)];
    match lang {
        Lang::Rust => files.extend([
            file("Cargo.toml", include_str!("../templates/rust/Cargo.toml.in")),
            file("src/lib.rs", own.rust),
            file(".gitignore", include_str!("../templates/rust/gitignore")),
        ]),
        Lang::Js => files.extend([
            file("package.json", include_str!("../templates/js/package.json.in")),
            file("app.js", own.js),
            file("talaria.js", TALARIA_JS),
            file(".gitignore", include_str!("../templates/js/gitignore")),
        ]),
        Lang::Python => files.extend([
            file("app.py", own.python),
            file("talaria.py", TALARIA_PY),
            file(".gitignore", include_str!("../templates/python/gitignore")),
        ]),
    }
    let adapter = kind == Starter::Adapter;
    if lang == Lang::Python {
        files.push(file("wit/world.wit", PYTHON_WORLD));
        files.push(file("wit/deps/talaria-plugin-0.2.0/plugin.wit", WIT));
        if adapter {
            files.push(file("wit/deps/talaria-plugin-0.3.0/plugin.wit", ADAPTER_WIT));
        }
        files.extend(WASI.iter().map(|(name, text)| file(format!("wit/deps/{name}"), text)));
    } else if adapter {
        files.push(file("wit/plugin.wit", ADAPTER_WIT));
        files.push(file("wit/deps/talaria-plugin-0.2.0/plugin.wit", WIT));
    } else {
        files.push(file("wit/plugin.wit", WIT));
    }
    files
}

/// `template` with every placeholder filled in.
fn render(template: &str, name: &str, kind: Starter, lang: Lang) -> String {
    let w = words(lang);
    let files = format!(
        "| file | what |\n|---|---|\n{}| `plugin.toml` | name, version, plugin API, and the capabilities it asks for |\n| `plugin-tests.toml` | test cases for `talaria plugin test` |",
        w.files
    );
    template
        .replace("{{capabilities}}", CAPABILITIES.trim_end())
        .replace("{{files}}", &files)
        .replace("{{language}}", w.language)
        .replace("{{compiler}}", w.compiler)
        .replace("{{needs}}", w.needs)
        .replace("{{build_comment}}", w.build_comment)
        .replace("{{doc}}", w.doc)
        .replace("{{http_note}}", w.http_note)
        .replace("{{memory_note}}", w.memory_note)
        .replace("{{add_tool}}", w.add_tool)
        .replace("{{lang_note}}", w.lang_note)
        .replace("{{world}}", kind.world())
        .replace("{{api}}", kind.api())
        .replace("{{name}}", name)
}

/// Write a working `kind` project in `lang` named `name` into `dir`, which must not exist or be
/// empty. The project builds with [`build`](super::build()) and passes `talaria plugin test` as
/// it is.
///
/// # Errors
/// `name` is not a valid plugin name (1-64 characters of a-z, 0-9, `-` and `_`, starting with a
/// letter: the manifest's rule, checked by parsing the rendered `plugin.toml`); `dir` is a file or
/// a directory with something in it; a file cannot be written.
pub fn new_project(dir: &Path, name: &str, kind: Starter, lang: Lang) -> anyhow::Result<()> {
    let files = files(kind, lang);
    let manifest_path = dir.join("plugin.toml");
    // The name goes in as a TOML string, so whatever it holds, the manifest's own check judges
    // it (for a valid name this is exactly the file written below).
    let template = files.iter().find(|f| f.path == "plugin.toml").context("the template has no plugin.toml")?;
    let quoted = toml::Value::String(name.to_string()).to_string();
    let manifest = render(&template.template.replace("\"{{name}}\"", &quoted), name, kind, lang);
    let parsed = talaria_core::runtime::Manifest::parse(&manifest, &manifest_path)
        .with_context(|| format!("cannot create a plugin named `{name}`"))?;
    if parsed.name != name {
        bail!("cannot create a plugin named `{name}`: it must be 1-64 characters of a-z, 0-9, `-` or `_`");
    }
    check_empty(dir)?;
    for f in &files {
        let path = dir.join(&f.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, render(f.template, name, kind, lang))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// A tool-plugin project: [`new_project`] with [`Starter::Tool`].
///
/// # Errors
/// As for [`new_project`].
pub fn new_plugin(dir: &Path, name: &str, lang: Lang) -> anyhow::Result<()> {
    new_project(dir, name, Starter::Tool, lang)
}

/// A platform-adapter project (API 0.3.0): [`new_project`] with [`Starter::Adapter`]. It serves a
/// webhook route, each POSTed JSON message going to the agent and the reply back in the HTTP
/// response.
///
/// # Errors
/// As for [`new_project`].
pub fn new_adapter(dir: &Path, name: &str, lang: Lang) -> anyhow::Result<()> {
    new_project(dir, name, Starter::Adapter, lang)
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

    const KINDS: [Starter; 5] = [Starter::Tool, Starter::Memory, Starter::Context, Starter::Hook, Starter::Adapter];

    #[test]
    fn every_kind_in_every_language_renders_a_valid_project() {
        for kind in KINDS {
            for lang in LANGS {
                let tmp = tempfile::tempdir().expect("tempdir");
                let dir = tmp.path().join("weather-now");
                new_project(&dir, "weather-now", kind, lang).expect("created");
                let at = format!("{kind}/{lang}");

                let manifest =
                    talaria_core::runtime::Manifest::load(&dir.join("plugin.toml")).expect("valid plugin.toml");
                assert_eq!(manifest.name, "weather-now");
                assert_eq!(manifest.version.to_string(), "0.1.0");
                assert_eq!(manifest.api.to_string(), kind.api(), "{at}");
                assert_eq!(manifest.wasm, "plugin.wasm");
                let kinds = match kind {
                    Starter::Tool => "tool",
                    Starter::Memory => "memory",
                    Starter::Context => "context-engine",
                    Starter::Hook => "hook",
                    Starter::Adapter => "platform",
                };
                assert_eq!(manifest.kinds, [kinds], "{at}");
                assert!(!manifest.description.is_empty());
                // The memory provider keeps its turns in kv; the rest ask for nothing.
                let requested: Vec<String> = manifest.requests.iter().map(ToString::to_string).collect();
                assert_eq!(requested, if kind == Starter::Memory { vec!["kv".to_string()] } else { vec![] }, "{at}");

                let readme = read(&dir, "README.md");
                assert!(readme.starts_with("# weather-now\n"), "{at}");
                assert!(readme.contains("talaria plugin build"), "{at}");
                assert!(read(&dir, ".gitignore").contains("/plugin.wasm"), "{at}");
                for f in files(kind, lang) {
                    let text = read(&dir, &f.path);
                    for placeholder in [
                        "{{name}}",
                        "{{capabilities}}",
                        "{{language}}",
                        "{{world}}",
                        "{{files}}",
                        "{{lang_note}}",
                        "{{needs}}",
                    ] {
                        assert!(!text.contains(placeholder), "{at}: {} keeps {placeholder}", f.path);
                    }
                }
                // Every kind comes with cases `plugin test` can run.
                assert!(read(&dir, "plugin-tests.toml").contains("[[test]]"), "{at}");

                // The WIT each toolchain needs is in the project.
                let world = kind.world();
                match lang {
                    Lang::Python => {
                        let own = read(&dir, "wit/world.wit");
                        assert!(own.contains(&format!("world {world} {{")), "{own}");
                        assert!(own.contains(&format!("include talaria:plugin/{world}@{};", kind.api())), "{own}");
                        assert!(own.contains("import wasi:http/outgoing-handler@0.2.12;"), "{own}");
                        assert_eq!(read(&dir, "wit/deps/talaria-plugin-0.2.0/plugin.wit"), WIT);
                        for (name, text) in WASI {
                            assert_eq!(&read(&dir, &format!("wit/deps/{name}")), text, "{name}");
                        }
                        assert!(!dir.join("wit/plugin.wit").exists(), "one main package");
                        assert!(read(&dir, "talaria.py").contains("def fetch("));
                    }
                    Lang::Rust | Lang::Js => {
                        let contract = read(&dir, "wit/plugin.wit");
                        assert!(contract.contains(&format!("world {world} {{")), "{at}");
                        assert!(!dir.join("wit/world.wit").exists());
                        if lang == Lang::Js {
                            assert!(read(&dir, "talaria.js").contains("export class TalariaError"));
                            assert!(read(&dir, "app.js").contains("from './talaria.js'"), "{at}");
                        } else {
                            assert!(read(&dir, "src/lib.rs").contains(&format!("world: \"{world}\"")), "{at}");
                        }
                    }
                }
                if kind == Starter::Adapter {
                    assert_eq!(read(&dir, "wit/deps/talaria-plugin-0.2.0/plugin.wit"), WIT, "{at}");
                }
                assert_eq!(crate::detect(&dir).expect("detected"), lang);
            }
        }
    }

    #[test]
    fn the_tool_template_has_the_hello_cases() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("t");
        new_plugin(&dir, "t", Lang::Rust).expect("created");
        let tests: toml::Table = toml::from_str(&read(&dir, "plugin-tests.toml")).expect("tests parse");
        let cases = tests["test"].as_array().expect("[[test]]");
        assert_eq!(cases.len(), 2);
        assert!(cases.iter().all(|c| c["tool"].as_str() == Some("hello")));
        assert_eq!(cases[0]["args"]["name"].as_str(), Some("Ada"));
        assert_eq!(cases[0]["expect_contains"].as_str(), Some("Hello, Ada"));
        assert_eq!(cases[1]["expect_error"].as_str(), Some("name"));
        let readme = read(&dir, "README.md");
        for command in ["talaria plugin test", "talaria plugin pack", "talaria plugins install ./ --allow-unsigned"] {
            assert!(readme.contains(command), "{command}");
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
        assert!(read(&py, "app.py").contains("import talaria\n"));
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
