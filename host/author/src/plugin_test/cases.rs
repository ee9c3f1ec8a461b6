//! `plugin-tests.toml`: its cases (with their canned HTTP answers), and whether a call met a
//! case's expectations.

use std::path::Path;

use anyhow::Context as _;
use serde::Deserialize;
use serde_json::Value;
use talaria_core::runtime::{HttpStub, RecordedImport};

/// Longest text quoted in a reason.
pub(super) const MAX_SHOWN: usize = 200;

/// One case of `plugin-tests.toml`. Which kind of plugin it exercises follows from its keys
/// ([`Case::target`]); the expectations apply to the text (or JSON) the call gave.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(super) struct Case {
    /// A tool to call; with `event`, the tool of the event.
    pub(super) tool: Option<String>,
    /// The tool's arguments (a tool call, or a hook event's call).
    #[serde(default)]
    pub(super) args: toml::Table,

    /// Hooks: the event to send, by its manifest name.
    pub(super) event: Option<String>,
    /// post_tool_call / transform_tool_result: what the tool returned, and whether it worked.
    pub(super) result: Option<String>,
    pub(super) ok: Option<bool>,
    /// pre_llm_call / post_llm_call.
    pub(super) user_message: Option<String>,
    pub(super) assistant_response: Option<String>,
    /// on_session_end / on_session_finalize.
    pub(super) reason: Option<String>,
    /// What a hook must answer: proceed, block, require_approval, add_context, replace_result.
    pub(super) expect_decision: Option<String>,

    /// Memory providers: finished turns to sync first, in order.
    #[serde(default)]
    pub(super) turns: Vec<TurnToml>,
    /// The new message to recall for.
    pub(super) prefetch: Option<String>,
    /// Ask for the system-prompt block instead.
    #[serde(default)]
    pub(super) system_prompt: bool,

    /// Context engines: the history, a number of generated messages or a list of messages.
    pub(super) history: Option<toml::Value>,
    pub(super) prompt_tokens: Option<u64>,
    pub(super) context_length: Option<u64>,
    /// Call compress (forced), not only should_compress.
    #[serde(default)]
    pub(super) compress: bool,
    pub(super) focus: Option<String>,
    pub(super) expect_should_compress: Option<bool>,
    /// The compressed history's length.
    pub(super) expect_messages: Option<usize>,

    /// Adapters: a request to one of its webhook routes.
    pub(super) webhook: Option<WebhookToml>,
    /// Poll once.
    #[serde(default)]
    pub(super) poll: bool,
    /// Send a reply.
    pub(super) send: Option<SendToml>,

    pub(super) expect_contains: Option<String>,
    pub(super) expect_equals: Option<String>,
    pub(super) expect_json: Option<toml::Value>,
    pub(super) expect_error: Option<String>,
    #[serde(default)]
    pub(super) expect_imports: Vec<String>,
    #[serde(default)]
    pub(super) config: toml::Table,
    pub(super) llm_reply: Option<String>,
    /// Canned HTTP answers; with any, the case never reaches the network.
    #[serde(default)]
    pub(super) http: Vec<StubToml>,
}

/// What a case exercises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Target {
    Tool,
    Hook,
    Memory,
    Context,
    Adapter,
}

impl Target {
    /// The plugin kind (manifest name) that answers it.
    pub(super) fn kind(self) -> talaria_core::runtime::Kind {
        use talaria_core::runtime::Kind;
        match self {
            Target::Tool => Kind::Tool,
            Target::Hook => Kind::Hook,
            Target::Memory => Kind::Memory,
            Target::Context => Kind::ContextEngine,
            Target::Adapter => Kind::Platform,
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Target::Tool => "tool",
            Target::Hook => "hook",
            Target::Memory => "memory",
            Target::Context => "context",
            Target::Adapter => "adapter",
        }
    }
}

/// What each kind's case is told by, for the message when a case says nothing or too much.
const TARGET_KEYS: &str = "`tool` (a tool), `event` (a hook), `prefetch` or `system_prompt` (a memory provider), \
                           `history` (a context engine), or `webhook`, `poll` or `send` (an adapter)";

