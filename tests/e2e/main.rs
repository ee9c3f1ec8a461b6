//! End-to-end tests of the real `talaria` binary, each with a fresh TALARIA_HOME and workspace.
//! Outside services (a weather API) are local fake servers.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use talaria_test_support::{self as support, FakeServer};

mod acp;
mod authoring;
mod boundary;
mod chat;
mod cron;
mod egress;
mod extensions;
mod faults;
mod gateway;
mod gateway_discord;
mod gateway_slack;
mod journal_race;
mod market;
mod mcp;
mod mcp_serve;
mod oneshot;

mod plugin_test;
mod repl;
mod resize;
mod sandbox;
mod scale_out;
mod screen;
mod serve;
mod sessions;
mod skills;
mod telemetry;
mod terminal;
mod wire;

struct Talaria {
    home: tempfile::TempDir,
    workspace: tempfile::TempDir,
}

impl Talaria {
    fn new() -> Self {
        Self { home: tempfile::tempdir().expect("home"), workspace: tempfile::tempdir().expect("workspace") }
    }

    fn ws(&self) -> PathBuf {
        self.workspace.path().canonicalize().expect("workspace")
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_talaria"))
            .args(args)
            .current_dir(self.workspace.path())
            .env("TALARIA_HOME", self.home.path())
            .env_remove("TALARIA_LOG")
            .env_remove("WEATHER_API_KEY")
            .output()
            .expect("run talaria")
    }

    /// `talaria chat` on a pseudo-terminal (util-linux `script`), without colour, its stdin and
    /// stdout piped to the test.
    fn spawn_repl(&self) -> std::process::Child {
        self.spawn_repl_colored(false)
    }

    /// The REPL on a pseudo-terminal of [`repl::ROWS`] × [`repl::COLS`], with colour unless
    /// `NO_COLOR` is set (`color` false).
    fn spawn_repl_colored(&self, color: bool) -> std::process::Child {
        self.spawn_repl_args(color, &["chat"])
    }

    /// `talaria ARGS` on a pseudo-terminal of [`repl::ROWS`] × [`repl::COLS`].
    fn spawn_repl_args(&self, color: bool, args: &[&str]) -> std::process::Child {
        let quoted: Vec<String> = args.iter().map(|a| format!("'{}'", a.replace('\'', "'\\''"))).collect();
        let command = format!(
            "stty rows {} cols {} && exec {} {}",
            repl::ROWS,
            repl::COLS,
            env!("CARGO_BIN_EXE_talaria"),
            quoted.join(" ")
        );
        let mut cmd = Command::new("script");
        cmd.args(["-qfec", &command, "/dev/null"])
            .current_dir(self.workspace.path())
            .env("TALARIA_HOME", self.home.path())
            .env("TERM", "xterm")
            .env_remove("COLORTERM")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        if color {
            cmd.env_remove("NO_COLOR");
        } else {
            cmd.env("NO_COLOR", "1");
        }
        cmd.spawn().expect("script(1) from util-linux")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "talaria {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).expect("utf8")
    }

    /// Run, expect exit code 1, return stderr.
    fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(out.status.code(), Some(1), "talaria {args:?}: {}", String::from_utf8_lossy(&out.stdout));
        String::from_utf8(out.stderr).expect("utf8")
    }

    /// A bundled component, written out so tests can install it as a user plugin.
    fn bundled_wasm(&self, name: &str) -> PathBuf {
        let b = talaria_bundled::PLUGINS
            .iter()
            .find(|p| p.manifest.contains(&format!("name = \"{name}\"")))
            .unwrap_or_else(|| panic!("no bundled {name}"));
        let path = self.home.path().join(format!("{name}.wasm"));
        std::fs::write(&path, b.wasm).expect("write");
        path
    }
}

#[test]
fn version_and_help() {
    let t = Talaria::new();
    assert_eq!(t.ok(&["--version"]), format!("talaria {}\n", env!("CARGO_PKG_VERSION")));
    let help = t.ok(&["tools", "call", "--help"]);
    assert!(help.contains("--yolo") && help.contains("Arguments as a JSON object"), "{help}");
}

