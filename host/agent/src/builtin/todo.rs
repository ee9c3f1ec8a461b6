//! The `todo` tool: the model's task list for the session.
//!
//! [`Todos`] holds the list behind a mutex; [`Todos::call`] runs one tool call. Omitting `todos`
//! reads the list; `merge: true` updates items by id and appends new ones; otherwise the list is
//! replaced. Every call answers with the whole list and a summary, so the latest `todo` result in
//! the history is the list itself: [`Todos::restore`] rebuilds it from there when a session
//! resumes, and [`Todos::render_unfinished`] gives the text re-injected after compression.
//!
//! ```
//! use serde_json::json;
//! use talaria_agent::builtin::todo::Todos;
//! let todos = Todos::default();
//! todos.call(&json!({"todos": [{"id": "1", "content": "Write the parser", "status": "in_progress"}]}))?;
//! let out = todos.call(&json!({"todos": [{"id": "1", "status": "completed"}], "merge": true}))?;
//! assert_eq!(out["summary"]["completed"], 1);
//! assert!(todos.render_unfinished().is_none());
//! # Ok::<(), talaria_protocol::ToolError>(())
//! ```

use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use talaria_protocol::{Message, ToolAnnotations, ToolError, ToolSpec};

/// The tool's name as the model calls it.
pub const NAME: &str = "todo";
/// Most items a list may hold.
pub const MAX_ITEMS: usize = 256;
/// Longest `content` of one item, in characters.
pub const MAX_CONTENT_CHARS: usize = 4000;
/// Longest `id`, in characters.
pub const MAX_ID_CHARS: usize = 100;

/// Where an item stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Pending,
    InProgress,
    Completed,
    Cancelled,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::InProgress => "in_progress",
            Self::Completed => "completed",
            Self::Cancelled => "cancelled",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "pending" => Some(Self::Pending),
            "in_progress" => Some(Self::InProgress),
            "completed" => Some(Self::Completed),
            "cancelled" => Some(Self::Cancelled),
            _ => None,
        }
    }

    /// Pending or in progress.
    pub fn unfinished(self) -> bool {
        match self {
            Self::Pending | Self::InProgress => true,
            Self::Completed | Self::Cancelled => false,
        }
    }
}

/// One item of the list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Todo {
    pub id: String,
    pub content: String,
    pub status: Status,
}

/// The session's task list.
#[derive(Debug, Default)]
pub struct Todos {
    list: Mutex<Vec<Todo>>,
}

/// One item as sent: in a merge, `content` and `status` may be left out to keep the current ones.
struct Update {
    id: String,
    content: Option<String>,
    status: Option<Status>,
}

impl Todos {
    pub fn new() -> Self {
        Self::default()
    }

