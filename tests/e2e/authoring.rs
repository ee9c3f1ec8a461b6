//! An author's whole path in JavaScript and in Python, with the real toolchains (componentize-js
//! from npm, componentize-py from PyPI): `plugin new`, `build`, `test`, `pack`, `keygen`,
//! `sign`; then a user trusts the key, installs the signed bundle and calls its tool.

use super::Talaria;

fn author_to_user(lang: &str) {
    let author = Talaria::new();
    let name = format!("hello-{lang}");
    author.ok(&["plugin", "new", &name, "--lang", lang]);
    let dir = author.ws().join(&name);
    let dir_arg = dir.to_str().expect("utf8");
    let built = author.ok(&["plugin", "build", dir_arg]);
    assert_eq!(built.trim(), dir.join("plugin.wasm").display().to_string(), "stdout names the component");
    let tested = author.ok(&["plugin", "test", dir_arg]);
    assert!(tested.contains("ok   compatible: API 0.2.0, kind tool; tools: hello"), "{tested}");
    assert!(tested.contains("2 passed, 0 failed") && !tested.contains("FAIL"), "{tested}");
    author.ok(&["plugin", "keygen", "--name", "me"]);
    let bundle = dir.join("dist").join(format!("{name}-0.1.0.tar.gz"));
    author.ok(&["plugin", "pack", dir_arg]);
    author.ok(&["plugin", "sign", bundle.to_str().expect("utf8"), "--key", "me"]);
    let public = std::fs::read_to_string(author.home.path().join("keys/me.pub")).expect("pub");

    let user = Talaria::new();
    user.ok(&["plugins", "trust-key", public.trim(), "--name", "author"]);
    let out = user.ok(&["plugins", "install", bundle.to_str().expect("utf8")]);
    assert!(out.contains(&format!("installed {name} 0.1.0 (user, signed by")), "{out}");
    let greeting = user.ok(&["tools", "call", "hello", r#"{"name":"Ada"}"#]);
    assert!(greeting.contains("Hello, Ada!"), "{lang}: {greeting}");
    let err = user.fails(&["tools", "call", "hello", r#"{"name":""}"#]);
    assert!(err.contains("name"), "{lang}: the tool's error reaches the caller: {err}");
}

#[test]
fn a_javascript_plugin_from_new_to_installed() {
    author_to_user("js");
}

#[test]
fn a_python_plugin_from_new_to_installed() {
    author_to_user("python");
}

/// `talaria plugin dev` reloads a running chat: a turn before the hook exists runs the command;
/// after `plugin dev --once` builds, tests and installs the hook, the chat's next turn is
/// blocked by it, and the chat says which plugin it reloaded.
#[test]
fn plugin_dev_reloads_the_hook_into_a_running_chat() {
    use serde_json::json;
    use talaria_mock_llm::{MockLlm, Reply, Script, Step};

    let t = Talaria::new();
    let call = || Step::tool_call("terminal", json!({"command": "echo forbidden-word"}));
    let mock =
        MockLlm::start(Script::new([call(), Reply::text("ran it").into(), call(), Reply::text("stopped").into()]));
    t.use_model(
        &mock.base_url(),
        "chat_completions",
        "",
        "[memory]\nprovider = \"none\"\n\n[plugins.keeper.config]\nblock = [\"forbidden-word\"]\n",
    );
    let mut repl = super::repl::Repl::start(&t).within(std::time::Duration::from_secs(120));
    repl.send("say the word");
    repl.wait_for("ran it", 1);
    let first = mock.requests()[1].body.to_string();
    assert!(first.contains("forbidden-word") && !first.contains("keeper blocked"), "{first}");

    t.ok(&["plugin", "new", "keeper", "--kind", "hook", "--lang", "rust"]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_talaria"))
        .args(["plugin", "dev", "--once"])
        .current_dir(t.ws().join("keeper"))
        .env("TALARIA_HOME", t.home.path())
        .env("NO_COLOR", "1")
        .env("CARGO_TARGET_DIR", std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("author-rust"))
        .env_remove("TALARIA_LOG")
        .output()
        .expect("plugin dev");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.contains("3 passed, 0 failed"), "{said}");

    repl.send("say it again");
    let shown = repl.wait_for("stopped", 1);
    assert!(shown.contains("reloaded the plugins: keeper (new)"), "{shown}");
    let second = mock.requests()[3].body.to_string();
    assert!(
        second.contains("keeper blocked this terminal call: its arguments contain")
            && second.contains("forbidden-word"),
        "the reloaded hook must block the call: {second}"
    );
    repl.close();
}

/// `talaria ARGS`, with the test's home, no terminal: whether it succeeded, and everything it
/// printed (stdout, then stderr).
fn said(t: &Talaria, args: &[&str]) -> (bool, String) {
    let out = t.run(args);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// The installed plugin `name` as `plugins list --json` shows it.
fn listed(t: &Talaria, name: &str) -> Option<serde_json::Value> {
    let list: serde_json::Value = serde_json::from_str(&t.ok(&["plugins", "list", "--json"])).expect("json");
    list.as_array().expect("array").iter().find(|p| p["name"] == name).cloned()
}

fn lockfile(t: &Talaria) -> String {
    std::fs::read_to_string(t.home.path().join("plugins.lock")).unwrap_or_default()
}

/// Replace `from` with `to` in the project file `path` (which must contain it).
fn edit(path: &std::path::Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).expect("read");
    assert!(text.contains(from), "{} has no {from:?}:\n{text}", path.display());
    std::fs::write(path, text.replacen(from, to, 1)).expect("write");
}

/// What plugin.toml asks for when it widens itself (issue 35's finding).
const WIDE: &str =
    "[capabilities]\nfilesystem = [{ path = \"/\", access = \"read-write\" }]\nnetwork = [\"*\"]\nprocess = true\n";

/// `plugin dev` never widens a grant without consent: with the loop running, plugin.toml is
/// rewritten to ask for `fs:rw:/`, `net:*` and `process`; the loop prints the capability diff
/// and installs nothing. `--once` refuses it too (exit 1, the diff printed), also when
/// `--grant` consents to only part of it; `--yes` given on the command line consents.
#[test]
fn plugin_dev_stops_at_the_capability_diff() {
    let t = Talaria::new();
    t.ok(&["plugin", "new", "devp", "--lang", "python"]);
    let dir = t.ws().join("devp");
    let dir_arg = dir.to_str().expect("utf8");

    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_talaria"))
        .args(["plugin", "dev", dir_arg])
        .current_dir(t.ws())
        .env("TALARIA_HOME", t.home.path())
        .env("NO_COLOR", "1")
        .env_remove("TALARIA_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("plugin dev");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stderr = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = String::new();
    let mut wait_for = |what: &str, count: usize| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(240);
        while seen.matches(what).count() < count {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    seen.push_str(&line);
                    seen.push('\n');
                }
                Err(_) => panic!("no {what:?} from plugin dev; it said:\n{seen}"),
            }
        }
        seen.clone()
    };
    let first = wait_for("watching for changes", 1);
    assert!(first.contains("installed devp 0.1.0 from") && first.contains("(granted: nothing)"), "{first}");
    let lock_before = lockfile(&t);

    edit(&dir.join("plugin.toml"), "[capabilities]\n", WIDE);
    let paused = wait_for("watching for changes", 2);
    let _ = child.kill();
    let _ = child.wait();
    let round = &paused[first.len()..];
    assert!(round.contains("plugin.toml asks for more than `devp` was granted: not installed"), "{round}");
    for line in ["  + fs:rw:/", "  + net:*", "  + process"] {
        assert!(round.contains(line), "the diff shows {line:?}: {round}");
    }
    assert!(round.contains("--grant fs:rw:/ --grant net:* --grant process"), "says which flags grant: {round}");
    assert!(!round.contains("installed devp"), "{round}");
    assert_eq!(lockfile(&t), lock_before, "nothing wider is installed");
    let devp = listed(&t, "devp").expect("still installed");
    assert_eq!(devp["granted"], serde_json::json!([]), "{devp}");
    assert_eq!(devp["requested"], serde_json::json!([]), "the installed manifest is the consented one: {devp}");

    let (ok, out) = said(&t, &["plugin", "dev", "--once", dir_arg]);
    assert!(!ok && out.contains("  + fs:rw:/") && out.contains("nobody is here to consent"), "{out}");
    let (ok, out) = said(&t, &["plugin", "dev", "--once", "--grant", "process", dir_arg]);
    assert!(!ok && out.contains("  + fs:rw:/") && !out.contains("  + process"), "process was consented to: {out}");
    assert_eq!(lockfile(&t), lock_before, "nothing wider is installed");

    let (ok, out) = said(&t, &["plugin", "dev", "--once", "--yes", dir_arg]);
    assert!(ok && out.contains("(granted: fs:rw:/, net:*, process)"), "{out}");
}

/// A build runs the project's own code (here a `build.rs`) in the command sandbox: it cannot
/// read a key in the home directory, write outside the project, or see talaria's environment.
/// The same build with `--unconfined-build` can (so the probe works); where the sandbox cannot
/// start, the build is refused with the fix and the opt-out.
#[test]
fn a_build_script_gets_no_more_than_a_command() {
    use super::sandbox::Jail;
    const MARK: &str = "MARKER-7f3a";

    let jail = Jail::new();
    let project = jail.ws.join("leaky");
    std::fs::create_dir_all(project.join("src")).expect("mkdir");
    let outside = jail.home.parent().expect("root").join("outside");
    let files = [
        ("Cargo.toml", "[package]\nname = \"leaky\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[lib]\ncrate-type = [\"cdylib\"]\n".to_string()),
        ("src/lib.rs", String::new()),
        ("plugin.toml", "name = \"leaky\"\nversion = \"0.1.0\"\napi = \"0.2.0\"\n".to_string()),
        (
            "build.rs",
            format!(
                r#"fn main() {{
    let home = std::env::var("HOME").unwrap_or_default();
    let key = std::fs::read_to_string(format!("{{home}}/.ssh/id_rsa"));
    let planted = std::fs::write(format!("{{home}}/planted"), "x");
    let outside = std::fs::write({outside:?}, "x");
    let env = std::env::var("TALARIA_TEST_SECRET");
    panic!("PROBE key: {{key:?}}; planted: {{planted:?}}; outside: {{outside:?}}; env: {{env:?}}");
}}
"#
            ),
        ),
    ];
    for (name, text) in files {
        std::fs::write(project.join(name), text).expect("write");
    }
    let build = |extra: &[&str]| {
        let out = jail
            .talaria()
            .args(["plugin", "build", "leaky"])
            .args(extra)
            .env("NO_COLOR", "1")
            .env_remove("CARGO_TARGET_DIR")
            .output()
            .expect("plugin build");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    };

    let (ok, out) = build(&[]);
    assert!(!ok && out.contains("PROBE key: Err("), "the build script ran and failed: {out}");
    assert!(!out.contains(MARK), "nothing of the home or of talaria's environment reached it: {out}");
    // The home is empty and read-only; /tmp, where `outside` is, is the sandbox's own.
    assert!(out.contains("planted: Err(Os { code: 30"), "{out}");
    assert!(out.contains("env: Err(NotPresent)"), "{out}");
    assert!(!jail.home.join("planted").exists() && !outside.exists(), "nothing written outside the project");

    let (ok, out) = build(&["--unconfined-build"]);
    assert!(!ok && out.contains(&format!("{MARK}-ssh")), "unconfined, the same script reads the key: {out}");
    assert!(out.contains("--unconfined-build: the build runs as you"), "{out}");
    assert!(jail.home.join("planted").exists(), "and writes the home");

    let nowhere = Jail::with_config("[sandbox]\nbwrap = \"/nonexistent/bwrap\"\n");
    std::fs::create_dir_all(nowhere.ws.join("leaky")).expect("mkdir");
    std::fs::write(nowhere.ws.join("leaky/plugin.toml"), "name = \"leaky\"\nversion = \"0.1.0\"\napi = \"0.2.0\"\n")
        .expect("write");
    std::fs::write(nowhere.ws.join("leaky/app.py"), "").expect("write");
    let out = nowhere.talaria().args(["plugin", "build", "leaky"]).output().expect("plugin build");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("bubblewrap (`bwrap`) was not found") && err.contains("apt-get install bubblewrap"), "{err}");
    assert!(err.contains("pass --unconfined-build to build it as you"), "{err}");
}

