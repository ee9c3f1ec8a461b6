//! How the loop sees tools: plugins through the [`ToolHost`] trait, plus what it needs to run a
//! batch of calls — argument parsing, previews, parallel safety and the result size cap.
//!
//! The agent never sees wasmtime: the CLI implements [`ToolHost`] over the plugin runtime.

use std::future::Future;
use std::path::{Component, Path, PathBuf};
use std::pin::Pin;

use serde_json::Value;
use talaria_protocol::{ToolCall, ToolError, ToolSpec};

/// A boxed future, for object-safe async traits.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a tool is told about its call.
#[derive(Debug, Clone, Default)]
pub struct ToolContext {
    pub session_id: String,
    pub call_id: String,
    /// The session's working directory.
    pub workspace: PathBuf,
}

/// The plugin tools the loop may call.
pub trait ToolHost: Send + Sync {
    /// Every tool the plugins provide (problems are the host's to report).
    fn specs(&self) -> BoxFuture<'_, Vec<ToolSpec>>;

    /// Run `name` with the model's raw JSON arguments. The result is text for the model.
    fn call<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a str,
        ctx: ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>>;
}

/// No plugins at all (tests, or a host that failed to start).
pub struct NoTools;

impl ToolHost for NoTools {
    fn specs(&self) -> BoxFuture<'_, Vec<ToolSpec>> {
        Box::pin(async { Vec::new() })
    }

    fn call<'a>(&'a self, name: &'a str, _: &'a str, _: ToolContext) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move { Err(ToolError::UnknownTool(name.to_string())) })
    }
}

/// Parse the model's arguments: a JSON object, or an error the model can act on.
pub fn parse_arguments(call: &ToolCall) -> Result<Value, ToolError> {
    let text = call.arguments.trim();
    let text = if text.is_empty() { "{}" } else { text };
    match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(other) => Err(ToolError::InvalidArgs(format!(
            "the arguments must be a JSON object, got {}; call {} again with an object matching its parameters",
            kind(&other),
            call.name
        ))),
        Err(e) => Err(ToolError::InvalidArgs(format!(
            "the arguments are not valid JSON ({e}); call {} again with a JSON object matching its parameters",
            call.name
        ))),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A one-line summary of a call for progress lines: the tool and its main argument.
pub fn preview(name: &str, args: Option<&Value>) -> String {
    const KEYS: [&str; 9] = ["command", "path", "url", "query", "pattern", "goal", "city", "question", "action"];
    let main = args.and_then(|a| KEYS.iter().find_map(|k| a.get(*k).and_then(Value::as_str)));
    match main {
        Some(m) => format!("{name} {}", one_line(m, 70)),
        None => name.to_string(),
    }
}

/// `text` on one line, cut to `max` chars with an ellipsis.
pub fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        return flat;
    }
    let mut cut: String = flat.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Tools that only read, and may run beside anything that does not write (reference §1).
const READ_ONLY: &[&str] = &["web_fetch", "web_search", "session_search", "get_weather", "read_file", "search_files"];
/// Tools whose `path` argument says what they touch.
const PATH_TOOLS: &[&str] = &["read_file", "search_files", "write_file", "patch"];
const WRITERS: &[&str] = &["write_file", "patch"];

/// Whether a batch may run in parallel: more than one call, every argument an object, nothing
/// interactive, and every tool either read-only or a file tool on a path no other call touches
/// (the same path or a parent counts as touching; a write conflicts with everything on it).
pub fn parallel_safe(calls: &[(&ToolCall, Option<&Value>)], workspace: &Path) -> bool {
    if calls.len() < 2 {
        return false;
    }
    let mut touched: Vec<(PathBuf, bool)> = Vec::new();
    for (call, args) in calls {
        let Some(args) = args else { return false };
        let name = call.name.as_str();
        if !READ_ONLY.contains(&name) && !WRITERS.contains(&name) {
            return false;
        }
        if PATH_TOOLS.contains(&name) {
            let path = args.get("path").and_then(Value::as_str).unwrap_or(".");
            let path = lexical(&workspace.join(path));
            let writes = WRITERS.contains(&name);
            if touched.iter().any(|(p, w)| (writes || *w) && (p.starts_with(&path) || path.starts_with(p))) {
                return false;
            }
            touched.push((path, writes));
        }
    }
    true
}

fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(name: &str, args: &str) -> ToolCall {
        ToolCall { id: "c".into(), name: name.into(), arguments: args.into() }
    }

    #[test]
    fn malformed_arguments_become_errors_the_model_can_act_on() {
        let e = parse_arguments(&call("read_file", "{\"path\": ")).expect_err("malformed");
        assert!(e.to_string().starts_with("invalid arguments: the arguments are not valid JSON"), "{e}");
        assert!(e.to_string().contains("call read_file again"), "{e}");
        let e = parse_arguments(&call("read_file", "[1]")).expect_err("array");
        assert!(e.to_string().contains("must be a JSON object, got an array"), "{e}");
        assert_eq!(parse_arguments(&call("todo", "")).expect("empty is {}"), json!({}));
    }

    #[test]
    fn batches_run_in_parallel_only_when_safe() {
        let ws = Path::new("/w");
        let batch = |calls: &[(&str, Value)]| {
            let owned: Vec<ToolCall> = calls.iter().map(|(n, a)| call(n, &a.to_string())).collect();
            let pairs: Vec<(&ToolCall, Option<&Value>)> =
                owned.iter().zip(calls.iter()).map(|(c, (_, a))| (c, Some(a))).collect();
            parallel_safe(&pairs, ws)
        };
        assert!(batch(&[("read_file", json!({"path": "a.rs"})), ("read_file", json!({"path": "b.rs"}))]));
        assert!(batch(&[("read_file", json!({"path": "a.rs"})), ("read_file", json!({"path": "a.rs"}))]));
        assert!(batch(&[("web_fetch", json!({"url": "x"})), ("write_file", json!({"path": "src/a.rs"}))]));
        assert!(!batch(&[("write_file", json!({"path": "src/a.rs"})), ("read_file", json!({"path": "src"}))]));
        assert!(!batch(&[("write_file", json!({"path": "./a"})), ("patch", json!({"path": "a"}))]));
        assert!(!batch(&[("terminal", json!({"command": "ls"})), ("read_file", json!({"path": "a"}))]));
        assert!(!batch(&[("clarify", json!({"question": "?"})), ("read_file", json!({"path": "a"}))]));
        assert!(!batch(&[("read_file", json!({"path": "a"}))]), "a single call runs inline");
    }

    #[test]
    fn previews_name_the_main_argument() {
        assert_eq!(preview("terminal", Some(&json!({"command": "cargo   test\n-q"}))), "terminal cargo test -q");
        assert_eq!(preview("todo", Some(&json!({"merge": true}))), "todo");
        assert_eq!(one_line(&"x".repeat(100), 10).chars().count(), 10);
    }
}
