//! `talaria cron` as real processes, with the mock model, the Telegram double, and a controlled
//! clock (`cron tick --now`): nothing waits for wall-clock minutes.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_mock_llm::{MockLlm, Reply, Script, Step};
use talaria_store::Store;
use talaria_store::cron::Job;
use talaria_test_support::telegram::TelegramFake;

use crate::Talaria;
use crate::gateway::{Gateway, setup};

const TOKEN: &str = "123456:TEST-token-value";
const WAIT: Duration = Duration::from_secs(30);
/// Far enough ahead that every job added now is due.
const LATER: &str = "2099-01-01T00:00:00Z";

fn home_with(mock: &MockLlm, extra: &str) -> Talaria {
    let t = Talaria::new();
    t.use_mock(mock, "chat_completions", extra);
    t
}

/// `cron add SCHEDULE PROMPT ARGS...`: the new job's id.
fn add(t: &Talaria, schedule: &str, prompt: &str, args: &[&str]) -> String {
    let mut all = vec!["cron", "add", schedule, prompt];
    all.extend_from_slice(args);
    let out = t.ok(&all);
    out.lines()
        .find_map(|l| l.strip_prefix("saved job "))
        .and_then(|rest| rest.split(';').next())
        .unwrap_or_else(|| panic!("no job saved:\n{out}"))
        .to_string()
}

fn tick(t: &Talaria, now: &str) -> std::process::Output {
    t.run(&["cron", "tick", "--now", now])
}

fn history(t: &Talaria, id: &str) -> Vec<Value> {
    let out = t.ok(&["cron", "history", id, "--json"]);
    serde_json::from_str(&out).expect("json")
}

fn job(t: &Talaria, id: &str) -> Value {
    let out = t.ok(&["cron", "list", "--json"]);
    let jobs: Vec<Value> = serde_json::from_str(&out).expect("json");
    jobs.into_iter().find(|j| j["id"] == id).expect("listed")
}

/// The text the model was last given as a tool result.
fn last_tool_result(mock: &MockLlm) -> String {
    let requests = mock.requests();
    let messages = requests.last().expect("a request").body["messages"].as_array().cloned().unwrap_or_default();
    messages.iter().rev().find(|m| m["role"] == "tool").map(|m| m["content"].to_string()).unwrap_or_default()
}

