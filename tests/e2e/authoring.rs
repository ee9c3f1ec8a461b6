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