    /// The tool as the model sees it.
    pub fn spec() -> ToolSpec {
        ToolSpec {
            name: NAME.into(),
            description: "Your task list for this session. Use it for work with 3 or more steps or when the user \
                gives several tasks; skip it for simple requests. Call with no `todos` to read the list. Send \
                `todos` to replace the whole list, or with `merge: true` to update items by id (content or status \
                may be left out) and append new ones. Keep one item in_progress, mark items completed as soon as \
                they are done and cancelled when no longer needed. Unfinished items survive context compression."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "todos": {
                        "type": "array",
                        "description": "The items to write. Omit to read the current list.",
                        "maxItems": MAX_ITEMS,
                        "items": {
                            "type": "object",
                            "properties": {
                                "id": {"type": "string", "description": "Short unique id, e.g. \"1\" or \"tests\"."},
                                "content": {"type": "string", "description": "What to do, in one line."},
                                "status": {"type": "string", "enum": ["pending", "in_progress", "completed", "cancelled"]}
                            },
                            "required": ["id"]
                        }
                    },
                    "merge": {
                        "type": "boolean",
                        "description": "true: update items by id and append new ones. false (default): replace the list."
                    }
                }
            }),
            plugin: "talaria".into(),
            // It changes the list; calls must stay in order.
            annotations: ToolAnnotations { destructive: false, open_world: false, ..ToolAnnotations::default() },
        }
    }

    /// Runs one call of the tool: read, replace or merge, then answer with the list and a summary.
    ///
    /// # Errors
    /// [`ToolError::InvalidArgs`] when an item is malformed, an id repeats within the call, a new
    /// item lacks content or status, or a limit ([`MAX_ITEMS`], [`MAX_CONTENT_CHARS`]) is exceeded.
    /// The list is unchanged then.
    pub fn call(&self, args: &Value) -> Result<Value, ToolError> {
        let mut list = self.lock();
        let Some(items) = args.get("todos").filter(|v| !v.is_null()) else {
            return Ok(result(&list));
        };
        let merge = match args.get("merge") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => return Err(invalid(format!("`merge` must be true or false, not {other}"))),
        };
        let Value::Array(items) = items else {
            return Err(invalid("`todos` must be an array of {id, content, status} objects".into()));
        };
        let updates = items.iter().enumerate().map(|(i, item)| parse(i, item)).collect::<Result<Vec<_>, _>>()?;
        let mut seen = HashSet::new();
        if let Some(dup) = updates.iter().find(|u| !seen.insert(u.id.as_str())) {
            return Err(invalid(format!("id \"{}\" appears twice in `todos`; give each item its own id", dup.id)));
        }
        let mut next = if merge { list.clone() } else { Vec::new() };
        for update in updates {
            match next.iter_mut().find(|t| t.id == update.id) {
                Some(todo) => {
                    if let Some(content) = update.content {
                        todo.content = content;
                    }
                    if let Some(status) = update.status {
                        todo.status = status;
                    }
                }
                None => {
                    let (Some(content), Some(status)) = (update.content, update.status) else {
                        let why = if merge { "is not in the list yet" } else { "is new (merge is false)" };
                        return Err(invalid(format!(
                            "item \"{}\" {why}: it needs both `content` and `status`",
                            update.id
                        )));
                    };
                    next.push(Todo { id: update.id, content, status });
                }
            }
        }
        if next.len() > MAX_ITEMS {
            return Err(invalid(format!(
                "the list would have {} items; at most {MAX_ITEMS} are allowed. Remove completed or cancelled \
                 items (send the list without them, merge false) or combine small steps",
                next.len()
            )));
        }
        *list = next;
        Ok(result(&list))
    }

    /// A copy of the list.
    pub fn list(&self) -> Vec<Todo> {
        self.lock().clone()
    }

    /// The items still pending or in progress, in list order.
    pub fn unfinished(&self) -> Vec<Todo> {
        self.lock().iter().filter(|t| t.status.unfinished()).cloned().collect()
    }

    /// Rebuilds the list from the last successful `todo` result in `history` (a resumed session),
    /// or from the unfinished list a compression carried into its summary, whichever is later.
    /// Leaves the list as it is when there is neither.
    pub fn restore(&self, history: &[Message]) {
        let found = history.iter().rev().find_map(|m| match m {
            Message::Tool { name, content, .. } if name == NAME => from_result(content),
            Message::Tool { .. } => None,
            Message::System { content } | Message::User { content, .. } | Message::Assistant { content, .. } => {
                from_carried(content)
            }
        });
        if let Some(todos) = found {
            *self.lock() = todos;
        }
    }

    /// The unfinished items as a short block for the model, or `None` when there are none. Meant to
    /// be re-injected after the history is compressed, so the plan is not lost with it.
    pub fn render_unfinished(&self) -> Option<String> {
        let unfinished = self.unfinished();
        if unfinished.is_empty() {
            return None;
        }
        let mut out = String::from(CARRIED_HEADER);
        for t in &unfinished {
            let mark = match t.status {
                Status::InProgress => "[>]",
                Status::Pending | Status::Completed | Status::Cancelled => "[ ]",
            };
            let _ = write!(out, "\n- {mark} {}. {} ({})", t.id, t.content, t.status.as_str());
        }
        Some(out)
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Todo>> {
        // The list stays consistent even if a holder panicked: every write replaces it whole.
        self.list.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn invalid(message: String) -> ToolError {
    ToolError::InvalidArgs(message)
}

fn parse(index: usize, item: &Value) -> Result<Update, ToolError> {
    let Value::Object(item) = item else {
        return Err(invalid(format!("todos[{index}] must be an object {{id, content, status}}")));
    };
    let id = match item.get("id") {
        Some(Value::String(s)) => s.trim().to_owned(),
        Some(Value::Number(n)) => n.to_string(),
        Some(_) | None => return Err(invalid(format!("todos[{index}] needs an `id` (a short string)"))),
    };
    if id.is_empty() {
        return Err(invalid(format!("todos[{index}] has an empty `id`")));
    }
    if id.chars().count() > MAX_ID_CHARS {
        return Err(invalid(format!("todos[{index}]: `id` is longer than {MAX_ID_CHARS} characters")));
    }
    let content = match item.get("content") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => {
            let s = s.trim();
            let chars = s.chars().count();
            if s.is_empty() {
                return Err(invalid(format!("item \"{id}\": `content` is empty")));
            }
            if chars > MAX_CONTENT_CHARS {
                return Err(invalid(format!(
                    "item \"{id}\": `content` is {chars} characters; at most {MAX_CONTENT_CHARS} are allowed. \
                     Keep items to one line and split big tasks"
                )));
            }
            Some(s.to_owned())
        }
        Some(_) => return Err(invalid(format!("item \"{id}\": `content` must be a string"))),
    };
    let status = match item.get("status") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(Status::parse(s.trim()).ok_or_else(|| {
            invalid(format!("item \"{id}\": status \"{s}\" is not one of pending, in_progress, completed, cancelled"))
        })?),
        Some(_) => return Err(invalid(format!("item \"{id}\": `status` must be a string"))),
    };
    Ok(Update { id, content, status })
}

