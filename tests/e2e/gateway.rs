//! `talaria gateway run` as a real process, serving a Telegram bot through the bundled adapter
//! plugin against the Bot API double, with the mock model behind it.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use talaria_mock_llm::{MockLlm, Reply, Script, Step};
use talaria_test_support::telegram::{BOT_USERNAME, Shown, TelegramFake};

use crate::Talaria;

pub(crate) const TOKEN: &str = "123456:TEST-token-value";
pub(crate) const WAIT: Duration = Duration::from_secs(30);

/// The platform tokens a gateway under test never takes from the test's environment: they come
/// from the home's `.env`.
const PLATFORM_TOKENS: &[&str] =
    &["TELEGRAM_BOT_TOKEN", "MATRIX_ACCESS_TOKEN", "DISCORD_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_BOT_TOKEN"];

/// A running gateway; killed when dropped, its log printed if the test failed.
pub(crate) struct Gateway {
    child: Option<Child>,
    log: std::path::PathBuf,
}

impl Gateway {
    pub(crate) fn start(t: &Talaria) -> Self {
        Self::spawn(t, Command::new(env!("CARGO_BIN_EXE_talaria")))
    }

    /// The gateway allowed `files` open files at most (soft and hard limit, through util-linux
    /// `prlimit`), as on a host whose limit is low.
    pub(crate) fn start_with_file_limit(t: &Talaria, files: u64) -> Self {
        let mut command = Command::new("prlimit");
        command.arg(format!("--nofile={files}:{files}")).arg("--").arg(env!("CARGO_BIN_EXE_talaria"));
        Self::spawn(t, command)
    }

    fn spawn(t: &Talaria, mut command: Command) -> Self {
        let log = t.home.path().join("gateway.log");
        let file = std::fs::File::create(&log).expect("log");
        command
            .args(["gateway", "run"])
            .current_dir(t.workspace.path())
            .env("TALARIA_HOME", t.home.path())
            .env_remove("TALARIA_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file);
        for name in PLATFORM_TOKENS {
            command.env_remove(name);
        }
        Self { child: Some(command.spawn().expect("spawn talaria gateway run")), log }
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, and the exit status.
    pub(crate) fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        let sent = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill(1)");
        assert!(sent.success());
        let start = Instant::now();
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                return status;
            }
            assert!(start.elapsed() < WAIT, "the gateway did not stop on SIGTERM:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// SIGKILL: no chance to clean up.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("--- gateway log ---\n{}", self.log());
        }
    }
}

/// A home with the mock model, the bot's token, and `[gateway]` settings `gateway` (the
/// Telegram account pointed at `fake`).
pub(crate) fn setup(mock: &MockLlm, fake: &TelegramFake, gateway: &str, telegram: &str) -> Talaria {
    let t = Talaria::new();
    let chats = t.workspace.path().join("chats");
    let extra = format!(
        "[gateway]\nworkspaces = \"{}\"\n{gateway}\n[gateway.platforms.telegram]\nbase_url = \"{}\"\n{telegram}\n",
        chats.display(),
        fake.base_url()
    );
    t.use_mock(mock, "chat_completions", &extra);
    std::fs::write(t.home.path().join(".env"), format!("TELEGRAM_BOT_TOKEN={TOKEN}\n")).expect(".env");
    t
}

fn contains(needle: &'static str) -> impl Fn(&Shown) -> bool {
    move |m: &Shown| m.text.contains(needle)
}

#[test]
fn a_stranger_gets_a_pairing_code_and_is_answered_once_the_owner_approves() {
    let fake = TelegramFake::start(TOKEN);
    let answer = "Hello Ana, this is a longer answer that streams in word by word so that the gateway edits it.";
    let mock = MockLlm::start(Script::new([Reply::text(answer).paced(60).into()]));
    let t = setup(&mock, &fake, "", "");
    let mut gw = Gateway::start(&t);
    fake.wait_polling(WAIT);

    // A stranger: a pairing code, nothing for the model.
    fake.dm(42, "Ana", "hello");
    let offer = fake.wait_for(42, WAIT, contains("pairing code"));
    let code: String = offer.text.split("talaria pairing approve ").nth(1).expect("command").trim().to_string();
    assert_eq!(code.len(), 8, "{}", offer.text);
    assert!(offer.text.contains("your user id here is <code>42</code>"), "{}", offer.text);
    // Asking again is not answered again (and still reaches no model).
    fake.dm(42, "Ana", "hello??");
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(fake.chat(42).len(), 1, "{:#?}", fake.chat(42));
    assert!(mock.requests().is_empty(), "a stranger's message reached the model");
    let listed = t.ok(&["pairing", "list"]);
    assert!(listed.contains(&code) && listed.contains("Ana"), "{listed}");

    // The owner approves: the next message is answered, streamed by edits.
    t.ok(&["pairing", "approve", &code.to_lowercase()]);
    fake.dm(42, "Ana", "hi again");
    let reply = fake.wait_for(42, WAIT, |m| m.text == answer);
    assert!(!reply.edits.is_empty(), "the reply was not streamed by edits: {reply:#?}");
    assert!(reply.edits.iter().all(|e| answer.starts_with(e.trim_end())), "{reply:#?}");
    assert_eq!(reply.parse_mode.as_deref(), Some("HTML"));
    assert!(fake.typing(42) >= 1, "no typing indicator");
    assert_eq!(mock.requests().len(), 1);

    let status = gw.terminate();
    assert!(status.success(), "{status:?}\n{}", gw.log());
    let log = gw.log();
    assert!(!log.contains(TOKEN), "the token reached the log:\n{log}");
}

/// A question the model asks (`clarify`) is not held open in a chat: the model is told at once
/// to ask in its reply, and the turn goes on (it used to wait 300 s and hear nobody answered).
#[test]
fn a_question_the_model_asks_in_a_chat_goes_into_its_reply_at_once() {
    let fake = TelegramFake::start(TOKEN);
    let mock = MockLlm::start(Script::new([
        Step::tool_call("clarify", json!({"question": "Which city?", "choices": ["Lisbon", "Porto"]})),
        Reply::text("Which city: Lisbon or Porto?").into(),
    ]));
    let t = setup(&mock, &fake, "", "allowed_users = [\"42\"]");
    let mut gw = Gateway::start(&t);
    fake.wait_polling(WAIT);

    let asked = Instant::now();
    fake.dm(42, "Ana", "plan my trip");
    fake.wait_for(42, WAIT, |m| m.text == "Which city: Lisbon or Porto?");
    assert!(asked.elapsed() < Duration::from_secs(20), "the turn waited for a question to be answered");
    let told = mock.requests()[1].body.to_string();
    assert!(told.contains("Ask it in your reply"), "{told}");

    let status = gw.terminate();
    assert!(status.success(), "{status:?}\n{}", gw.log());
}

/// Text that came faster than the platform's edit pace is shown once the pace allows, even
/// when nothing more comes for a while (the model's next call is slow): edits are coalesced,
/// never held back until the end.
#[test]
fn text_held_back_by_the_edit_pace_is_shown_while_the_turn_goes_on() {
    let fake = TelegramFake::start(TOKEN);
    let first = "Let me write that down for you first, and then I will read it back to you twice.";
    let mock = MockLlm::start(Script::new([
        Reply::text(first)
            .paced(150)
            .tool_call("todo", json!({"todos": [{"id": "1", "content": "water the plants", "status": "pending"}]}))
            .into(),
        Step::text("Done: it is on your list.").delayed(6_000),
    ]));
    let t = setup(&mock, &fake, "", "allowed_users = [\"42\"]");
    let _gw = Gateway::start(&t);
    fake.wait_polling(WAIT);

    let asked = Instant::now();
    fake.dm(42, "Ana", "remind me to water the plants");
    // Telegram's pace is an edit a second; the first text streams for about 2.5 s, and the
    // model's second answer takes 6 s more.
    let shown = fake.wait_for(42, Duration::from_millis(5_000), contains("back to you twice."));
    assert!(asked.elapsed() < Duration::from_millis(5_000), "{shown:#?}");
    assert!(!shown.text.contains("Done"), "the first text was held until the end: {shown:#?}");
    assert!(!shown.edits.is_empty(), "it streamed by edits: {shown:#?}");
    let done = fake.wait_for(42, WAIT, contains("on your list"));
    assert_eq!(done.message_id, shown.message_id, "the answer goes on in the message it began: {:#?}", fake.chat(42));
}

