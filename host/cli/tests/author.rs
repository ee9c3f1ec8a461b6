//! `talaria plugin new` + `talaria plugin build` for each language, for real: a new project is
//! built with the language's own compiler, installed as a user plugin in a fresh TALARIA_HOME,
//! and its `hello` tool is called through the `talaria` binary, once for each case of the
//! project's plugin-tests.toml. A missing compiler fails the test with its install command.
//!
//! The authoring library is the `talaria-author` crate the binary mounts.

use std::path::Path;
use std::process::{Command, Output};

use talaria_author::Lang;
use talaria_author::build::{BuildOptions, build_with};

/// Create, build and install a `hello` plugin in `lang`, then run its test cases.
fn new_build_install_call(lang: Lang) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let project = tmp.path().join("hello");
    talaria_author::new_plugin(&project, "hello", lang).expect("new plugin");
    assert_eq!(talaria_author::detect(&project).expect("detect"), lang);

    let wasm = match lang {
        // One target directory for every run, so the dependencies are built once.
        Lang::Rust => {
            let target_dir = Some(Path::new(env!("CARGO_TARGET_TMPDIR")).join("author-rust"));
            build_with(&project, lang, &BuildOptions { release: true, target_dir })
        }
        Lang::Js | Lang::Python => talaria_author::build(&project, lang, true),
    }
    .unwrap_or_else(|e| panic!("building the {lang} template failed: {e:#}"));
    assert_eq!(wasm, project.join("plugin.wasm"));

    let home = tmp.path().join("home");
    let installed = home.join("plugins/hello");
    std::fs::create_dir_all(&installed).expect("plugin dir");
    for file in ["plugin.toml", "plugin.wasm"] {
        std::fs::copy(project.join(file), installed.join(file)).expect("install");
    }
    let workspace = tmp.path().join("workspace");
    std::fs::create_dir(&workspace).expect("workspace");

    let tests: toml::Table =
        toml::from_str(&std::fs::read_to_string(project.join("plugin-tests.toml")).expect("tests")).expect("toml");
    let cases = tests["test"].as_array().expect("[[test]]");
    assert_eq!(cases.len(), 2);
    for case in cases {
        let tool = case["tool"].as_str().expect("tool");
        let args = serde_json::to_string(&case["args"]).expect("args");
        let out = talaria(&home, &workspace, &["tools", "call", tool, &args]);
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        if let Some(want) = case.get("expect_contains").and_then(toml::Value::as_str) {
            assert!(out.status.success(), "{lang}: {args} failed:\n{stderr}");
            assert!(stdout.contains(want), "{lang}: {args} gave {stdout:?}, not {want:?}");
        }
        if let Some(want) = case.get("expect_error").and_then(toml::Value::as_str) {
            assert_eq!(out.status.code(), Some(1), "{lang}: {args} should fail: {stdout}");
            assert!(
                stderr.contains("invalid arguments: `name` must not be empty: say who to greet"),
                "{lang}: {args}: {stderr}"
            );
            assert!(stderr.contains(want));
        }
    }
    assert_eq!(
        String::from_utf8_lossy(&talaria(&home, &workspace, &["tools", "call", "hello", r#"{"name":"Ada"}"#]).stdout),
        "Hello, Ada!\n"
    );
    // The template's one `log` call reaches talaria's log.
    let logged = talaria(&home, &workspace, &["-v", "tools", "call", "hello", r#"{"name":"Grace"}"#]);
    let stderr = String::from_utf8_lossy(&logged.stderr);
    assert!(stderr.contains("greeting Grace") && stderr.contains("plugin=\"hello\""), "{lang}: {stderr}");
}

fn talaria(home: &Path, workspace: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_talaria"))
        .args(args)
        .current_dir(workspace)
        .env("TALARIA_HOME", home)
        .env("NO_COLOR", "1")
        .env_remove("TALARIA_LOG")
        .output()
        .expect("run talaria")
}

#[test]
fn a_new_rust_plugin_builds_installs_and_greets() {
    new_build_install_call(Lang::Rust);
}

#[test]
fn a_new_javascript_plugin_builds_installs_and_greets() {
    new_build_install_call(Lang::Js);
}

#[test]
fn a_new_python_plugin_builds_installs_and_greets() {
    new_build_install_call(Lang::Python);
}