#[test]
fn bundled_tools_are_listed_without_color_when_piped() {
    let t = Talaria::new();
    let out = t.ok(&["tools", "list"]);
    for tool in ["read_file", "write_file", "patch", "search_files", "web_fetch", "terminal", "get_weather"] {
        assert!(out.contains(tool), "{tool} missing from:\n{out}");
    }
    assert!(!out.contains('\u{1b}'), "escape codes in piped output");
    let json: serde_json::Value = serde_json::from_str(&t.ok(&["tools", "list", "--json"])).expect("json");
    let read = json.as_array().expect("array").iter().find(|t| t["name"] == "read_file").expect("read_file");
    assert_eq!(read["plugin"], "files");
    assert_eq!(read["parameters"]["type"], "object");
    // Searching the journal changes nothing (it was announced as destructive: issue 36).
    let search = json.as_array().expect("array").iter().find(|t| t["name"] == "journal_search").expect("journal");
    assert_eq!(
        (
            &search["annotations"]["read_only"],
            &search["annotations"]["destructive"],
            &search["annotations"]["open_world"]
        ),
        (&serde_json::json!(true), &serde_json::json!(false), &serde_json::json!(false)),
        "{search}"
    );
}

#[test]
fn file_tools_work_in_the_workspace() {
    let t = Talaria::new();
    std::fs::write(t.ws().join("notes.txt"), "alpha\nbeta\ngamma\n").expect("write");
    let out = t.ok(&["tools", "call", "read_file", r#"{"path": "notes.txt"}"#]);
    assert!(out.contains("1\talpha") && out.contains("3\tgamma"), "{out}");
    t.ok(&["tools", "call", "write_file", r#"{"path": "sub/new.txt", "content": "hello\n"}"#]);
    assert_eq!(std::fs::read_to_string(t.ws().join("sub/new.txt")).expect("read"), "hello\n");
    let diff =
        t.ok(&["tools", "call", "patch", r#"{"path": "notes.txt", "old_string": "beta", "new_string": "BETA"}"#]);
    assert!(diff.contains("-beta") && diff.contains("+BETA"), "{diff}");
    assert_eq!(std::fs::read_to_string(t.ws().join("notes.txt")).expect("read"), "alpha\nBETA\ngamma\n");
}

#[test]
fn file_tools_cannot_leave_the_workspace() {
    let t = Talaria::new();
    std::fs::write(t.home.path().join("secret.txt"), "top secret").expect("write");
    let path = t.home.path().canonicalize().expect("canon").join("secret.txt");
    let err = t.fails(&["tools", "call", "read_file", &format!(r#"{{"path": "{}"}}"#, path.display())]);
    assert!(!err.contains("top secret"));
    assert!(err.starts_with("error: "), "{err}");
}

#[test]
fn terminal_runs_commands_and_refuses_dangerous_ones() {
    let t = Talaria::new();
    let out = t.ok(&["tools", "call", "terminal", r#"{"command": "echo hello from $(basename $PWD)"}"#]);
    let name = t.ws().file_name().and_then(|n| n.to_str()).expect("name").to_string();
    assert!(out.contains(&format!("hello from {name}")), "{out}");

    std::fs::create_dir(t.ws().join("build")).expect("mkdir");
    let err = t.fails(&["tools", "call", "terminal", r#"{"command": "rm -rf build"}"#]);
    assert!(err.contains("needs approval") && err.contains("--yolo"), "{err}");
    assert!(t.ws().join("build").exists());
    t.ok(&["tools", "call", "--yolo", "terminal", r#"{"command": "rm -rf build"}"#]);
    assert!(!t.ws().join("build").exists());

    let err = t.fails(&["tools", "call", "--yolo", "terminal", r#"{"command": "rm -rf /"}"#]);
    assert!(err.contains("is always refused"), "{err}");
}

#[test]
fn weather_gets_its_key_at_the_http_boundary_only() {
    let t = Talaria::new();
    let api = FakeServer::start(|req| {
        if req.header("key") == Some("wk-42") {
            let body = r#"{"location":{"name":"Lisbon","country":"Portugal"},"current":{"temp_c":21.5,"feelslike_c":21.0,"wind_kph":9.0,"humidity":60,"condition":{"text":"Sunny"}}}"#;
            (200, vec![("content-type".into(), "application/json".into())], body.into())
        } else {
            (401, vec![], r#"{"error":{"message":"API key is invalid"}}"#.into())
        }
    });
    let host = format!("127.0.0.1:{}", api.addr.port());
    let manifest = format!(
        "name = \"weather\"\nversion = \"0.1.1\"\napi = \"0.2.0\"\n[capabilities]\nnetwork = [\"{host}\"]\nsecrets = [{{ name = \"WEATHER_API_KEY\", host = \"{host}\", headers = [\"key\"] }}]\n"
    );
    support::install(t.home.path(), "weather", &t.bundled_wasm("weather"), &manifest);
    std::fs::write(
        t.home.path().join("config.toml"),
        format!("[plugins.weather.config]\nbase_url = \"{}\"\n", api.url("/v1")),
    )
    .expect("config");
    std::fs::write(t.home.path().join(".env"), "WEATHER_API_KEY=wk-42\n").expect("env");

    // A user plugin starts with nothing granted.
    let err = t.fails(&["tools", "call", "get_weather", r#"{"location": "Lisbon"}"#]);
    assert!(err.contains("WEATHER_API_KEY is not available"), "{err}");
    let listed = t.ok(&["plugins", "list"]);
    assert!(listed.contains("weather *") && listed.contains("shadows bundled:weather"), "{listed}");

    t.ok(&["plugins", "grant", "weather", "all"]);
    let out = t.ok(&["tools", "call", "get_weather", r#"{"location": "Lisbon"}"#]);
    assert_eq!(out, "Lisbon, Portugal: Sunny, 21.5°C (feels like 21.0°C), wind 9.0 km/h, humidity 60%\n");
    let seen = api.received();
    assert_eq!(seen.last().and_then(|r| r.header("key")), Some("wk-42"));
    assert_eq!(seen.last().map(|r| r.path.as_str()), Some("/v1/current.json?q=Lisbon"));

    // Revoking the secret: the plugin sees it as missing and nothing reaches the API.
    t.ok(&["plugins", "revoke", "weather", &format!("secret:WEATHER_API_KEY@{host}")]);
    let before = api.received().len();
    let err = t.fails(&["tools", "call", "get_weather", r#"{"location": "Lisbon"}"#]);
    assert!(err.contains("WEATHER_API_KEY is not available"), "{err}");
    assert_eq!(api.received().len(), before);
}

#[test]
fn grants_cannot_exceed_the_manifest() {
    let t = Talaria::new();
    let err = t.fails(&["plugins", "grant", "weather", "net:evil.example.com"]);
    assert!(err.contains("plugin 'weather' does not request net:evil.example.com"), "{err}");
    let err = t.fails(&["plugins", "grant", "weather", "root"]);
    assert!(err.contains("`root` is not a capability"), "{err}");
    let err = t.fails(&["plugins", "grant", "nosuch", "kv"]);
    assert!(err.contains("no plugin named 'nosuch'"), "{err}");
}

#[test]
fn revoking_a_bundled_grant_takes_effect() {
    let t = Talaria::new();
    std::fs::write(t.ws().join("a.txt"), "x\n").expect("write");
    t.ok(&["plugins", "revoke", "files", "fs:rw:$WORKSPACE"]);
    let info = t.ok(&["plugins", "info", "files"]);
    assert!(info.contains("granted:    -"), "{info}");
    let err = t.fails(&["tools", "call", "read_file", r#"{"path": "a.txt"}"#]);
    assert!(err.starts_with("error: "), "{err}");
    t.ok(&["plugins", "grant", "files", "fs:ro:$WORKSPACE"]);
    assert!(t.ok(&["tools", "call", "read_file", r#"{"path": "a.txt"}"#]).contains("1\tx"));
    let err = t.fails(&["tools", "call", "write_file", r#"{"path": "b.txt", "content": "y"}"#]);
    assert!(err.starts_with("error: ") && !t.ws().join("b.txt").exists(), "{err}");
}

#[test]
fn broken_plugins_are_reported_and_the_rest_load() {
    let t = Talaria::new();
    support::install(
        t.home.path(),
        "typo",
        Path::new(support::EVIL_WASM),
        &support::manifest("typo", "netwrk = [\"x\"]"),
    );
    support::install(t.home.path(), "command", Path::new(support::NOT_A_TOOL_WASM), &support::manifest("command", ""));
    let out = t.run(&["tools", "list"]);
    assert!(out.status.success());
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("read_file"), "{stdout}");
    let manifest = t.home.path().join("plugins/typo/plugin.toml");
    assert!(
        stderr.contains(&format!("warning: {}:", manifest.display())) && stderr.contains("unknown field `netwrk`"),
        "{stderr}"
    );
    assert!(stderr.contains("does not export talaria:plugin/tools@0.2.0"), "{stderr}");
}

#[test]
fn project_plugins_load_only_when_trusted() {
    let t = Talaria::new();
    let dir = t.ws().join(".talaria/plugins/proj");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::copy(support::EVIL_WASM, dir.join("plugin.wasm")).expect("copy");
    std::fs::write(dir.join("plugin.toml"), support::manifest("proj", "")).expect("manifest");
    let out = t.run(&["plugins", "list"]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("proj"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not trusted; run `talaria trust`"));
    t.ok(&["trust"]);
    let listed = t.ok(&["plugins", "list"]);
    assert!(listed.lines().any(|l| l.starts_with("proj") && l.contains("project")), "{listed}");
    assert_eq!(t.ok(&["tools", "call", "echo", r#"{"text": "from the project"}"#]), "from the project\n");
}

#[test]
fn bad_arguments_fail_with_a_clear_message() {
    let t = Talaria::new();
    let err = t.fails(&["tools", "call", "read_file", "not json"]);
    assert!(err.contains("invalid arguments: arguments are not valid JSON"), "{err}");
    let err = t.fails(&["tools", "call", "nope"]);
    assert!(err.contains("unknown tool: nope (available: "), "{err}");
    let out = t.run(&["tools", "frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn web_fetch_reads_pages_but_never_loopback_through_its_wildcard() {
    let t = Talaria::new();
    let site = FakeServer::start(|req| match req.path.as_str() {
        "/moved" => (301, vec![("location".into(), "/article".into())], String::new()),
        _ => (
            200,
            vec![("content-type".into(), "text/html; charset=utf-8".into())],
            "<html><head><title>Crab Facts</title></head><body><nav>menu</nav><article><h1>Crabs</h1>\
             <p>Crabs walk sideways because their legs bend outward at the joints, which makes a sideways \
             gait the most efficient way to move quickly across sand and rock.</p>\
             <p>They are <a href=\"/more\">decapods</a>: ten legs in all.</p></article></body></html>"
                .into(),
        ),
    });
    // The bundled web plugin asks for `net:*`, which never reaches loopback.
    let err = t.fails(&["tools", "call", "web_fetch", &format!(r#"{{"url": "{}"}}"#, site.url("/article"))]);
    assert!(err.contains("resolves to 127.0.0.1, a loopback address"), "{err}");
    assert!(site.received().is_empty());

    // A user copy granted this very host explicitly may fetch it.
    let host = format!("127.0.0.1:{}", site.addr.port());
    let manifest =
        format!("name = \"web\"\nversion = \"0.1.0\"\napi = \"0.2.0\"\n[capabilities]\nnetwork = [\"{host}\"]\n");
    support::install(t.home.path(), "web", &t.bundled_wasm("web"), &manifest);
    t.ok(&["plugins", "grant", "web", &format!("net:{host}")]);
    let page = t.ok(&["tools", "call", "web_fetch", &format!(r#"{{"url": "{}"}}"#, site.url("/moved"))]);
    assert!(page.contains("Crab Facts"), "{page}");
    assert!(page.contains(&site.url("/article")), "final URL missing: {page}");
    assert!(page.contains("Crabs walk sideways"), "{page}");
    assert!(page.contains(&format!("[decapods]({})", site.url("/more"))), "{page}");
    assert!(!page.contains("<p>"), "{page}");
}

#[test]
fn tools_call_says_which_plugin_runs_a_name_two_plugins_offer() {
    let t = Talaria::new();
    // A copy of the bundled weather plugin under another name: both offer `get_weather`.
    let wasm = t.bundled_wasm("weather");
    let manifest = talaria_bundled::PLUGINS
        .iter()
        .find(|p| p.manifest.contains("name = \"weather\""))
        .expect("bundled weather")
        .manifest
        .replace("name = \"weather\"", "name = \"weather2\"");
    support::install(t.home.path(), "weather2", &wasm, &manifest);
    let out = t.run(&["tools", "call", "get_weather", r#"{"location": "Lisbon"}"#]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("tool `get_weather` is already provided by plugin 'weather'; it was not registered (set `allow_override = true` under [plugins.weather2] in config.toml to let it replace it)"),
        "{err}"
    );
    assert!(err.contains("running `get_weather` of plugin 'weather' ('weather2' left out"), "{err}");
}
