//! What a tool does, told to the host as hints: [`ToolAnnotations`].

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Hints about what a tool does, in the manner of MCP's tool annotations (`readOnlyHint`,
/// `destructiveHint`, `idempotentHint`, `openWorldHint`), plus the arguments that name the
/// workspace paths it touches.
///
/// The loop runs a batch of calls side by side only when the annotations say they cannot step
/// on each other, and front doors choose how to show a call (ACP's tool kinds) from them. They
/// never widen what a tool may do: grants do that. A plugin's false claim can only make its own
/// calls run side by side or be shown under another kind.
///
/// The defaults are the cautious ones: a tool that says nothing may change anything and reach
/// anything, so it always runs alone.
///
/// ```
/// use talaria_protocol::ToolAnnotations;
/// let read = ToolAnnotations::reads(&["path"]);
/// let args = serde_json::json!({"path": "src/main.rs"});
/// assert_eq!(read.touched(&args, "/w".as_ref()), vec![std::path::PathBuf::from("/w/src/main.rs")]);
/// assert!(read.may_run_beside_others());
/// assert!(!ToolAnnotations::default().may_run_beside_others());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ToolAnnotations {
    /// It changes nothing: it reads files or the web, or computes. Default false.
    pub read_only: bool,
    /// When not read-only: it may delete or overwrite what exists, rather than only add.
    /// Default true.
    pub destructive: bool,
    /// Calling it again with the same arguments changes nothing more. Default false.
    pub idempotent: bool,
    /// It reaches beyond the workspace (the web, another service, a shell). Default true.
    pub open_world: bool,
    /// The arguments (top-level names) that hold a workspace path it reads, or writes when it
    /// is not read-only. Empty: none, or unknown.
    pub paths: Vec<String>,
}

impl Default for ToolAnnotations {
    fn default() -> Self {
        Self { read_only: false, destructive: true, idempotent: false, open_world: true, paths: Vec::new() }
    }
}

impl ToolAnnotations {
    /// A tool that only reads the workspace paths in arguments `paths`.
    pub fn reads(paths: &[&str]) -> Self {
        Self {
            read_only: true,
            destructive: false,
            idempotent: true,
            open_world: false,
            paths: paths.iter().map(|p| (*p).to_string()).collect(),
        }
    }

    /// A tool that writes the workspace paths in arguments `paths` (and nothing else).
    pub fn writes(paths: &[&str]) -> Self {
        Self { open_world: false, paths: paths.iter().map(|p| (*p).to_string()).collect(), ..Self::default() }
    }

    /// A tool that only reads from beyond the workspace (a web page, a weather service).
    pub fn fetches() -> Self {
        Self { read_only: true, destructive: false, idempotent: true, open_world: true, paths: Vec::new() }
    }

    /// Whether a call of it may run beside other calls: it only reads, or it only touches the
    /// workspace paths its arguments name (so a conflict can be seen).
    pub fn may_run_beside_others(&self) -> bool {
        self.read_only || (!self.open_world && !self.paths.is_empty())
    }

    /// The workspace paths a call with `args` touches, made absolute against `workspace` and
    /// normalized lexically (`a/../b` is `b`). A path argument that is absent or not a string
    /// counts as the whole workspace.
    pub fn touched(&self, args: &Value, workspace: &Path) -> Vec<PathBuf> {
        self.paths
            .iter()
            .map(|name| {
                let path = args.get(name).and_then(Value::as_str).unwrap_or(".");
                lexical(&workspace.join(path))
            })
            .collect()
    }
}

/// `path` with `.` and `..` resolved without touching the file system (links are not resolved:
/// a containment check must still look at the real path).
pub fn lexical(path: &Path) -> PathBuf {
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

    #[test]
    fn missing_fields_take_the_cautious_defaults() {
        let a: ToolAnnotations = serde_json::from_str(r#"{"read_only": true}"#).expect("parses");
        assert!(a.read_only && a.destructive && a.open_world && !a.idempotent && a.paths.is_empty());
        let none: ToolAnnotations = serde_json::from_str("{}").expect("parses");
        assert_eq!(none, ToolAnnotations::default());
    }

    #[test]
    fn touched_paths_are_lexical_and_default_to_the_workspace() {
        let w = ToolAnnotations::writes(&["path", "to"]);
        let got = w.touched(&serde_json::json!({"path": "a/../b", "to": 3}), Path::new("/w"));
        assert_eq!(got, [PathBuf::from("/w/b"), PathBuf::from("/w")]);
    }
}
