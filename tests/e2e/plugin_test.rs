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