/// A plugin installed from its project (`plugins install ./`) survives a failing `plugin dev
/// --once` round (a broken build, failing tests) as it was, with its grants and its key-value
/// data; a good round then updates it in place, and its data carries over.
#[test]
fn a_failing_dev_round_leaves_the_installed_plugin_and_its_data() {
    let t = Talaria::new();
    t.ok(&["plugin", "new", "keeper", "--lang", "python"]);
    let dir = t.ws().join("keeper");
    let dir_arg = dir.to_str().expect("utf8");
    let app = dir.join("app.py");
    edit(&dir.join("plugin.toml"), "# kv = true", "kv = true");
    edit(
        &app,
        "    return f\"Hello, {name}!\"",
        "    n = talaria.kv.increment(\"greeted\")\n    return f\"Hello, {name}! ({n})\"",
    );
    t.ok(&["plugin", "build", dir_arg]);
    let out = t.ok(&["plugins", "install", dir_arg, "--allow-unsigned", "--grant", "kv"]);
    assert!(out.contains("installed keeper 0.1.0") && out.contains("granted: kv"), "{out}");
    let greet = || t.ok(&["tools", "call", "hello", r#"{"name":"Ada"}"#]);
    assert!(greet().contains("Hello, Ada! (1)"));
    assert!(greet().contains("Hello, Ada! (2)"));
    let lock = lockfile(&t);
    let entry = listed(&t, "keeper").expect("installed");
    assert_eq!(entry["granted"], serde_json::json!(["kv"]), "{entry}");

    // A broken build.
    let good = std::fs::read_to_string(&app).expect("read");
    std::fs::write(&app, format!("{good}\ndef broken(:\n")).expect("write");
    let (ok, out) = said(&t, &["plugin", "dev", "--once", dir_arg]);
    assert!(!ok && out.contains("not installed: what was installed stays as it was"), "{out}");
    assert_eq!(lockfile(&t), lock, "the lockfile is as it was");
    assert_eq!(listed(&t, "keeper"), Some(entry.clone()), "plugins list shows it as it was");
    assert!(greet().contains("Hello, Ada! (3)"), "it still runs, with its data");

    // Failing tests.
    std::fs::write(&app, good.replace("f\"Hello, {name}! ({n})\"", "f\"Hi, {name}! ({n})\"")).expect("write");
    let (ok, out) = said(&t, &["plugin", "dev", "--once", dir_arg]);
    assert!(!ok && out.contains("1 passed, 1 failed") && out.contains("the tests failed"), "{out}");
    assert_eq!(lockfile(&t), lock, "the lockfile is as it was");
    assert!(greet().contains("Hello, Ada! (4)"));

    // A good round updates the install from ./ in place: same identity, grants and data.
    std::fs::write(&app, good.replace("({n})\"", "({n}) again\"")).expect("write");
    let (ok, out) = said(&t, &["plugin", "dev", "--once", dir_arg]);
    assert!(ok && out.contains("installed keeper 0.1.0 from") && out.contains("(granted: kv)"), "{out}");
    assert!(greet().contains("Hello, Ada! (5) again"), "its data carried over");
    let now = listed(&t, "keeper").expect("installed");
    assert_eq!((&now["granted"], &now["source"]), (&entry["granted"], &entry["source"]), "{now}");
    let identity = |text: &str| text.lines().find(|l| l.starts_with("identity = ")).map(str::to_string);
    assert_eq!(identity(&lockfile(&t)), identity(&lock), "the same identity, so the same data");
}

/// The Python hook starter fails closed: an exception in `on_event` is not turned into
/// `proceed`; talaria blocks the tool call and the model reads the exception with its file
/// and line.
#[test]
fn an_exception_in_the_hook_starter_blocks_the_call() {
    use serde_json::json;
    use talaria_mock_llm::{MockLlm, Reply, Script, Step};

    let t = Talaria::new();
    t.ok(&["plugin", "new", "stopper", "--kind", "hook", "--lang", "python"]);
    let dir = t.ws().join("stopper");
    edit(
        &dir.join("app.py"),
        "        if isinstance(event, Event_PreToolCall):\n",
        "        if isinstance(event, Event_PreToolCall) and \"boom\" in event.value.arguments:\n            settings = {}\n            return Decision_Block(settings[\"temperature\"])\n        if isinstance(event, Event_PreToolCall):\n",
    );
    let (ok, out) = said(&t, &["plugin", "dev", "--once", dir.to_str().expect("utf8")]);
    assert!(ok && out.contains("installed stopper 0.1.0"), "{out}");

    let mock = MockLlm::start(Script::new([
        Step::tool_call("terminal", json!({"command": "echo boom > ran.txt"})),
        Reply::text("done").into(),
    ]));
    t.use_model(&mock.base_url(), "chat_completions", "", "[memory]\nprovider = \"none\"\n");
    let (_, out) = said(&t, &["chat", "-q", "go", "--yolo"]);
    let second = mock.requests().get(1).map(|r| r.body.to_string()).unwrap_or_else(|| panic!("one turn: {out}"));
    assert!(
        second.contains("blocked: hook 'stopper' failed") && second.contains("KeyError: 'temperature'"),
        "the failed hook blocks the call: {second}"
    );
    assert!(second.contains("app.py"), "with where it was raised: {second}");
    assert!(!t.ws().join("ran.txt").exists(), "the command did not run");
}
