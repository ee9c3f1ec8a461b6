//! The glue between plain tool functions and the `tools` export.

use std::fmt;
use std::path::{Component, Path, PathBuf};

use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use crate::__bindings::talaria::plugin::types as wit;

/// What the host tells a tool about the call.
#[derive(Debug, Clone)]
pub struct Context {
    /// The session this call belongs to; empty outside a session.
    pub session_id: String,
    /// The model's id for this call; empty when there is none.
    pub call_id: String,
    /// Absolute path of the session's working directory.
    pub workspace: PathBuf,
}

impl Context {
    /// A context for `workspace` (for tests; the host builds the real one).
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        Self { session_id: String::new(), call_id: String::new(), workspace: workspace.into() }
    }

    /// Resolve a path the model gave: relative paths are taken from the workspace, and `.` and
    /// `..` are folded lexically (`/w/a/../b` is `/w/b`). The sandbox still decides access.
    pub fn resolve(&self, path: impl AsRef<Path>) -> PathBuf {
        let joined = self.workspace.join(path.as_ref());
        let mut out = PathBuf::new();
        for part in joined.components() {
            match part {
                Component::ParentDir => {
                    out.pop();
                }
                Component::CurDir => {}
                other => out.push(other),
            }
        }
        out
    }

    /// Whether `path` (after [`Context::resolve`]) lies inside the workspace.
    pub fn in_workspace(&self, path: impl AsRef<Path>) -> bool {
        self.resolve(path).starts_with(&self.workspace)
    }
}

impl From<wit::CallContext> for Context {
    fn from(c: wit::CallContext) -> Self {
        Self { session_id: c.session_id, call_id: c.call_id, workspace: PathBuf::from(c.workspace) }
    }
}

/// A tool's failure, shown to the model as a JSON error.
///
/// Any `std::error::Error` converts into [`ToolError::Failed`], so `?` works on I/O, JSON and
/// HTTP errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolError {
    /// The arguments were wrong; the message should say how to fix them.
    InvalidArgs(String),
    /// The tool ran and failed.
    Failed(String),
}

impl ToolError {
    /// The arguments were wrong.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidArgs(message.into())
    }

    /// The tool failed.
    pub fn failed(message: impl Into<String>) -> Self {
        Self::Failed(message.into())
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidArgs(m) => write!(f, "invalid arguments: {m}"),
            Self::Failed(m) => f.write_str(m),
        }
    }
}

impl<E: std::error::Error> From<E> for ToolError {
    fn from(e: E) -> Self {
        Self::Failed(e.to_string())
    }
}

impl From<ToolError> for wit::ToolError {
    fn from(e: ToolError) -> Self {
        match e {
            ToolError::InvalidArgs(m) => Self::InvalidArgs(m),
            ToolError::Failed(m) => Self::Failed(m),
        }
    }
}

/// Build a tool spec; the argument type is inferred from the function.
pub fn spec<A, F>(name: &str, doc: &[&str], _tool: F) -> wit::ToolSpec
where
    A: JsonSchema,
    F: Fn(A, &Context) -> Result<String, ToolError>,
{
    wit::ToolSpec { name: name.to_string(), description: description(doc), parameters: schema_of::<A>() }
}

/// Decode the arguments and run the tool.
pub fn invoke<A, F>(tool: F, args: &str, ctx: &Context) -> Result<String, wit::ToolError>
where
    A: DeserializeOwned,
    F: Fn(A, &Context) -> Result<String, ToolError>,
{
    let args: A = serde_json::from_str(args).map_err(|e| wit::ToolError::InvalidArgs(e.to_string()))?;
    tool(args, ctx).map_err(Into::into)
}

/// The error for a tool name this plugin does not have.
pub fn unknown_tool(name: &str) -> wit::ToolError {
    wit::ToolError::UnknownTool(name.to_string())
}

/// Doc-comment lines to one description: lines joined, paragraphs kept.
fn description(doc: &[&str]) -> String {
    let mut out = String::new();
    for line in doc.iter().map(|l| l.trim()) {
        if line.is_empty() {
            out.push_str("\n\n");
        } else {
            if !out.is_empty() && !out.ends_with('\n') {
                out.push(' ');
            }
            out.push_str(line);
        }
    }
    out.trim().to_string()
}

/// The JSON Schema of `A` as the model wants it: subschemas inlined, no `$schema` or `title`.
fn schema_of<A: JsonSchema>() -> String {
    let generator =
        schemars::generate::SchemaSettings::draft2020_12().with(|s| s.inline_subschemas = true).into_generator();
    let mut schema = serde_json::Value::from(generator.into_root_schema_for::<A>());
    if let Some(map) = schema.as_object_mut() {
        map.remove("$schema");
        map.remove("title");
        map.entry("properties").or_insert_with(|| serde_json::json!({}));
    }
    schema.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_against_the_workspace() {
        let ctx = Context::new("/w");
        assert_eq!(ctx.resolve("a/b.txt"), PathBuf::from("/w/a/b.txt"));
        assert_eq!(ctx.resolve("a/../b.txt"), PathBuf::from("/w/b.txt"));
        assert_eq!(ctx.resolve("/etc/passwd"), PathBuf::from("/etc/passwd"));
        assert_eq!(ctx.resolve("../../etc"), PathBuf::from("/etc"));
        assert!(ctx.in_workspace("./x/./y"));
        assert!(!ctx.in_workspace("../w2/x"));
    }

    #[test]
    fn doc_lines_become_a_description() {
        assert_eq!(
            description(&[" Read a file.", " Returns lines.", "", " Limits apply."]),
            "Read a file. Returns lines.\n\nLimits apply."
        );
    }
}