#[test]
fn bad_schedules_are_refused_with_a_valid_example() {
    let t = Talaria::new();
    for (schedule, says) in [
        ("evry 2h", "cannot read \"evry 2h\""),
        ("61 * * * *", "Number out of bounds"),
        ("0 0 8 * * *", "has 6 fields"),
        ("every 10s", "shorter than a minute"),
        ("2020-01-01T08:00", "passed"),
    ] {
        let out = t.run(&["cron", "add", schedule, "check the build"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{schedule}: {err}");
        assert!(err.contains(says), "{schedule}: {err}");
        assert!(err.contains("every 2h") && err.contains("0 8 * * 1-5"), "no valid example for {schedule}: {err}");
    }
    let out = t.run(&["cron", "add", "0 8 * * *", "x", "--tz", "Mars/Olympus"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Mars/Olympus") && err.contains("Europe/Paris"), "{err}");
    assert!(t.ok(&["cron", "list"]).starts_with("no jobs"), "nothing was saved");
}

#[test]
fn next_runs_are_shown_before_saving_and_a_dry_run_saves_nothing() {
    let t = Talaria::new();
    let out = t.ok(&["cron", "add", "0 8 * * 1-5", "Summarise my inbox", "--tz", "Europe/Paris", "--dry-run"]);
    assert!(out.contains("on Monday, Tuesday, Wednesday, Thursday, and Friday (Europe/Paris)"), "{out}");
    let next = out.lines().find(|l| l.trim_start().starts_with("next")).expect("next runs");
    assert_eq!(next.matches(", ").count(), 2, "three next runs: {next}");
    assert!(t.ok(&["cron", "list"]).starts_with("no jobs"));
    // Piped and NO_COLOR-free: no escape codes either way.
    assert!(!out.contains('\u{1b}'), "{out:?}");
}

#[test]
fn two_tickers_racing_run_a_due_job_once() {
    let mock = MockLlm::start(Script::new([Reply::text("the build is green").paced(20).into()]).repeat_last(true));
    let t = home_with(&mock, "");
    let id = add(&t, "every 1h", "check the build", &[]);
    let spawn = || {
        Command::new(env!("CARGO_BIN_EXE_talaria"))
            .args(["cron", "tick", "--now", LATER])
            .current_dir(t.workspace.path())
            .env("TALARIA_HOME", t.home.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn")
    };
    let tickers: Vec<_> = (0..3).map(|_| spawn()).collect();
    let outs: Vec<_> = tickers.into_iter().map(|c| c.wait_with_output().expect("wait")).collect();
    for out in &outs {
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let ran: usize = outs.iter().map(|o| String::from_utf8_lossy(&o.stdout).matches("ran ").count()).sum();
    assert_eq!(ran, 1, "{outs:#?}");
    assert_eq!(mock.requests().len(), 1, "the model was asked more than once");
    let runs = history(&t, &id);
    assert_eq!(runs.len(), 1);
    assert_eq!((runs[0]["status"].as_str(), runs[0]["output"].as_str()), (Some("ok"), Some("the build is green")));
    // The answer is kept under the home.
    let delivery = runs[0]["delivery"].as_str().expect("delivery");
    let file = delivery.strip_prefix("local: ").expect("a local file");
    assert!(std::fs::read_to_string(file).expect("kept").contains("the build is green"));
    // The backlog collapsed: the next run is after the tick's time, and it is not due again then.
    assert!(job(&t, &id)["next_run_at"].as_str().expect("next") > LATER);
    let again = tick(&t, LATER);
    assert!(again.status.success() && again.stdout.is_empty(), "{again:?}");
}

#[test]
fn the_run_says_where_its_answer_goes_and_has_no_history() {
    let mock = MockLlm::start(Script::new([Step::text("one"), Step::text("two")]));
    let t = home_with(&mock, "");
    t.ok(&["chat", "-q", "remember: the password is swordfish"]);
    let id = add(&t, "every 1h", "check the build", &["--name", "build check"]);
    assert!(tick(&t, LATER).status.success());
    let requests = mock.requests();
    let messages = requests[1].body["messages"].as_array().expect("messages");
    let user: Vec<&str> =
        messages.iter().filter(|m| m["role"] == "user").filter_map(|m| m["content"].as_str()).collect();
    assert_eq!(user.len(), 1, "a fresh conversation: {user:?}");
    assert!(user[0].starts_with("[Scheduled job \"build check\" (every 1h)"), "{}", user[0]);
    assert!(user[0].contains("[SILENT]") && user[0].ends_with("\n\ncheck the build"), "{}", user[0]);
    assert!(!requests[1].body.to_string().contains("swordfish"), "the run saw another conversation");
    let sessions: Vec<Value> = serde_json::from_str(&t.ok(&["sessions", "list", "--json"])).expect("json");
    let sources: Vec<&str> = sessions.iter().filter_map(|s| s["source"].as_str()).collect();
    assert_eq!(sources.iter().filter(|s| **s == "cron").count(), 1, "{sources:?}");
    assert_eq!(history(&t, &id)[0]["status"], "ok");
}

#[test]
fn a_job_killed_mid_run_is_reported_and_not_run_again() {
    let mock = MockLlm::start(Script::new([Step::text("too late").delayed(20_000), Step::text("fine")]));
    let t = home_with(&mock, "");
    let id = add(&t, "every 1h", "check the build", &[]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_talaria"))
        .args(["cron", "tick", "--now", LATER])
        .current_dir(t.workspace.path())
        .env("TALARIA_HOME", t.home.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let start = Instant::now();
    while mock.requests().is_empty() {
        assert!(start.elapsed() < WAIT, "the run never asked the model");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("kill -9");
    child.wait().expect("reap");
    assert_eq!(history(&t, &id)[0]["status"], "running", "the store still thinks it runs");

    // The next tick finds it: reported, exit 1, and the missed time is not run again.
    let out = tick(&t, LATER);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("interrupted: talaria cron (pid") && err.contains("it is not run again"), "{err}");
    assert!(out.stdout.is_empty(), "something ran: {}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(mock.requests().len(), 1, "the interrupted run was run again");
    let runs = history(&t, &id);
    assert_eq!((runs.len(), runs[0]["status"].as_str()), (1, Some("error")));
    let listed = job(&t, &id);
    assert_eq!((listed["state"].as_str(), listed["last_status"].as_str()), (Some("scheduled"), Some("error")));
    assert!(listed["last_error"].as_str().is_some_and(|e| e.starts_with("interrupted: ")), "{listed}");
}

#[test]
fn a_jobs_dangerous_command_is_denied_unless_the_user_allowed_it() {
    let mock = MockLlm::start(Script::new([
        Step::tool_call("terminal", json!({"command": "rm -rf build"})),
        Step::text("tried"),
        Step::tool_call("terminal", json!({"command": "rm -rf build"})),
        Step::text("cleaned"),
    ]));
    let t = home_with(&mock, "");
    std::fs::create_dir(t.workspace.path().join("build")).expect("mkdir");
    let id = add(&t, "every 1h", "clean the build directory", &["--toolsets", "terminal"]);
    assert!(tick(&t, LATER).status.success());
    let refused = last_tool_result(&mock);
    assert!(
        refused.contains("`rm -rf build` needs approval (recursive delete) and no one is here to approve it"),
        "{refused}"
    );
    assert!(refused.contains("talaria cron edit JOB --allow rm-recursive"), "{refused}");
    assert!(t.workspace.path().join("build").exists(), "a denied command ran");

    // Allowing it needs the user's explicit yes.
    let out = t.run(&["cron", "edit", &id, "--allow", "rm-recursive"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("confirm it with --yes"));
    t.ok(&["cron", "edit", &id, "--allow", "rm-recursive", "--yes"]);
    let out = tick(&t, "2099-01-02T00:00:00Z");
    assert!(out.status.success(), "{out:?}");
    assert!(!t.workspace.path().join("build").exists(), "the allowed command did not run: {}", last_tool_result(&mock));
}

#[test]
fn the_cronjob_tool_is_not_offered_to_a_scheduled_run_and_refused_if_called() {
    let mock = MockLlm::start(Script::new([
        Step::tool_call("cronjob", json!({"action": "add", "schedule": "every 1h", "prompt": "spawn more"})),
        Step::text("could not"),
    ]));
    let t = home_with(&mock, "");
    add(&t, "every 1h", "schedule yourself again", &[]);
    assert!(tick(&t, LATER).status.success());
    let requests = mock.requests();
    let tools: Vec<String> = requests[0].body["tools"]
        .as_array()
        .map(|a| a.iter().filter_map(|t| t["function"]["name"].as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    assert!(!tools.is_empty() && !tools.contains(&"cronjob".to_string()), "{tools:?}");
    let result = last_tool_result(&mock);
    assert!(result.contains("unknown tool") || result.contains("cronjob;"), "{result}");
    let jobs: Vec<Value> = serde_json::from_str(&t.ok(&["cron", "list", "--json"])).expect("json");
    assert_eq!(jobs.len(), 1, "a run made a job: {jobs:#?}");
}

#[test]
fn the_cronjob_tool_needs_someone_to_confirm() {
    let mock = MockLlm::start(Script::new([
        Step::tool_call("cronjob", json!({"action": "add", "schedule": "every 1h", "prompt": "check the build"})),
        Step::text("noted"),
    ]));
    let t = home_with(&mock, "");
    t.ok(&["chat", "-q", "check the build every hour"]);
    assert!(last_tool_result(&mock).contains("nobody here can confirm a schedule"), "{}", last_tool_result(&mock));
    assert!(t.ok(&["cron", "list"]).starts_with("no jobs"));
}

#[test]
fn a_silent_answer_is_kept_and_not_delivered_and_others_reach_telegram_without_a_gateway() {
    let fake = TelegramFake::start(TOKEN);
    let mock =
        MockLlm::start(Script::new([Step::text("[SILENT] nothing new"), Step::text("**3 new mails** in inbox/")]));
    let t = setup(&mock, &fake, "", "home_channel = \"42\"");
    let quiet = add(&t, "every 1h", "anything new?", &["--deliver", "telegram:42"]);
    assert!(tick(&t, LATER).status.success());
    let runs = history(&t, &quiet);
    assert_eq!((runs[0]["status"].as_str(), runs[0]["delivery"].as_str()), (Some("ok"), Some("silent")));
    assert_eq!(runs[0]["output"], "[SILENT] nothing new");
    assert_eq!(fake.calls("sendMessage"), 0, "a silent answer was sent");

    t.ok(&["cron", "pause", &quiet]);
    let loud = add(&t, "every 1h", "summarise my inbox", &["--deliver", "telegram"]);
    let out = tick(&t, LATER);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let shown = fake.wait_for(42, WAIT, |m| m.text.contains("3 new mails"));
    assert_eq!(shown.parse_mode.as_deref(), Some("HTML"));
    assert!(shown.text.contains("<b>3 new mails</b>"), "{}", shown.text);
    let runs = history(&t, &loud);
    assert_eq!((runs[0]["status"].as_str(), runs[0]["delivery"].as_str()), (Some("ok"), Some("sent")));
}

#[test]
fn a_delivery_the_platform_refuses_marks_the_run() {
    let fake = TelegramFake::start(TOKEN);
    let mock = MockLlm::start(Script::new([Step::text("report")]));
    let t = setup(&mock, &fake, "", "");
    // Account `telegram` has no home channel: refused before it is saved.
    let out = t.run(&["cron", "add", "every 1h", "x", "--deliver", "telegram"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("home_channel = \"CHAT_ID\""));
    let out = t.run(&["cron", "add", "every 1h", "x", "--deliver", "slack:C1"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no account `slack` is configured (configured: telegram)"));
    // A chat the bot cannot write to: the platform refuses it for good.
    let blocked = format!("telegram:{}", talaria_test_support::telegram::BLOCKED_CHAT);
    let id = add(&t, "every 1h", "report", &["--deliver", &blocked]);
    let out = tick(&t, LATER);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    let runs = history(&t, &id);
    assert_eq!(runs[0]["status"], "delivery_failed", "{runs:#?}");
    assert_eq!(job(&t, &id)["last_status"], "delivery_failed");
    // `gateway status` names the failed delivery and what the platform said.
    let out = t.run(&["gateway", "status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.contains("failed after")).unwrap_or_default();
    assert!(line.contains(&format!("to telegram chat {}", talaria_test_support::telegram::BLOCKED_CHAT)), "{text}");
    assert!(line.contains("403 Forbidden: bot was blocked by the user"), "{text}");
    let out = t.run(&["gateway", "status", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let troubled = &status["deliveries"]["troubled"][0];
    assert_eq!(troubled["state"], "failed", "{status}");
    assert!(troubled["last_error"].as_str().is_some_and(|e| e.contains("403 Forbidden")), "{status}");
}

/// A job due when the gateway starts: written straight into the store (nothing else makes
/// one due now without waiting).
fn due_job(t: &Talaria, deliver: &str, prompt: &str) -> String {
    let store = Store::open(&t.home.path().join("state.db")).expect("store");
    let now = jiff::Timestamp::now().as_millisecond();
    let job = Job {
        name: "due".into(),
        prompt: prompt.into(),
        schedule_kind: "every".into(),
        schedule_expr: format!("PT1H@{}", jiff::Timestamp::now()),
        schedule_display: "every 1h".into(),
        deliver: deliver.into(),
        enabled: true,
        next_run_at: Some(now - 1_000),
        workspace: Some(t.ws().display().to_string()),
        creator: "user".into(),
        ..Job::default()
    };
    talaria_test_support::wait(store.cron_insert(&job)).expect("insert")
}

#[test]
fn the_gateway_runs_due_jobs_and_sends_their_answers_through_its_ledger() {
    let fake = TelegramFake::start(TOKEN);
    let mock = MockLlm::start(Script::new([Step::text("morning summary"), Step::text("ticked beside it")]));
    let t = setup(&mock, &fake, "", "home_channel = \"42\"");
    let id = due_job(&t, "telegram", "summarise");
    let gw = Gateway::start(&t);
    fake.wait_for(42, WAIT, |m| m.text == "morning summary");
    let start = Instant::now();
    while history(&t, &id)[0]["delivery"] != "sent" {
        assert!(start.elapsed() < WAIT, "{:#?}\n{}", history(&t, &id), gw.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    // `cron tick` beside a running gateway leaves the sending to it.
    t.ok(&["cron", "pause", &id]);
    let other = add(&t, "every 1h", "tick beside", &["--deliver", "telegram:42"]);
    let out = tick(&t, LATER);
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok, queued"), "{out:?}");
    fake.wait_for(42, WAIT, |m| m.text == "ticked beside it");
    assert_eq!(fake.chat(42).len(), 2, "{:#?}", fake.chat(42));
    let start = Instant::now();
    while history(&t, &other)[0]["delivery"] != "sent" {
        assert!(start.elapsed() < WAIT, "{:#?}", history(&t, &other));
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_admin_schedules_from_a_chat_and_the_answers_come_back_there() {
    let fake = TelegramFake::start(TOKEN);
    let mock = MockLlm::start(Script::new([
        Step::tool_call(
            "cronjob",
            json!({"action": "add", "schedule": "every 2h", "prompt": "check the build", "name": "build"}),
        ),
        Step::text("Scheduled."),
        Step::text("build is green"),
    ]));
    let t = setup(&mock, &fake, "", "allowed_users = [\"42\"]\nadmins = [\"42\"]");
    let gw = Gateway::start(&t);
    fake.wait_polling(WAIT);
    fake.dm(42, "Ana", "check the build every two hours");
    let ask = fake.wait_for(42, WAIT, |m| m.text.contains("Approval needed"));
    assert!(
        ask.text.contains("schedule") && ask.text.contains("every 2h") && ask.text.contains("check the build"),
        "{}",
        ask.text
    );
    let allow = ask.buttons.iter().find(|(label, _)| label == "Allow once").expect("Allow once").1.clone();
    fake.press(42, 42, "Ana", ask.message_id, &allow);
    fake.wait_for(42, WAIT, |m| m.text == "Scheduled.");
    let jobs: Vec<Value> = serde_json::from_str(&t.ok(&["cron", "list", "--json"])).expect("json");
    assert_eq!(jobs.len(), 1, "{}", gw.log());
    assert_eq!((jobs[0]["deliver"].as_str(), jobs[0]["origin"].as_str()), (Some("origin"), Some("telegram:42")));
    assert_eq!(jobs[0]["creator"], "chat:telegram:42");
    // Its runs get the chat's tools, not the owner's (no terminal), and never `cronjob`.
    let tools: Vec<&str> = jobs[0]["toolsets"].as_array().expect("toolsets").iter().filter_map(Value::as_str).collect();
    assert!(tools.contains(&"read_file") && tools.contains(&"clarify"), "{tools:?}");
    assert!(!tools.contains(&"terminal") && !tools.contains(&"cronjob"), "{tools:?}");
    // Its run answers in the chat it came from (ticked beside the gateway).
    let out = tick(&t, LATER);
    assert!(out.status.success(), "{out:?}");
    fake.wait_for(42, WAIT, |m| m.text == "build is green");
}

#[test]
fn a_run_past_its_timeout_is_stopped_and_reported() {
    let mock = MockLlm::start(Script::new([Step::text("too slow").delayed(15_000)]));
    let t = home_with(&mock, "");
    let id = add(&t, "every 1h", "check the build", &["--timeout", "1"]);
    let started = Instant::now();
    let out = tick(&t, LATER);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "the run was not stopped at its timeout");
    let runs = history(&t, &id);
    assert_eq!(runs[0]["status"], "error");
    assert_eq!(runs[0]["error"], "stopped after its timeout of 1 s");
}

#[test]
fn a_jobs_commands_stay_confined_unless_that_job_is_set_unconfined() {
    let outside = tempfile::tempdir().expect("outside");
    let marker = outside.path().join("marker.txt");
    std::fs::write(&marker, "outside the workspace\n").expect("marker");
    let read = json!({"command": format!("cat {}", marker.display())});
    let mock = MockLlm::start(Script::new([
        Step::tool_call("terminal", read.clone()),
        Step::text("looked"),
        Step::tool_call("terminal", read),
        Step::text("looked again"),
    ]));
    // The home runs commands unconfined; a scheduled run stays confined all the same.
    let unconfined = "[sandbox]\ncommands = \"unconfined\"\n";
    let t = home_with(&mock, unconfined);
    let id = add(&t, "every 1h", "look at the marker", &["--toolsets", "terminal"]);
    assert!(tick(&t, LATER).status.success());
    let confined = last_tool_result(&mock);
    assert!(confined.contains("No such file or directory"), "{confined}");
    assert!(!confined.contains("outside the workspace"), "{confined}");

    // Only the operator naming that very job runs it unconfined.
    t.use_mock(&mock, "chat_completions", &format!("{unconfined}[cron]\nunconfined_jobs = [\"{id}\"]\n"));
    assert!(tick(&t, "2099-01-02T00:00:00Z").status.success());
    let ran = last_tool_result(&mock);
    assert!(ran.contains("outside the workspace"), "{ran}");
}

/// A job's `[budget]` stops its next run, not the one that crosses it: that run ends with its
/// answer after its tool call; the next is refused before any model call, saying which limit
/// and when it resets; another job is not held back.
#[test]
fn a_jobs_budget_stops_its_next_run_not_the_one_that_crosses_it() {
    let todo = json!({"todos": [{"id": "1", "content": "sweep", "status": "pending"}]});
    let mock = MockLlm::start(Script::new([
        Reply::text("").tool_call("todo", todo).usage(700, 100).into(),
        Reply::text("all tidy").usage(700, 100).into(),
        Reply::text("the other job ran").usage(10, 5).into(),
    ]));
    let t = home_with(&mock, "[budget.per_job]\ndaily_tokens = 1000\n");
    let id = add(&t, "every 1h", "tidy up", &[]);
    assert!(tick(&t, LATER).status.success());
    let runs = history(&t, &id);
    assert_eq!((runs[0]["status"].as_str(), runs[0]["output"].as_str()), (Some("ok"), Some("all tidy")));
    assert_eq!(mock.requests().len(), 2, "the crossing run made both its calls");

    let out = tick(&t, "2099-01-01T01:30:00Z");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let runs = history(&t, &id);
    assert_eq!(runs[0]["status"], "error", "{runs:#?}");
    let error = runs[0]["error"].as_str().expect("error");
    assert!(
        error.starts_with(&format!(
            "The daily budget of job {id} is used up (1,600 of 1,000 tokens today). It resets at "
        )),
        "{error}"
    );
    assert_eq!(mock.requests().len(), 2, "a refused run calls no model");

    let other = add(&t, "every 1h", "something else", &[]);
    assert!(tick(&t, "2099-01-01T01:30:00Z").status.success());
    assert_eq!(history(&t, &other)[0]["output"], "the other job ran");

    // `talaria usage`: the two turns that ran (not the refused one), and each job's standing.
    let usage: Value = serde_json::from_str(&t.ok(&["usage", "--json"])).expect("json");
    assert_eq!(usage["by_source"]["cron"]["turns"], 2, "{usage:#}");
    assert_eq!(
        (usage["total"]["input_tokens"].as_u64(), usage["total"]["output_tokens"].as_u64()),
        (Some(1410), Some(205))
    );
    let standing = |job: &str| {
        usage["budget"].as_array().expect("budget").iter().find(|b| b["scope"] == format!("job {job}")).cloned()
    };
    let spent = standing(&id).expect("the job's standing");
    assert_eq!((spent["used"].as_str(), spent["reached"].as_bool()), (Some("1,600 tokens"), Some(true)), "{spent:#}");
    assert_eq!(spent["limit"], "1,000 tokens");
    let fresh = standing(&other).expect("the other job's standing");
    assert_eq!((fresh["used"].as_str(), fresh["reached"].as_bool()), (Some("15 tokens"), Some(false)));
    let text = t.ok(&["usage"]);
    assert!(text.contains("SOURCE") && text.contains(&format!("job {id}")) && text.contains("(reached)"), "{text}");
}