impl Case {
    /// What this case exercises.
    ///
    /// # Errors
    /// Its keys name no target, or several.
    pub(super) fn target(&self) -> Result<Target, String> {
        let mut found = Vec::new();
        if self.event.is_some() {
            found.push(Target::Hook);
        } else if self.tool.is_some() {
            found.push(Target::Tool);
        }
        if self.prefetch.is_some() || self.system_prompt || !self.turns.is_empty() {
            found.push(Target::Memory);
        }
        if self.history.is_some() {
            found.push(Target::Context);
        }
        if self.webhook.is_some() || self.poll || self.send.is_some() {
            found.push(Target::Adapter);
        }
        match found.as_slice() {
            [one] => Ok(*one),
            [] => Err(format!("it says nothing to do: give {TARGET_KEYS}")),
            many => {
                let names: Vec<&str> = many.iter().map(|t| t.name()).collect();
                Err(format!(
                    "it mixes the keys of {}: one case exercises one kind, so give only one of {TARGET_KEYS}",
                    names.join(" and ")
                ))
            }
        }
    }

    /// How the case is named in the report: the tool, the event, the memory or context call, or
    /// the adapter call.
    pub(super) fn label(&self) -> String {
        match self.target() {
            Ok(Target::Tool) => self.tool.clone().unwrap_or_default(),
            Ok(Target::Hook) => self.event.clone().unwrap_or_default(),
            Ok(Target::Memory) if self.system_prompt => "system_prompt".into(),
            Ok(Target::Memory) if self.prefetch.is_some() => "prefetch".into(),
            Ok(Target::Memory) => "sync_turn".into(),
            Ok(Target::Context) if self.compress => "compress".into(),
            Ok(Target::Context) => "should_compress".into(),
            Ok(Target::Adapter) if self.webhook.is_some() => "webhook".into(),
            Ok(Target::Adapter) if self.poll => "poll".into(),
            Ok(Target::Adapter) => "send".into(),
            Err(_) => "?".into(),
        }
    }
}

/// One finished turn a memory case syncs.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(super) struct TurnToml {
    pub(super) user: String,
    pub(super) assistant: String,
}

/// A request to an adapter's webhook route.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(super) struct WebhookToml {
    /// POST when absent.
    pub(super) method: Option<String>,
    /// The route's path, as the adapter sees it ("/" when absent).
    pub(super) path: Option<String>,
    #[serde(default)]
    pub(super) query: String,
    #[serde(default)]
    pub(super) headers: std::collections::BTreeMap<String, String>,
    /// The body as text, or `json` for a JSON body.
    pub(super) body: Option<String>,
    pub(super) json: Option<toml::Value>,
}

/// A reply an adapter sends.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(super) struct SendToml {
    pub(super) chat_id: String,
    pub(super) text: String,
    pub(super) thread_id: Option<String>,
    pub(super) reply_to: Option<String>,
}

/// One `[[test.http]]` answer.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(super) struct StubToml {
    pub(super) url: String,
    pub(super) method: Option<String>,
    pub(super) status: Option<u16>,
    #[serde(default)]
    pub(super) headers: std::collections::BTreeMap<String, String>,
    pub(super) body: Option<String>,
    pub(super) json: Option<toml::Value>,
}

