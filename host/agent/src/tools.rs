//! What the loop needs to run a batch of tool calls: argument parsing, previews, parallel
//! safety and the result size cap. The tools themselves are handlers in one
//! [`Registry`](crate::Registry), whatever their kind — the agent's own tools, plugin tools, MCP
//! servers' tools and an editor's overlays (agent/registry.rs, the loop's own).
//!
//! Every call goes through the same stages whichever handler runs it (see `agent/calls.rs`):
//! the arguments are parsed once into a [`ToolContext`], then hooks, approval, checkpoint, the
//! handler, result hooks, the cap (with the rest spilled to a file), and events.
//!
//! The agent never sees wasmtime: `talaria-core` gives it the plugins and MCP servers as
//! [`ToolSource`](crate::ToolSource)s, and a front end's tools as a
//! [`ToolOverlay`](crate::ToolOverlay).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;

use serde_json::Value;
pub use talaria_protocol::{Attached, ToolContext};
use talaria_protocol::{FileChange, ToolAnnotations, ToolCall, ToolError};

/// A boxed future, for object-safe async traits.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A result too long for the conversation, saved whole ([`spill`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spilled {
    /// What the model gets instead: the start of the result and where the rest is.
    pub text: String,
    /// Where the whole result was saved (`None`: it could not be).
    pub saved: Option<PathBuf>,
    /// Bytes of the result the preview keeps.
    pub head_len: usize,
}

/// Save `text`, the result of call `call_id` in session `session_id`, as
/// `home/results/SESSION/CALL.txt`, and give the model its first `preview` characters and the
/// path.
pub fn spill(home: &Path, session_id: &str, call_id: &str, text: &str, preview: usize) -> Spilled {
    let dir = home.join("results").join(file_safe(session_id));
    let path = dir.join(format!("{}.txt", file_safe(call_id)));
    let written = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, text));
    let len = text.chars().count();
    let head: String = text.chars().take(preview).collect();
    let note = match &written {
        Ok(()) => format!("the full result ({len} chars) was saved to {}", path.display()),
        Err(e) => format!("the full result ({len} chars) could not be saved ({e})"),
    };
    Spilled {
        text: format!(
            "{head}\n\n[output cut after {} of {len} chars: {note}. Ask for less at a time — a narrower query, a line range, or a filter.]",
            head.chars().count()
        ),
        saved: written.ok().map(|()| path),
        head_len: head.len(),
    }
}

/// An id as a file name: letters, digits, `_` and `-` (others become `_`), at most 80.
fn file_safe(id: &str) -> String {
    id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).take(80).collect()
}

