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
    if lang == Lang::Js {
        // An author's tool returning data instead of text: named, not a wasm trap.
        let app = std::fs::read_to_string(project.join("app.js")).expect("app.js");
        let app = app.replace(
            "const TOOLS = {\n",
            "const TOOLS = {\n  stats: {\n    description: 'Counts.',\n    parameters: { type: 'object', properties: {} },\n    run() {\n      return { count: 3 };\n    },\n  },\n",
        );
        std::fs::write(project.join("app.js"), app).expect("app.js");
    }
    if lang == Lang::Python {
        // An author's tool using a host import it was not granted: talaria's message must reach
        // them whole, not as a Python panic.
        let app = std::fs::read_to_string(project.join("app.py")).expect("app.py");
        let app = app.replace(
            "\n\n# Each tool:",
            "\n\ndef remember(args: dict, context: CallContext) -> str:\n    \"\"\"Remember a value.\"\"\"\n    talaria.kv.set(\"k\", b\"v\")\n    return \"kept\"\n\n\n# Each tool:",
        );
        let app = app.replace(
            "TOOLS = {\n",
            "TOOLS = {\n    \"remember\": (remember, {\"type\": \"object\", \"properties\": {}}),\n",
        );
        std::fs::write(project.join("app.py"), app).expect("app.py");
    }

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
    if lang == Lang::Js {
        let wrong = talaria(&home, &workspace, &["tools", "call", "stats", "{}"]);
        let stderr = String::from_utf8_lossy(&wrong.stderr);
        assert_eq!(wrong.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("tool `stats` must return a string; got object (use JSON.stringify for data)"),
            "{stderr}"
        );
    }
    if lang == Lang::Python {
        let refused = talaria(&home, &workspace, &["tools", "call", "remember", "{}"]);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("the kv capability is not granted to plugin 'hello' (request `kv = true` in plugin.toml and grant it: `talaria plugins grant hello kv`)"),
            "{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
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

/// Create and build a platform-adapter starter in `lang`, install it, serve it from a real
/// `talaria gateway run`, and have its webhook route answered by the mock model.
fn new_adapter_serves_a_message(lang: Lang) {
    use std::io::{Read as _, Write as _};
    let tmp = tempfile::tempdir().expect("tempdir");
    let project = tmp.path().join("relay");
    talaria_author::new_adapter(&project, "relay", lang).expect("new adapter");
    let manifest = talaria_runtime::Manifest::load(&project.join("plugin.toml")).expect("manifest");
    assert_eq!((manifest.api.to_string(), manifest.kinds.clone()), ("0.3.0".to_string(), vec!["platform".to_string()]));
    let wasm = match lang {
        Lang::Rust => {
            let target_dir = Some(Path::new(env!("CARGO_TARGET_TMPDIR")).join("author-rust"));
            build_with(&project, lang, &BuildOptions { release: true, target_dir })
        }
        Lang::Js | Lang::Python => talaria_author::build(&project, lang, true),
    }
    .unwrap_or_else(|e| panic!("building the {lang} adapter starter failed: {e:#}"));

    let home = tmp.path().join("home");
    let installed = home.join("plugins/relay");
    std::fs::create_dir_all(&installed).expect("plugin dir");
    std::fs::copy(project.join("plugin.toml"), installed.join("plugin.toml")).expect("install");
    std::fs::copy(&wasm, installed.join("plugin.wasm")).expect("install");
    let mock = talaria_mock_llm::MockLlm::start(talaria_mock_llm::Script::auto());
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let config = format!(
        "[model]\nprovider = \"custom\"\nname = \"mock\"\nbase_url = \"{}\"\n[agent]\nauto_title = false\n\
         [gateway]\nworkspaces = \"{}\"\nlisten = \"127.0.0.1:{port}\"\n\
         [gateway.platforms.relay]\nallow_all = true\n\
         [gateway.platforms.relay.routes.in]\nauth = \"token\"\nheader = \"X-Token\"\nsecret = \"RELAY_TOKEN\"\n",
        mock.base_url(),
        tmp.path().join("chats").display()
    );
    std::fs::write(home.join("config.toml"), config).expect("config");
    std::fs::write(home.join(".env"), "RELAY_TOKEN=relay-secret\n").expect(".env");
    let mut gateway = Command::new(env!("CARGO_BIN_EXE_talaria"))
        .args(["gateway", "run"])
        .env("TALARIA_HOME", &home)
        .env_remove("TALARIA_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("talaria gateway run");
    let addr = format!("127.0.0.1:{port}");
    // The adapter's first start compiles it (a Python component takes a while on a busy machine).
    let start = std::time::Instant::now();
    loop {
        let out = talaria(&home, tmp.path(), &["gateway", "status", "--json"]);
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if status["status"]["accounts"]["relay"].as_str().is_some_and(|s| s.starts_with("connected")) {
            break;
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(180), "{lang}: the adapter never connected: {status}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let mut stream = std::net::TcpStream::connect(&addr).expect("the listener");
    let body = r#"{"chat": "c1", "user": "u1", "name": "Ana", "text": "echo hello from the starter"}"#;
    let request = format!(
        "POST /webhooks/relay/in HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nX-Token: relay-secret\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("write");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let _ = gateway.kill();
    let output = gateway.wait_with_output().expect("wait");
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.contains(r#"{"reply":"hello from the starter"}"#),
        "{lang}: {answer}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn a_new_rust_adapter_builds_and_serves_a_message() {
    new_adapter_serves_a_message(Lang::Rust);
}

#[test]
fn a_new_javascript_adapter_builds_and_serves_a_message() {
    new_adapter_serves_a_message(Lang::Js);
}

#[test]
fn a_new_python_adapter_builds_and_serves_a_message() {
    new_adapter_serves_a_message(Lang::Python);
}