fn result(list: &[Todo]) -> Value {
    let count = |s: Status| list.iter().filter(|t| t.status == s).count();
    let mut summary = Map::new();
    summary.insert("total".into(), list.len().into());
    for s in [Status::Pending, Status::InProgress, Status::Completed, Status::Cancelled] {
        summary.insert(s.as_str().into(), count(s).into());
    }
    json!({ "todos": list, "summary": summary })
}

/// The list in a `todo` tool result, or `None` when `content` is an error or something else.
/// The first line of [`Todos::render_unfinished`]; a compression carries the block verbatim.
const CARRIED_HEADER: &str = "Your todo list (unfinished items, kept across context compression):";

/// The items of a carried block (`- [>] ID. CONTENT (STATUS)` lines after [`CARRIED_HEADER`]).
fn from_carried(content: &str) -> Option<Vec<Todo>> {
    let (_, block) = content.rsplit_once(CARRIED_HEADER)?;
    let mut out = Vec::new();
    for line in block.lines().skip(1) {
        let Some(rest) = line.strip_prefix("- [>] ").or_else(|| line.strip_prefix("- [ ] ")) else { break };
        let Some((id, rest)) = rest.split_once(". ") else { break };
        let Some((content, status)) = rest.rsplit_once(" (") else { break };
        let Some(status) = status.strip_suffix(')').and_then(Status::parse) else { break };
        out.push(Todo { id: id.to_string(), content: content.to_string(), status });
    }
    (!out.is_empty()).then_some(out)
}

