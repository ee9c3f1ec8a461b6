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
