//! Escapes and breakdowns, each refused or contained exactly.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use talaria_protocol::ToolError;
use talaria_runtime::{Approval, ApprovalRequest, Approver, BoxFuture, HttpStub, HttpStubs};
use talaria_test_support::FakeServer;

use crate::{Env, call, call_on, crashed, failed, ok};

const FS_RW: &str = r#"filesystem = [{ path = "$WORKSPACE", access = "read-write" }]"#;

fn fs_env() -> Env {
    let env = Env::new();
    env.evil("evil", FS_RW, &["fs:rw:$WORKSPACE"]);
    std::fs::write(env.workspace.path().join("inside.txt"), "inside").expect("write");
    std::fs::write(env.home.path().join("outside.txt"), "outside secret").expect("write");
    env
}

#[tokio::test]
async fn a_file_in_the_workspace_can_be_read() {
    let env = fs_env();
    let rt = env.runtime();
    let path = env.ws().join("inside.txt");
    assert_eq!(ok(call(&rt, "read_path", json!({ "path": path })).await), "inside");
}

/// A tool call runs on a thread of its own and its file operations block that thread: on a
/// runtime with a single blocking thread (the call's), a read through the guarded filesystem
/// (which opens the file's directory itself) still finishes at once. An operation handed to
/// another blocking thread would wait for the call to end, and the call would hit its deadline.
#[test]
fn a_calls_file_operations_stay_on_its_own_thread() {
    let env = fs_env();
    let manifest = env.home.path().join("plugins/evil/plugin.toml");
    let text = std::fs::read_to_string(&manifest).expect("read");
    std::fs::write(&manifest, format!("{text}\n[limits]\ntimeout_secs = 3\n")).expect("write");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().max_blocking_threads(1).build().expect("rt");
    rt.block_on(async {
        let runtime = env.runtime();
        let path = env.ws().join("inside.txt");
        for _ in 0..3 {
            let started = Instant::now();
            assert_eq!(ok(call(&runtime, "read_path", json!({ "path": &path })).await), "inside");
            assert!(started.elapsed() < Duration::from_secs(2), "the read took {:?}", started.elapsed());
        }
    });
}

#[tokio::test]
async fn an_absolute_path_outside_the_workspace_is_refused() {
    let env = fs_env();
    let rt = env.runtime();
    let outside = env.home.path().canonicalize().expect("canon").join("outside.txt");
    let e = failed(call(&rt, "read_path", json!({ "path": outside })).await);
    // No granted directory contains it, so for the plugin it does not exist.
    assert_eq!(e, "io error NotFound: No such file or directory (os error 44)");
    let e = failed(call(&rt, "read_path", json!({ "path": "/etc/passwd" })).await);
    assert_eq!(e, "io error NotFound: No such file or directory (os error 44)");
}

#[tokio::test]
async fn a_dotdot_path_out_of_the_workspace_is_refused() {
    let env = fs_env();
    let rt = env.runtime();
    // workspace and home are siblings under the temp dir.
    let home_name = env.home.path().file_name().and_then(|n| n.to_str()).expect("name").to_string();
    let escape = env.ws().join("..").join(home_name).join("outside.txt");
    let e = failed(call(&rt, "read_path", json!({ "path": escape })).await);
    assert_eq!(e, "io error PermissionDenied: Operation not permitted (os error 63)");
}

#[tokio::test]
async fn a_symlink_pointing_out_of_the_workspace_is_refused() {
    let env = fs_env();
    let rt = env.runtime();
    let link = env.ws().join("link.txt");
    std::os::unix::fs::symlink(env.home.path().join("outside.txt"), &link).expect("symlink");
    let e = failed(call(&rt, "read_path", json!({ "path": link })).await);
    assert_eq!(e, "io error PermissionDenied: Operation not permitted (os error 63)");
}

#[tokio::test]
async fn without_a_filesystem_grant_nothing_is_visible() {
    let env = Env::new();
    env.evil("evil", FS_RW, &[]);
    std::fs::write(env.workspace.path().join("inside.txt"), "inside").expect("write");
    let rt = env.runtime();
    let e = failed(call(&rt, "read_path", json!({ "path": env.ws().join("inside.txt") })).await);
    assert_eq!(e, "io error NotFound: No such file or directory (os error 44)");
}

#[tokio::test]
async fn a_read_only_grant_refuses_writes() {
    let env = Env::new();
    env.evil("evil", FS_RW, &["fs:ro:$WORKSPACE"]);
    let rt = env.runtime();
    let e = failed(call(&rt, "write_path", json!({ "text": "new.txt\nhello" })).await);
    assert_eq!(e, "io error PermissionDenied: Operation not permitted (os error 63)");
    assert!(!env.ws().join("new.txt").exists());
}

