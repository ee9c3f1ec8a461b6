//! The glue between plain tool functions and the `tools` export.
//!
//! `export_tools!` and `export_memory!` both turn a list of functions into a [`ToolSet`] (with
//! the hidden `__tool_set!` macro) and export it through [`Tools`], so a tool behaves the same
//! whichever kind of plugin offers it.

use std::fmt;
use std::marker::PhantomData;
use std::path::{Component, Path, PathBuf};

use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use crate::__bindings::talaria::plugin::types as wit;
use crate::__bindings::tool::exports::talaria::plugin::tools as export;

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

/// The tools of one plugin: what `__tool_set!` implements for the functions it is given.
pub trait ToolSet {
    /// The specs of every tool, in the order they were listed.
    fn list() -> Vec<wit::ToolSpec>;

    /// Run the tool called `name`.
    fn call(name: &str, args: &str, context: &Context) -> Result<String, wit::ToolError>;
}

/// The `tools` export for any [`ToolSet`].
pub struct Tools<S>(PhantomData<S>);

impl<S: ToolSet> export::Guest for Tools<S> {
    fn list() -> Vec<wit::ToolSpec> {
        S::list()
    }

    fn call(name: String, args: String, context: wit::CallContext) -> Result<String, wit::ToolError> {
        S::call(&name, &args, &Context::from(context))
    }
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

/// Implement [`ToolSet`] on a new unit struct `$set` for a list of tool functions. Shared by
/// `export_tools!` and `export_memory!`; the list may be empty (a memory provider without tools).
#[doc(hidden)]
#[macro_export]
macro_rules! __tool_set {
    ($set:ident { $( $(#[doc = $doc:literal])* $tool:ident ),* $(,)? }) => {
        #[doc(hidden)]
        struct $set;

        impl $crate::__private::ToolSet for $set {
            fn list() -> ::std::vec::Vec<$crate::__private::ToolSpec> {
                ::std::vec![ $( $crate::__private::spec(stringify!($tool), &[$($doc),*], $tool) ),* ]
            }

            #[allow(unused_variables)]
            fn call(
                name: &str,
                args: &str,
                context: &$crate::Context,
            ) -> ::std::result::Result<::std::string::String, $crate::__private::WitToolError> {
                match name {
                    $( stringify!($tool) => $crate::__private::invoke($tool, args, context), )*
                    other => ::std::result::Result::Err($crate::__private::unknown_tool(other)),
                }
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::__bindings::tool::exports::talaria::plugin::tools::Guest;
    use serde::Deserialize;

    #[derive(Deserialize, JsonSchema)]
    struct EchoArgs {
        /// What to say.
        text: String,
    }

    fn echo(args: EchoArgs, ctx: &Context) -> Result<String, ToolError> {
        if args.text.is_empty() {
            return Err(ToolError::invalid("text is empty"));
        }
        Ok(format!("{}@{}", args.text, ctx.session_id))
    }

    crate::__tool_set!(EchoSet {
        /// Say it back.
        echo,
    });
    crate::__tool_set!(NoTools {});

    fn context() -> wit::CallContext {
        wit::CallContext { session_id: "s1".into(), call_id: "c1".into(), workspace: "/w".into() }
    }

    #[test]
    fn a_tool_set_lists_and_dispatches() {
        let specs = Tools::<EchoSet>::list();
        assert_eq!(specs.len(), 1);
        assert_eq!((specs[0].name.as_str(), specs[0].description.as_str()), ("echo", "Say it back."));
        let schema: serde_json::Value = serde_json::from_str(&specs[0].parameters).expect("json schema");
        assert_eq!(schema["properties"]["text"]["description"], "What to say.");
        assert_eq!(schema["required"], serde_json::json!(["text"]));

        assert!(matches!(
            Tools::<EchoSet>::call("echo".into(), r#"{"text":"hi"}"#.into(), context()),
            Ok(s) if s == "hi@s1"
        ));
        assert!(matches!(
            Tools::<EchoSet>::call("echo".into(), r#"{"text":""}"#.into(), context()),
            Err(wit::ToolError::InvalidArgs(m)) if m == "text is empty"
        ));
        assert!(matches!(
            Tools::<EchoSet>::call("echo".into(), r#"{"txt":"x"}"#.into(), context()),
            Err(wit::ToolError::InvalidArgs(m)) if m.contains("missing field `text`")
        ));
        assert!(matches!(
            Tools::<EchoSet>::call("nope".into(), "{}".into(), context()),
            Err(wit::ToolError::UnknownTool(m)) if m == "nope"
        ));
    }

    #[test]
    fn an_empty_tool_set_has_no_tools() {
        assert!(Tools::<NoTools>::list().is_empty());
        assert!(matches!(
            Tools::<NoTools>::call("x".into(), "{}".into(), context()),
            Err(wit::ToolError::UnknownTool(_))
        ));
    }

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