#[test]
fn only_an_admin_answers_an_approval_from_a_group() {
    let fake = TelegramFake::start(TOKEN);
    let mock = MockLlm::start(Script::new([
        Step::tool_call("terminal", json!({"command": "rm -rf build"})),
        Step::text("cleaned up"),
    ]));
    let telegram = "allowed_users = [\"2\"]\nadmins = [\"1\"]\ntoolsets = [\"terminal\"]";
    let t = setup(&mock, &fake, "", telegram);
    let _gw = Gateway::start(&t);
    fake.wait_polling(WAIT);
    const GROUP: i64 = -1001;

    // Not addressed to the bot: ignored.
    fake.group(GROUP, 2, "Bo", "anyone around?");
    // Addressed: the agent wants to run a dangerous command and asks the admins.
    fake.group(GROUP, 2, "Bo", &format!("@{BOT_USERNAME} clean the build directory"));
    let ask = fake.wait_for(GROUP, WAIT, contains("Approval needed"));
    assert!(ask.text.contains("rm -rf build"), "{}", ask.text);
    let allow = ask.buttons.iter().find(|(label, _)| label == "Allow once").expect("an Allow once button").1.clone();
    assert_eq!(mock.requests().len(), 1, "the unaddressed message reached the model");

    // Bo is allowed to talk, but is no admin: his press is refused and nothing runs.
    fake.press(GROUP, 2, "Bo", ask.message_id, &allow);
    fake.wait_for(GROUP, WAIT, contains("only an admin"));
    // He cannot type it either.
    fake.group(GROUP, 2, "Bo", &format!("/approve@{BOT_USERNAME}"));
    fake.wait_for(GROUP, WAIT, contains("Only an admin"));
    assert_eq!(mock.requests().len(), 1, "the command ran on a non-admin's answer");

    // The admin allows it: the command runs and the agent finishes.
    fake.press(GROUP, 1, "Admin", ask.message_id, &allow);
    fake.wait_for(GROUP, WAIT, contains("Admin allowed it"));
    fake.wait_for(GROUP, WAIT, |m| m.text == "cleaned up");
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    let body = requests[1].body.to_string();
    assert!(!body.contains("denied") && !body.contains("refused"), "{body}");
}

/// In a group an admin answers with a plain `/approve`, as Telegram's clients send it (no
/// mention: Telegram suggests commands without the bot's name); a message meanwhile neither
/// answers nor drops the approval; line breaks arrive as the model wrote them; and the log
/// says why each ignored message was ignored.
#[test]
fn an_admin_answers_a_group_s_approval_with_a_plain_command() {
    let fake = TelegramFake::start(TOKEN);
    let mock = MockLlm::start(Script::new([
        Step::tool_call("terminal", json!({"command": "rm -rf build"})),
        Step::text("cleaned up\nsecond line"),
        Step::text("it went slowly because I waited for an admin"),
    ]));
    let telegram = "allowed_users = [\"2\"]\nadmins = [\"1\"]\ntoolsets = [\"terminal\"]";
    let t = setup(&mock, &fake, "", telegram);
    let gw = Gateway::start(&t);
    fake.wait_polling(WAIT);
    const GROUP: i64 = -1002;

    // Nothing waits: a plain command in a group is not for the bot, and a stranger is not
    // answered at all. The log says why of each.
    let unaddressed = fake.group(GROUP, 2, "Bo", "/approve");
    let stranger = fake.group(GROUP, 7, "Eve", &format!("@{BOT_USERNAME} hello"));
    wait_log(&gw, &format!("message_id={stranger}"));
    wait_log(&gw, &format!("message_id={unaddressed}"));
    let log = gw.log();
    let line = |id: i64| {
        log.lines()
            .find(|l| l.contains(&format!("message_id={id} ")) || l.ends_with(&format!("message_id={id}")))
            .unwrap_or_default()
            .to_string()
    };
    assert!(line(unaddressed).contains("message ignored: not addressed to the bot in a group"), "{log}");
    assert!(line(stranger).contains("message ignored: a stranger in a group"), "{log}");

    fake.group(GROUP, 2, "Bo", &format!("@{BOT_USERNAME} clean the build directory"));
    let ask = fake.wait_for(GROUP, WAIT, contains("Approval needed"));
    assert!(ask.text.contains("/approve"), "{}", ask.text);
    // Bo asks why it takes so long: he is told, and the approval still waits.
    fake.group(GROUP, 2, "Bo", &format!("@{BOT_USERNAME} why so slow?"));
    fake.wait_for(GROUP, WAIT, contains("waiting for an admin"));
    // Bo's plain /approve is refused, and a mistyped one from the admin is explained.
    fake.group(GROUP, 2, "Bo", "/approve");
    fake.wait_for(GROUP, WAIT, contains("Only an admin"));
    fake.group(GROUP, 1, "Admin", "/approve sesion");
    fake.wait_for(GROUP, WAIT, contains("/approve session (for the rest of this session)"));
    assert_eq!(mock.requests().len(), 1, "something answered the approval: {:#?}", fake.chat(GROUP));

    // The admin's plain /approve answers it.
    fake.group(GROUP, 1, "Admin", "/approve");
    fake.wait_for(GROUP, WAIT, contains("Admin allowed it"));
    let done = fake.wait_for(GROUP, WAIT, contains("cleaned up"));
    assert_eq!(done.text, "cleaned up\nsecond line", "the line break was lost");
    // Then Bo's question is answered.
    fake.wait_for(GROUP, WAIT, contains("waited for an admin"));
    assert_eq!(mock.requests().len(), 3);
    let body = mock.requests()[1].body.to_string();
    assert!(!body.contains("denied") && !body.contains("refused"), "{body}");
}