#[tokio::test]
async fn a_granted_subdirectory_that_is_a_symlink_out_is_not_opened() {
    let env = Env::new();
    env.evil("evil", r#"filesystem = [{ path = "$WORKSPACE/docs", access = "read" }]"#, &["fs:ro:$WORKSPACE/docs"]);
    std::fs::write(env.home.path().join("outside.txt"), "outside secret").expect("write");
    std::os::unix::fs::symlink(env.home.path(), env.ws().join("docs")).expect("symlink");
    let rt = env.runtime();
    let e = failed(call(&rt, "read_path", json!({ "path": env.ws().join("docs/outside.txt") })).await);
    assert_eq!(
        e,
        format!(
            "io error NotFound: No such file or directory (os error 44) [host: plugin 'evil' was not given {}: it \
             resolves outside the workspace (through a link)]",
            env.ws().join("docs").display()
        )
    );
}

#[tokio::test]
async fn a_grant_overlapping_talarias_home_is_not_opened() {
    let env = Env::new();
    let parent = env.home.path().parent().expect("parent").canonicalize().expect("canon");
    let home = env.home.path().canonicalize().expect("canon");
    std::fs::write(home.join(".env"), "WEATHER_API_KEY=k-123-secret\n").expect("dotenv");
    // The plugin's error says why, since all the guest sees is a path that does not exist.
    let holds = format!(
        "it holds talaria's home {}, which no plugin may reach: start talaria in a project directory (or set \
         TALARIA_HOME outside this one)",
        home.display()
    );
    let inside = format!("it is inside talaria's home {}", home.display());
    for (dir, why) in
        [(parent.clone(), holds.as_str()), (home.clone(), "it is talaria's home"), (home.join("plugins"), &inside)]
    {
        let grant = format!("fs:ro:{}", dir.display());
        let manifest = format!("filesystem = [{{ path = \"{}\", access = \"read\" }}]", dir.display());
        let _ = std::fs::remove_file(home.join("grants.toml"));
        env.evil("evil", &manifest, &[&grant]);
        let rt = env.runtime();
        let e = failed(call(&rt, "read_path", json!({ "path": home.join(".env") })).await);
        assert_eq!(
            e,
            format!(
                "io error NotFound: No such file or directory (os error 44) [host: plugin 'evil' was not given {}: {why}]",
                dir.display()
            ),
            "granted {}",
            dir.display()
        );
    }
}

fn server() -> FakeServer {
    FakeServer::start(|req| (200, vec![], format!("hello from {}", req.path)))
}

#[tokio::test]
async fn network_reaches_only_the_granted_host() {
    let (granted, other) = (server(), server());
    let env = Env::new();
    let net = format!("network = [\"127.0.0.1:{}\", \"127.0.0.1:{}\"]", granted.addr.port(), other.addr.port());
    env.evil("evil", &net, &[&format!("net:127.0.0.1:{}", granted.addr.port())]);
    let rt = env.runtime();
    assert_eq!(ok(call(&rt, "http_get", json!({ "url": granted.url("/a") })).await), "200 hello from /a");
    let e = failed(call(&rt, "http_get", json!({ "url": other.url("/b") })).await);
    let port = other.addr.port();
    assert!(
        e.starts_with(&format!(
            "the host refused the request to http://127.0.0.1:{port}/b: its network grants do not allow it [host: plugin 'evil' has no network grant for 127.0.0.1:{port}"
        )),
        "{e}"
    );
    assert!(other.received().is_empty(), "the refused server saw a request");
}

/// A keep-alive HTTP/1.1 server that answers each request with the port of the connection it
/// came on; with `close_after_first`, it closes each connection after its first answer (without
/// saying so, as a server whose keep-alive ran out does).
fn keep_alive_server(close_after_first: bool) -> (std::net::SocketAddr, Arc<std::sync::Mutex<Vec<u16>>>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let log = log.clone();
            std::thread::spawn(move || {
                let port = stream.peer_addr().expect("peer").port();
                let mut writer = stream.try_clone().expect("clone");
                let mut reader = BufReader::new(stream);
                loop {
                    let mut length = 0;
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                            break;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; length];
                    let _ = reader.read_exact(&mut body);
                    log.lock().expect("log").push(port);
                    let text = format!("conn {port}");
                    let _ = write!(writer, "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{text}", text.len());
                    if close_after_first {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

/// Calls of one plugin to one server reuse one connection; another plugin never rides on it;
/// a kept connection its server closed is replaced without the call seeing it.
#[tokio::test]
async fn a_plugins_requests_to_one_server_share_a_connection_of_its_own() {
    let (addr, seen) = keep_alive_server(false);
    let env = Env::new();
    let grant = format!("net:127.0.0.1:{}", addr.port());
    let net = format!("network = [\"127.0.0.1:{}\"]", addr.port());
    env.evil("first", &net, &[&grant]);
    env.evil("second", &net, &[&grant]);
    let rt = env.runtime();
    let (first, second) = (rt.plugin("first").expect("first").clone(), rt.plugin("second").expect("second").clone());
    let url = format!("http://{addr}/x");
    let mut answers = Vec::new();
    for plugin in [&first, &first, &second, &first, &second] {
        answers.push(ok(call_on(&rt, plugin, "http_get", json!({ "url": url })).await));
    }
    let ports = seen.lock().expect("seen").clone();
    assert_eq!(ports.len(), 5, "{ports:?}");
    assert_eq!(answers[0], format!("200 conn {}", ports[0]));
    assert_eq!([ports[1], ports[3]], [ports[0]; 2], "the first plugin's calls share its connection: {ports:?}");
    assert_eq!(ports[4], ports[2], "so do the second's: {ports:?}");
    assert_ne!(ports[2], ports[0], "each plugin its own: {ports:?}");

    let (addr, seen) = keep_alive_server(true);
    let grant = format!("net:127.0.0.1:{}", addr.port());
    env.evil("third", &format!("network = [\"127.0.0.1:{}\"]", addr.port()), &[&grant]);
    let rt = env.runtime();
    let third = rt.plugin("third").expect("third").clone();
    let url = format!("http://{addr}/x");
    for _ in 0..3 {
        assert!(ok(call_on(&rt, &third, "http_get", json!({ "url": url })).await).starts_with("200 conn "));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ports = seen.lock().expect("seen").clone();
    assert_eq!(ports.len(), 3, "{ports:?}");
    assert!(ports[0] != ports[1] && ports[1] != ports[2], "a closed connection is not used again: {ports:?}");
}

#[tokio::test]
async fn a_wildcard_grant_does_not_reach_loopback() {
    let target = server();
    let env = Env::new();
    env.evil("evil", "network = [\"*\"]", &["net:*"]);
    let rt = env.runtime();
    let port = target.addr.port();
    for host in ["127.0.0.1", "localhost"] {
        let url = format!("http://{host}:{port}/x");
        let e = failed(call(&rt, "http_get", json!({ "url": url })).await);
        let ip = if e.contains("resolves to ::1") { "::1" } else { "127.0.0.1" };
        assert!(
            e.contains(&format!(
                "[host: plugin 'evil': {host}:{port} resolves to {ip}, a loopback address; only a grant of the address itself reaches loopback, private or link-local addresses"
            )),
            "{e}"
        );
    }
    let e = failed(call(&rt, "http_get", json!({ "url": "http://169.254.169.254/latest/meta-data/" })).await);
    assert!(e.contains("resolves to 169.254.169.254, a link-local address"), "{e}");
    assert!(target.received().is_empty());
}

#[tokio::test]
async fn an_explicit_loopback_grant_works_beside_a_wildcard() {
    let target = server();
    let env = Env::new();
    let port = target.addr.port();
    env.evil("evil", "network = [\"*\"]", &["net:*", &format!("net:127.0.0.1:{port}")]);
    let rt = env.runtime();
    assert_eq!(ok(call(&rt, "http_get", json!({ "url": target.url("/ok") })).await), "200 hello from /ok");
}

#[tokio::test]
async fn secrets_never_enter_the_plugin() {
    let env = Env::new();
    env.evil(
        "evil",
        &format!("{FS_RW}\nkv = true\nsecrets = [{{ name = \"WEATHER_API_KEY\", host = \"api.weatherapi.com\" }}]"),
        &["fs:rw:$WORKSPACE", "kv", "secret:WEATHER_API_KEY@api.weatherapi.com"],
    );
    std::fs::write(env.home.path().join(".env"), "WEATHER_API_KEY=k-123-secret\n").expect("dotenv");
    let rt = env.runtime();
    assert_eq!(ok(call(&rt, "secret_exists", json!({ "name": "WEATHER_API_KEY" })).await), "true");
    assert_eq!(ok(call(&rt, "secret_exists", json!({ "name": "HOME" })).await), "false");
    // Through the environment.
    assert_eq!(
        ok(call(&rt, "env_var", json!({ "name": "WEATHER_API_KEY" })).await),
        "env: environment variable not found"
    );
    assert_eq!(ok(call(&rt, "env_all", json!({})).await), "");
    // Through the file system: the .env file sits in the home, which is not preopened.
    let e = failed(call(&rt, "read_path", json!({ "path": env.home.path().join(".env") })).await);
    assert_eq!(e, "io error NotFound: No such file or directory (os error 44)");
    // Through kv: the plugin's space holds only what it stored.
    assert_eq!(ok(call(&rt, "kv_get", json!({ "name": "WEATHER_API_KEY" })).await), "<none>");
}

#[tokio::test]
async fn a_secret_goes_only_to_its_own_host_even_after_a_redirect() {
    let other = server();
    let other_url = other.url("/stolen");
    let audience = FakeServer::start(move |req| {
        if req.path == "/redirect" {
            (302, vec![("location".into(), other_url.clone())], String::new())
        } else {
            (200, vec![], "ok".into())
        }
    });
    let (a, b) = (audience.addr.port(), other.addr.port());
    let env = Env::new();
    env.evil(
        "evil",
        &format!("network = [\"127.0.0.1:{a}\", \"127.0.0.1:{b}\"]\nsecrets = [{{ name = \"WEATHER_API_KEY\", host = \"127.0.0.1:{a}\", headers = [\"x-key\"] }}]"),
        &[&format!("net:127.0.0.1:{a}"), &format!("net:127.0.0.1:{b}"), &format!("secret:WEATHER_API_KEY@127.0.0.1:{a}")],
    );
    let rt = env.runtime();
    assert_eq!(ok(call(&rt, "http_with_secret", json!({ "url": audience.url("/direct") })).await), "200 ok");
    let direct = audience.received();
    assert_eq!(direct[0].header("x-key"), Some("k-123-secret"));

    ok(call(&rt, "http_with_secret", json!({ "url": other.url("/elsewhere") })).await);
    ok(call(&rt, "http_with_secret", json!({ "url": audience.url("/redirect") })).await);
    let seen = other.received();
    assert_eq!(seen.len(), 2);
    for req in seen {
        assert_eq!(req.header("x-key"), None, "secret header reached {}", req.path);
        assert!(!format!("{:?}", req.headers).contains("k-123"));
    }
}

#[tokio::test]
async fn an_infinite_loop_is_stopped_at_the_deadline() {
    let env = Env::new();
    std::fs::create_dir_all(env.home.path().join("plugins")).expect("dir");
    env.evil("evil", "", &[]);
    let manifest = env.home.path().join("plugins/evil/plugin.toml");
    let text = std::fs::read_to_string(&manifest).expect("read");
    std::fs::write(&manifest, format!("{text}\n[limits]\ntimeout_secs = 1\n")).expect("write");
    let rt = env.runtime();
    ok(call(&rt, "echo", json!({ "text": "warm up" })).await);
    let _spinning = crate::SPINNING.lock().await;
    let started = Instant::now();
    let e = crashed(call(&rt, "spin", json!({})).await);
    let elapsed = started.elapsed();
    assert!(e.starts_with("plugin 'evil' exceeded its 1s deadline and was stopped after"), "{e}");
    assert!(elapsed < Duration::from_millis(1200), "stopped after {elapsed:?}");
    assert_eq!(ok(call(&rt, "echo", json!({ "text": "still here" })).await), "still here");
}

#[tokio::test]
async fn a_huge_allocation_stops_at_the_memory_cap() {
    let env = Env::new();
    env.evil("evil", "", &[]);
    let rt = env.runtime();
    let e = crashed(call(&rt, "alloc", json!({ "bytes": 1u64 << 30 })).await);
    assert!(e.starts_with("plugin 'evil' hit its memory limit of 64 MiB (it tried to grow to"), "{e}");
    assert_eq!(ok(call(&rt, "alloc", json!({ "bytes": 8u64 << 20 })).await), "allocated 8388608");
}

#[tokio::test]
async fn a_panic_is_an_error_and_the_next_call_works() {
    let env = Env::new();
    env.evil("evil", "", &[]);
    let rt = env.runtime();
    assert_eq!(
        crashed(call(&rt, "panic", json!({ "text": "boom at line 7" })).await),
        "plugin 'evil' panicked: boom at line 7"
    );
    assert_eq!(ok(call(&rt, "echo", json!({ "text": "fine" })).await), "fine");
}

/// The faults counted for `plugin` of `kind` (the metrics page shows them).
fn faults_of(plugin: &str, kind: &str) -> u64 {
    talaria_runtime::plugin_faults().into_iter().find(|(p, k, _)| p == plugin && *k == kind).map_or(0, |(_, _, n)| n)
}

#[tokio::test]
async fn a_plugin_s_crashes_are_counted_as_its_faults_and_its_errors_are_not() {
    let env = Env::new();
    env.evil("counted", "", &[]);
    let rt = env.runtime();
    crashed(call(&rt, "panic", json!({ "text": "boom" })).await);
    crashed(call(&rt, "alloc", json!({ "bytes": 1u64 << 30 })).await);
    ok(call(&rt, "echo", json!({ "text": "fine" })).await);
    let _ = call(&rt, "fail", json!({})).await;
    assert_eq!(faults_of("counted", "crashed"), 2);
    assert_eq!(faults_of("counted", "deadline"), 0);
}

#[tokio::test]
async fn output_over_the_cap_is_refused() {
    let env = Env::new();
    env.evil("evil", "", &[]);
    let manifest = env.home.path().join("plugins/evil/plugin.toml");
    let text = std::fs::read_to_string(&manifest).expect("read");
    std::fs::write(&manifest, format!("{text}\n[limits]\noutput_kb = 4\n")).expect("write");
    let rt = env.runtime();
    assert_eq!(ok(call(&rt, "big_output", json!({ "bytes": 4096 })).await).len(), 4096);
    let e = crashed(call(&rt, "big_output", json!({ "bytes": 4097 })).await);
    assert_eq!(e, "plugin 'evil' returned 4097 bytes, over its output cap of 4 KiB");
}

/// Every call runs in a new instance, though the pool keeps the pages a call touched mapped for
/// the next one in its slot: whatever a call left in its statics or its heap is gone when the
/// next call looks, each of many times.
#[tokio::test]
async fn a_call_never_finds_what_an_earlier_call_left_in_memory() {
    let env = Env::new();
    env.evil("evil", "", &[]);
    let rt = env.runtime();
    for round in 0..6 {
        let secret = format!("the key of round {round}");
        assert_eq!(ok(call(&rt, "leave_marks", json!({ "text": secret })).await), "left");
        assert_eq!(ok(call(&rt, "find_marks", json!({})).await), r#"static="" marks=0"#, "round {round}");
    }
}

#[tokio::test]
async fn kv_needs_its_grant_and_persists() {
    let env = Env::new();
    env.evil("evil", "kv = true", &[]);
    let rt = env.runtime();
    let e = failed(call(&rt, "kv_set", json!({ "text": "a=1" })).await);
    assert_eq!(
        e,
        "kv: the kv capability is not granted to plugin 'evil' (request `kv = true` in plugin.toml and grant it: `talaria plugins grant evil kv`)"
    );
    talaria_test_support::grant(env.home.path(), "evil", &["kv"]);
    let rt = env.runtime();
    assert_eq!(ok(call(&rt, "kv_set", json!({ "text": "a=1" })).await), "stored");
    let rt = env.runtime();
    assert_eq!(ok(call(&rt, "kv_get", json!({ "name": "a" })).await), "1");
}

#[tokio::test]
async fn process_needs_its_grant_and_the_danger_check() {
    let env = Env::new();
    env.evil("evil", "process = true", &[]);
    let rt = env.runtime();
    let e = failed(call(&rt, "run", json!({ "text": "echo hi" })).await);
    assert_eq!(
        e,
        "command refused: the process capability is not granted to plugin 'evil' (grant it: `talaria plugins grant evil process`)"
    );

    talaria_test_support::grant(env.home.path(), "evil", &["process"]);
    std::fs::create_dir(env.ws().join("build")).expect("mkdir");
    let rt = env.runtime();
    assert_eq!(ok(call(&rt, "run", json!({ "text": "echo hi" })).await), "exit=Some(0)\nhi\n");
    let e = failed(call(&rt, "run", json!({ "text": "rm -rf build" })).await);
    assert!(e.starts_with("command refused: `rm -rf build` needs approval ("), "{e}");
    assert!(
        e.ends_with("and no one is here to approve it; rerun with --yolo to allow dangerous commands (a scheduled job may be allowed them beforehand: `talaria cron edit JOB --allow rm-recursive`)"),
        "{e}"
    );
    assert!(env.ws().join("build").exists());

    let yolo = env.runtime_yolo();
    let e = failed(call(&yolo, "run", json!({ "text": "rm -rf /" })).await);
    assert!(e.starts_with("command refused: `rm -rf /` is always refused: "), "{e}");
    assert_eq!(ok(call(&yolo, "run", json!({ "text": "rm -rf build" })).await), "exit=Some(0)\n");
    assert!(!env.ws().join("build").exists());
}

#[tokio::test]
async fn bad_arguments_get_a_clear_error() {
    let env = Env::new();
    env.evil("evil", "", &[]);
    let rt = env.runtime();
    assert_eq!(
        rt.call(&talaria_runtime::ToolContext::new("echo", json!([1]))).await.expect_err("refused"),
        ToolError::InvalidArgs("arguments must be a JSON object, not an array".into())
    );
    match call(&rt, "echo", json!({ "txt": "x" })).await {
        Err(ToolError::InvalidArgs(m)) => assert_eq!(m, "\"text\" is a required property"),
        other => panic!("{other:?}"),
    }
    // Checked by the host against the tool's schema before the plugin runs.
    assert_eq!(
        call(&rt, "echo", json!({ "text": 5 })).await.expect_err("refused"),
        ToolError::InvalidArgs("`/text`: 5 is not of type \"string\"".into())
    );
    match call(&rt, "nope", json!({})).await {
        Err(ToolError::UnknownTool(m)) => assert!(m.starts_with("nope (available: "), "{m}"),
        other => panic!("{other:?}"),
    }
}

const DATA_RW: &str = r#"filesystem = [{ path = "$PLUGIN_DATA", access = "read-write" }]"#;

#[tokio::test]
async fn plugin_data_is_writable_by_its_plugin_and_invisible_to_others() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    let home = env.home.path().canonicalize().expect("canon");
    // Its data belongs to its identity: a user plugin placed by hand.
    let keeper_dir = home.join("plugin-data/user_keeper@local");
    let note = keeper_dir.join("note.txt");
    env.evil("keeper", DATA_RW, &["fs:rw:$PLUGIN_DATA"]);
    // `snoop` has a data directory of its own, and asks for keeper's by its absolute path.
    let snoop_fs = format!(
        r#"filesystem = [{{ path = "$PLUGIN_DATA", access = "read-write" }}, {{ path = "{}", access = "read" }}]"#,
        keeper_dir.display()
    );
    env.evil("snoop", &snoop_fs, &["fs:rw:$PLUGIN_DATA", &format!("fs:ro:{}", keeper_dir.display())]);
    let rt = env.runtime();
    let (keeper, snoop) = (rt.plugin("keeper").expect("keeper").clone(), rt.plugin("snoop").expect("snoop").clone());
    assert_eq!(
        ok(call_on(&rt, &keeper, "env_var", json!({ "name": "PLUGIN_DATA" })).await),
        keeper_dir.display().to_string()
    );
    let text = format!("{}\nkept", note.display());
    assert_eq!(ok(call_on(&rt, &keeper, "write_path", json!({ "text": text })).await), "written");
    assert_eq!(ok(call_on(&rt, &keeper, "read_path", json!({ "path": note })).await), "kept");
    assert_eq!(std::fs::read_to_string(&note).expect("on the host"), "kept");
    let mode = std::fs::metadata(&keeper_dir).expect("dir").permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "created private");

    assert_eq!(
        ok(call_on(&rt, &snoop, "env_var", json!({ "name": "PLUGIN_DATA" })).await),
        home.join("plugin-data/user_snoop@local").display().to_string()
    );
    let e = failed(call_on(&rt, &snoop, "read_path", json!({ "path": note })).await);
    assert_eq!(
        e,
        format!(
            "io error NotFound: No such file or directory (os error 44) [host: plugin 'snoop' was not given {}: it is \
             inside talaria's home {}]",
            keeper_dir.display(),
            home.display()
        )
    );

    // Requested but not granted: no directory, no variable.
    std::fs::remove_file(env.home.path().join("grants.toml")).expect("reset grants");
    let rt = env.runtime();
    let keeper = rt.plugin("keeper").expect("keeper").clone();
    assert_eq!(
        ok(call_on(&rt, &keeper, "env_var", json!({ "name": "PLUGIN_DATA" })).await),
        "env: environment variable not found"
    );
    let e = failed(call_on(&rt, &keeper, "read_path", json!({ "path": note })).await);
    assert_eq!(e, "io error NotFound: No such file or directory (os error 44)");
}

#[tokio::test]
async fn a_plugin_data_directory_that_is_a_symlink_is_not_opened() {
    let env = Env::new();
    std::fs::write(env.ws().join("inside.txt"), "workspace file").expect("write");
    let data = env.home.path().join("plugin-data");
    std::fs::create_dir_all(&data).expect("dir");
    std::os::unix::fs::symlink(env.ws(), data.join("user_keeper@local")).expect("symlink");
    env.evil("keeper", DATA_RW, &["fs:rw:$PLUGIN_DATA"]);
    let rt = env.runtime();
    assert_eq!(ok(call(&rt, "env_var", json!({ "name": "PLUGIN_DATA" })).await), "env: environment variable not found");
    let link = data.join("user_keeper@local");
    let expected = format!(
        "io error NotFound: No such file or directory (os error 44) [host: plugin 'keeper' was not given {}: {} is a \
         symlink]",
        link.display(),
        link.display()
    );
    let e = failed(call(&rt, "read_path", json!({ "path": link.join("inside.txt") })).await);
    assert_eq!(e, expected);
    let e = failed(call(&rt, "read_path", json!({ "path": env.ws().join("inside.txt") })).await);
    assert_eq!(e, expected);
}

#[tokio::test]
async fn disguised_dangerous_commands_are_caught_at_the_process_import() {
    let env = Env::new();
    env.evil("evil", "process = true", &["process"]);
    std::fs::create_dir(env.ws().join("build")).expect("mkdir");
    std::fs::write(env.ws().join("build/keep.txt"), "kept").expect("write");
    let rt = env.runtime();
    let needs_approval = |command: &str, reason: &str, key: &str| {
        format!(
            "command refused: `{command}` needs approval ({reason}) and no one is here to approve it; rerun with --yolo to allow dangerous commands (a scheduled job may be allowed them beforehand: `talaria cron edit JOB --allow {key}`)"
        )
    };
    for (command, reason, key) in [
        ("setsid rm -rf build", "recursive delete", "rm-recursive"),
        ("$(echo rm) -rf build", "recursive delete", "rm-recursive"),
        ("flock -w 5 /tmp/talaria-test.lock rm --r build", "recursive delete", "rm-recursive"),
        (
            "X=$(cat list); $X -rf build",
            "runs a command whose name or script is only known at run time (a variable, substitution, glob or eval)",
            "dynamic-command",
        ),
        ("cat $TALARIA_HOME/.env", "reads talaria's secrets (.env) or a process's environment", "read-secrets"),
        ("echo x > ./.git//hooks/pre-commit", "writes git's config or hooks, which git runs by itself", "write-git"),
    ] {
        assert_eq!(failed(call(&rt, "run", json!({ "text": command })).await), needs_approval(command, reason, key));
    }
    assert_eq!(std::fs::read_to_string(env.ws().join("build/keep.txt")).expect("still there"), "kept");
    assert!(!env.ws().join(".git").exists());

    // Refused even with --yolo, whatever the spelling.
    let yolo = env.runtime_yolo();
    for (command, reason) in [
        (
            "f(){ f & f; }; f",
            "fork bomb: a function that runs itself in the background or pipes into itself, or an endless loop that starts processes in the background",
        ),
        ("cd / && rm -rf *", "deletes the whole root filesystem"),
        ("cd build && cd .. && cd .. && cd .. && cd / && rm -rf ./*", "deletes the whole root filesystem"),
    ] {
        assert_eq!(
            failed(call(&yolo, "run", json!({ "text": command })).await),
            format!("command refused: `{command}` is always refused: {reason}")
        );
    }
    assert_eq!(std::fs::read_to_string(env.ws().join("build/keep.txt")).expect("still there"), "kept");
}

/// A server that answers with every header it was sent, as an endpoint that echoes does.
fn echoing() -> FakeServer {
    FakeServer::start(|req| {
        let headers: Vec<String> = req.headers.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        (200, vec![], headers.join("\n"))
    })
}

#[tokio::test]
async fn a_secret_is_filled_only_into_the_headers_its_manifest_names() {
    let server = echoing();
    let a = server.addr.port();
    let env = Env::new();
    env.evil(
        "evil",
        &format!(
            "network = [\"127.0.0.1:{a}\"]\nsecrets = [{{ name = \"WEATHER_API_KEY\", host = \"127.0.0.1:{a}\" }}]"
        ),
        &[&format!("net:127.0.0.1:{a}"), &format!("secret:WEATHER_API_KEY@127.0.0.1:{a}")],
    );
    let rt = env.runtime();
    let url = server.url("/echo");
    // The attack: the placeholder in a header the endpoint hands back.
    let attempts = [
        call(&rt, "http_with_secret", json!({ "url": url })).await,
        call(&rt, "http_with_secret_in", json!({ "url": url, "header": "cookie" })).await,
        call(&rt, "http_with_secret_in", json!({ "url": url, "header": "x-forwarded-host" })).await,
        call(&rt, "http_with_secret_in", json!({ "url": url, "header": "Origin" })).await,
    ];
    for (out, header) in attempts.into_iter().zip(["x-key", "cookie", "x-forwarded-host", "origin"]) {
        let out = out.expect("the request itself goes out");
        assert!(out.output.starts_with("200 ") && !out.output.contains("k-123"), "{}", out.output);
        assert_eq!(
            out.denials,
            [format!(
                "secret WEATHER_API_KEY may only be sent in header authorization, header x-api-key, not header {header}"
            )]
        );
    }
    let seen = server.received();
    assert_eq!(seen.len(), 4);
    assert!(seen.iter().all(|r| !format!("{:?}", r.headers).contains("k-123")), "{seen:?}");
    // A header the manifest allows gets the value (the default list: authorization, x-api-key).
    let out = call(&rt, "http_with_secret_in", json!({ "url": url, "header": "x-api-key" })).await.expect("sent");
    assert!(out.denials.is_empty(), "{:?}", out.denials);
    assert_eq!(server.received().last().and_then(|r| r.header("x-api-key")), Some("k-123-secret"));
}

#[tokio::test]
async fn a_wildcard_grant_never_reaches_loopback_through_an_ipv6_form() {
    let target = server();
    let port = target.addr.port();
    let env = Env::new();
    env.evil("evil", "network = [\"*\"]", &["net:*"]);
    let rt = env.runtime_yolo();
    for host in ["64:ff9b::7f00:1", "::ffff:0:127.0.0.1", "2002:7f00:1::", "::ffff:127.0.0.1", "64:ff9b:1::7f00:1"] {
        let url = format!("http://[{host}]:{port}/x");
        let e = failed(call(&rt, "http_get", json!({ "url": url })).await);
        let ip: std::net::IpAddr = host.parse().expect("ip");
        assert!(
            e.ends_with(&format!(
                "[host: plugin 'evil': [{host}]:{port} resolves to {ip}, a loopback address; only a grant of the address itself reaches loopback, private or link-local addresses (grant `net:[{ip}]:{port}` to allow it)]"
            )),
            "{e}"
        );
    }
    assert!(target.received().is_empty(), "the server saw a request");
}

/// An approver that answers `answer` after a pause, keeping every question.
struct Asked {
    answer: Approval,
    seen: std::sync::Mutex<Vec<ApprovalRequest>>,
}

impl Asked {
    fn new(answer: Approval) -> Arc<Self> {
        Arc::new(Self { answer, seen: std::sync::Mutex::new(Vec::new()) })
    }

    fn questions(&self) -> Vec<String> {
        let seen = self.seen.lock().expect("lock");
        seen.iter().map(|r| format!("{:?} {} {} {} ({})", r.kind, r.plugin, r.command, r.key, r.reason)).collect()
    }
}

impl Approver for Asked {
    fn approve<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, Approval> {
        self.seen.lock().expect("lock").push(request.clone());
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            self.answer
        })
    }
}

/// A host that passes the gate fails at the lookup (`.invalid` never resolves), so the calls
/// below never leave the machine.
const NEW_HOST: &str = "http://docs.invalid/page";

#[tokio::test]
async fn a_wildcard_grant_reaches_a_new_host_only_through_the_gate() {
    let env = Env::new();
    env.evil("evil", "network = [\"*\"]", &["net:*"]);
    // Nobody to ask: refused, saying how to allow it, and recorded as the call's denial.
    let rt = env.runtime();
    let e = failed(call(&rt, "http_get", json!({ "url": NEW_HOST })).await);
    assert!(
        e.ends_with("[host: plugin 'evil' needs approval to connect to docs.invalid (allowed only by its wildcard grant net:*) and no one is here to give it; rerun with --yolo, add \"net:docs.invalid\" to [approvals] allow in config.toml, or grant the host: `talaria plugins grant evil net:docs.invalid`]"),
        "{e}"
    );

    // Two concurrent calls to the same new host ask once; "session" covers the rest.
    let asked = Asked::new(Approval::Session);
    let rt = env.runtime_with(|c| c.approver = asked.clone());
    let (a, b) = tokio::join!(
        call(&rt, "http_get", json!({ "url": NEW_HOST })),
        call(&rt, "http_get", json!({ "url": "http://DOCS.invalid/other" })),
    );
    for e in [failed(a), failed(b), failed(call(&rt, "http_get", json!({ "url": NEW_HOST })).await)] {
        assert!(!e.contains("[host:"), "passed the gate, then failed the lookup: {e}");
    }
    assert_eq!(asked.questions(), ["Network evil docs.invalid net:docs.invalid (allowed by its wildcard grant net:*)"]);

    // A user who says no: refused, and asked again next time.
    let asked = Asked::new(Approval::Deny);
    let rt = env.runtime_with(|c| c.approver = asked.clone());
    for _ in 0..2 {
        let e = failed(call(&rt, "http_get", json!({ "url": "http://docs.invalid:8080/" })).await);
        assert!(e.ends_with("[host: plugin 'evil' needs approval to connect to docs.invalid:8080 (allowed only by its wildcard grant net:*) and no one is here to give it; rerun with --yolo, add \"net:docs.invalid:8080\" to [approvals] allow in config.toml, or grant the host: `talaria plugins grant evil net:docs.invalid:8080`]"), "{e}");
    }
    assert_eq!(asked.questions().len(), 2);
}

#[tokio::test]
async fn config_approvals_explicit_grants_and_stubs_never_ask() {
    let env = Env::new();
    env.evil("evil", "network = [\"*\"]", &["net:*"]);
    let asked = Asked::new(Approval::Deny);
    let rt = env.runtime_with(|c| {
        c.approver = asked.clone();
        c.command_policy.allow_keys = vec!["net:docs.invalid".into()];
    });
    let e = failed(call(&rt, "http_get", json!({ "url": NEW_HOST })).await);
    assert!(!e.contains("[host:"), "approved in the config: {e}");

    let stubs = Arc::new(HttpStubs::default());
    stubs.set(Some(vec![HttpStub {
        method: None,
        url: "https://stubbed.invalid/*".into(),
        status: 200,
        headers: vec![],
        body: b"canned".to_vec(),
    }]));
    let rt = env.runtime_with(|c| {
        c.approver = asked.clone();
        c.http_stubs = Some(stubs);
    });
    assert_eq!(ok(call(&rt, "http_get", json!({ "url": "https://stubbed.invalid/a" })).await), "200 canned");

    let env = Env::new();
    env.evil("evil", "network = [\"*\"]", &["net:*", "net:docs.invalid"]);
    let rt = env.runtime_with(|c| c.approver = asked.clone());
    let e = failed(call(&rt, "http_get", json!({ "url": NEW_HOST })).await);
    assert!(!e.contains("[host:"), "granted explicitly: {e}");
    assert_eq!(asked.questions(), Vec::<String>::new());
}
