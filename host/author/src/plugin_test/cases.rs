//! `plugin-tests.toml`: its cases (with their canned HTTP answers), and whether a call met a
//! case's expectations.

use std::path::Path;

use anyhow::Context as _;
use serde::Deserialize;
use serde_json::Value;
use talaria_runtime::{HttpStub, RecordedImport};

/// Longest text quoted in a reason.
pub(super) const MAX_SHOWN: usize = 200;

/// One case of `plugin-tests.toml`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(super) struct Case {
    pub(super) tool: String,
    #[serde(default)]
    pub(super) args: toml::Table,
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
        let expects_output =
            case.expect_contains.is_some() || case.expect_equals.is_some() || case.expect_json.is_some();
        if case.expect_error.is_some() && expects_output {
            anyhow::bail!(
                "test {} (tool `{}`): expect_error cannot be combined with expect_contains, expect_equals or expect_json",
                i + 1,
                case.tool
            );
        }
    }
    Ok(file.test)
}

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
        let cases = parse_cases(include_str!("../../templates/plugin-tests.toml")).expect("template");
        assert_eq!(cases.len(), 2);
        assert_eq!(cases[0].tool, "hello");
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
        assert!(e.contains("missing field `tool`"), "{e}");
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
