//! The trust boundary end to end: what a plugin (or a repository) leaves in the workspace, the
//! name a plugin claims and the key that signs its updates get it nothing the user did not grant.

use std::path::{Path, PathBuf};
use std::process::Command;

use talaria_mock_llm::{MockLlm, Script, Step};

use super::{Talaria, support};

/// A plugin directory `name` holding the evil component, requesting `caps`.
fn evil_dir(root: &Path, name: &str, version: &str, caps: &str) -> PathBuf {
    let dir = root.join(format!("{name}-{version}"));
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::copy(support::EVIL_WASM, dir.join("plugin.wasm")).expect("wasm");
    let manifest = support::manifest(name, caps).replace("version = \"0.1.0\"", &format!("version = \"{version}\""));
    std::fs::write(dir.join("plugin.toml"), manifest).expect("manifest");
    dir
}

fn text(out: &std::process::Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_context_file_linked_to_secrets_never_reaches_the_model_or_the_store() {
    let t = Talaria::new();
    let mock = MockLlm::start(Script::new([Step::text("noted")]));
    std::fs::write(
        t.home.path().join("config.toml"),
        format!(
            "[model]\nprovider = \"custom\"\nname = \"mock-model\"\nbase_url = \"{}\"\nkey_env = \"MOCK_API_KEY\"\n",
            mock.base_url()
        ),
    )
    .expect("config");
    std::fs::write(t.home.path().join(".env"), "OPENAI_API_KEY=sk-dotenv-secret-4242\n").expect(".env");
    // What a plugin with fs:rw on the workspace leaves behind.
    let home = t.home.path().canonicalize().expect("home");
    let up = "../".repeat(t.ws().components().count() - 1);
    let relative = format!("{up}{}", home.join(".env").display().to_string().trim_start_matches('/'));
    std::os::unix::fs::symlink(&relative, t.ws().join("AGENTS.md")).expect("link");
    std::os::unix::fs::symlink("/proc/self/environ", t.ws().join("CLAUDE.md")).expect("link");
    let out = Command::new(env!("CARGO_BIN_EXE_talaria"))
        .args(["chat", "-q", "hello"])
        .current_dir(t.ws())
        .env("TALARIA_HOME", t.home.path())
        .env("MOCK_API_KEY", "sk-environment-secret-7777")
        .output()
        .expect("run");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout.trim(), "noted");
    let outside = format!("it is a link leading out of {}, which talaria never follows", t.ws().display());
    assert!(stderr.contains(&format!("AGENTS.md: not loaded: {outside}")), "{stderr}");
    assert!(stderr.contains(&format!("CLAUDE.md: not loaded: {outside}")), "{stderr}");
    let sent = mock.requests()[0].body.to_string();
    for secret in ["sk-dotenv-secret-4242", "sk-environment-secret-7777", "MOCK_API_KEY"] {
        assert!(!sent.contains(secret), "{secret} reached the model: {sent}");
    }
    let db = std::fs::read(t.home.path().join("state.db")).expect("db");
    let db = String::from_utf8_lossy(&db);
    assert!(!db.contains("sk-dotenv-secret-4242") && !db.contains("sk-environment-secret-7777"));
}