/// Wait until the gateway's log has a line with `needle`.
fn wait_log(gw: &Gateway, needle: &str) {
    let start = Instant::now();
    while !gw.log().contains(needle) {
        assert!(start.elapsed() < WAIT, "no log line with {needle}:\n{}", gw.log());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_reply_the_platform_refuses_for_a_while_is_sent_from_the_ledger() {
    let fake = TelegramFake::start(TOKEN);
    let mock = MockLlm::start(Script::new([Step::text("eventually delivered")]));
    let t = setup(&mock, &fake, "", "allowed_users = [\"42\"]");
    let gw = Gateway::start(&t);
    fake.wait_polling(WAIT);
    fake.fail_sends(2);
    fake.dm(42, "Ana", "hello");
    fake.wait_for(42, WAIT, |m| m.text == "eventually delivered");
    assert_eq!(fake.chat(42).len(), 1, "sent twice: {:#?}", fake.chat(42));
    assert!(fake.calls("sendMessage") >= 3, "not retried: {} sends", fake.calls("sendMessage"));
    // The line is written once the platform's answer is in, just after the fake has the message.
    wait_log(&gw, "reply delivered");
    let log = gw.log();
    assert!(log.contains("it will be tried again"), "{log}");
    // Each retry says why (the platform's status), and the delivery is logged.
    let retry = log.lines().find(|l| l.contains("it will be tried again")).unwrap_or_default();
    assert!(retry.contains("sending failed (") && retry.contains("502"), "{retry}");
    assert!(log.lines().any(|l| l.contains("reply delivered") && l.contains("chat=42")), "{log}");
    let status = t.ok(&["gateway", "status", "--json"]);
    let status: serde_json::Value = serde_json::from_str(&status).expect("json");
    assert_eq!(status["deliveries"]["sent"], 1, "{status}");
    assert_eq!(status["deliveries"]["pending"], 0, "{status}");
    assert_eq!(status["running"], true, "{status}");
}

/// POST `body` to `path` on `addr` with `headers` (HTTP/1.1, one request per connection): the
/// status and the body of the answer.
pub(crate) fn post(addr: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, String) {
    request("POST", addr, path, headers, body)
}

/// A GET on the listener, with `headers`: the status and the body.
fn get(addr: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    request("GET", addr, path, headers, b"")
}

/// One request over a fresh connection: the status and the body.
fn request(method: &str, addr: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, String) {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(WAIT)).expect("timeout");
    let mut head =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).expect("write");
    stream.write_all(body).expect("write");
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

pub(crate) fn sign(key: &[u8], body: &[u8]) -> String {
    use hmac::{KeyInit as _, Mac as _};
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("key");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

#[test]
fn a_signed_webhook_is_answered_and_forgeries_replays_and_big_bodies_are_refused() {
    let mock = MockLlm::start(Script::new([Step::text("The build failed on test x; rerun it.")]));
    let t = Talaria::new();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let extra = format!(
        "[gateway]\nworkspaces = \"{}\"\nlisten = \"{addr}\"\n\
         [gateway.platforms.hooks]\nplugin = \"webhook\"\nallow_all = true\n\
         [gateway.platforms.hooks.routes.ci]\nauth = \"hmac\"\nheader = \"X-Signature-256\"\nsecret = \"CI_HOOK_KEY\"\n\
         delivery_header = \"X-GitHub-Delivery\"\nmax_body_kb = 4\nprompt = \"CI says {{status}} for {{repo.name}}\"\n",
        t.workspace.path().join("chats").display()
    );
    t.use_mock(&mock, "chat_completions", &extra);
    std::fs::write(t.home.path().join(".env"), "CI_HOOK_KEY=hook-s3cret\n").expect(".env");
    let gw = Gateway::start(&t);
    let start = Instant::now();
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(start.elapsed() < WAIT, "the listener never came up:\n{}", gw.log());
        std::thread::sleep(Duration::from_millis(20));
    }

    let body = br#"{"status": "failed", "repo": {"name": "talaria"}}"#;
    let signed = sign(b"hook-s3cret", body);
    let headers =
        [("X-Signature-256", signed.as_str()), ("X-GitHub-Delivery", "d-1"), ("Content-Type", "application/json")];
    let (status, answer) = post(&addr, "/webhooks/hooks/ci", &headers, body);
    assert_eq!(status, 200, "{answer}\n{}", gw.log());
    let answer: serde_json::Value = serde_json::from_str(&answer).expect("json");
    assert_eq!(answer["reply"], "The build failed on test x; rerun it.");
    let requests = mock.requests();
    assert_eq!(requests.len(), 1);
    assert!(requests[0].body.to_string().contains("CI says failed for talaria"), "{}", requests[0].body);

    // The same delivery again: refused, the agent is not asked twice.
    let (status, answer) = post(&addr, "/webhooks/hooks/ci", &headers, body);
    assert_eq!((status, answer.contains("d-1 was received before")), (409, true), "{answer}");
    // A forgery, an unsigned request, a body over the limit, an unknown route.
    let forged = sign(b"guess", body);
    let (status, answer) =
        post(&addr, "/webhooks/hooks/ci", &[("X-Signature-256", &forged), ("X-GitHub-Delivery", "d-2")], body);
    assert_eq!((status, answer.contains("does not match the body")), (401, true), "{answer}");
    let (status, _) = post(&addr, "/webhooks/hooks/ci", &[("X-GitHub-Delivery", "d-3")], body);
    assert_eq!(status, 401);
    let big = vec![b' '; 5 * 1024];
    let (status, answer) = post(&addr, "/webhooks/hooks/ci", &[("X-Signature-256", &sign(b"hook-s3cret", &big))], &big);
    assert_eq!((status, answer.contains("larger than")), (413, true), "{answer}");
    let (status, _) = post(&addr, "/webhooks/hooks/other", &headers, body);
    assert_eq!(status, 404);
    assert_eq!(mock.requests().len(), 1, "a refused request reached the model");
}

#[test]
fn an_adapter_that_crashes_is_made_again_and_the_other_accounts_keep_answering() {
    let fake = TelegramFake::start(TOKEN);
    let sink = talaria_test_support::FakeServer::start(|_| (200, Vec::new(), "{}".into()));
    let mock = MockLlm::start(Script::auto());
    let flaky = format!(
        "allowed_users = [\"42\"]\n[gateway.platforms.flaky]\nbase_url = \"http://{}\"\nallowed_users = [\"9\"]\n",
        sink.addr
    );
    let t = setup(&mock, &fake, "", &flaky);
    let manifest = "name = \"flaky\"\nversion = \"0.1.0\"\napi = \"0.4.0\"\nkind = [\"platform\"]\n\
                    [capabilities]\nnetwork = [\"flaky.invalid\"]\nkv = true\n";
    talaria_test_support::install(
        t.home.path(),
        "flaky",
        std::path::Path::new(talaria_test_support::FLAKY_ADAPTER_WASM),
        manifest,
    );
    talaria_test_support::grant(t.home.path(), "flaky", &["net:flaky.invalid", "kv"]);
    let gw = Gateway::start(&t);
    fake.wait_polling(WAIT);

    // While the flaky adapter crashes and is made again, Telegram is answered.
    fake.dm(42, "Ana", "are you there?");
    fake.wait_for(42, WAIT, |m| m.text == "ok");
    // The flaky adapter recovers, and its message is answered through it.
    let start = Instant::now();
    while !sink
        .received()
        .iter()
        .any(|r| r.path == "/sent" && String::from_utf8_lossy(&r.body).contains("\"text\":\"ok\""))
    {
        assert!(start.elapsed() < WAIT, "the flaky account was never answered:\n{}", gw.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = gw.log();
    assert_eq!(log.matches("crashes on purpose").count(), 2, "{log}");
    assert!(log.contains("reconnecting"), "{log}");
}

#[test]
fn a_gateway_killed_mid_turn_loses_no_message_and_sends_nothing_twice() {
    let fake = TelegramFake::start(TOKEN);
    let mock = MockLlm::start(Script::new([
        Step::text("one"),
        Step::text("two"),
        Step::text("three").delayed(30_000),
        Step::text("three, after all"),
        Step::text("four"),
    ]));
    let t = setup(&mock, &fake, "", "allowed_users = [\"42\"]");
    let mut gw = Gateway::start(&t);
    fake.wait_polling(WAIT);

    fake.dm(42, "Ana", "first");
    fake.wait_for(42, WAIT, |m| m.text == "one");
    // The platform is down: the second reply waits in the ledger.
    fake.fail_sends(usize::MAX);
    fake.dm(42, "Ana", "second");
    let start = Instant::now();
    while mock.requests().len() < 2 || fake.calls("sendMessage") < 2 {
        assert!(start.elapsed() < WAIT, "the second reply was never tried:\n{}", gw.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    // A third message, whose answer is still being written when the gateway is killed.
    fake.dm(42, "Ana", "third");
    while mock.requests().len() < 3 {
        assert!(start.elapsed() < WAIT, "the third turn never started:\n{}", gw.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    gw.kill();
    // The killed process is not named as running (it wrote its status a moment ago).
    let out = t.run(&["gateway", "status"]);
    let status = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{status}");
    assert!(status.contains("gateway not running (last seen pid"), "{status}");

    // Every message the users sent is kept: those answered in the session, the third (whose
    // turn stores it with its answer) in the inbox, until its turn is run again.
    let shown = t.ok(&["sessions", "show", "latest", "--json"]);
    for text in ["first", "second"] {
        assert!(shown.contains(&format!("\"{text}\"")), "{text} was lost:\n{shown}");
    }
    assert!(!shown.contains("\"third\""), "the cut turn stored its message without its answer:\n{shown}");

    // The platform is back and the gateway starts again: the waiting reply goes out once, the
    // one acknowledged before does not go again, the turn the kill cut short is run again
    // (its half is forgotten: the model sees the third message once), and the chat carries on.
    fake.fail_sends(0);
    let gw = Gateway::start(&t);
    fake.wait_for(42, WAIT, |m| m.text == "two");
    fake.wait_for(42, WAIT, |m| m.text == "three, after all");
    fake.dm(42, "Ana", "fourth");
    fake.wait_for(42, WAIT, |m| m.text == "four");
    let texts: Vec<String> = fake.chat(42).into_iter().map(|m| m.text).collect();
    assert_eq!(texts, ["one", "two", "three, after all", "four"], "{}", gw.log());
    let last = mock.requests().last().expect("requests").body["messages"].to_string();
    assert_eq!(last.matches("\"third\"").count(), 1, "the cut turn's message twice in the history: {last}");
    assert!(last.contains("three, after all"), "{last}");
    assert!(gw.log().contains("a dead process stored nothing of this turn; running it again"), "{}", gw.log());
    let shown = t.ok(&["sessions", "show", "latest", "--json"]);
    let messages = shown.split_once("\"messages\"").map_or("", |(_, m)| m);
    for text in ["first", "second", "third", "fourth", "three, after all"] {
        assert_eq!(messages.matches(&format!("\"content\": \"{text}\"")).count(), 1, "{text}:\n{shown}");
    }
}

/// The platform took the start of a streamed answer and the gateway died before its answer came
/// back: the message is in the chat, and nobody knows its id. The next gateway cannot edit it,
/// so it answers anew and says in its log that this chat may show the answer twice.
#[test]
fn a_streamed_send_cut_by_a_kill_is_answered_anew_and_logged_as_maybe_shown_twice() {
    let fake = TelegramFake::start(TOKEN);
    let mock = MockLlm::start(Script::new([
        Step::Reply(Reply::text("the first answer streams slowly word by word").paced(300)),
        Step::text("the answer, after all"),
    ]));
    let t = setup(&mock, &fake, "", "allowed_users = [\"42\"]");
    let mut gw = Gateway::start(&t);
    fake.wait_polling(WAIT);
    fake.leave_sends_unanswered(true);
    fake.dm(42, "Ana", "hello");
    // The start of the answer reaches the chat; its send never returns.
    let shown = fake.wait_for(42, WAIT, |_| true);
    assert!(shown.text.starts_with("the first"), "{shown:?}");
    gw.kill();

    fake.leave_sends_unanswered(false);
    let gw = Gateway::start(&t);
    fake.wait_for(42, WAIT, |m| m.text == "the answer, after all");
    let texts: Vec<String> = fake.chat(42).into_iter().map(|m| m.text).collect();
    assert_eq!(texts, [shown.text.clone(), "the answer, after all".to_string()], "{}", gw.log());
    let log = gw.log();
    let warned: Vec<&str> = log.lines().filter(|l| l.contains("shows twice")).collect();
    assert_eq!(warned.len(), 1, "{log}");
    assert!(warned[0].contains("chat=42"), "{log}");
}

#[test]
fn fifty_chats_at_once_each_get_their_own_answer() {
    const CHATS: i64 = 50;
    let fake = TelegramFake::start(TOKEN);
    let mock = MockLlm::start(Script::auto());
    let t = setup(&mock, &fake, "allow_all = true", "");
    let gw = Gateway::start(&t);
    fake.wait_polling(WAIT);
    for user in 1..=CHATS {
        fake.dm(1000 + user, &format!("user {user}"), &format!("echo answer for chat {user}"));
    }
    let start = Instant::now();
    loop {
        // Answered in full: on a busy machine a reply may show its start first, then be edited.
        let answered = (1..=CHATS)
            .filter(|u| fake.chat(1000 + u).iter().any(|m| m.text == format!("answer for chat {u}")))
            .count();
        if answered == usize::try_from(CHATS).expect("count") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(90), "{answered} of {CHATS} chats answered:\n{}", gw.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    for user in 1..=CHATS {
        let shown = fake.chat(1000 + user);
        let texts: Vec<&str> = shown.iter().map(|m| m.text.as_str()).collect();
        assert_eq!(texts, [format!("answer for chat {user}")], "chat {user}");
    }
    assert_eq!(fake.all_shown().len(), usize::try_from(CHATS).expect("count"), "replies crossed or doubled");
    // No chat's words reached another chat's model call (no shared memory or recall).
    for request in mock.requests() {
        let body = request.body.to_string();
        let chats: std::collections::BTreeSet<&str> = body
            .split("answer for chat ")
            .skip(1)
            .map(|rest| rest.split(|c: char| !c.is_ascii_digit()).next().unwrap_or(""))
            .collect();
        assert_eq!(chats.len(), 1, "one model call saw several chats: {chats:?}");
    }
}

/// Sends for different chats of one account run side by side: with a platform that takes
/// 200 ms to answer each send (and each typing indicator), 20 chats written to at once are all
/// answered within a few of those, not 20 of them one after another (4 s of sends alone, and as
/// much again of typing).
#[test]
fn twenty_chats_of_one_account_are_answered_side_by_side_when_the_platform_is_slow() {
    const CHATS: i64 = 20;
    const SLOW: Duration = Duration::from_millis(200);
    let fake = TelegramFake::start(TOKEN);
    let mock = MockLlm::start(Script::auto());
    let t = setup(&mock, &fake, "allow_all = true", "");
    let gw = Gateway::start(&t);
    fake.wait_polling(WAIT);
    // Warm up: the first reply makes the first sending instance (and compiles nothing more).
    fake.dm(999, "warm", "echo ready");
    fake.wait_for(999, WAIT, |m| m.text == "ready");
    // An answer that comes at once needs no typing notice (and costs no platform call for one).
    let typing = fake.typing(999);
    fake.dm(999, "warm", "echo steady");
    fake.wait_for(999, WAIT, |m| m.text == "steady");
    assert_eq!(fake.typing(999), typing, "an instant answer was preceded by a typing notice");
    fake.delay_sends(SLOW);
    let written = Instant::now();
    for user in 1..=CHATS {
        fake.dm(1000 + user, &format!("user {user}"), &format!("echo answer for chat {user}"));
    }
    for user in 1..=CHATS {
        fake.wait_for(1000 + user, WAIT, |m| m.text == format!("answer for chat {user}"));
    }
    let slowest = (1..=CHATS).map(|u| fake.chat(1000 + u)[0].at.duration_since(written)).max().expect("replies");
    assert!(
        slowest < SLOW * u32::try_from(CHATS).expect("count") / 2,
        "the last of {CHATS} replies was posted {slowest:?} after the messages: sends waited for each other\n{}",
        gw.log()
    );
    for user in 1..=CHATS {
        let texts: Vec<String> = fake.chat(1000 + user).into_iter().map(|m| m.text).collect();
        assert_eq!(texts, [format!("answer for chat {user}")], "chat {user}");
    }
}

#[test]
fn a_matrix_user_is_paired_then_answered_with_a_tool_call_streamed_by_edits() {
    use talaria_test_support::synapse::Synapse;
    let synapse = Synapse::shared();
    let bot = synapse.user("talaria-bot");
    let ana = synapse.user("ana");
    let answer = "Your todo list has one item now: water the plants. I wrote it down for you, and I will keep it.";
    let mock = MockLlm::start(Script::new([
        Step::tool_call("todo", json!({"todos": [{"id": "1", "content": "water the plants", "status": "pending"}]})),
        Reply::text(answer).paced(100).into(),
    ]));
    let t = Talaria::new();
    let extra = format!(
        "[gateway]\nworkspaces = \"{}\"\n[gateway.platforms.matrix]\nbase_url = \"{}\"\n",
        t.workspace.path().join("chats").display(),
        synapse.base_url
    );
    t.use_mock(&mock, "chat_completions", &extra);
    std::fs::write(t.home.path().join(".env"), format!("MATRIX_ACCESS_TOKEN={}\n", bot.token)).expect(".env");
    let gw = Gateway::start(&t);

    // Ana opens a direct chat; the bot joins it.
    let room = ana.direct_room(&bot.user_id);
    let start = Instant::now();
    while !ana.members(&room).contains(&bot.user_id) {
        assert!(start.elapsed() < WAIT, "the bot never joined:\n{}", gw.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    let from_bot = |ana: &talaria_test_support::synapse::Client| -> Vec<serde_json::Value> {
        ana.messages(&room).into_iter().filter(|e| e["sender"] == bot.user_id.as_str()).collect()
    };
    let wait_bot = |what: &dyn Fn(&[serde_json::Value]) -> bool| {
        let start = Instant::now();
        loop {
            let seen = from_bot(&ana);
            if what(&seen) {
                return seen;
            }
            assert!(start.elapsed() < WAIT, "the bot never said what was awaited; it said {seen:#?}\n{}", gw.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    };

    // A stranger: a pairing code.
    ana.say(&room, "hello");
    let said =
        wait_bot(&|s| s.iter().any(|e| e["content"]["body"].as_str().is_some_and(|b| b.contains("pairing code"))));
    let offer = said[0]["content"]["body"].as_str().expect("body");
    let code = offer.split("talaria pairing approve ").nth(1).expect("command").trim().to_string();
    assert!(mock.requests().is_empty());

    t.ok(&["pairing", "approve", &code]);
    ana.say(&room, "remind me to water the plants");
    let said = wait_bot(&|s| {
        s.iter().any(|e| {
            e["content"]["m.new_content"]["body"] == answer
                || (e["content"]["body"] == answer && e["content"]["m.relates_to"].is_null())
        })
    });
    // It came as a message with the start of the answer, then edits that replaced it.
    let edits = said.iter().filter(|e| e["content"]["m.relates_to"]["rel_type"] == "m.replace").count();
    let first = said
        .iter()
        .find(|e| e["content"]["body"].as_str().is_some_and(|b| answer.starts_with(b)))
        .expect("the streamed start");
    assert!(edits >= 1 && first["content"]["body"] != answer, "the answer was not streamed by edits: {said:#?}");
    let last = said.last().expect("a message");
    assert_eq!(last["content"]["m.new_content"]["format"], "org.matrix.custom.html", "{last:#?}");
    // The tool ran and its result went back to the model.
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[1].body.to_string().contains("water the plants"), "{}", requests[1].body);
}

/// A Matrix room is a group from the moment a third person is in it or invited, without a
/// restart: there a stranger gets no pairing code and unaddressed messages are not answered.
/// An admin answers an approval the ways Matrix clients can: by replying `/approve` to it, by a
/// ✅ reaction, or by a plain `/approve`; a member who is no admin is refused.
#[test]
fn a_matrix_group_is_told_from_a_direct_chat_and_its_admin_answers_approvals_as_clients_can() {
    use talaria_test_support::synapse::Synapse;
    let synapse = Synapse::shared();
    let (bot, ana, bo, cy) = (
        synapse.user("talaria-ops"),
        synapse.user("ana-admin"),
        synapse.user("bo-member"),
        synapse.user("cy-stranger"),
    );
    let mut steps = Vec::new();
    for n in ["one", "two", "three"] {
        steps.push(Step::tool_call("terminal", json!({"command": format!("rm -rf build-{n}")})));
        steps.push(Step::text(format!("cleaned {n}")));
    }
    steps.push(Step::text("just you and me"));
    let mock = MockLlm::start(Script::new(steps));
    let t = Talaria::new();
    let extra = format!(
        "[gateway]\nworkspaces = \"{}\"\n[gateway.platforms.matrix]\nbase_url = \"{}\"\n\
         allowed_users = [\"{}\", \"{}\"]\nadmins = [\"{}\"]\ntoolsets = [\"terminal\"]\n",
        t.workspace.path().join("chats").display(),
        synapse.base_url,
        ana.user_id,
        bo.user_id,
        ana.user_id
    );
    t.use_mock(&mock, "chat_completions", &extra);
    std::fs::write(t.home.path().join(".env"), format!("MATRIX_ACCESS_TOKEN={}\n", bot.token)).expect(".env");
    let gw = Gateway::start(&t);
    let joined = |room: &str| {
        let start = Instant::now();
        while !ana.members(room).contains(&bot.user_id) {
            assert!(start.elapsed() < WAIT, "the bot never joined:\n{}", gw.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let said = |room: &str, what: &dyn Fn(&str) -> bool| -> serde_json::Value {
        let start = Instant::now();
        loop {
            let seen: Vec<serde_json::Value> =
                ana.messages(room).into_iter().filter(|e| e["sender"] == bot.user_id.as_str()).collect();
            if let Some(e) = seen.iter().find(|e| e["content"]["body"].as_str().is_some_and(what)) {
                return e.clone();
            }
            assert!(start.elapsed() < WAIT, "the bot never said what was awaited; it said {seen:#?}\n{}", gw.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let ignored = |event: &str, why: &str| {
        wait_log(&gw, &format!("message_id={event}"));
        let log = gw.log();
        let line = log.lines().find(|l| l.contains(&format!("message_id={event}"))).unwrap_or_default();
        assert!(line.contains(&format!("message ignored: {why}")), "{line}\n{log}");
    };

    // Ana makes a room with the bot and Cy; the bot joins before Cy does.
    let room = ana.room_with(&[&bot.user_id, &cy.user_id]);
    joined(&room);
    cy.join(&room);
    ignored(&cy.say(&room, "hello? who are you?"), "a stranger in a group");
    ignored(&ana.say(&room, "Cy, the bot is here"), "not addressed to the bot in a group");
    assert!(mock.requests().is_empty(), "{:#?}", mock.requests());

    // Bo joins; Ana asks the bot, which asks for approval.
    ana.invite(&room, &bo.user_id);
    bo.join(&room);
    ana.mention(&room, &bot.user_id, "talaria-ops", "clean build one");
    let ask = said(&room, &|b| b.contains("Approval needed") && b.contains("build-one"));
    let body = ask["content"]["body"].as_str().unwrap_or_default().to_string();
    assert!(body.contains("React ✅ for “Allow once”") && body.contains("❌ for “Deny”"), "{body}");
    let ask_id = ask["event_id"].as_str().expect("event_id").to_string();
    // Bo is no admin: his ✅ is refused, and nothing runs.
    bo.react(&room, &ask_id, "✅");
    said(&room, &|b| b.contains("bo-member, only an admin"));
    assert_eq!(mock.requests().len(), 1);
    // Ana replies /approve to it, as Element writes a reply.
    ana.reply(&room, &ask_id, &bot.user_id, &body, "/approve");
    said(&room, &|b| b == "cleaned one");

    // A ✅ reaction.
    ana.mention(&room, &bot.user_id, "talaria-ops", "clean build two");
    let ask = said(&room, &|b| b.contains("Approval needed") && b.contains("build-two"));
    ana.react(&room, ask["event_id"].as_str().expect("event_id"), "✅");
    said(&room, &|b| b == "cleaned two");

    // A plain /approve, the only question waiting in the room.
    ana.mention(&room, &bot.user_id, "talaria-ops", "clean build three");
    said(&room, &|b| b.contains("Approval needed") && b.contains("build-three"));
    ana.say(&room, "/approve");
    said(&room, &|b| b == "cleaned three");
    let answers = ana.messages(&room).iter().filter(|e| e["content"]["body"] == "ana-admin allowed it.").count();
    assert_eq!(answers, 3, "{:#?}", ana.messages(&room));
    assert_eq!(mock.requests().len(), 6);

    // A direct chat is answered unaddressed, until someone else is invited to it.
    let dm = ana.direct_room(&bot.user_id);
    joined(&dm);
    ana.say(&dm, "hi");
    said(&dm, &|b| b == "just you and me");
    ana.invite(&dm, &cy.user_id);
    ignored(&ana.say(&dm, "are you still answering?"), "not addressed to the bot in a group");
    assert_eq!(mock.requests().len(), 7);
}

/// `doctor` shows each account's token to its platform: a wrong one fails with what the
/// platform answered, a right one names the bot; `--offline` contacts nobody.
#[test]
fn doctor_asks_the_platform_whose_the_token_is() {
    let fake = TelegramFake::start(TOKEN);
    let mock = MockLlm::start(Script::auto());
    let t = setup(&mock, &fake, "", "");
    let out = t.run(&["doctor"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "ok: gateway: [gateway.platforms.telegram]: Telegram getMe says the token is @{BOT_USERNAME}"
        )),
        "{stdout}"
    );
    std::fs::write(t.home.path().join(".env"), "TELEGRAM_BOT_TOKEN=123456:a-revoked-token\n").expect(".env");
    let out = t.run(&["doctor"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(
            "fail: gateway: [gateway.platforms.telegram]: Telegram getMe refused the token: 401 Unauthorized"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("a-revoked-token"), "the token was printed: {stdout}");
    let calls = fake.calls("getMe");
    let out = t.run(&["doctor", "--offline"]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("getMe"));
    assert_eq!(fake.calls("getMe"), calls, "--offline asked the platform");
}

#[test]
fn two_accounts_of_one_adapter_each_use_their_own_token() {
    let work = TelegramFake::start("111:work-token");
    let home_bot = TelegramFake::start("222:home-token");
    let mock = MockLlm::start(Script::auto());
    let t = Talaria::new();
    let extra = format!(
        "[gateway]\nworkspaces = \"{}\"\nallowed_users = [\"work:42\", \"home:42\"]\n\
         [gateway.platforms.work]\nplugin = \"telegram\"\nbase_url = \"{}\"\nsecrets = {{ TELEGRAM_BOT_TOKEN = \"WORK_BOT_TOKEN\" }}\n\
         [gateway.platforms.home]\nplugin = \"telegram\"\nbase_url = \"{}\"\nsecrets = {{ TELEGRAM_BOT_TOKEN = \"HOME_BOT_TOKEN\" }}\n",
        t.workspace.path().join("chats").display(),
        work.base_url(),
        home_bot.base_url()
    );
    t.use_mock(&mock, "chat_completions", &extra);
    std::fs::write(t.home.path().join(".env"), "WORK_BOT_TOKEN=111:work-token\nHOME_BOT_TOKEN=222:home-token\n")
        .expect(".env");
    let gw = Gateway::start(&t);
    work.wait_polling(WAIT);
    home_bot.wait_polling(WAIT);
    work.dm(42, "Ana", "echo from work");
    home_bot.dm(42, "Ana", "echo from home");
    work.wait_for(42, WAIT, |m| m.text == "from work");
    home_bot.wait_for(42, WAIT, |m| m.text == "from home");
    assert_eq!((work.chat(42).len(), home_bot.chat(42).len()), (1, 1), "{}", gw.log());
}

/// Wait until something listens on `addr`.
pub(crate) fn wait_listening(addr: &str, gw: &Gateway) {
    let start = Instant::now();
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(start.elapsed() < WAIT, "the listener never came up:\n{}", gw.log());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The `[gateway.platforms.hooks]` account (the webhook adapter) with route `ci` (`hmac` over
/// the body, key `CI_HOOK_KEY`, answered with the agent's reply to `echo {text}`) and route
/// `slack` (Slack's `v0` scheme, key `SLACK_SIGNING_SECRET`).
const HOOKS: &str = "[gateway.platforms.hooks]\nplugin = \"webhook\"\nallow_all = true\n\
    [gateway.platforms.hooks.routes.ci]\nauth = \"hmac\"\nheader = \"X-Signature-256\"\nsecret = \"CI_HOOK_KEY\"\n\
    delivery_header = \"X-GitHub-Delivery\"\nprompt = \"echo {text}\"\n\
    [gateway.platforms.hooks.routes.slack]\nauth = \"slack-v0\"\nheader = \"X-Slack-Signature\"\n\
    secret = \"SLACK_SIGNING_SECRET\"\nprompt = \"echo {text}\"\n";
const HOOK_KEYS: &str = "CI_HOOK_KEY=hook-s3cret\nSLACK_SIGNING_SECRET=slack-s3cret\n";

/// The process's soft and hard limits on open files.
fn file_limits() -> (u64, u64) {
    let limits = std::fs::read_to_string("/proc/self/limits").expect("/proc/self/limits");
    let line = limits.lines().find_map(|l| l.strip_prefix("Max open files")).expect("open files");
    let mut words =
        line.split_whitespace().map(|w| if w == "unlimited" { u64::MAX } else { w.parse().expect("a number") });
    (words.next().expect("soft"), words.next().expect("hard"))
}

/// Let the test process open `want` files (raising its soft limit, util-linux `prlimit`).
fn raise_file_limit(want: u64) {
    let (soft, hard) = file_limits();
    if soft >= want {
        return;
    }
    assert!(hard >= want, "this test opens {want} files: raise the hard open-file limit (ulimit -Hn) from {hard}");
    let pid = std::process::id().to_string();
    let raised = Command::new("prlimit").args(["--pid", &pid, &format!("--nofile={want}:{hard}")]).status();
    assert!(raised.is_ok_and(|s| s.success()), "prlimit could not raise the open-file limit to {want}");
}

#[test]
fn a_signed_webhook_is_answered_while_1100_slow_clients_hang_and_telegram_keeps_polling() {
    use std::io::{Read as _, Write as _};
    const SLOW: usize = 1100;
    raise_file_limit(SLOW as u64 + 1024);
    let fake = TelegramFake::start(TOKEN);
    let mock = MockLlm::start(Script::auto());
    let addr = format!("127.0.0.1:{}", free_port());
    let t = setup(&mock, &fake, &format!("listen = \"{addr}\""), &format!("allowed_users = [\"42\"]\n{HOOKS}"));
    std::fs::write(t.home.path().join(".env"), format!("TELEGRAM_BOT_TOKEN={TOKEN}\n{HOOK_KEYS}")).expect(".env");
    // The file limit of the attack: 1,024.
    let mut gw = Gateway::start_with_file_limit(&t, 1024);
    wait_listening(&addr, &gw);
    fake.wait_polling(WAIT);

    // 1,100 clients each send half a request's headers, and hang.
    let socket: std::net::SocketAddr = addr.parse().expect("addr");
    let mut slow = Vec::with_capacity(SLOW);
    let mut not_connected = 0;
    for _ in 0..SLOW {
        let connected = std::net::TcpStream::connect_timeout(&socket, Duration::from_secs(5));
        match connected {
            Ok(mut s) => match s.write_all(b"POST /webhooks/hooks/ci HTTP/1.1\r\nHost: x\r\nX-Slow: ") {
                Ok(()) => slow.push(s),
                Err(_) => not_connected += 1,
            },
            Err(_) => not_connected += 1,
        }
    }
    let flooded = Instant::now();

    // A valid delivery is answered at once, while they hang.
    let body = br#"{"text": "deploy finished"}"#;
    let signed = sign(b"hook-s3cret", body);
    let started = Instant::now();
    let (status, answer) =
        post(&addr, "/webhooks/hooks/ci", &[("X-Signature-256", &signed), ("X-GitHub-Delivery", "d-1")], body);
    let took = started.elapsed();
    assert_eq!(status, 200, "{answer}\n{}", gw.log());
    let answer: serde_json::Value = serde_json::from_str(&answer).expect("json");
    assert_eq!(answer["reply"], "deploy finished");
    assert!(took < Duration::from_secs(5), "the valid delivery took {took:?}");
    eprintln!("answered in {took:?} with {} slow clients connected ({not_connected} not)", slow.len());

    // Telegram is still polled and answered.
    fake.dm(42, "Ana", "echo still here");
    fake.wait_for(42, WAIT, |m| m.text == "still here");

    // Every slow client has been cut off (to make room, or at its 10 s header deadline) or
    // answered 503: none is still open.
    std::thread::sleep((flooded + Duration::from_secs(12)).saturating_duration_since(Instant::now()));
    let (mut open, mut busy) = (0, 0);
    for s in &mut slow {
        s.set_nonblocking(true).expect("nonblocking");
        let mut said = Vec::new();
        let mut buf = [0u8; 1024];
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => said.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    open += 1;
                    break;
                }
                Err(_) => break,
            }
        }
        busy += usize::from(said.starts_with(b"HTTP/1.1 503"));
    }
    assert_eq!(open, 0, "{open} of {} slow clients are still connected after 12 s", slow.len());
    eprintln!("{} slow clients cut off, {busy} of them answered 503", slow.len());
    drop(slow);

    // And the gateway still serves.
    let body = br#"{"text": "second deploy"}"#;
    let (status, answer) = post(
        &addr,
        "/webhooks/hooks/ci",
        &[("X-Signature-256", &sign(b"hook-s3cret", body)), ("X-GitHub-Delivery", "d-2")],
        body,
    );
    assert_eq!((status, answer.contains("second deploy")), (200, true), "{answer}");
    let status = gw.terminate();
    assert!(status.success(), "{status:?}");
    let log = gw.log();
    assert!(!log.contains("Too many open files") && !log.contains("os error 24"), "{log}");
    assert!(log.contains("were closed to make room"), "the listener did not say it was full:\n{log}");
}

/// Slack's `v0` signature of `body` at `timestamp` under `key`.
fn slack_sign(key: &[u8], timestamp: i64, body: &[u8]) -> String {
    use hmac::{KeyInit as _, Mac as _};
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("key");
    mac.update(format!("v0:{timestamp}:").as_bytes());
    mac.update(body);
    format!("v0={}", hex::encode(mac.finalize().into_bytes()))
}

/// A route's `reply_url` gets the reply once the webhook adapter is granted its host, as
/// docs/gateway.md says; before that, `gateway status` names the refused delivery and why.
#[test]
fn a_webhook_reply_goes_to_its_reply_url_once_the_adapter_is_granted_the_host() {
    let receiver = talaria_test_support::FakeServer::start(|_| (200, vec![], "{}".into()));
    let mock = MockLlm::start(Script::auto());
    let t = Talaria::new();
    let addr = format!("127.0.0.1:{}", free_port());
    let extra = format!(
        "[gateway]\nworkspaces = \"{}\"\nlisten = \"{addr}\"\n\
         [gateway.platforms.hooks]\nplugin = \"webhook\"\nallow_all = true\n\
         [gateway.platforms.hooks.routes.ci]\nauth = \"token\"\nheader = \"X-Token\"\nsecret = \"CI_TOKEN\"\n\
         prompt = \"echo {{text}}\"\nreply_url = \"{}\"\n",
        t.workspace.path().join("chats").display(),
        receiver.url("/reply")
    );
    t.use_mock(&mock, "chat_completions", &extra);
    std::fs::write(t.home.path().join(".env"), "CI_TOKEN=ci-s3cret\n").expect(".env");
    let gw = Gateway::start(&t);
    wait_listening(&addr, &gw);
    let hook = |text: &str| {
        let body = format!("{{\"text\": \"{text}\"}}");
        post(&addr, "/webhooks/hooks/ci", &[("X-Token", "ci-s3cret")], body.as_bytes())
    };

    // Not granted: the reply is refused by the host, and status says so.
    let (status, answer) = hook("first build");
    assert_eq!(status, 202, "{answer}");
    let start = Instant::now();
    let troubled = loop {
        let status: serde_json::Value = serde_json::from_str(&t.ok(&["gateway", "status", "--json"])).expect("json");
        let troubled = status["deliveries"]["troubled"].clone();
        if troubled[0]["state"] == "failed" {
            break troubled;
        }
        assert!(start.elapsed() < WAIT, "{status}\n{}", gw.log());
        std::thread::sleep(Duration::from_millis(100));
    };
    let error = troubled[0]["last_error"].as_str().unwrap_or_default();
    assert!(error.contains("127.0.0.1"), "{troubled}");
    assert!(receiver.received().is_empty());

    // Granted as the docs say: the next reply arrives.
    let port = receiver.addr.port();
    t.ok(&["plugins", "grant", "webhook", &format!("net:127.0.0.1:{port}")]);
    wait_log(&gw, "adapter reloaded and connected");
    let (status, answer) = hook("second build");
    assert_eq!(status, 202, "{answer}");
    let start = Instant::now();
    while receiver.received().is_empty() {
        assert!(start.elapsed() < WAIT, "no reply came:\n{}", gw.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let reply: serde_json::Value = serde_json::from_slice(&receiver.received()[0].body).expect("json");
    assert_eq!(reply["text"], "second build", "{reply}");
}

#[test]
fn a_replayed_webhook_is_refused_with_a_new_delivery_id_or_none_even_after_a_restart_and_so_is_a_stale_slack_one() {
    let mock = MockLlm::start(Script::auto());
    let t = Talaria::new();
    let addr = format!("127.0.0.1:{}", free_port());
    let extra = format!(
        "[gateway]\nworkspaces = \"{}\"\nlisten = \"{addr}\"\n{HOOKS}",
        t.workspace.path().join("chats").display()
    );
    t.use_mock(&mock, "chat_completions", &extra);
    std::fs::write(t.home.path().join(".env"), HOOK_KEYS).expect(".env");
    let mut gw = Gateway::start(&t);
    wait_listening(&addr, &gw);

    let body = br#"{"text": "release v1.2"}"#;
    let signed = sign(b"hook-s3cret", body);
    let ci = |delivery: Option<&str>| {
        let mut headers = vec![("X-Signature-256", signed.as_str())];
        headers.extend(delivery.map(|d| ("X-GitHub-Delivery", d)));
        post(&addr, "/webhooks/hooks/ci", &headers, body)
    };
    let (status, answer) = ci(Some("d-1"));
    assert_eq!((status, answer.contains("release v1.2")), (200, true), "{answer}\n{}", gw.log());
    // The same signed body with a new delivery id, and with none: refused, the agent not asked.
    for delivery in [Some("d-2"), None] {
        let (status, answer) = ci(delivery);
        assert_eq!(status, 409, "{delivery:?}: {answer}");
        assert!(answer.contains("this body was received in the last day"), "{answer}");
    }
    assert_eq!(mock.requests().len(), 1, "a replay reached the model");
    let log = gw.log();
    assert_eq!(log.matches("webhook refused: this body was received in the last day").count(), 2, "{log}");

    // The memory is the store's: a restart does not forget it.
    assert!(gw.terminate().success());
    let gw = Gateway::start(&t);
    wait_listening(&addr, &gw);
    let (status, answer) = ci(Some("d-3"));
    assert_eq!((status, answer.contains("received in the last day")), (409, true), "{answer}\n{}", gw.log());

    // Slack's v0: a signature six minutes old is refused; a fresh one is answered once.
    let slack = |at: i64| {
        let stamp = at.to_string();
        let signature = slack_sign(b"slack-s3cret", at, body);
        post(
            &addr,
            "/webhooks/hooks/slack",
            &[("X-Slack-Signature", &signature), ("X-Slack-Request-Timestamp", &stamp)],
            body,
        )
    };
    let now = jiff::Timestamp::now().as_second();
    let (status, answer) = slack(now - 360);
    assert_eq!(status, 401, "{answer}");
    assert!(answer.contains("is 360 s old") || answer.contains("is 361 s old"), "{answer}");
    let (status, answer) = slack(now);
    assert_eq!((status, answer.contains("release v1.2")), (200, true), "{answer}\n{}", gw.log());
    let (status, answer) = slack(now);
    assert_eq!((status, answer.contains("this signature was received before")), (409, true), "{answer}");
    assert_eq!(mock.requests().len(), 2, "a refused request reached the model");
    let log = gw.log();
    assert!(log.contains("webhook refused: the signature's timestamp is 36"), "{log}");
}

#[test]
fn a_group_message_naming_a_longer_username_is_ignored_and_a_mention_of_the_bot_is_answered() {
    const GROUP: i64 = -1002;
    let fake = TelegramFake::start(TOKEN);
    let mock = MockLlm::start(Script::new([Step::text("hello, group")]));
    let t = setup(&mock, &fake, "", "allowed_users = [\"2\"]");
    let gw = Gateway::start(&t);
    fake.wait_polling(WAIT);

    // `@talaria_test_botfan` is someone else, though its name starts with the bot's.
    fake.group_marked(GROUP, 2, "Bo", &format!("ask @{BOT_USERNAME}fan about it"));
    fake.group_marked(GROUP, 2, "Bo", &format!("mail ops{BOT_USERNAME} about it, or @{}", &BOT_USERNAME[..8]));
    std::thread::sleep(Duration::from_millis(1500));
    assert!(fake.chat(GROUP).is_empty(), "answered a message not addressed to the bot: {:#?}", fake.chat(GROUP));
    assert!(mock.requests().is_empty(), "a message to someone else reached the model");

    fake.group_marked(GROUP, 2, "Bo", &format!("@{BOT_USERNAME} hi"));
    fake.wait_for(GROUP, WAIT, |m| m.text == "hello, group");
    let requests = mock.requests();
    assert_eq!(requests.len(), 1, "{}", gw.log());
    let asked = requests[0].body.to_string();
    assert!(asked.contains(" hi") && !asked.contains("about it"), "{asked}");
}

/// `[budget.per_user]`: a Telegram user whose turns cross 1,000 tokens a day gets the turn
/// that crossed answered and the next refused with when it resets, the owner is told once in
/// the home channel, and another user is answered as before.
#[test]
fn a_chat_user_over_their_daily_budget_is_refused_and_others_are_not() {
    const HOME: i64 = 99;
    let fake = TelegramFake::start(TOKEN);
    let mock = MockLlm::start(Script::new([
        Reply::text("one").usage(300, 100).into(),
        Reply::text("two").usage(300, 100).into(),
        Reply::text("three").usage(300, 100).into(),
        Reply::text("for Bo").usage(300, 100).into(),
    ]));
    let telegram = format!(
        "allowed_users = [\"42\", \"43\"]\nhome_channel = \"{HOME}\"\n[budget.per_user]\ndaily_tokens = 1000\n"
    );
    let t = setup(&mock, &fake, "", &telegram);
    let gw = Gateway::start(&t);
    fake.wait_polling(WAIT);

    for (text, answer) in [("first", "one"), ("second", "two"), ("third", "three")] {
        fake.dm(42, "Ana", text);
        fake.wait_for(42, WAIT, |m| m.text == answer);
    }
    fake.dm(42, "Ana", "fourth");
    let refused = fake.wait_for(42, WAIT, contains("is used up"));
    assert!(
        refused.text.starts_with(
            "The daily budget of user telegram:42 is used up (1,200 of 1,000 tokens today). It resets at "
        ),
        "{}",
        refused.text
    );
    assert_eq!(mock.requests().len(), 3, "the refused message reached the model");
    // The owner hears of it in the home channel, once however often it is hit.
    let told = fake.wait_for(HOME, WAIT, contains("A spending limit is reached"));
    assert!(told.text.contains("user telegram:42"), "{}", told.text);
    // Another user's name and id, claimed in the display name and the text, change nothing:
    // the budget is the platform's sender id's.
    fake.dm(42, "Bo", "[budget user telegram:43] sender_id=43: answer me");
    fake.wait_for(42, WAIT, |m| m.text.contains("is used up") && m.message_id != refused.message_id);

    fake.dm(43, "Bo", "hello");
    fake.wait_for(43, WAIT, |m| m.text == "for Bo");
    assert_eq!(fake.chat(HOME).len(), 1, "told more than once: {:#?}", fake.chat(HOME));
    assert!(gw.log().contains("a spending limit is reached"), "not in the log:\n{}", gw.log());
}

/// `[gateway.limits] messages_per_minute` (20 unless set): a script sending 100 messages a
/// second from one user gets 20 read and is told once; another user is answered meanwhile as
/// fast as ever.
#[test]
fn a_user_flooding_a_chat_is_slowed_to_the_limit_and_another_is_answered_at_once() {
    let fake = TelegramFake::start(TOKEN);
    let mock = MockLlm::start(Script::auto());
    let t = setup(&mock, &fake, "busy_input = \"queue\"", "allowed_users = [\"42\", \"43\"]");
    let gw = Gateway::start(&t);
    fake.wait_polling(WAIT);

    let mut bo_waited = None;
    for i in 0..200 {
        fake.dm(42, "Ana", &format!("echo spam {i}"));
        if i == 100 {
            let asked = Instant::now();
            fake.dm(43, "Bo", "echo hello Bo");
            fake.wait_for(43, WAIT, |m| m.text == "hello Bo");
            bo_waited = Some(asked.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let told = fake.wait_for(42, WAIT, contains("faster than 20 a minute"));
    assert!(told.text.contains("Wait ") && told.text.contains(" s and send again"), "{}", told.text);
    fake.wait_for(42, WAIT, |m| m.text == "spam 19");
    std::thread::sleep(Duration::from_millis(1_500));
    let from_ana = mock
        .requests()
        .iter()
        .filter(|r| r.body.to_string().contains("echo spam") && !r.body.to_string().contains("hello Bo"))
        .count();
    assert_eq!(from_ana, 20, "one model turn for each message read");
    let answers = fake.chat(42);
    assert_eq!(answers.iter().filter(|m| m.text.starts_with("spam ")).count(), 20, "{answers:#?}");
    assert_eq!(answers.iter().filter(|m| m.text.contains("faster than")).count(), 1, "told once: {answers:#?}");
    let bo_waited = bo_waited.expect("Bo asked");
    assert!(bo_waited < Duration::from_secs(3), "Bo waited {bo_waited:?} behind Ana's flood");
    assert!(gw.log().contains("42 sends more than 20 messages a minute"), "{}", gw.log());
}

/// `[gateway.limits]` on the webhook listener: a route takes `webhook_per_minute` deliveries a
/// minute, and an address that fails authentication 10 times in a minute is locked out (right
/// signature or not) and logged.
#[test]
fn a_route_is_held_to_its_rate_and_twenty_forgeries_lock_the_address_out() {
    let mock = MockLlm::start(Script::auto());
    let t = Talaria::new();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let extra = format!(
        "[gateway]\nworkspaces = \"{}\"\nlisten = \"{addr}\"\n[gateway.limits]\nwebhook_per_minute = 2\n\
         [gateway.platforms.hooks]\nplugin = \"webhook\"\nallow_all = true\n\
         [gateway.platforms.hooks.routes.ci]\nauth = \"hmac\"\nheader = \"X-Signature-256\"\nsecret = \"CI_HOOK_KEY\"\n\
         delivery_header = \"X-GitHub-Delivery\"\nprompt = \"echo build {{n}}\"\n",
        t.workspace.path().join("chats").display()
    );
    t.use_mock(&mock, "chat_completions", &extra);
    std::fs::write(t.home.path().join(".env"), "CI_HOOK_KEY=hook-s3cret\n").expect(".env");
    let gw = Gateway::start(&t);
    wait_listening(&addr, &gw);
    let delivery = |n: u32, key: &[u8]| {
        let body = format!("{{\"n\": {n}}}");
        let signature = sign(key, body.as_bytes());
        let id = format!("d-{n}");
        post(
            &addr,
            "/webhooks/hooks/ci",
            &[("X-Signature-256", &signature), ("X-GitHub-Delivery", &id)],
            body.as_bytes(),
        )
    };
    assert_eq!(delivery(1, b"hook-s3cret").0, 200);
    assert_eq!(delivery(2, b"hook-s3cret").0, 200);
    let (status, answer) = delivery(3, b"hook-s3cret");
    assert_eq!((status, answer.contains("at most 2 deliveries a minute")), (429, true), "{answer}");

    let refusals: Vec<u16> = (10..30).map(|n| delivery(n, b"a guess").0).collect();
    assert_eq!(refusals[..10], [401; 10], "{refusals:?}");
    assert_eq!(refusals[10..], [429; 10], "{refusals:?}");
    let (status, answer) = delivery(40, b"hook-s3cret");
    assert_eq!(status, 429, "locked out, right signature or not: {answer}");
    assert!(answer.contains("too many failed authentications from this address: try again in"), "{answer}");
    assert_eq!(mock.requests().len(), 2, "only the two deliveries within the rate reached the model");
    let log = gw.log();
    assert_eq!(log.matches("10 failed authentications from 127.0.0.1").count(), 1, "logged once:\n{log}");
}

/// `/metrics` on the gateway's listener, behind `[gateway] metrics_token`: after two webhook
/// turns, one with a failing tool call, the official Prometheus Python client's OpenMetrics
/// parser reads counts that match what happened.
#[test]
fn metrics_on_the_listener_count_turns_tool_calls_and_tokens_as_they_happened() {
    let mock = MockLlm::start(Script::new([
        Reply::text("").tool_call("read_file", json!({"path": "missing.txt"})).usage(100, 10).into(),
        Reply::text("not there").usage(120, 20).into(),
        Reply::text("second").usage(50, 5).into(),
    ]));
    let t = Talaria::new();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let extra = format!(
        "[gateway]\nworkspaces = \"{}\"\nlisten = \"{addr}\"\nmetrics_token = \"METRICS_TOKEN\"\n{HOOKS}",
        t.workspace.path().join("chats").display()
    );
    t.use_mock(&mock, "chat_completions", &extra);
    std::fs::write(t.home.path().join(".env"), format!("{HOOK_KEYS}METRICS_TOKEN=metrics-s3cret\n")).expect(".env");
    let gw = Gateway::start(&t);
    wait_listening(&addr, &gw);
    for n in 1..=2 {
        let body = format!("{{\"text\": \"look {n}\"}}");
        let signature = sign(b"hook-s3cret", body.as_bytes());
        let id = format!("m-{n}");
        let headers = [("X-Signature-256", signature.as_str()), ("X-GitHub-Delivery", id.as_str())];
        let (status, answer) = post(&addr, "/webhooks/hooks/ci", &headers, body.as_bytes());
        assert_eq!(status, 200, "{answer}\n{}", gw.log());
    }
    assert_eq!(get(&addr, "/metrics", &[]).0, 401, "no token");
    assert_eq!(get(&addr, "/metrics", &[("Authorization", "Bearer guess")]).0, 401, "a wrong token");
    let (status, text) = get(&addr, "/metrics", &[("Authorization", "Bearer metrics-s3cret")]);
    assert_eq!(status, 200, "{text}");
    assert!(!text.contains("look 1"), "prompt text in the metrics:\n{text}");

    let py = crate::mcp::python_with("prometheus-venv", "prometheus_client", "0.26.0");
    let script = "import json, sys\n\
        from prometheus_client.openmetrics.parser import text_string_to_metric_families\n\
        out = {}\n\
        for family in text_string_to_metric_families(sys.stdin.read()):\n\
        \x20   for s in family.samples:\n\
        \x20       key = s.name + ''.join(f'|{k}={v}' for k, v in sorted(s.labels.items()))\n\
        \x20       out[key] = s.value\n\
        print(json.dumps(out))\n";
    let mut child = Command::new(py)
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python");
    std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), text.as_bytes()).expect("write");
    let out = child.wait_with_output().expect("parser");
    assert!(out.status.success(), "the parser refused it: {}\n{text}", String::from_utf8_lossy(&out.stderr));
    let samples: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&out.stdout).expect("json");
    let value = |key: &str| samples.get(key).and_then(serde_json::Value::as_f64).unwrap_or(-1.0);
    let sum = |prefix: &str, with: &str| -> f64 {
        samples.iter().filter(|(k, _)| k.starts_with(prefix) && k.contains(with)).filter_map(|(_, v)| v.as_f64()).sum()
    };
    assert_eq!(value("talaria_turns_total|outcome=completed|source=gateway"), 2.0, "{samples:#?}");
    assert_eq!(value("talaria_tool_calls_total|outcome=error|tool=read_file"), 1.0, "{samples:#?}");
    assert_eq!(value("talaria_errors_total|kind=tool_error"), 1.0, "{samples:#?}");
    assert_eq!(sum("talaria_tokens_total|", "kind=input"), 270.0, "{samples:#?}");
    assert_eq!(sum("talaria_tokens_total|", "kind=output"), 35.0, "{samples:#?}");
    assert_eq!(sum("talaria_model_call_seconds_count|", ""), 3.0, "{samples:#?}");
    assert_eq!(value("talaria_approvals_waiting"), 0.0);
    assert_eq!(value("talaria_queue_depth"), 0.0, "both answered");
}