/// Parse the model's arguments: a JSON object, or an error the model can act on.
pub fn parse_arguments(call: &ToolCall) -> Result<Value, ToolError> {
    match serde_json::from_str::<Value>(talaria_protocol::arguments_or_empty(&call.arguments)) {
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

/// Whether a batch may run in parallel: more than one call, every argument an object, and
/// every tool one whose [`ToolAnnotations`] allow it (it only reads, or only touches the paths
/// its arguments name) on paths no other call writes (the same path or a parent counts as
/// touching; a write conflicts with everything on it). A tool the loop has no spec for runs
/// alone.
pub fn parallel_safe(calls: &[(&ToolCall, Option<&Value>, Option<&ToolAnnotations>)], workspace: &Path) -> bool {
    if calls.len() < 2 {
        return false;
    }
    let mut touched: Vec<(PathBuf, bool)> = Vec::new();
    for (_, args, annotations) in calls {
        let (Some(args), Some(a)) = (args, annotations) else { return false };
        if !a.may_run_beside_others() {
            return false;
        }
        let writes = !a.read_only;
        for path in a.touched(args, workspace) {
            if touched.iter().any(|(p, w)| (writes || *w) && (p.starts_with(&path) || path.starts_with(p))) {
                return false;
            }
            touched.push((path, writes));
        }
    }
    true
}

/// Largest file (in bytes) whose text a [`Snapshot`] keeps.
pub const SNAPSHOT_MAX_BYTES: u64 = 256 * 1024;

/// The workspace files a writing call may change, read before it runs, to report what it
/// changed ([`FileChange`]) once it is done. Only tools annotated as writing the paths their
/// arguments name are watched, only text files up to [`SNAPSHOT_MAX_BYTES`], and only below the
/// workspace: a path that leaves it (absolute elsewhere, `..`, or a link pointing out) is not
/// read, so a model cannot make the host read a file a tool would have refused.
#[derive(Debug, Default)]
pub struct Snapshot {
    root: Option<talaria_beneath::Root>,
    workspace: PathBuf,
    files: Vec<(PathBuf, Option<String>)>,
}

impl Snapshot {
    /// Read what a call of a tool annotated `a` with `args` may write.
    pub fn before(a: &ToolAnnotations, args: &Value, workspace: &Path) -> Self {
        if a.read_only || a.paths.is_empty() {
            return Self::default();
        }
        let Ok(root) = talaria_beneath::Root::open(workspace) else { return Self::default() };
        let mut files = Vec::new();
        for path in a.touched(args, workspace) {
            let Ok(rel) = path.strip_prefix(workspace) else { continue };
            if rel.as_os_str().is_empty() || files.iter().any(|(r, _)| r == rel) {
                continue;
            }
            match read_text(&root, rel) {
                Ok(text) => files.push((rel.to_path_buf(), text)),
                Err(()) => continue,
            }
        }
        Self { root: Some(root), workspace: workspace.to_path_buf(), files }
    }

    /// The files whose text differs now.
    pub fn changes(&self) -> Vec<FileChange> {
        let Some(root) = &self.root else { return Vec::new() };
        self.files
            .iter()
            .filter_map(|(rel, before)| {
                let after = read_text(root, rel).ok()?;
                (after != *before).then(|| FileChange {
                    path: self.workspace.join(rel).to_string_lossy().into_owned(),
                    before: before.clone(),
                    after,
                })
            })
            .collect()
    }
}

/// A file's text: `Ok(None)` when it does not exist; `Err` when it cannot be shown as text (too
/// large, not UTF-8, not a regular file, leading out).
fn read_text(root: &talaria_beneath::Root, rel: &Path) -> Result<Option<String>, ()> {
    match root.read(rel, SNAPSHOT_MAX_BYTES) {
        Ok(None) => Ok(None),
        Ok(Some(bytes)) => String::from_utf8(bytes).map(Some).map_err(|_| ()),
        Err(_) => Err(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(name: &str, args: &str) -> ToolCall {
        ToolCall::new("c", name, args)
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
        let read = ToolAnnotations::reads(&["path"]);
        let write = ToolAnnotations::writes(&["path"]);
        let fetch = ToolAnnotations::fetches();
        let shell = ToolAnnotations::default();
        let batch = |calls: &[(&ToolAnnotations, Value)]| {
            let owned: Vec<ToolCall> = calls.iter().map(|(_, a)| call("t", &a.to_string())).collect();
            let rows: Vec<(&ToolCall, Option<&Value>, Option<&ToolAnnotations>)> =
                owned.iter().zip(calls.iter()).map(|(c, (n, a))| (c, Some(a), Some(*n))).collect();
            parallel_safe(&rows, ws)
        };
        assert!(batch(&[(&read, json!({"path": "a.rs"})), (&read, json!({"path": "b.rs"}))]));
        assert!(batch(&[(&read, json!({"path": "a.rs"})), (&read, json!({"path": "a.rs"}))]));
        assert!(batch(&[(&fetch, json!({"url": "x"})), (&write, json!({"path": "src/a.rs"}))]));
        assert!(batch(&[(&write, json!({"path": "src/a.rs"})), (&write, json!({"path": "src/b.rs"}))]));
        assert!(!batch(&[(&write, json!({"path": "src/a.rs"})), (&read, json!({"path": "src"}))]));
        assert!(!batch(&[(&write, json!({"path": "./a"})), (&write, json!({"path": "a"}))]));
        assert!(!batch(&[(&write, json!({})), (&read, json!({"path": "a"}))]), "no path: the whole workspace");
        assert!(!batch(&[(&shell, json!({"command": "ls"})), (&read, json!({"path": "a"}))]));
        assert!(!batch(&[(&read, json!({"path": "a"}))]), "a single call runs inline");
        let c = call("unknown", "{}");
        let v = json!({});
        assert!(!parallel_safe(&[(&c, Some(&v), None), (&c, Some(&v), Some(&read))], ws), "no spec: alone");
    }

    #[test]
    fn snapshots_report_changed_text_files_below_the_workspace_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path().canonicalize().expect("canonical");
        let outside = tempfile::tempdir().expect("tempdir");
        std::fs::write(outside.path().join("secret"), "s3cret").expect("write");
        std::fs::write(ws.join("a.txt"), "old\n").expect("write");
        std::os::unix::fs::symlink(outside.path().join("secret"), ws.join("link")).expect("link");
        let w = ToolAnnotations::writes(&["path"]);
        let snap = Snapshot::before(&w, &json!({"path": "a.txt"}), &ws);
        std::fs::write(ws.join("a.txt"), "new\n").expect("write");
        let got = snap.changes();
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].before.as_deref(), got[0].after.as_deref()), (Some("old\n"), Some("new\n")));
        assert_eq!(got[0].path, ws.join("a.txt").to_string_lossy());
        let created = Snapshot::before(&w, &json!({"path": "b.txt"}), &ws);
        std::fs::write(ws.join("b.txt"), "hi").expect("write");
        assert_eq!(created.changes()[0].before, None, "a new file had no text before");
        for escape in [json!({"path": "link"}), json!({"path": "../x"}), json!({"path": outside.path().join("secret")})]
        {
            let snap = Snapshot::before(&w, &escape, &ws);
            assert!(snap.files.is_empty(), "{escape} was read");
        }
        let read = Snapshot::before(&ToolAnnotations::reads(&["path"]), &json!({"path": "a.txt"}), &ws);
        assert!(read.files.is_empty(), "a read-only tool changes nothing");
    }

    #[test]
    fn previews_name_the_main_argument() {
        assert_eq!(preview("terminal", Some(&json!({"command": "cargo   test\n-q"}))), "terminal cargo test -q");
        assert_eq!(preview("todo", Some(&json!({"merge": true}))), "todo");
        assert_eq!(one_line(&"x".repeat(100), 10).chars().count(), 10);
    }
}
