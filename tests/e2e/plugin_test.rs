//! `talaria plugin test`: a plugin project's component is checked and its cases run in the
//! sandbox, each with the host imports it made printed beneath it.

use std::path::PathBuf;

use super::{Talaria, support};

impl Talaria {
    /// A plugin project `name` in the workspace holding `wasm`, `manifest` and `tests`.
    fn plugin_project(&self, name: &str, wasm: &str, manifest: &str, tests: &str) -> PathBuf {
        let dir = self.ws().join(name);
        std::fs::create_dir_all(&dir).expect("project");
        std::fs::copy(wasm, dir.join("plugin.wasm")).expect("wasm");
        std::fs::write(dir.join("plugin.toml"), manifest).expect("manifest");
        std::fs::write(dir.join("plugin-tests.toml"), tests).expect("tests");
        dir
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn plugin_test_reports_each_case_with_its_host_imports() {
    let t = Talaria::new();
    let tests = r#"
[[test]]
tool = "legacy_echo"
args = { text = "hi" }
expect_equals = "0.1.0: hi"
expect_imports = ["log info"]

[[test]]
tool = "legacy_echo"
args = { text = "hi" }
expect_contains = "bye"
"#;
    t.plugin_project("legacy", support::LEGACY_V1_WASM, &support::manifest_v1("legacy", ""), tests);
    let out = t.run(&["plugin", "test", "legacy"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("plugin legacy 0.1.0 ("), "{stdout}");
    // "(compiled in 0.3 s)" follows the first time.
    assert!(
        lines[1].starts_with("ok   compatible: API 0.1.0, kind tool; tools: legacy_echo; host imports: log"),
        "{stdout}"
    );
    assert!(lines[2].starts_with(r#"ok   legacy_echo {"text":"hi"}  ("#) && lines[2].ends_with(" ms)"), "{stdout}");
    // $WORKSPACE is a scratch directory, not the project.
    assert!(
        lines[3].starts_with(r#"       log info "echo in /"#) && lines[3].contains("talaria-plugin-test-"),
        "{stdout}"
    );
    assert!(lines[4].starts_with(r#"FAIL legacy_echo {"text":"hi"}  ("#), "{stdout}");
    assert_eq!(lines[5], r#"     expected output containing "bye", got "0.1.0: hi""#, "{stdout}");
    assert!(lines[6].starts_with(r#"       log info "echo in "#), "{stdout}");
    assert_eq!(lines[7..], ["1 passed, 1 failed"], "{stdout}");
    assert!(!stdout.contains('\u{1b}'), "escape codes in piped output");
}

#[test]
fn plugin_test_grants_what_the_manifest_requests_and_speaks_json() {
    let t = Talaria::new();
    // kv carries from case to case; `secrets` and the network are used but not requested.
    let tests = r#"
[[test]]
tool = "kv_set"
args = { text = "counter=42" }
expect_equals = "stored"
expect_imports = ["kv.set counter (2 bytes) -> ok"]

[[test]]
tool = "kv_get"
args = { name = "counter" }
expect_equals = "42"
"#;
    let dir = t.plugin_project("evil", support::EVIL_WASM, &support::manifest("evil", "kv = true"), tests);
    let out = t.run(&["plugin", "test", &dir.display().to_string()]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("\n       kv.set counter (2 bytes) -> ok\n"), "{stdout}");
    assert!(stdout.contains("\n       kv.get counter -> 2 bytes\n"), "{stdout}");
    assert!(stdout.ends_with("2 passed, 0 failed\n"), "{stdout}");
    assert!(
        stderr.contains("note: the component imports the ")
            && stderr.contains("network")
            && stderr.contains("but plugin.toml requests none of them: calls to them will be refused"),
        "{stderr}"
    );
    // The user's own home got no plugin and no grant.
    assert!(!t.home.path().join("plugins").exists() && !t.home.path().join("grants.toml").exists());

    let out = t.run(&["plugin", "test", "--json", &dir.display().to_string()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(report["plugin"], "evil");
    assert_eq!(report["compatibility"]["ok"], true);
    assert_eq!((report["passed"].as_u64(), report["failed"].as_u64()), (Some(2), Some(0)));
    let import = &report["tests"][0]["imports"][0];
    assert_eq!(import["line"], "kv.set counter (2 bytes) -> ok");
    assert_eq!((import["interface"].as_str(), import["function"].as_str()), (Some("kv"), Some("set")));
}

#[test]
fn plugin_test_fails_without_a_built_component() {
    let t = Talaria::new();
    let dir = t.plugin_project("legacy", support::LEGACY_V1_WASM, &support::manifest_v1("legacy", ""), "");
    std::fs::remove_file(dir.join("plugin.wasm")).expect("remove");
    let out = t.run(&["plugin", "test", "legacy"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.ends_with(
            "FAIL compatibility: no plugin.wasm: build it first with `talaria plugin build`\nthe component is not compatible\n"
        ),
        "{stdout}"
    );
    let err = t.fails(&["plugin", "test", "nowhere"]);
    assert!(err.contains(&format!("{} has no plugin.toml", t.ws().join("nowhere").display())), "{err}");
}

/// `[[test.http]]` answers a case's requests without the network, after the grant check; a
/// request no stub matches is refused, and a host the manifest does not request stays refused.
#[test]
fn http_stubs_answer_requests_offline_after_the_grant_check() {
    let t = Talaria::new();
    let tests = r#"
[[test]]
tool = "http_get"
args = { url = "https://api.example.com/v1/forecast?q=Oslo" }
expect_equals = "200 {\"temp_c\":21}"
expect_imports = ["http GET https://api.example.com/v1/forecast?q=Oslo -> 200"]
[[test.http]]
url = "https://api.example.com/v1/*"
json = { temp_c = 21 }

[[test]]
tool = "http_get"
args = { url = "https://api.example.com/v2/other" }
expect_error = "no stub in plugin-tests.toml answers GET https://api.example.com/v2/other"
[[test.http]]
url = "https://api.example.com/v1/*"
body = "unused"

[[test]]
tool = "http_get"
args = { url = "https://elsewhere.example.org/" }
expect_error = "has no network grant for elsewhere.example.org:443"
[[test.http]]
url = "*"
status = 500
"#;
    let manifest = support::manifest("evil", "network = [\"api.example.com\"]");
    let dir = t.plugin_project("evil", support::EVIL_WASM, &manifest, tests);
    let out = t.run(&["plugin", "test", &dir.display().to_string()]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.ends_with("3 passed, 0 failed\n"), "{stdout}");
    assert!(stdout.contains("http GET https://api.example.com/v2/other -> refused: no stub"), "{stdout}");
}

/// A new project `name` of `kind` in `lang`, its file `file` edited (`from` → `to`) and
/// `cases` added to its plugin-tests.toml; then built (in the sandbox). The project directory.
fn starter(
    t: &Talaria,
    name: &str,
    kind: &str,
    lang: &str,
    file: &str,
    edits: &[(&str, &str)],
    cases: &str,
) -> PathBuf {
    t.ok(&["plugin", "new", name, "--kind", kind, "--lang", lang]);
    let dir = t.ws().join(name);
    let path = dir.join(file);
    let mut source = std::fs::read_to_string(&path).expect("read");
    for (from, to) in edits {
        assert!(source.contains(from), "{file} has no {from:?}:\n{source}");
        source = source.replacen(from, to, 1);
    }
    std::fs::write(&path, source).expect("write");
    let tests = dir.join("plugin-tests.toml");
    let mut all = std::fs::read_to_string(&tests).expect("tests");
    all.push_str(cases);
    std::fs::write(&tests, all).expect("tests");
    t.ok(&["plugin", "build", dir.to_str().expect("utf8")]);
    dir
}

/// The 1-based number of the line of `file` in `dir` that contains `text`.
fn line_of(dir: &std::path::Path, file: &str, text: &str) -> usize {
    let source = std::fs::read_to_string(dir.join(file)).expect("read");
    source.lines().position(|l| l.contains(text)).unwrap_or_else(|| panic!("no {text:?} in {file}")) + 1
}

/// The hook starter in Python: a wrong return type names the method, the type it must return
/// and where the method is (not a panic in the bindings); an exception fails the call with its
/// file and line, and is not turned into `proceed`.
#[test]
fn python_hook_errors_name_the_method_the_type_and_the_line() {
    let t = Talaria::new();
    let cases = r#"
[[test]]
event = "pre_tool_call"
tool = "terminal"
args = { command = "as-text" }
expect_error = "it returned str 'block'"

[[test]]
event = "pre_tool_call"
tool = "terminal"
args = { command = "boom" }
expect_error = "KeyError: 'temperature'"
"#;
    let edits = [(
        "        if isinstance(event, Event_PreToolCall):\n",
        "        if isinstance(event, Event_PreToolCall) and \"as-text\" in event.value.arguments:\n            return \"block\"\n        if isinstance(event, Event_PreToolCall) and \"boom\" in event.value.arguments:\n            settings = {}\n            return Decision_Block(settings[\"temperature\"])\n        if isinstance(event, Event_PreToolCall):\n",
    )];
    let dir = starter(&t, "stopper", "hook", "python", "app.py", &edits, cases);
    let out = t.run(&["plugin", "test", dir.to_str().expect("utf8")]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("5 passed, 0 failed") && !stdout.contains("panicked"), "{stdout}");

    // What the errors read, in full, as `plugin test --json` reports them.
    let out = t.run(&["plugin", "test", "--json", dir.to_str().expect("utf8")]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let error = |n: usize| report["tests"][n]["error"].as_str().unwrap_or_default().to_string();
    let def = line_of(&dir, "app.py", "def on_event(");
    let wrong = error(3);
    assert!(
        wrong.contains(&format!(
            "TypeError: Hooks.on_event (app.py, line {def}) must return Decision (one of Decision_Proceed, Decision_Block,"
        )) && wrong.contains("but it returned str 'block'"),
        "{wrong}"
    );
    let raised = line_of(&dir, "app.py", "settings[\"temperature\"]");
    let boom = error(4);
    assert!(
        boom.contains("KeyError: 'temperature'") && boom.contains(&format!("app.py\", line {raised}, in on_event")),
        "{boom}"
    );
}

/// The tool starter in Python: an exception reaches the caller (the model, `plugin test`,
/// `tools call`) with the file and line it was raised at; a ToolSpec whose schema is a dict
/// names `Tools.list`, `list[ToolSpec]` and the field.
#[test]
fn python_tool_errors_name_the_file_line_and_type() {
    let t = Talaria::new();
    let cases = r#"
[[test]]
tool = "hello"
args = { name = "weather" }
expect_error = "KeyError: 'temperature' (app.py, line"
"#;
    let edits = [(
        "    talaria.log.info(f\"greeting {name}\")\n",
        "    talaria.log.info(f\"greeting {name}\")\n    if name == \"weather\":\n        return args[\"temperature\"]\n",
    )];
    let dir = starter(&t, "hello", "tool", "python", "app.py", &edits, cases);
    let dir_arg = dir.to_str().expect("utf8");
    let out = t.run(&["plugin", "test", dir_arg]);
    assert!(out.status.success(), "{}", text(&out.stdout));
    t.ok(&["plugin", "dev", "--once", dir_arg]);
    let line = line_of(&dir, "app.py", "return args[\"temperature\"]");
    let err = t.fails(&["tools", "call", "hello", r#"{"name":"weather"}"#]);
    assert!(err.contains(&format!("KeyError: 'temperature' (app.py, line {line}, in hello)")), "{err}");

    // The schema as a dict: the whole tool list is refused, saying why.
    let edits =
        [("ToolSpec(name, run.__doc__ or \"\", json.dumps(schema))", "ToolSpec(name, run.__doc__ or \"\", schema)")];
    let dir = starter(&t, "schema", "tool", "python", "app.py", &edits, "");
    let out = t.run(&["plugin", "test", dir.to_str().expect("utf8")]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let def = line_of(&dir, "app.py", "def list(self)");
    assert!(
        stdout.contains(&format!("Tools.list (app.py, line {def}) must return list[ToolSpec], but in what it returned, [0].parameters is dict"))
            && stdout.contains("not str (use json.dumps)"),
        "{stdout}"
    );
    assert!(!stdout.contains("panicked"), "{stdout}");
}

/// The hook starter in JavaScript: a wrong return type names `hooks.onEvent` and the decision
/// it must return; an exception fails the call with its file and line.
#[test]
fn javascript_hook_errors_name_the_method_and_the_type() {
    let t = Talaria::new();
    let cases = r#"
[[test]]
event = "pre_tool_call"
tool = "terminal"
args = { command = "as-text" }
expect_error = "hooks.onEvent must return a decision: { tag: 'proceed' }"

[[test]]
event = "pre_tool_call"
tool = "terminal"
args = { command = "boom" }
expect_error = "app.js:"
"#;
    let edits = [(
        "    if (event.tag === 'pre-tool-call') {\n",
        "    if (event.val?.arguments?.includes('as-text')) return 'block';\n    if (event.val?.arguments?.includes('boom')) return { tag: 'block', val: undefined.temperature };\n    if (event.tag === 'pre-tool-call') {\n",
    )];
    let dir = starter(&t, "stopper", "hook", "js", "app.js", &edits, cases);
    let out = t.run(&["plugin", "test", dir.to_str().expect("utf8")]);
    let stdout = text(&out.stdout);
    assert!(out.status.success() && stdout.contains("5 passed, 0 failed"), "{stdout}\n{}", text(&out.stderr));
}

/// `plugin build` on a manifest with a typo says what is wrong (and exits 1), as does `plugin
/// dev`, whatever the typo.
#[test]
fn plugin_build_prints_every_manifest_error() {
    let t = Talaria::new();
    t.ok(&["plugin", "new", "typo", "--lang", "python"]);
    let dir = t.ws().join("typo");
    let manifest = std::fs::read_to_string(dir.join("plugin.toml")).expect("read");
    let typos = [
        ("version = ", "verison = ", "unknown field `verison`"),
        ("kind = [\"tool\"]", "kind = [\"tools\"]", "unknown kind `tools`"),
        ("# kv = true", "kv = yes", "plugin.toml: TOML parse error"),
        ("# kv = true", "netwrok = [\"x\"]", "unknown field `netwrok`"),
    ];
    for (from, to, said) in typos {
        std::fs::write(dir.join("plugin.toml"), manifest.replacen(from, to, 1)).expect("write");
        for command in [&["plugin", "build"][..], &["plugin", "dev", "--once"]] {
            let args: Vec<&str> = command.iter().copied().chain([dir.to_str().expect("utf8")]).collect();
            let err = t.fails(&args);
            assert!(err.contains(said) && err.starts_with("error: "), "{command:?} with {to:?}: {err}");
        }
    }
}
