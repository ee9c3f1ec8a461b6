//! The marketplace end to end: `talaria plugin pack|keygen|sign|publish` on a publisher's side,
//! `talaria plugins install|update|search|verify|trust-key` on a user's, through every source —
//! a directory, a bundle file, an http URL and a registry index served on loopback, and an OCI
//! registry (Debian's docker-registry, started here) — and every refusal, each leaving the
//! previously installed version working.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use talaria_test_support::FakeServer;
use talaria_test_support::registry::Registry;

use super::{Talaria, support};

const TOOL_ARGS: &str = r#"{"text":"hi"}"#;

/// A plugin project named `echo` at `version` (the legacy echo component), requesting `caps`
/// (a `[capabilities]` body), with `readme` as its README.
fn project(root: &Path, version: &str, caps: &str, readme: &str) -> PathBuf {
    let dir = root.join(format!("echo-{version}"));
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::copy(support::LEGACY_V1_WASM, dir.join("plugin.wasm")).expect("wasm");
    let manifest = format!(
        "name = \"echo\"\nversion = \"{version}\"\napi = \"0.1.0\"\ndescription = \"Echoes text back\"\n\n[capabilities]\n{caps}\n"
    );
    std::fs::write(dir.join("plugin.toml"), manifest).expect("manifest");
    std::fs::write(dir.join("README.md"), readme).expect("readme");
    dir
}

impl Talaria {
    fn path(&self) -> &Path {
        self.home.path()
    }