impl StubToml {
    pub(super) fn to_stub(&self) -> anyhow::Result<HttpStub> {
        let mut headers: Vec<(String, String)> = self.headers.clone().into_iter().collect();
        let body = match (&self.body, &self.json) {
            (Some(_), Some(_)) => anyhow::bail!("a [[test.http]] answer for {} has both `body` and `json`", self.url),
            (Some(text), None) => text.clone().into_bytes(),
            (None, Some(value)) => {
                if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-type")) {
                    headers.push(("content-type".into(), "application/json".into()));
                }
                serde_json::to_vec(value)?
            }
            (None, None) => Vec::new(),
        };
        Ok(HttpStub {
            method: self.method.clone(),
            url: self.url.clone(),
            status: self.status.unwrap_or(200),
            headers,
            body,
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CasesFile {
    #[serde(default)]
    pub(super) test: Vec<Case>,
}

/// The cases in `path`; `None` when there is no such file.
pub(super) fn load_cases(path: &Path) -> anyhow::Result<Option<Vec<Case>>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    parse_cases(&text).map(Some).with_context(|| format!("{} is not valid", path.display()))
}

fn parse_cases(text: &str) -> anyhow::Result<Vec<Case>> {
    let file: CasesFile = toml::from_str(text).map_err(|e| anyhow::anyhow!("{}", e.to_string().trim_end()))?;
    for (i, case) in file.test.iter().enumerate() {
        let n = i + 1;
        let target = case.target().map_err(|why| anyhow::anyhow!("test {n}: {why}"))?;
        let label = case.label();
        let expects_output =
            case.expect_contains.is_some() || case.expect_equals.is_some() || case.expect_json.is_some();
        if case.expect_error.is_some() && expects_output {
            anyhow::bail!(
                "test {n} ({} `{label}`): expect_error cannot be combined with expect_contains, expect_equals or expect_json",
                target.name()
            );
        }
        let misplaced = |key: &str, wanted: Target| {
            anyhow::anyhow!("test {n} ({} `{label}`): `{key}` belongs to {} cases", target.name(), wanted.name())
        };
        if case.expect_decision.is_some() && target != Target::Hook {
            return Err(misplaced("expect_decision", Target::Hook));
        }
        if (case.expect_should_compress.is_some() || case.expect_messages.is_some()) && target != Target::Context {
            return Err(misplaced("expect_should_compress / expect_messages", Target::Context));
        }
        if case.expect_messages.is_some() && !case.compress {
            anyhow::bail!("test {n} (context `{label}`): `expect_messages` needs `compress = true`");
        }
        if let Some(decision) = &case.expect_decision
            && !DECISIONS.contains(&decision.as_str())
        {
            anyhow::bail!(
                "test {n} (hook `{label}`): expect_decision = {decision:?} is not one of {}",
                DECISIONS.join(", ")
            );
        }
        if target == Target::Hook {
            let event = case.event.as_deref().unwrap_or_default();
            if talaria_protocol::HookKind::parse(event).is_none() {
                let names: Vec<&str> = talaria_protocol::HookKind::ALL.iter().map(|k| k.name()).collect();
                anyhow::bail!("test {n}: event = {event:?} is not an event; use one of {}", names.join(", "));
            }
        }
        if let Some(hook) = &case.webhook
            && hook.body.is_some()
            && hook.json.is_some()
        {
            anyhow::bail!("test {n} (adapter `webhook`): give the webhook a `body` or `json`, not both");
        }
    }
    Ok(file.test)
}

/// What a hook may answer, as `expect_decision` names it.
pub(super) const DECISIONS: [&str; 5] = ["proceed", "block", "require_approval", "add_context", "replace_result"];

/// Why `case` failed, given what the call gave and which imports it made; empty if it passed.
pub(super) fn check(case: &Case, result: &Result<String, String>, imports: &[RecordedImport]) -> Vec<String> {
    let mut reasons = Vec::new();
    match (result, &case.expect_error) {
        (Ok(output), Some(wanted)) => {
            reasons.push(format!("expected an error containing {wanted:?}, but the call succeeded: {}", shown(output)));
        }
        (Err(e), Some(wanted)) if !e.contains(wanted.as_str()) => {
            reasons.push(format!("expected an error containing {wanted:?}, got: {}", whole(e)));
        }
        (Err(_), Some(_)) => {}
        (Err(e), None) => reasons.push(format!("the call failed: {}", whole(e))),
        (Ok(output), None) => {
            if let Some(wanted) = &case.expect_contains
                && !output.contains(wanted.as_str())
            {
                reasons.push(format!("expected output containing {wanted:?}, got {}", shown(output)));
            }
            if let Some(wanted) = &case.expect_equals
                && output != wanted
            {
                reasons.push(format!("expected output {}, got {}", shown(wanted), shown(output)));
            }
            if let Some(wanted) = &case.expect_json {
                let wanted = serde_json::to_value(wanted).unwrap_or(Value::Null);
                match serde_json::from_str::<Value>(output) {
                    Err(e) => reasons.push(format!("expected JSON output, got {} ({e})", shown(output))),
                    Ok(got) => {
                        if let Some(why) = json_mismatch(&wanted, &got, "") {
                            reasons.push(format!("JSON output does not match: {why}"));
                        }
                    }
                }
            }
        }
    }
    let lines: Vec<String> = imports.iter().map(ToString::to_string).collect();
    for wanted in &case.expect_imports {
        if !lines.iter().any(|l| l.starts_with(wanted.as_str())) {
            let made = if lines.is_empty() { "none were made".to_string() } else { "see the calls below".to_string() };
            reasons.push(format!("expected a host import call starting with {wanted:?}; {made}"));
        }
    }
    reasons
}

/// Where `got` differs from `wanted`: objects need `wanted`'s keys (others may be there too),
/// arrays the same length and items, numbers the same value, everything else equality.
fn json_mismatch(wanted: &Value, got: &Value, at: &str) -> Option<String> {
    let here = if at.is_empty() { "the top level".to_string() } else { format!("`{at}`") };
    match (wanted, got) {
        (Value::Object(w), Value::Object(g)) => w.iter().find_map(|(key, wv)| {
            let path = if at.is_empty() { key.clone() } else { format!("{at}.{key}") };
            match g.get(key) {
                Some(gv) => json_mismatch(wv, gv, &path),
                None => Some(format!("no key `{path}`")),
            }
        }),
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            w.iter().zip(g).enumerate().find_map(|(i, (wv, gv))| json_mismatch(wv, gv, &format!("{at}[{i}]")))
        }
        (Value::Number(w), Value::Number(g)) if w.as_f64() == g.as_f64() => None,
        _ if wanted == got => None,
        _ => Some(format!("at {here} expected {wanted}, got {}", clip(&got.to_string(), MAX_SHOWN))),
    }
}

/// Text in a reason: quoted, cut (a tool's output may be long).
fn shown(text: &str) -> String {
    format!("{:?}", clip(text, MAX_SHOWN))
}

/// An error in a reason: quoted and whole, since its end is often the hint that fixes it.
fn whole(error: &str) -> String {
    format!("{error:?}")
}

pub(super) fn clip(text: &str, max: usize) -> String {
    if text.chars().count() > max {
        format!("{}…", text.chars().take(max).collect::<String>())
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_stubs_take_a_body_or_json_never_both() {
        let stub =
            |extra: &str| -> StubToml { toml::from_str(&format!("url = \"https://x/*\"\n{extra}")).expect("stub") };
        let json = stub("json = { a = 1 }").to_stub().expect("json");
        assert_eq!((json.status, json.body.as_slice()), (200, &b"{\"a\":1}"[..]));
        assert!(json.headers.contains(&("content-type".into(), "application/json".into())));
        let text = stub("body = \"hi\"\nstatus = 404\nmethod = \"POST\"").to_stub().expect("body");
        assert_eq!((text.status, text.body.as_slice(), text.method.as_deref()), (404, &b"hi"[..], Some("POST")));
        let err = stub("body = \"x\"\njson = 1").to_stub().expect_err("both");
        assert!(err.to_string().contains("has both `body` and `json`"), "{err}");
        assert!(toml::from_str::<StubToml>("url = \"x\"\nbogus = 1").is_err(), "unknown keys are refused");
    }

    fn case(toml: &str) -> Case {
        parse_cases(&format!("[[test]]\ntool = \"t\"\n{toml}")).expect("parses").remove(0)
    }

    fn import(interface: &str, function: &str, summary: &str, outcome: Option<&str>) -> RecordedImport {
        RecordedImport {
            plugin: "p".into(),
            interface: interface.into(),
            function: function.into(),
            summary: summary.into(),
            outcome: outcome.map(str::to_string),
        }
    }

    fn ok(text: &str) -> Result<String, String> {
        Ok(text.to_string())
    }

    #[test]
    fn an_error_is_shown_whole_and_an_output_cut() {
        let hint = "grant it: `talaria plugins grant p net:api.example.com`";
        let error = format!("{} {hint}", "x".repeat(300));
        let reasons = check(&case("expect_contains = \"ok\""), &Err(error), &[]);
        assert!(reasons[0].ends_with(&format!("{hint}\"")), "{reasons:?}");
        let reasons = check(&case("expect_contains = \"ok\""), &ok(&"y".repeat(500)), &[]);
        assert!(reasons[0].ends_with("…\""), "{reasons:?}");
    }

    #[test]
    fn the_template_parses() {
        let cases = parse_cases(include_str!("../../templates/tool/plugin-tests.toml")).expect("template");
        assert_eq!(cases.len(), 2);
        assert_eq!(cases[0].tool.as_deref(), Some("hello"));
        assert_eq!(cases[0].args.get("name").and_then(|v| v.as_str()), Some("Ada"));
        assert_eq!(cases[0].expect_contains.as_deref(), Some("Hello, Ada"));
        assert_eq!(cases[1].expect_error.as_deref(), Some("name"));
    }

    #[test]
    fn every_key_parses_and_args_default_to_an_empty_object() {
        let c = case(
            "expect_contains = \"a\"\nexpect_equals = \"ab\"\nexpect_json = { k = 1 }\nexpect_imports = [\"log\"]\nconfig = { units = \"metric\" }\nllm_reply = \"yes\"",
        );
        assert!(c.args.is_empty());
        assert_eq!(c.expect_imports, ["log"]);
        assert_eq!(c.config.get("units").and_then(|v| v.as_str()), Some("metric"));
        assert_eq!(c.llm_reply.as_deref(), Some("yes"));
        assert!(parse_cases("").expect("empty").is_empty());
    }

    #[test]
    fn an_unknown_key_is_named() {
        let e = parse_cases("[[test]]\ntool = \"t\"\nexpect_contain = \"x\"\n").expect_err("refused").to_string();
        assert!(e.contains("unknown field `expect_contain`"), "{e}");
        let e = parse_cases("[[tests]]\ntool = \"t\"\n").expect_err("refused").to_string();
        assert!(e.contains("unknown field `tests`"), "{e}");
        let e = parse_cases("[[test]]\nargs = {}\n").expect_err("refused").to_string();
        assert!(e.starts_with("test 1: it says nothing to do: give `tool` (a tool), `event` (a hook)"), "{e}");
    }

    #[test]
    fn each_kind_is_told_by_its_keys_and_one_case_is_one_kind() {
        let target = |toml: &str| parse_cases(&format!("[[test]]\n{toml}")).map(|mut c| c.remove(0).target());
        assert_eq!(target("tool = \"t\"").expect("tool"), Ok(Target::Tool));
        assert_eq!(target("event = \"pre_tool_call\"\ntool = \"terminal\"").expect("hook"), Ok(Target::Hook));
        assert_eq!(target("prefetch = \"q\"").expect("memory"), Ok(Target::Memory));
        assert_eq!(target("system_prompt = true").expect("memory"), Ok(Target::Memory));
        assert_eq!(target("history = 4").expect("context"), Ok(Target::Context));
        assert_eq!(target("poll = true").expect("adapter"), Ok(Target::Adapter));
        assert_eq!(target("send = { chat_id = \"c\", text = \"t\" }").expect("adapter"), Ok(Target::Adapter));
        let e = target("tool = \"t\"\nprefetch = \"q\"").expect_err("mixed").to_string();
        assert!(e.starts_with("test 1: it mixes the keys of tool and memory: one case exercises one kind"), "{e}");
        let e = target("event = \"before_tool\"").expect_err("bad event").to_string();
        assert!(
            e.starts_with("test 1: event = \"before_tool\" is not an event; use one of pre_tool_call, post_tool_call"),
            "{e}"
        );
        let e = target("event = \"pre_tool_call\"\nexpect_decision = \"deny\"").expect_err("bad decision").to_string();
        assert_eq!(
            e,
            "test 1 (hook `pre_tool_call`): expect_decision = \"deny\" is not one of proceed, block, require_approval, add_context, replace_result"
        );
        let e = target("tool = \"t\"\nexpect_decision = \"block\"").expect_err("misplaced").to_string();
        assert_eq!(e, "test 1 (tool `t`): `expect_decision` belongs to hook cases");
        let e = target("history = 4\nexpect_messages = 2").expect_err("no compress").to_string();
        assert_eq!(e, "test 1 (context `should_compress`): `expect_messages` needs `compress = true`");
    }

    #[test]
    fn every_templates_cases_parse() {
        for text in [
            include_str!("../../templates/memory/plugin-tests.toml"),
            include_str!("../../templates/context/plugin-tests.toml"),
            include_str!("../../templates/hook/plugin-tests.toml"),
            include_str!("../../templates/adapter/plugin-tests.toml"),
        ] {
            let cases = parse_cases(text).expect("parses");
            assert!(cases.len() >= 2);
        }
    }

    #[test]
    fn an_error_and_an_output_cannot_both_be_expected() {
        let e = parse_cases(
            "[[test]]\ntool = \"t\"\n[[test]]\ntool = \"u\"\nexpect_error = \"x\"\nexpect_contains = \"y\"\n",
        )
        .expect_err("refused")
        .to_string();
        assert_eq!(
            e,
            "test 2 (tool `u`): expect_error cannot be combined with expect_contains, expect_equals or expect_json"
        );
    }

    #[test]
    fn no_expectation_means_the_call_must_succeed() {
        let c = case("");
        assert!(check(&c, &ok("anything"), &[]).is_empty());
        assert_eq!(check(&c, &Err("boom".into()), &[]), [r#"the call failed: "boom""#]);
    }

    #[test]
    fn output_expectations() {
        let c = case("expect_contains = \"Ada\"");
        assert!(check(&c, &ok("Hello, Ada"), &[]).is_empty());
        assert_eq!(check(&c, &ok("Hello, Bob"), &[]), [r#"expected output containing "Ada", got "Hello, Bob""#]);
        let c = case("expect_equals = \"x\\n\"");
        assert!(check(&c, &ok("x\n"), &[]).is_empty());
        assert_eq!(check(&c, &ok("x"), &[]), [r#"expected output "x\n", got "x""#]);
        let long = "y".repeat(500);
        assert!(check(&case("expect_equals = \"x\""), &ok(&long), &[])[0].ends_with("…\""));
    }

    #[test]
    fn json_expectations_match_a_subset() {
        let c = case("expect_json = { greeting = \"hi\", n = 2, nested = { ok = true }, list = [1, \"a\"] }");
        let got = r#"{"greeting":"hi","n":2.0,"nested":{"ok":true,"more":1},"list":[1,"a"],"extra":null}"#;
        assert!(check(&c, &ok(got), &[]).is_empty());
        let got = r#"{"greeting":"hi","n":2,"nested":{"ok":false},"list":[1,"a"]}"#;
        assert_eq!(check(&c, &ok(got), &[]), ["JSON output does not match: at `nested.ok` expected true, got false"]);
        let got = r#"{"greeting":"hi","n":2,"nested":{"ok":true},"list":[1]}"#;
        assert_eq!(check(&c, &ok(got), &[]), [r#"JSON output does not match: at `list` expected [1,"a"], got [1]"#]);
        assert_eq!(check(&c, &ok("{}"), &[]), ["JSON output does not match: no key `greeting`"]);
        let e = check(&c, &ok("not json"), &[]);
        assert!(e[0].starts_with(r#"expected JSON output, got "not json" (expected ident"#), "{e:?}");
    }

    #[test]
    fn error_expectations() {
        let c = case("expect_error = \"name\"");
        assert!(check(&c, &Err("invalid arguments: name is empty".into()), &[]).is_empty());
        assert_eq!(check(&c, &Err("boom".into()), &[]), [r#"expected an error containing "name", got: "boom""#]);
        assert_eq!(
            check(&c, &ok("Hello, !"), &[]),
            [r#"expected an error containing "name", but the call succeeded: "Hello, !""#]
        );
    }

    #[test]
    fn import_expectations_match_recorded_lines_by_prefix() {
        let made =
            [import("log", "info", "\"greeting Ada\"", None), import("kv", "get", "x", Some("denied: no kv grant"))];
        let c = case("expect_imports = [\"log\", \"log info\", \"kv.get x -> denied\"]");
        assert!(check(&c, &ok(""), &made).is_empty());
        let c = case("expect_imports = [\"kv.set\"]");
        assert_eq!(
            check(&c, &ok(""), &made),
            [r#"expected a host import call starting with "kv.set"; see the calls below"#]
        );
        assert_eq!(check(&c, &ok(""), &[]), [r#"expected a host import call starting with "kv.set"; none were made"#]);
        // Checked whether the call succeeded or not.
        assert_eq!(check(&c, &Err("x".into()), &[]).len(), 2);
    }
}
