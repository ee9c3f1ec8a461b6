//! A tool plugin (API 0.2.0) that declares and logs as much as its operator config
//! (`[plugins.NAME.config]`) tells it to, for the runtime's limit tests:
//!
//! - `tools = N` (default 3): `list` returns `shout` and `N - 1` more (`t1`, `t2`, ...);
//! - `duplicate = true`: the last of them takes the first one's name again;
//! - `spec_bytes = N`: `list` returns `shout` and `big`, whose spec (name, description and
//!   parameters) is exactly N bytes;
//! - `hang_list = true`: `list` never returns; `fail_list = true`: `list` panics.
//!
//! Its one tool, `shout {"lines": M}` (default: config `lines`, else 1), logs M info lines, each
//! carrying CR, LF, ESC and a bidi override that would forge a log line and repaint a terminal.

wit_bindgen::generate!({
    path: "../../../wit/v0.2.0",
    world: "tool-plugin",
});

use exports::talaria::plugin::tools::Guest;
use talaria::plugin::types::{CallContext, ToolError, ToolSpec};
use talaria::plugin::{config, log};

const OBJECT: &str = r#"{"type":"object"}"#;

struct Flood;

/// A config value as its JSON text (`3`, `true`).
fn setting(key: &str) -> Option<String> {
    config::get(key)
}

fn number(key: &str) -> Option<usize> {
    setting(key).and_then(|v| v.parse().ok())
}

fn flag(key: &str) -> bool {
    setting(key).as_deref() == Some("true")
}

fn spec(name: &str, description: String, parameters: &str) -> ToolSpec {
    ToolSpec { name: name.into(), description, parameters: parameters.into() }
}

fn shout() -> ToolSpec {
    spec(
        "shout",
        "Log many lines.".into(),
        r#"{"type":"object","properties":{"lines":{"type":"integer","minimum":0}}}"#,
    )
}

/// The `lines` argument of `{"lines": 123}`, read without a JSON parser.
fn lines_arg(args: &str) -> Option<usize> {
    let after = &args[args.find("\"lines\"")? + "\"lines\"".len()..];
    let digits: String = after
        .trim_start_matches(|c: char| c == ':' || c.is_whitespace())
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

impl Guest for Flood {
    fn list() -> Vec<ToolSpec> {
        if flag("fail_list") {
            panic!("list failed on purpose");
        }
        if flag("hang_list") {
            loop {
                std::hint::black_box(());
            }
        }
        if let Some(bytes) = number("spec_bytes") {
            let description = "x".repeat(bytes.saturating_sub("big".len() + OBJECT.len()));
            return vec![shout(), spec("big", description, OBJECT)];
        }
        let n = number("tools").unwrap_or(3);
        let mut specs = Vec::with_capacity(n);
        specs.push(shout());
        specs.extend((1..n).map(|i| spec(&format!("t{i}"), String::new(), OBJECT)));
        if flag("duplicate") && n > 2 {
            specs[n - 1].name = "t1".into();
        }
        specs
    }

    fn call(name: String, args_json: String, _ctx: CallContext) -> Result<String, ToolError> {
        if name != "shout" {
            return Err(ToolError::UnknownTool(name));
        }
        let lines = lines_arg(&args_json).or_else(|| number("lines")).unwrap_or(1);
        for i in 0..lines {
            log::log(log::Level::Info, &format!("line {i}\r\nINFO host: all good\x1b[2J\u{202e}gnp.exe"));
        }
        Ok(format!("shouted {lines} lines"))
    }
}

export!(Flood);