    fn stderr_of(&self, args: &[&str]) -> (bool, String, String) {
        let out = self.run(args);
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn lock(&self) -> String {
        std::fs::read_to_string(self.path().join("plugins.lock")).unwrap_or_default()
    }

    fn echo_works(&self) {
        let out = self.ok(&["tools", "call", "legacy_echo", TOOL_ARGS]);
        assert!(out.contains("0.1.0: hi"), "{out}");
    }

    fn config(&self, text: &str) {
        std::fs::write(self.path().join("config.toml"), text).expect("config");
    }
}

/// A publisher: a home with a signing key named `acme`; returns its public key line.
fn new_publisher() -> (Talaria, String) {
    let p = Talaria::new();
    p.ok(&["plugin", "keygen", "--name", "acme"]);
    let public = std::fs::read_to_string(p.path().join("keys/acme.pub")).expect("pub");
    (p, public.trim().to_string())
}

/// Pack (and sign, with `key`) a project into `out`; returns the bundle path.
fn release(p: &Talaria, dir: &Path, out: &Path, key: Option<&str>) -> PathBuf {
    let version = std::fs::read_to_string(dir.join("plugin.toml"))
        .expect("manifest")
        .lines()
        .find_map(|l| l.strip_prefix("version = ").map(|v| v.trim_matches('"').to_string()))
        .expect("version");
    let bundle = out.join(format!("echo-{version}.tar.gz"));
    p.ok(&["plugin", "pack", dir.to_str().expect("utf8"), "-o", bundle.to_str().expect("utf8")]);
    if let Some(key) = key {
        p.ok(&["plugin", "sign", bundle.to_str().expect("utf8"), "--key", key]);
    }
    bundle
}

#[test]
fn a_directory_installs_only_with_allow_unsigned_and_is_recorded_in_the_lockfile() {
    let t = Talaria::new();
    let dir = project(&t.ws(), "1.0.0", "kv = true", "# echo");
    let dir_arg = dir.to_str().expect("utf8");
    let err = t.fails(&["plugins", "install", dir_arg]);
    assert!(
        err.contains("is not signed; install it only if you trust where it came from, with --allow-unsigned"),
        "{err}"
    );
    assert!(!t.path().join("plugins.lock").exists(), "a refusal writes nothing");

    let (ok, out, err) = t.stderr_of(&["plugins", "install", dir_arg, "--allow-unsigned"]);
    assert!(ok, "{err}");
    assert!(out.contains("installed echo 1.0.0 (user, unsigned)"), "{out}");
    assert!(err.contains("not granted: kv"), "not a terminal and no --grant: nothing granted\n{err}");
    let lock = t.lock();
    for needle in
        ["[plugins.echo]", "version = \"1.0.0\"", "digest = \"sha256:", "dir = \".store/echo/1.0.0-", "granted = []"]
    {
        assert!(lock.contains(needle), "{needle} missing from\n{lock}");
    }
    t.echo_works();
    let info = t.ok(&["plugins", "info", "echo"]);
    assert!(info.contains(&format!("installed:  from {}", dir.display())), "{info}");
    assert!(info.contains("signed by:  nobody"), "{info}");
    assert!(t.ok(&["plugins", "verify"]).contains("ok      echo 1.0.0 (user, unsigned)"));

    // A component changed after install is refused at load, named by verify and doctor, and
    // repaired by installing the same bundle again.
    let store = t.path().join("plugins/.store/echo");
    let version_dir = std::fs::read_dir(&store).expect("store").next().expect("a version").expect("entry").path();
    let mut wasm = std::fs::read(version_dir.join("plugin.wasm")).expect("wasm");
    wasm.push(0);
    std::fs::write(version_dir.join("plugin.wasm"), wasm).expect("tamper");
    let err = t.fails(&["tools", "call", "legacy_echo", TOOL_ARGS]);
    assert!(err.contains("unknown tool"), "a tampered component offers no tools: {err}");
    let (ok, _, err) = t.stderr_of(&["tools", "list"]);
    assert!(ok && err.contains("its component changed since it was installed"), "{err}");
    let out = t.run(&["plugins", "verify"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("plugin.wasm changed since it was installed"));
    let doctor = String::from_utf8_lossy(&t.run(&["doctor", "--offline"]).stdout).into_owned();
    assert!(
        doctor.contains("installed: echo 1.0.0: ") && doctor.contains("changed since it was installed"),
        "{doctor}"
    );
    let (ok, _, err) = t.stderr_of(&["plugins", "install", dir_arg, "--allow-unsigned"]);
    assert!(ok && err.contains("repairing echo 1.0.0: its installed files no longer matched the lockfile"), "{err}");
    t.echo_works();
    let doctor = String::from_utf8_lossy(&t.run(&["doctor", "--offline"]).stdout).into_owned();
    assert!(doctor.contains("ok: installed: 1 installed plugins match their lockfiles"), "{doctor}");

    // Granting an installed plugin writes its lockfile; removing it keeps nothing but its data.
    t.ok(&["plugins", "grant", "echo", "kv"]);
    assert!(t.lock().contains("granted = [\"kv\"]"), "{}", t.lock());
    assert!(t.ok(&["plugins", "remove", "echo"]).contains("removed echo 1.0.0 (user)"));
    assert!(!t.lock().contains("[plugins.echo]"));
    assert!(!t.path().join("plugins/.store/echo").exists(), "its files are gone");
    assert!(t.fails(&["tools", "call", "legacy_echo", TOOL_ARGS]).contains("unknown tool"));
}

#[test]
fn signed_bundles_install_from_a_file_and_a_url_once_the_key_is_trusted() {
    let (publisher, public) = new_publisher();
    let dist = publisher.ws().join("dist");
    let project_dir = project(&publisher.ws(), "1.0.0", "kv = true", "# echo");
    let bundle = release(&publisher, &project_dir, &dist, Some("acme"));
    let key_id = publisher.ok(&["plugins", "keys"]);
    assert!(key_id.contains("acme (your key)"), "keygen trusts the publisher's own key: {key_id}");

    let t = Talaria::new();
    let bundle_arg = bundle.to_str().expect("utf8");
    let err = t.fails(&["plugins", "install", bundle_arg]);
    assert!(err.contains("which is not in your trust store"), "{err}");
    assert!(err.contains("talaria plugins trust-key"), "says how to fix it: {err}");
    let pub_file = publisher.path().join("keys/acme.pub");
    let trusted = t.ok(&["plugins", "trust-key", pub_file.to_str().expect("utf8"), "--name", "acme"]);
    let id = trusted.split_whitespace().nth(2).expect("key id").to_string();
    assert!(public.starts_with("talaria-ed25519 "), "{public}");

    let (ok, out, err) = t.stderr_of(&["plugins", "install", bundle_arg, "--grant", "kv"]);
    assert!(ok, "{err}");
    assert!(out.contains(&format!("installed echo 1.0.0 (user, signed by {id} (acme))")), "{out}");
    assert!(out.contains("granted: kv"), "{out}");
    assert!(t.lock().contains(&format!("signer = \"{id} (acme)\"")), "{}", t.lock());
    t.echo_works();

    // The same bundle over http from this machine, with its signature beside it.
    let server = FakeServer::files(&dist);
    let u = Talaria::new();
    u.ok(&["plugins", "trust-key", &public, "--name", "acme"]);
    let url = server.url("/echo-1.0.0.tar.gz");
    let out = u.ok(&["plugins", "install", &url]);
    assert!(out.contains(&format!("installed echo 1.0.0 (user, signed by {id} (acme))")), "{out}");
    assert!(u.lock().contains(&format!("source = \"{url}\"")), "{}", u.lock());
    u.echo_works();
    let paths: Vec<String> = server.received().iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, ["/echo-1.0.0.tar.gz", "/echo-1.0.0.tar.gz.sig"]);
    // Installing the same bundle again changes nothing.
    assert!(u.ok(&["plugins", "install", &url]).contains("already installed (same digest)"));
}

#[test]
fn a_registry_index_is_searched_installed_from_and_updates_ask_again_for_new_capabilities() {
    let (publisher, public) = new_publisher();
    let site = publisher.ws().join("site");
    std::fs::create_dir_all(site.join("bundles")).expect("mkdir");
    let index = site.join("index.json");
    let publish = |version: &str, caps: &str| {
        let dir = project(&publisher.ws(), version, caps, "# echo");
        let bundle = release(&publisher, &dir, &site.join("bundles"), Some("acme"));
        publisher.ok(&[
            "plugin",
            "publish",
            bundle.to_str().expect("utf8"),
            "--index",
            index.to_str().expect("utf8"),
            "--url",
            &format!("bundles/echo-{version}.tar.gz"),
        ]);
    };
    publish("1.0.0", "kv = true");
    let server = FakeServer::files(&site);
    let index_url = server.url("/index.json");

    let t = Talaria::new();
    t.config(&format!("[marketplace]\nregistries = [\"{index_url}\"]\n"));
    t.ok(&["plugins", "trust-key", &public, "--name", "acme"]);
    let found = t.ok(&["plugins", "search", "echo"]);
    assert!(found.contains("echo") && found.contains("1.0.0") && found.contains("kv"), "{found}");
    assert!(found.contains("Echoes text back"), "{found}");
    assert!(t.ok(&["plugins", "search", "nothing-like-this"]).contains("no plugins match"));

    let out = t.ok(&["plugins", "install", "echo", "--grant", "kv"]);
    assert!(out.contains("installed echo 1.0.0") && out.contains("granted: kv"), "{out}");
    assert!(t.lock().contains(&format!("source = \"registry+{index_url}#echo\"")), "{}", t.lock());
    t.echo_works();
    assert!(t.ok(&["plugins", "update", "echo"]).contains("echo 1.0.0 is up to date"));

    // 1.1.0 asks for the network as well: the update shows it and, with no one to ask and no
    // --grant, does not grant it; kv stays granted.
    publish("1.1.0", "kv = true\nnetwork = [\"api.example.com\"]");
    let (ok, out, err) = t.stderr_of(&["plugins", "update", "echo"]);
    assert!(ok, "{err}");
    assert!(out.contains("updated echo 1.0.0 → 1.1.0"), "{out}");
    assert!(err.contains("requests capabilities the installed version did not"), "{err}");
    assert!(err.contains("net:api.example.com") && err.contains("(still granted: kv)"), "{err}");
    assert!(err.contains("not granted: net:api.example.com"), "{err}");
    let listed: serde_json::Value = serde_json::from_str(&t.ok(&["plugins", "list", "--json"])).expect("json");
    let echo = listed.as_array().expect("array").iter().find(|p| p["name"] == "echo").expect("echo");
    assert_eq!(echo["version"], "1.1.0");
    assert_eq!(echo["granted"], serde_json::json!(["kv"]), "the new capability was not granted without consent");
    t.echo_works();

    // A later update with --grant consents; one that requests nothing new asks nothing.
    publish("1.2.0", "kv = true\nnetwork = [\"api.example.com\"]\nprocess = true");
    let (ok, out, err) = t.stderr_of(&["plugins", "update", "--all", "--grant", "process"]);
    assert!(ok, "{err}");
    assert!(out.contains("updated echo 1.1.0 → 1.2.0") && out.contains("granted: kv, process"), "{out}");
    assert!(!err.contains("net:api.example.com    "), "net was asked about before, not again: {err}");

    // An index whose digest does not match the bundle it serves is refused.
    let bundle_path = site.join("bundles/echo-1.2.0.tar.gz");
    let mut bytes = std::fs::read(&bundle_path).expect("bundle");
    bytes.extend_from_slice(b"tampered");
    std::fs::write(&bundle_path, bytes).expect("tamper");
    let u = Talaria::new();
    u.config(&format!("[marketplace]\nregistries = [\"{index_url}\"]\n"));
    u.ok(&["plugins", "trust-key", &public, "--name", "acme"]);
    let err = u.fails(&["plugins", "install", "echo"]);
    assert!(err.contains("but the registry index pins"), "{err}");
    assert!(err.contains("it was changed or corrupted on the way; refusing it"), "{err}");
    assert!(!u.path().join("plugins.lock").exists());
}

#[test]
fn an_oci_registry_round_trip() {
    let registry = Registry::start();
    let (publisher, public) = new_publisher();
    let dir = project(&publisher.ws(), "1.0.0", "kv = true", "# echo");
    let bundle = release(&publisher, &dir, &publisher.ws().join("dist"), Some("acme"));
    let reference = format!("oci://{}/plugins/echo", registry.host());
    let out = publisher.ok(&["plugin", "publish", bundle.to_str().expect("utf8"), "--oci", &reference]);
    assert!(out.contains(&format!("to {reference}:1.0.0")) && out.contains(&format!("to {reference}:latest")), "{out}");

    let t = Talaria::new();
    t.ok(&["plugins", "trust-key", &public, "--name", "acme"]);
    let out = t.ok(&["plugins", "install", &format!("{reference}:1.0.0"), "--grant", "kv"]);
    assert!(out.contains("installed echo 1.0.0 (user, signed by"), "{out}");
    assert!(t.lock().contains(&format!("source = \"{reference}:1.0.0\"")), "{}", t.lock());
    t.echo_works();
    assert!(t.ok(&["plugins", "update", "echo"]).contains("echo 1.0.0 is up to date"));

    let err = t.fails(&["plugins", "install", &format!("{reference}:9.9.9")]);
    assert!(err.contains("9.9.9"), "a missing tag is named: {err}");
}

/// Write a gzip'd tar with raw entry names (so `..` can be written).
fn evil_bundle(path: &Path, entries: &[(&str, &[u8])]) {
    let mut tar = tar::Builder::new(Vec::new());
    for (name, body) in entries {
        let mut header = tar::Header::new_gnu();
        let field = &mut header.as_gnu_mut().expect("gnu").name;
        field[..name.len()].copy_from_slice(name.as_bytes());
        header.set_size(body.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_cksum();
        tar.append(&header, *body).expect("append");
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar.into_inner().expect("tar")).expect("gz");
    std::fs::write(path, gz.finish().expect("gz")).expect("write");
}

#[test]
fn every_refusal_leaves_the_installed_version_working() {
    let (publisher, public) = new_publisher();
    let dist = publisher.ws().join("dist");
    let t = Talaria::new();
    t.ok(&["plugins", "trust-key", &public, "--name", "acme"]);
    let installed = project(&t.ws(), "1.1.0", "kv = true", "# echo");
    t.ok(&["plugins", "install", installed.to_str().expect("utf8"), "--allow-unsigned", "--grant", "kv"]);
    let lock_before = t.lock();
    let intact = |what: &str| {
        assert_eq!(t.lock(), lock_before, "{what}: the lockfile changed");
        t.echo_works();
        let verify = t.ok(&["plugins", "verify"]);
        assert!(verify.contains("ok      echo 1.1.0"), "{what}: {verify}");
        let staged = t.path().join("plugins/.staging");
        assert!(
            !staged.exists() || std::fs::read_dir(&staged).expect("staging").next().is_none(),
            "{what}: staging left"
        );
    };
    let install = |source: &Path| t.fails(&["plugins", "install", source.to_str().expect("utf8"), "--allow-unsigned"]);

    // A downgrade.
    let older = project(&publisher.ws(), "1.0.0", "kv = true", "# echo");
    let err = install(&older);
    assert!(
        err.contains("echo 1.0.0 is older than the installed 1.1.0; to go back to it, pass --allow-downgrade"),
        "{err}"
    );
    intact("downgrade");

    // A bundle changed after it was signed.
    let newer = project(&publisher.ws(), "1.2.0", "kv = true", "# echo");
    let signed = release(&publisher, &newer, &dist, Some("acme"));
    let sig = std::fs::read(format!("{}.sig", signed.display())).expect("sig");
    std::fs::write(newer.join("README.md"), "# echo, now with a surprise").expect("readme");
    let tampered = release(&publisher, &newer, &publisher.ws().join("tampered"), None);
    std::fs::write(format!("{}.sig", tampered.display()), &sig).expect("old sig");
    let err = install(&tampered);
    assert!(err.contains("the bundle was changed after it was signed; refusing it"), "{err}");
    intact("tampered");

    // A signature claiming the trusted key but made by another.
    let (stranger, _) = new_publisher();
    let forged_dir = publisher.ws().join("forged");
    let forged = release(&stranger, &newer, &forged_dir, Some("acme"));
    let mut forged_sig: serde_json::Value =
        serde_json::from_slice(&std::fs::read(format!("{}.sig", forged.display())).expect("sig")).expect("json");
    let trusted_sig: serde_json::Value = serde_json::from_slice(&sig).expect("json");
    forged_sig["key_id"] = trusted_sig["key_id"].clone();
    std::fs::write(format!("{}.sig", forged.display()), forged_sig.to_string()).expect("forge");
    let err = install(&forged);
    assert!(err.contains("does not verify: the bundle or its signature was altered"), "{err}");
    intact("wrong signature");

    // Signed by a key the user never trusted.
    let unknown = release(&stranger, &newer, &publisher.ws().join("unknown"), Some("acme"));
    let err = install(&unknown);
    assert_eq!(err.matches("which is not in your trust store").count(), 1, "said once: {err}");
    intact("unknown key");

    // A tar entry climbing out of the plugin directory.
    let escape = t.ws().join("escape.tar.gz");
    let manifest = std::fs::read(newer.join("plugin.toml")).expect("manifest");
    evil_bundle(&escape, &[("plugin.toml", &manifest), ("../../../escaped.txt", b"gotcha")]);
    let err = install(&escape);
    assert_eq!(err.matches("bundle entry `../../../escaped.txt` escapes the plugin directory").count(), 1, "{err}");
    assert!(!t.path().join("escaped.txt").exists() && !t.path().join("plugins/escaped.txt").exists());
    intact("escaping entry");

    // A component over the size limit.
    t.config("[marketplace]\nmax_bundle_mb = 1\n");
    let big = project(&publisher.ws().join("big"), "1.3.0", "", "# big");
    let mut wasm = std::fs::read(big.join("plugin.wasm")).expect("wasm");
    wasm.resize(2 * 1024 * 1024, 0);
    std::fs::write(big.join("plugin.wasm"), wasm).expect("pad");
    let err = install(&big);
    assert!(err.contains("bundle entry `plugin.wasm` is 2.0 MiB, over the 1.0 MiB limit for one file"), "{err}");
    t.config("");
    intact("oversized");

    // A component that does not load.
    let broken = project(&publisher.ws().join("broken"), "1.4.0", "", "# broken");
    std::fs::write(broken.join("plugin.wasm"), b"\0asm\x0d\0\x01\0 not a component").expect("garbage");
    let err = install(&broken);
    assert!(err.contains("the component does not load"), "{err}");
    intact("broken component");

    // Killed at the consent prompt, after staging, verifying and compiling.
    let asking = project(&publisher.ws().join("asking"), "1.5.0", "kv = true\nprocess = true", "# echo");
    kill_at_the_prompt(&t, &asking);
    assert!(
        t.path().join("plugins/.staging").read_dir().expect("staging").next().is_some(),
        "the crash left its staging"
    );
    assert_eq!(t.lock(), lock_before, "killed: the lockfile changed");
    t.echo_works();
    // The next install clears what the crash left.
    let out = t.ok(&["plugins", "install", asking.to_str().expect("utf8"), "--allow-unsigned", "--yes"]);
    assert!(out.contains("updated echo 1.1.0 → 1.5.0") && out.contains("granted: kv, process"), "{out}");
    assert!(t.path().join("plugins/.staging").read_dir().is_err(), "staging cleared");
    t.echo_works();
}

/// Run an interactive install on a pseudo-terminal and `kill -9` it when it asks for consent.
fn kill_at_the_prompt(t: &Talaria, dir: &Path) {
    let talaria = env!("CARGO_BIN_EXE_talaria");
    let command = format!("echo PID=$$; exec {talaria} plugins install {} --allow-unsigned", dir.display());
    let mut child = Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .current_dir(t.workspace.path())
        .env("TALARIA_HOME", t.home.path())
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("script(1) from util-linux");
    let mut out = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 || tx.send(String::from_utf8_lossy(&buf[..n]).into_owned()).is_err() {
                break;
            }
        }
    });
    let mut seen = String::new();
    let start = Instant::now();
    while !seen.contains("Grant them?") {
        assert!(start.elapsed() < Duration::from_secs(120), "never asked:\n{seen}");
        if let Ok(chunk) = rx.recv_timeout(Duration::from_millis(100)) {
            seen.push_str(&chunk);
        }
    }
    assert!(seen.contains("process") && seen.contains("run shell commands"), "the prompt lists what it asks: {seen}");
    let pid: i32 = seen
        .split("PID=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .expect("pid");
    let killed = Command::new("kill").args(["-9", &pid.to_string()]).status().expect("kill");
    assert!(killed.success());
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_project_has_its_own_lockfile_whose_grants_apply_once_the_project_is_trusted() {
    let t = Talaria::new();
    let dir = project(t.path(), "1.0.0", "kv = true", "# echo");
    let (ok, out, err) = t.stderr_of(&[
        "plugins",
        "install",
        dir.to_str().expect("utf8"),
        "--project",
        "--allow-unsigned",
        "--grant",
        "kv",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("installed echo 1.0.0 (project, unsigned)"), "{out}");
    assert!(err.contains("is not trusted yet; its plugins load after `talaria trust`"), "{err}");
    let lock = std::fs::read_to_string(t.ws().join(".talaria/plugins.lock")).expect("project lockfile");
    assert!(lock.contains("granted = [\"kv\"]"), "{lock}");
    assert!(!t.path().join("plugins.lock").exists(), "the user's scope is untouched");
    assert!(t.fails(&["tools", "call", "legacy_echo", TOOL_ARGS]).contains("unknown tool"), "not before trust");
    let trusted = t.ok(&["trust"]);
    assert!(trusted.contains("  echo 1.0.0 (installed unsigned from "), "{trusted}");
    assert!(trusted.contains("    granted:   kv (by the project)"), "{trusted}");
    t.echo_works();
    let listed = t.ok(&["plugins", "list"]);
    assert!(listed.lines().any(|l| l.starts_with("echo") && l.contains("project") && l.contains("kv")), "{listed}");
    assert!(t.ok(&["plugins", "remove", "echo", "--project"]).contains("removed echo 1.0.0 (project)"));
}

#[test]
fn rollback_returns_to_the_replaced_version_without_restoring_revoked_grants() {
    let t = Talaria::new();
    let v1 = project(&t.ws(), "1.0.0", "kv = true", "# one");
    t.ok(&["plugins", "install", v1.to_str().expect("utf8"), "--allow-unsigned", "--grant", "kv"]);
    let err = t.fails(&["plugins", "rollback", "echo"]);
    assert!(err.contains("no earlier version of `echo` is kept to roll back to"), "{err}");
    let v2 = project(&t.ws(), "2.0.0", "kv = true\nprocess = true", "# two");
    t.ok(&["plugins", "install", v2.to_str().expect("utf8"), "--allow-unsigned", "--yes"]);
    t.ok(&["plugins", "revoke", "echo", "kv"]);

    let out = t.ok(&["plugins", "rollback", "echo"]);
    assert!(out.contains("rolled back echo 2.0.0 → 1.0.0 (user)"), "{out}");
    let listed: serde_json::Value = serde_json::from_str(&t.ok(&["plugins", "list", "--json"])).expect("json");
    let echo = listed.as_array().expect("array").iter().find(|p| p["name"] == "echo").expect("echo");
    assert_eq!(echo["version"], "1.0.0");
    assert_eq!(echo["granted"], serde_json::json!([]), "kv was revoked after 1.0.0 was replaced: not granted again");
    t.echo_works();
    assert!(t.ok(&["plugins", "verify"]).contains("ok      echo 1.0.0"));
    // And forward again: both versions stay on disk until a third replaces one.
    assert!(t.ok(&["plugins", "rollback", "echo"]).contains("rolled back echo 1.0.0 → 2.0.0"));
    t.echo_works();
    let versions = std::fs::read_dir(t.path().join("plugins/.store/echo")).expect("store").count();
    assert_eq!(versions, 2);
}

#[test]
fn remove_keeps_a_plugins_data_unless_purged() {
    let t = Talaria::new();
    let dir = t.ws().join("keeper");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::copy(support::EVIL_WASM, dir.join("plugin.wasm")).expect("wasm");
    std::fs::write(dir.join("plugin.toml"), support::manifest("keeper", "kv = true")).expect("manifest");
    let dir_arg = dir.to_str().expect("utf8");
    let install = || t.ok(&["plugins", "install", dir_arg, "--allow-unsigned", "--grant", "kv"]);
    install();
    assert!(t.ok(&["tools", "call", "kv_set", r#"{"text":"colour=green"}"#]).contains("stored"));
    let out = t.ok(&["plugins", "remove", "keeper"]);
    assert!(out.contains("its data stays in") && out.contains("`--purge` deletes them"), "{out}");
    install();
    assert!(t.ok(&["tools", "call", "kv_get", r#"{"name":"colour"}"#]).contains("green"), "kept across a reinstall");
    let out = t.ok(&["plugins", "remove", "keeper", "--purge"]);
    assert!(out.contains("deleted 1 key-value entries"), "{out}");
    install();
    assert!(t.ok(&["tools", "call", "kv_get", r#"{"name":"colour"}"#]).contains("<none>"), "purged");
}