#[test]
fn trust_shows_and_pins_what_a_project_brings() {
    let t = Talaria::new();
    let plugins = t.ws().join(".talaria/plugins");
    std::fs::create_dir_all(&plugins).expect("dir");
    let dir = evil_dir(&plugins, "helper", "0.1.0", "kv = true");
    std::fs::rename(&dir, plugins.join("helper")).expect("rename");
    // Before trust: ignored, and said so.
    let (_, err) = text(&t.run(&["plugins", "list"]));
    assert!(err.contains("this project is not trusted; run `talaria trust` to load them"), "{err}");

    let out = t.ok(&["trust"]);
    let sha = talaria_runtime::fsutil::sha256_hex(&std::fs::read(support::EVIL_WASM).expect("wasm"));
    for needle in [
        format!("{} brings 1 plugin:", t.ws().display()),
        "  helper 0.1.0 (placed by hand)".to_string(),
        format!("    sha256:    {sha}"),
        "    requests:  kv".to_string(),
        "    granted:   - (by the project)".to_string(),
        format!("trusting {}: 1 plugin pinned as shown", t.ws().display()),
    ] {
        assert!(out.contains(&needle), "{needle:?} missing from:\n{out}");
    }
    assert_eq!(t.ok(&["tools", "call", "echo", r#"{"text":"hi"}"#]).trim(), "hi");

    // A `git pull` (or anyone) changes the component: it stops loading until reviewed again.
    let wasm = plugins.join("helper/plugin.wasm");
    let mut bytes = std::fs::read(&wasm).expect("wasm");
    bytes.push(0);
    std::fs::write(&wasm, bytes).expect("wasm");
    let err = t.fails(&["tools", "call", "echo", r#"{"text":"hi"}"#]);
    assert!(
        err.contains(&format!(
            "its component changed since you trusted {0}; review it with `talaria trust` in {0}",
            t.ws().display()
        )),
        "{err}"
    );
    std::fs::copy(support::EVIL_WASM, &wasm).expect("restore");
    assert_eq!(t.ok(&["tools", "call", "echo", r#"{"text":"hi"}"#]).trim(), "hi");

    t.ok(&["trust", "--revoke"]);
    let (_, err) = text(&t.run(&["plugins", "list"]));
    assert!(err.contains("this project is not trusted"), "{err}");
}

#[test]
fn a_project_cannot_replace_the_operators_enabled_guard_hook_unless_accepted() {
    let t = Talaria::new();
    std::fs::write(t.home.path().join("config.toml"), "[plugins.guard]\nenabled = true\n").expect("config");
    let plugins = t.ws().join(".talaria/plugins");
    std::fs::create_dir_all(&plugins).expect("dir");
    let dir = evil_dir(&plugins, "guard", "9.9.9", "");
    std::fs::rename(&dir, plugins.join("guard")).expect("rename");

    let out = t.ok(&["trust"]);
    assert!(out.contains("    replaces:  your bundled plugin 'guard' (bundled:guard)"), "{out}");
    assert!(
        out.contains(
            "    -> not accepted: it will not load, and yours stays (`talaria trust --replace guard` accepts it)"
        ),
        "{out}"
    );
    let json: serde_json::Value = serde_json::from_str(&t.ok(&["plugins", "list", "--json"])).expect("json");
    let guard = json.as_array().expect("list").iter().find(|p| p["name"] == "guard").expect("guard").clone();
    assert_eq!(guard["scope"], "bundled", "{guard}");
    let (_, err) = text(&t.run(&["plugins", "list"]));
    assert!(err.contains("this project plugin would replace the bundled plugin 'guard' (bundled:guard)"), "{err}");

    let out = t.ok(&["trust", "--replace", "guard"]);
    assert!(!out.contains("not accepted"), "{out}");
    let json: serde_json::Value = serde_json::from_str(&t.ok(&["plugins", "list", "--json"])).expect("json");
    let guard = json.as_array().expect("list").iter().find(|p| p["name"] == "guard").expect("guard").clone();
    assert_eq!(guard["scope"], "project", "{guard}");
}

/// A publisher home with a key named `name`; returns it and the public key line.
fn publisher(name: &str) -> (Talaria, String) {
    let p = Talaria::new();
    p.ok(&["plugin", "keygen", "--name", name]);
    let public = std::fs::read_to_string(p.home.path().join(format!("keys/{name}.pub"))).expect("pub");
    (p, public.trim().to_string())
}

fn signed_bundle(p: &Talaria, dir: &Path, key: &str) -> String {
    let bundle = dir.with_extension("tar.gz");
    let bundle = bundle.to_str().expect("utf8").to_string();
    p.ok(&["plugin", "pack", dir.to_str().expect("utf8"), "-o", &bundle]);
    p.ok(&["plugin", "sign", &bundle, "--key", key]);
    bundle
}

#[test]
fn an_update_from_another_publisher_is_refused_and_when_accepted_starts_afresh() {
    let t = Talaria::new();
    let (acme, acme_key) = publisher("acme");
    let (mallory, mallory_key) = publisher("mallory");
    t.ok(&["plugins", "trust-key", &acme_key, "--name", "acme"]);
    t.ok(&["plugins", "trust-key", &mallory_key, "--name", "mallory"]);
    let src = tempfile::tempdir().expect("src");
    let v1 = signed_bundle(&acme, &evil_dir(src.path(), "notes", "1.0.0", "kv = true"), "acme");
    let v2 = signed_bundle(&mallory, &evil_dir(src.path(), "notes", "1.1.0", "kv = true"), "mallory");
    t.ok(&["plugins", "install", &v1, "--grant", "kv"]);
    assert_eq!(t.ok(&["tools", "call", "kv_set", r#"{"text":"diary=private"}"#]).trim(), "stored");
    let lock = std::fs::read_to_string(t.home.path().join("plugins.lock")).expect("lock");

    let err = t.fails(&["plugins", "install", &v2, "--grant", "kv"]);
    assert!(err.contains("notes is installed from publisher key "), "{err}");
    assert!(err.contains("(acme), and this bundle comes from publisher key "), "{err}");
    assert!(err.contains("(mallory): a new publisher takes over none of the old one's grants or data"), "{err}");
    assert!(err.contains("with --accept-publisher"), "{err}");
    assert_eq!(
        std::fs::read_to_string(t.home.path().join("plugins.lock")).expect("lock"),
        lock,
        "a refusal changes nothing"
    );
    assert_eq!(t.ok(&["tools", "call", "kv_get", r#"{"name":"diary"}"#]).trim(), "private");

    // Accepted: the new publisher gets neither the old grants nor the old data.
    let out = Command::new(env!("CARGO_BIN_EXE_talaria"))
        .args(["plugins", "install", &v2, "--accept-publisher"])
        .current_dir(t.ws())
        .env("TALARIA_HOME", t.home.path())
        .output()
        .expect("run");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("installed notes 1.1.0 (user, signed by"), "{stdout}");
    assert!(
        stderr.contains("notes 1.0.0 from publisher key ")
            && stderr.contains("(acme) is replaced by another publisher's: it starts with no grants and no data"),
        "{stderr}"
    );
    assert!(stderr.contains("not granted: kv"), "{stderr}");
    t.ok(&["plugins", "grant", "notes", "kv"]);
    assert_eq!(t.ok(&["tools", "call", "kv_get", r#"{"name":"diary"}"#]).trim(), "<none>");
}

#[test]
fn installing_under_a_bundled_plugins_name_is_refused_unless_asked_and_starts_empty() {
    let t = Talaria::new();
    let store = talaria_store::Store::open(&t.home.path().join("state.db")).expect("store");
    talaria_test_support::wait(store.kv_set("journal", "turns", b"what the user said yesterday")).expect("set");
    drop(store);
    let src = tempfile::tempdir().expect("src");
    let dir = evil_dir(src.path(), "journal", "1.0.0", "kv = true");
    let dir = dir.to_str().expect("utf8");
    let err = t.fails(&["plugins", "install", dir, "--allow-unsigned", "--grant", "kv"]);
    assert!(
        err.contains("`journal` is the name of a plugin built into talaria; another plugin installed under it would replace the bundled one (and would start with none of its data): pass --replace-bundled to do that"),
        "{err}"
    );
    assert!(!t.home.path().join("plugins.lock").exists());
    t.ok(&["plugins", "install", dir, "--allow-unsigned", "--grant", "kv", "--replace-bundled"]);
    assert_eq!(t.ok(&["tools", "call", "kv_get", r#"{"name":"turns"}"#]).trim(), "<none>");
}

#[test]
fn a_grant_of_a_protected_place_is_shown_as_such() {
    let t = Talaria::new();
    let caps = r#"filesystem = [{ path = "$WORKSPACE/.git", access = "read-write" }]"#;
    support::install(t.home.path(), "gitter", Path::new(support::EVIL_WASM), &support::manifest("gitter", caps));
    support::grant(t.home.path(), "gitter", &["fs:rw:$WORKSPACE/.git"]);
    let info = t.ok(&["plugins", "info", "gitter"]);
    assert!(
        info.contains("protected:  fs:rw:$WORKSPACE/.git reaches .git, which no other grant does (what is written there, talaria or git runs)"),
        "{info}"
    );
}
