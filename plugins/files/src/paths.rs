//! Paths the model gives, resolved against the workspace, and I/O errors explained in their terms.
//!
//! The sandbox decides what the plugin may touch; this module only resolves paths lexically
//! (`.` and `..` are folded without asking the host, so nothing is canonicalised through it) and
//! turns the errors WASI reports into sentences a model can act on.
//!
//! ```ignore
//! let target = Target::new(&ctx.workspace, ctx.resolve("src/../README.md"));
//! std::fs::read(&target.path).map_err(|e| target.io_error("read", &e))?;
//! ```

use std::io;
use std::path::{Component, Path, PathBuf};

use talaria_sdk::ToolError;

/// A path resolved against the workspace.
#[derive(Debug, Clone)]
pub struct Target {
    /// Absolute and lexically normalised.
    pub path: PathBuf,
    workspace: PathBuf,
}

impl Target {
    /// `path` is what `Context::resolve` returned (absolute when the workspace is).
    pub fn new(workspace: &Path, path: PathBuf) -> Self {
        Self { path: normalize(&path), workspace: normalize(workspace) }
    }

    /// Whether the path lies inside the workspace (or is the workspace).
    pub fn inside(&self) -> bool {
        self.path.starts_with(&self.workspace)
    }

    /// How to show the path to the model: relative to the workspace when inside it.
    pub fn shown(&self) -> String {
        match self.path.strip_prefix(&self.workspace) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
            Ok(rel) => rel.display().to_string(),
            Err(_) => self.path.display().to_string(),
        }
    }

    /// A failed `verb` (e.g. "read") on this path, explained.
    pub fn io_error(&self, verb: &str, err: &io::Error) -> ToolError {
        ToolError::failed(describe(verb, self, err))
    }
}

fn describe(verb: &str, target: &Target, err: &io::Error) -> String {
    let workspace = target.workspace.display();
    if !target.inside() {
        return format!(
            "cannot {verb} {}: outside the directories this plugin was granted (the workspace is {workspace}); \
             use a path inside the workspace (the sandbox said: {err})",
            target.path.display()
        );
    }
    let shown = target.shown();
    let why = match err.kind() {
        io::ErrorKind::NotFound => {
            format!("no such file or directory (relative paths start at the workspace, {workspace})")
        }
        io::ErrorKind::PermissionDenied => {
            format!("permission denied; a symlink that leads outside the workspace is refused too ({err})")
        }
        io::ErrorKind::IsADirectory => {
            "it is a directory; use search_files with target=\"files\" to list what is in it".to_string()
        }
        io::ErrorKind::NotADirectory => format!("part of the path is a file, not a directory ({err})"),
        _ if is_sandbox_refusal(err) => {
            format!("the sandbox refused it; a symlink that leads outside the workspace is not followed ({err})")
        }
        _ => err.to_string(),
    };
    format!("cannot {verb} {shown}: {why}")
}

/// WASI's ENOTCAPABLE ("Capabilities insufficient"), which std has no kind for.
fn is_sandbox_refusal(err: &io::Error) -> bool {
    const ENOTCAPABLE: i32 = 76;
    cfg!(target_os = "wasi") && err.raw_os_error() == Some(ENOTCAPABLE)
}

/// Fold `.` and `..` without touching the filesystem. `..` at the root stays at the root.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                let last_is_normal = matches!(out.components().next_back(), Some(Component::Normal(_)));
                if last_is_normal {
                    out.pop();
                } else if !out.has_root() {
                    out.push("..");
                }
            }
            Component::Prefix(_) | Component::RootDir | Component::Normal(_) => out.push(part.as_os_str()),
        }
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(p: &str) -> Target {
        Target::new(Path::new("/ws/proj"), Path::new("/ws/proj").join(p))
    }

    #[test]
    fn normalize_folds_dots() {
        assert_eq!(normalize(Path::new("/a/./b/../c")), PathBuf::from("/a/c"));
        assert_eq!(normalize(Path::new("/a/../../etc")), PathBuf::from("/etc"));
        assert_eq!(normalize(Path::new("a/../../b")), PathBuf::from("../b"));
        assert_eq!(normalize(Path::new("./")), PathBuf::from("."));
    }

    #[test]
    fn dotdot_escape_is_outside() {
        let t = target("../other/secret.txt");
        assert_eq!(t.path, PathBuf::from("/ws/other/secret.txt"));
        assert!(!t.inside());
        assert_eq!(t.shown(), "/ws/other/secret.txt");
    }

    #[test]
    fn inside_paths_are_shown_relative() {
        assert_eq!(target("src/./lib.rs").shown(), "src/lib.rs");
        assert_eq!(target("").shown(), ".");
        assert!(target("src/../Cargo.toml").inside());
        // A sibling whose name merely starts with the workspace's name is not inside.
        let t = Target::new(Path::new("/ws/proj"), PathBuf::from("/ws/project2/x"));
        assert!(!t.inside());
    }

    #[test]
    fn outside_errors_name_the_workspace() {
        let t = Target::new(Path::new("/ws/proj"), PathBuf::from("/etc/passwd"));
        let msg = describe("read", &t, &io::Error::from(io::ErrorKind::NotFound));
        assert!(msg.starts_with("cannot read /etc/passwd: outside the directories this plugin was granted"));
        assert!(msg.contains("the workspace is /ws/proj"));
    }

    #[test]
    fn inside_errors_say_what_went_wrong() {
        let msg = describe("read", &target("nope.txt"), &io::Error::from(io::ErrorKind::NotFound));
        assert!(msg.starts_with("cannot read nope.txt: no such file or directory"), "{msg}");
        let msg = describe("read", &target("src"), &io::Error::from(io::ErrorKind::IsADirectory));
        assert!(msg.contains("it is a directory"), "{msg}");
    }
}