fn from_result(content: &str) -> Option<Vec<Todo>> {
    let value: Value = serde_json::from_str(content).ok()?;
    if value.get("error").is_some() {
        return None;
    }
    serde_json::from_value(value.get("todos")?.clone()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: &str, content: &str, status: &str) -> Value {
        json!({"id": id, "content": content, "status": status})
    }

    fn ids(todos: &Todos) -> Vec<String> {
        todos.list().into_iter().map(|t| t.id).collect()
    }

    #[test]
    fn a_list_carried_through_compression_is_restored() {
        let todos = Todos::new();
        todos
            .call(&json!({"todos": [item("1", "parse the (nested) input", "in_progress"), item("2", "write tests", "pending"), item("3", "done already", "completed")]}))
            .expect("write");
        let block = todos.render_unfinished().expect("unfinished items");
        let summary = format!(
            "[talaria context summary #1: 12 earlier messages were compressed]\n## Goal\nx\n\n## Open Todo List\n{block}\n"
        );
        let history = [Message::user("start"), Message::assistant(summary), Message::user("go on")];
        let restored = Todos::new();
        restored.restore(&history);
        assert_eq!(restored.list(), todos.unfinished());
        // A later todo result wins over the carried list.
        let later = Message::tool("c1", NAME, todos.call(&json!({})).expect("read").to_string());
        let newer = Todos::new();
        newer.restore(&[Message::assistant(format!("x\n{block}")), later]);
        assert_eq!(ids(&newer), ["1", "2", "3"]);
    }

    #[test]
    fn read_on_empty_and_after_write() {
        let todos = Todos::new();
        let out = todos.call(&json!({})).expect("read");
        assert_eq!(out["todos"], json!([]));
        assert_eq!(out["summary"], json!({"total": 0, "pending": 0, "in_progress": 0, "completed": 0, "cancelled": 0}));
        todos.call(&json!({"todos": [item("1", "a", "pending")]})).expect("write");
        let out = todos.call(&json!({"todos": null})).expect("read");
        assert_eq!(out["todos"][0]["content"], "a");
    }

    #[test]
    fn replace_drops_items_not_sent() {
        let todos = Todos::new();
        todos.call(&json!({"todos": [item("1", "a", "pending"), item("2", "b", "pending")]})).expect("write");
        let out = todos.call(&json!({"todos": [item("3", "c", "in_progress")], "merge": false})).expect("replace");
        assert_eq!(ids(&todos), ["3"]);
        assert_eq!(out["summary"]["total"], 1);
        assert_eq!(out["summary"]["in_progress"], 1);
    }

    #[test]
    fn merge_updates_by_id_and_appends() {
        let todos = Todos::new();
        todos.call(&json!({"todos": [item("1", "a", "in_progress"), item("2", "b", "pending")]})).expect("write");
        let out = todos
            .call(&json!({"merge": true, "todos": [{"id": "1", "status": "completed"}, item("3", "c", "pending"),
                {"id": "2", "content": "b, but better"}]}))
            .expect("merge");
        assert_eq!(ids(&todos), ["1", "2", "3"]);
        let list = todos.list();
        assert_eq!((list[0].content.as_str(), list[0].status), ("a", Status::Completed));
        assert_eq!((list[1].content.as_str(), list[1].status), ("b, but better", Status::Pending));
        assert_eq!(out["summary"], json!({"total": 3, "pending": 2, "in_progress": 0, "completed": 1, "cancelled": 0}));
    }

    #[test]
    fn numeric_ids_are_accepted_as_strings() {
        let todos = Todos::new();
        todos.call(&json!({"todos": [{"id": 7, "content": "x", "status": "pending"}]})).expect("write");
        assert_eq!(ids(&todos), ["7"]);
    }

    #[test]
    fn bad_items_are_refused_and_leave_the_list_alone() {
        let todos = Todos::new();
        todos.call(&json!({"todos": [item("1", "a", "pending")]})).expect("write");
        let cases = [
            (json!({"todos": "1"}), "must be an array"),
            (json!({"todos": [item("2", "b", "done")]}), "not one of pending"),
            (json!({"todos": [{"content": "b", "status": "pending"}]}), "needs an `id`"),
            (json!({"todos": [item("2", "", "pending")]}), "`content` is empty"),
            (json!({"todos": [{"id": "2", "content": "b"}]}), "needs both `content` and `status`"),
            (json!({"merge": true, "todos": [{"id": "9", "status": "completed"}]}), "not in the list yet"),
            (json!({"todos": [item("2", "b", "pending"), item("2", "c", "pending")]}), "appears twice"),
            (json!({"merge": "yes", "todos": []}), "`merge` must be true or false"),
        ];
        for (args, expected) in cases {
            match todos.call(&args) {
                Err(ToolError::InvalidArgs(m)) => assert!(m.contains(expected), "{m} / {expected}"),
                other => panic!("{args}: {other:?}"),
            }
        }
        assert_eq!(ids(&todos), ["1"]);
    }

    #[test]
    fn limits() {
        let todos = Todos::new();
        let long = "x".repeat(MAX_CONTENT_CHARS + 1);
        let err = todos.call(&json!({"todos": [item("1", &long, "pending")]})).expect_err("too long");
        assert!(err.to_string().contains("4001 characters; at most 4000"), "{err}");
        let exact = "é".repeat(MAX_CONTENT_CHARS);
        todos.call(&json!({"todos": [item("1", &exact, "pending")]})).expect("4000 chars is fine");

        let full: Vec<Value> = (0..MAX_ITEMS).map(|i| item(&i.to_string(), "t", "pending")).collect();
        todos.call(&json!({"todos": full})).expect("256 items");
        let err = todos.call(&json!({"merge": true, "todos": [item("new", "t", "pending")]})).expect_err("257");
        assert!(err.to_string().contains("257 items; at most 256"), "{err}");
        assert_eq!(todos.list().len(), MAX_ITEMS);
    }

    #[test]
    fn unfinished_and_render() {
        let todos = Todos::new();
        assert_eq!(todos.render_unfinished(), None);
        todos
            .call(&json!({"todos": [item("1", "parse", "completed"), item("2", "check", "in_progress"),
                item("3", "ship", "pending"), item("4", "party", "cancelled")]}))
            .expect("write");
        assert_eq!(todos.unfinished().iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), ["2", "3"]);
        let text = todos.render_unfinished().expect("some");
        assert!(text.contains("- [>] 2. check (in_progress)\n- [ ] 3. ship (pending)"), "{text}");
        assert!(!text.contains("parse") && !text.contains("party"));
    }

    #[test]
    fn restore_takes_the_last_successful_result() {
        let first = Todos::new();
        first.call(&json!({"todos": [item("1", "old", "pending")]})).expect("write");
        let old = first.call(&json!({})).expect("read").to_string();
        first.call(&json!({"todos": [item("a", "new", "in_progress"), item("b", "next", "pending")]})).expect("write");
        let new = first.call(&json!({})).expect("read").to_string();
        let error = ToolError::InvalidArgs("bad".into()).to_json().to_string();
        let history = vec![
            Message::user("plan it"),
            Message::tool("c1", "todo", old),
            Message::tool("c2", "todo", new),
            Message::tool("c3", "todo", error),
            Message::tool("c4", "read_file", r#"{"todos": []}"#),
            Message::assistant("done"),
        ];
        let resumed = Todos::new();
        resumed.restore(&history);
        assert_eq!(resumed.list(), first.list());
        assert_eq!(ids(&resumed), ["a", "b"]);

        let untouched = Todos::new();
        untouched.call(&json!({"todos": [item("x", "keep", "pending")]})).expect("write");
        untouched.restore(&[Message::user("hi"), Message::tool("c", "todo", "not json")]);
        assert_eq!(ids(&untouched), ["x"]);
    }

    #[test]
    fn spec_is_an_object_schema_from_talaria() {
        let spec = Todos::spec();
        assert_eq!((spec.name.as_str(), spec.plugin.as_str()), ("todo", "talaria"));
        assert_eq!(spec.parameters["type"], "object");
        assert_eq!(spec.parameters["properties"]["todos"]["items"]["properties"]["status"]["enum"][1], "in_progress");
    }
}
