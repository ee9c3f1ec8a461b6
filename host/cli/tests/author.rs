//! `talaria plugin new` + `talaria plugin build` for each language, for real: a new project is
//! built with the language's own compiler, installed as a user plugin in a fresh TALARIA_HOME,
//! and its `hello` tool is called through the `talaria` binary, once for each case of the
//! project's plugin-tests.toml. A missing compiler fails the test with its install command.
//!
//! The authoring library is the `talaria-author` crate the binary mounts.

use std::path::{Path, PathBuf};
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
        Lang::Rust => {
            let target_dir = Some(rust_target_dir());
            build_with(&project, lang, &BuildOptions { release: true, target_dir, ..BuildOptions::default() })
        }
        Lang::Js | Lang::Python => talaria_author::build(&project, lang, true),
    }
    .unwrap_or_else(|e| panic!("building the {lang} template failed: {e:#}"));
    assert_eq!(wasm, project.join("plugin.wasm"));

    let home = tmp.path().join("home");
    // The starter's own cases pass in the sandbox (and its compiled code is cached for the calls).
    let tested = talaria(&home, &project, &["plugin", "test"]);
    let out = String::from_utf8_lossy(&tested.stdout);
    assert!(tested.status.success() && out.contains("2 passed, 0 failed"), "{lang}: {out}");
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

    if lang == Lang::Js {
        // An exception outside the template's wrappers: its message and place, not a bare trap.
        let app = std::fs::read_to_string(project.join("app.js")).expect("app.js");
        let app = app.replacen("  list() {\n", "  list() {\n    throw new Error('no tool table yet');\n", 1);
        std::fs::write(project.join("app.js"), app).expect("app.js");
        talaria_author::build(&project, lang, true).expect("rebuilt");
        let out = talaria(&home, &project, &["plugin", "test"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{stdout}");
        assert!(
            stdout.contains("plugin 'hello' threw an uncaught exception: no tool table yet (at list@app.js:"),
            "{stdout}"
        );
        assert!(!stdout.contains("unreachable"), "{stdout}");
    }
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

/// A `relay` adapter project in `lang`, built, tested and installed by `plugin dev --once` into
/// a home whose gateway serves it on a webhook route (token `relay-secret`), with the mock as
/// its model; then `talaria gateway run`, waited for until the account is connected. The
/// gateway process, its address and the project.
fn relay_gateway(tmp: &Path, lang: Lang, mock: &talaria_mock_llm::MockLlm) -> (std::process::Child, String, PathBuf) {
    let project = tmp.join("relay");
    talaria_author::new_adapter(&project, "relay", lang).expect("new adapter");
    let manifest = talaria_runtime::Manifest::load(&project.join("plugin.toml")).expect("manifest");
    assert_eq!((manifest.api.to_string(), manifest.kinds.clone()), ("0.3.0".to_string(), vec!["platform".to_string()]));
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let extra = format!(
        "[gateway]\nworkspaces = \"{}\"\nlisten = \"127.0.0.1:{port}\"\n\
         [gateway.platforms.relay]\nallow_all = true\n\
         [gateway.platforms.relay.routes.in]\nauth = \"token\"\nheader = \"X-Token\"\nsecret = \"RELAY_TOKEN\"\n",
        tmp.join("chats").display()
    );
    let (home, workspace) = home_with_model(tmp, mock, "", &extra);
    std::fs::write(home.join(".env"), "RELAY_TOKEN=relay-secret\n").expect(".env");
    // It builds, its own cases pass, and it is installed as `plugin dev` installs it.
    dev_once(&home, &project);
    let gateway = Command::new(env!("CARGO_BIN_EXE_talaria"))
        .args(["gateway", "run"])
        .current_dir(&workspace)
        .env("TALARIA_HOME", &home)
        .env_remove("TALARIA_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("talaria gateway run");
    // The adapter's first start may compile it (a Python component takes a while on a busy machine).
    let start = std::time::Instant::now();
    loop {
        let out = talaria(&home, &workspace, &["gateway", "status", "--json"]);
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if status["status"]["accounts"]["relay"].as_str().is_some_and(|s| s.starts_with("connected")) {
            break;
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(180), "{lang}: the adapter never connected: {status}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    (gateway, format!("127.0.0.1:{port}"), project)
}

/// POST `body` to the gateway's route `path` at `addr` with the route's token; the raw answer.
fn post(addr: &str, path: &str, body: &str) -> String {
    use std::io::{Read as _, Write as _};
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else { return String::new() };
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nX-Token: relay-secret\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("write");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
}

/// Stop the gateway; what it logged.
fn stop(mut gateway: std::process::Child) -> String {
    let _ = gateway.kill();
    let output = gateway.wait_with_output().expect("wait");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A platform-adapter starter in `lang`, served from a real `talaria gateway run`, has its
/// webhook route answered by the mock model.
fn new_adapter_serves_a_message(lang: Lang) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mock = talaria_mock_llm::MockLlm::start(talaria_mock_llm::Script::auto());
    let (gateway, addr, _) = relay_gateway(tmp.path(), lang, &mock);
    let body = r#"{"chat": "c1", "user": "u1", "name": "Ana", "text": "echo hello from the starter"}"#;
    let answer = post(&addr, "/webhooks/relay/in", body);
    let log = stop(gateway);
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.contains(r#"{"reply":"hello from the starter"}"#),
        "{lang}: {answer}\n{log}"
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

/// A home whose model is the mock, with `extra` config; and a workspace beside it.
fn home_with_model(tmp: &Path, mock: &talaria_mock_llm::MockLlm, model_extra: &str, extra: &str) -> (PathBuf, PathBuf) {
    let home = tmp.join("home");
    let workspace = tmp.join("workspace");
    for dir in [&home, &workspace] {
        std::fs::create_dir_all(dir).expect("dir");
    }
    let config = format!(
        "[model]\nprovider = \"custom\"\nname = \"mock\"\nbase_url = \"{}\"\napi_mode = \"chat_completions\"\n{model_extra}\n\
         [agent]\nauto_title = false\nretries = 1\nretry_delay_ms = 5\n\n{extra}\n",
        mock.base_url()
    );
    std::fs::write(home.join("config.toml"), config).expect("config");
    (home, workspace)
}

/// `talaria plugin dev --once --yes` in the project: build, `plugin test`, install, granting
/// what its plugin.toml requests (there is no terminal to ask). Its output.
/// The cargo target directory of the Rust projects this test builds: kept from run to run, so
/// their dependencies are built once, and its own, because cargo decides what is fresh by file
/// times: two tests building a crate of the same name (`relay`) in one directory at once could
/// each install the other's build. It is given through a symbolic link, as a `target` that
/// links elsewhere would be: a confined build must still write where the link leads.
fn rust_target_dir() -> PathBuf {
    let test = std::thread::current().name().unwrap_or("main").replace(|c: char| !c.is_ascii_alphanumeric(), "_");
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let real = tmp.join(format!("author-rust-{test}"));
    let link = tmp.join("author-links").join(&test);
    std::fs::create_dir_all(&real).expect("target directory");
    std::fs::create_dir_all(link.parent().expect("parent")).expect("links");
    if std::fs::read_link(&link).ok().as_deref() != Some(real.as_path()) {
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&real, &link).expect("link");
    }
    link
}

fn dev_once(home: &Path, project: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_talaria"))
        .args(["plugin", "dev", "--once", "--yes"])
        .current_dir(project)
        .env("TALARIA_HOME", home)
        .env("NO_COLOR", "1")
        .env("CARGO_TARGET_DIR", rust_target_dir())
        .env_remove("TALARIA_LOG")
        .output()
        .expect("plugin dev");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "plugin dev --once in {}:\n{text}", project.display());
    assert!(text.contains(" passed, 0 failed"), "{text}");
    assert!(text.contains("running sessions reload it before their next turn"), "{text}");
    text
}

/// `chat -q PROMPT` plus `args`: its stdout, after asserting it worked.
fn ask(home: &Path, workspace: &Path, prompt: &str, args: &[&str]) -> String {
    let mut all = vec!["chat", "-q", prompt];
    all.extend_from_slice(args);
    let out = talaria(home, workspace, &all);
    assert!(out.status.success(), "chat -q {prompt:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Everything the model was sent in `request`, as text.
fn sent(mock: &talaria_mock_llm::MockLlm, request: usize) -> String {
    mock.requests().get(request).map(|r| r.body.to_string()).unwrap_or_default()
}

/// The hook, memory provider and context engine starters of `lang`, each from `plugin new`
/// through `plugin dev --once` (build, its own cases, install) to a real session: the hook
/// blocks a call, the memory provider recalls an earlier turn, the context engine compresses.
fn every_kind_works_in_a_session(lang: Lang) {
    use serde_json::json;
    use talaria_author::Starter;
    use talaria_mock_llm::{MockLlm, Reply, Script, Step};
    let tmp = tempfile::tempdir().expect("tempdir");
    let new = |kind: Starter, name: &str| {
        let project = tmp.path().join(name);
        talaria_author::new_project(&project, name, kind, lang).expect("new project");
        project
    };

    // A hook blocks a call.
    let mock = MockLlm::start(Script::new([
        Step::tool_call("terminal", json!({"command": "echo 'DROP TABLE users'"})),
        Reply::text("could not").into(),
    ]));
    let (home, workspace) = home_with_model(&tmp.path().join("hook"), &mock, "", "[memory]\nprovider = \"none\"");
    dev_once(&home, &new(Starter::Hook, "keeper"));
    ask(&home, &workspace, "empty the users table", &[]);
    let after = sent(&mock, 1);
    assert!(
        after.contains("keeper blocked this terminal call: its arguments contain") && after.contains("DROP TABLE"),
        "{lang}: the hook's block must reach the model: {after}"
    );

    // A memory provider recalls a turn of an earlier session.
    let mock = MockLlm::start(Script::new([Reply::text("Noted.").into(), Reply::text("Mochi.").into()]));
    let (home, workspace) = home_with_model(&tmp.path().join("memory"), &mock, "", "[memory]\nprovider = \"recall\"");
    dev_once(&home, &new(Starter::Memory, "recall"));
    ask(&home, &workspace, "My cat is called Mochi.", &[]);
    ask(&home, &workspace, "What is my cat called?", &[]);
    let second = sent(&mock, 1);
    assert!(
        second.contains("From earlier conversations") && second.contains("the user said: My cat is called Mochi."),
        "{lang}: the provider must recall the first session: {second}"
    );

    // A context engine compresses when the conversation reaches its threshold: 10% of the room
    // the system prompt and tool schemas leave in a 10,000-token window, passed once the third
    // turn has read a long file.
    let mock = MockLlm::start(Script::new([
        Reply::text("one").into(),
        Reply::text("two").into(),
        Step::tool_call("read_file", json!({"path": "notes.txt"})),
        Reply::text("three").into(),
    ]));
    let (home, workspace) = home_with_model(
        &tmp.path().join("context"),
        &mock,
        "context_length = 10000",
        "[memory]\nprovider = \"none\"\n\n[context]\nengine = \"trim\"\n\n[plugins.trim.config]\nkeep = 2\nthreshold = 0.1\n",
    );
    std::fs::write(workspace.join("notes.txt"), "a line of the notes the third turn reads\n".repeat(200))
        .expect("notes");
    dev_once(&home, &new(Starter::Context, "trim"));
    ask(&home, &workspace, "first", &[]);
    ask(&home, &workspace, "second", &["--continue"]);
    assert_eq!(ask(&home, &workspace, "third", &["--continue"]).trim(), "three");
    let last = sent(&mock, 3);
    assert!(last.contains("4 earlier messages were removed to save room"), "{lang}: not compressed: {last}");
    assert!(!last.contains("\"content\":\"second\""), "{lang}: the dropped turn is gone: {last}");
}

#[test]
fn rust_starters_of_every_kind_work_in_a_session() {
    every_kind_works_in_a_session(Lang::Rust);
}

#[test]
fn javascript_starters_of_every_kind_work_in_a_session() {
    every_kind_works_in_a_session(Lang::Js);
}

#[test]
fn python_starters_of_every_kind_work_in_a_session() {
    every_kind_works_in_a_session(Lang::Python);
}

/// A loopback API: answers every request with `{"quote": ...}` and keeps each request's
/// `authorization` header. Its port, and the headers seen.
fn quote_api() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = std::io::BufReader::new(stream.try_clone().expect("clone"));
            let mut authorization = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                    break;
                }
                if let Some((name, value)) = line.split_once(':')
                    && name.eq_ignore_ascii_case("authorization")
                {
                    authorization = value.trim().to_string();
                }
            }
            log.lock().expect("lock").push(authorization);
            let body = r#"{"quote": "Simplicity is prerequisite for reliability."}"#;
            let mut stream = stream;
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, seen)
}

/// What docs/authors/{python,javascript}.md tell an author to do for an API with a key: ask for
/// the host and the secret in plugin.toml, put the key in `.env`, send the secret's placeholder
/// in a header. The tool gets the API's answer; the API gets the key; the plugin never sees it.
/// A host that was not granted is refused with talaria's message.
fn a_tool_calls_an_api_with_an_injected_secret(lang: Lang) {
    let (port, seen) = quote_api();
    let tmp = tempfile::tempdir().expect("tempdir");
    let project = tmp.path().join("quotes");
    talaria_author::new_plugin(&project, "quotes", lang).expect("new plugin");
    let manifest = std::fs::read_to_string(project.join("plugin.toml")).expect("plugin.toml").replace(
        "[capabilities]\n",
        &format!(
            "[capabilities]\nnetwork = [\"127.0.0.1:{port}\"]\nsecrets = [{{ name = \"QUOTE_KEY\", host = \"127.0.0.1:{port}\" }}]\n"
        ),
    );
    std::fs::write(project.join("plugin.toml"), manifest).expect("plugin.toml");
    match lang {
        Lang::Python => {
            let code = format!(
                "\n\ndef quote(args: dict, context: CallContext) -> str:\n    \"\"\"Today's quote.\"\"\"\n    reply = talaria.fetch(\n        \"http://127.0.0.1:{port}/v1/quote\",\n        headers={{\"authorization\": \"Bearer \" + talaria.secret(\"QUOTE_KEY\")}},\n    )\n    return reply.raise_for_status().json()[\"quote\"]\n\n\ndef elsewhere(args: dict, context: CallContext) -> str:\n    \"\"\"A host that was not granted.\"\"\"\n    return talaria.fetch(\"http://127.0.0.2:{port}/\").text()\n\n\n# Each tool:"
            );
            let app = std::fs::read_to_string(project.join("app.py")).expect("app.py");
            let app = app.replace("\n\n# Each tool:", &code).replace(
                "TOOLS = {\n",
                "TOOLS = {\n    \"quote\": (quote, {\"type\": \"object\", \"properties\": {}}),\n    \"elsewhere\": (elsewhere, {\"type\": \"object\", \"properties\": {}}),\n",
            );
            std::fs::write(project.join("app.py"), app).expect("app.py");
        }
        Lang::Js => {
            let tool = format!(
                "const TOOLS = {{\n  quote: {{\n    description: \"Today's quote.\",\n    parameters: {{ type: 'object', properties: {{}} }},\n    async run() {{\n      const reply = await fetch('http://127.0.0.1:{port}/v1/quote', {{\n        headers: {{ authorization: `Bearer ${{secret('QUOTE_KEY')}}` }},\n      }});\n      if (!reply.ok) throw new TalariaError(`the API answered ${{reply.status}}`);\n      return (await reply.json()).quote;\n    }},\n  }},\n  elsewhere: {{\n    description: 'A host that was not granted.',\n    parameters: {{ type: 'object', properties: {{}} }},\n    async run() {{\n      return (await fetch('http://127.0.0.2:{port}/')).text();\n    }},\n  }},\n"
            );
            let app = std::fs::read_to_string(project.join("app.js")).expect("app.js");
            let app = app
                .replace(
                    "import { checked, failure, log } from './talaria.js';",
                    "import { TalariaError, checked, failure, log, secret } from './talaria.js';",
                )
                .replace("const TOOLS = {\n", &tool);
            std::fs::write(project.join("app.js"), app).expect("app.js");
        }
        Lang::Rust => unreachable!("the Rust starter's HTTP is wasi:http through a crate of the author's choice"),
    }
    let home = tmp.path().join("home");
    let workspace = tmp.path().join("workspace");
    std::fs::create_dir_all(&home).expect("home");
    std::fs::create_dir_all(&workspace).expect("workspace");
    std::fs::write(home.join(".env"), "QUOTE_KEY=s3cret-quote-key\n").expect(".env");
    let installed = dev_once(&home, &project);
    assert!(
        installed.contains(&format!("granted: net:127.0.0.1:{port}, secret:QUOTE_KEY@127.0.0.1:{port}")),
        "{installed}"
    );

    let out = talaria(&home, &workspace, &["tools", "call", "quote", "{}"]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{lang}: {stderr}");
    assert_eq!(stdout.trim(), "Simplicity is prerequisite for reliability.", "{lang}");
    assert_eq!(seen.lock().expect("lock").as_slice(), ["Bearer s3cret-quote-key"], "{lang}: the API gets the key");

    let refused = talaria(&home, &workspace, &["tools", "call", "elsewhere", "{}"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{lang}: {stderr}");
    assert!(
        stderr.contains(&format!("plugin 'quotes' has no network grant for 127.0.0.2:{port}")),
        "{lang}: talaria's reason must reach the author: {stderr}"
    );
    assert_eq!(seen.lock().expect("lock").len(), 1, "{lang}: the refused request never left");
}

#[test]
fn a_python_tool_calls_an_api_with_an_injected_secret() {
    a_tool_calls_an_api_with_an_injected_secret(Lang::Python);
}

#[test]
fn a_javascript_tool_calls_an_api_with_an_injected_secret() {
    a_tool_calls_an_api_with_an_injected_secret(Lang::Js);
}

/// `plugin dev` reloads an adapter into a running gateway: after the adapter's source changes
/// and `plugin dev --once` installs it again, the same account answers with the new code,
/// without restarting the gateway.
#[test]
fn plugin_dev_reloads_an_adapter_into_a_running_gateway() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mock = talaria_mock_llm::MockLlm::start(talaria_mock_llm::Script::auto());
    let (gateway, addr, project) = relay_gateway(tmp.path(), Lang::Rust, &mock);
    let answer_to = |body: &str, want: &str| {
        let start = std::time::Instant::now();
        loop {
            let answer = post(&addr, "/webhooks/relay/in", body);
            if answer.contains(want) || start.elapsed() > std::time::Duration::from_secs(60) {
                return answer;
            }
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
    };
    let before = answer_to("not json", "expected");
    let source = std::fs::read_to_string(project.join("src/lib.rs")).expect("lib.rs");
    std::fs::write(project.join("src/lib.rs"), source.replace("expected {{", "version two wants {{")).expect("edit");
    dev_once(&tmp.path().join("home"), &project);
    let after = answer_to("not json", "version two wants");
    let echoed = answer_to(r#"{"chat": "c1", "user": "u1", "text": "echo still answering"}"#, "still answering");
    let log = stop(gateway);
    assert!(before.starts_with("HTTP/1.1 400") && before.contains("expected {"), "{before}\n{log}");
    assert!(after.starts_with("HTTP/1.1 400") && after.contains("version two wants {"), "{after}\n{log}");
    assert!(echoed.starts_with("HTTP/1.1 200") && echoed.contains(r#"{"reply":"still answering"}"#), "{echoed}\n{log}");
    assert!(log.contains("adapter reloaded and connected"), "{log}");
}
