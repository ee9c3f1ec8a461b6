//! The bundled `files` plugin: `read_file`, `write_file`, `patch` and `search_files` over the
//! workspace.
//!
//! Relative paths start at the workspace. The sandbox decides what may be touched (the manifest
//! asks for the workspace, read-write); paths outside it are still attempted, and the refusal is
//! explained to the model. The logic lives in plain modules (`read`, `patch`, `search`,
//! `paths`) that are unit-tested natively; this file is the thin tool layer.
//!
//! ```text
//! read_file {"path": "src/main.rs", "offset": 1, "limit": 50}
//!      1→fn main() {      (→ is a tab)
//! ```

mod paths;
mod search;

use std::fs;
use std::io;

use regex::RegexBuilder;
use serde::Deserialize;
use talaria_edit::{patch, read};
use talaria_sdk::{Context, JsonSchema, ToolError, export_tools};

use crate::paths::Target;

/// Results `search_files` returns when no limit is given, and the most it returns.
const DEFAULT_SEARCH_LIMIT: usize = 100;
const MAX_SEARCH_LIMIT: usize = 1000;

fn target(ctx: &Context, path: &str) -> Result<Target, ToolError> {
    if path.trim().is_empty() {
        return Err(ToolError::invalid("path is empty: give a file path, relative to the workspace or absolute"));
    }
    Ok(Target::new(&ctx.workspace, ctx.resolve(path)))
}

#[derive(Deserialize, JsonSchema)]
struct ReadFileArgs {
    /// File to read, relative to the workspace or absolute.
    path: String,
    /// First line to show, counting from 1. Default 1.
    offset: Option<usize>,
    /// How many lines to show. Default 500, at most 2000.
    limit: Option<usize>,
}

fn read_file(args: ReadFileArgs, ctx: &Context) -> Result<String, ToolError> {
    let target = target(ctx, &args.path)?;
    let offset = args.offset.unwrap_or(1);
    if offset == 0 {
        return Err(ToolError::invalid("offset counts lines from 1; use offset=1 for the start of the file"));
    }
    let limit = args.limit.unwrap_or(read::DEFAULT_LIMIT).min(read::MAX_LIMIT);
    if limit == 0 {
        return Err(ToolError::invalid("limit must be at least 1 (default 500, at most 2000)"));
    }
    let file = fs::File::open(&target.path).map_err(|e| target.io_error("read", &e))?;
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        return Err(target.io_error("read", &io::Error::from(io::ErrorKind::IsADirectory)));
    }
    let reader = read::sniff(file).map_err(|e| target.io_error("read", &e))?.ok_or_else(|| {
        ToolError::failed(format!(
            "{} looks like a binary file (it has NUL bytes near the start); read_file shows text files only",
            target.shown()
        ))
    })?;
    match read::render(reader, offset, limit) {
        Ok(text) => Ok(text),
        Err(read::ReadError::PastEnd { offset, total }) => {
            Err(ToolError::invalid(talaria_edit::past_end(&target.shown(), offset, total)))
        }
        Err(read::ReadError::Io(e)) => Err(target.io_error("read", &e)),
    }
}

#[derive(Deserialize, JsonSchema)]
struct WriteFileArgs {
    /// File to write, relative to the workspace or absolute. Missing parent directories are created.
    path: String,
    /// The complete new content of the file.
    content: String,
}

fn write_file(args: WriteFileArgs, ctx: &Context) -> Result<String, ToolError> {
    let target = target(ctx, &args.path)?;
    let existed = match fs::metadata(&target.path) {
        Ok(m) if m.is_dir() => {
            return Err(ToolError::invalid(format!(
                "{} is a directory; give the path of a file inside it",
                target.shown()
            )));
        }
        Ok(_) => true,
        Err(_) => false,
    };
    if let Some(parent) = target.path.parent() {
        fs::create_dir_all(parent).map_err(|e| target.io_error("write", &e))?;
    }
    fs::write(&target.path, &args.content).map_err(|e| target.io_error("write", &e))?;
    Ok(talaria_edit::written(&target.shown(), &args.content, existed))
}

#[derive(Deserialize, JsonSchema)]
struct PatchArgs {
    /// File to edit, relative to the workspace or absolute.
    path: String,
    /// The text to find, copied from the file with a few lines of context so it matches once.
    /// Empty (with a file that does not exist yet) creates the file with new_string.
    old_string: String,
    /// The text to put in its place (empty to delete it).
    new_string: String,
    /// Replace every occurrence instead of refusing when old_string matches more than once.
    #[serde(default)]
    replace_all: bool,
}

fn patch(args: PatchArgs, ctx: &Context) -> Result<String, ToolError> {
    let target = target(ctx, &args.path)?;
    let shown = target.shown();
    let before = match fs::read(&target.path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound && args.old_string.is_empty() => {
            if let Some(parent) = target.path.parent() {
                fs::create_dir_all(parent).map_err(|e| target.io_error("write", &e))?;
            }
            fs::write(&target.path, &args.new_string).map_err(|e| target.io_error("create", &e))?;
            return Ok(talaria_edit::created(&shown, &args.new_string));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound && target.inside() => {
            return Err(ToolError::failed(format!(
                "cannot patch {shown}: no such file; to create a file use write_file, or patch with an empty old_string"
            )));
        }
        Err(e) => return Err(target.io_error("read", &e)),
    };
    let before = String::from_utf8(before)
        .map_err(|_| ToolError::failed(format!("{shown} is not UTF-8 text; patch edits text files only")))?;
    let done = patch::apply(&before, &args.old_string, &args.new_string, args.replace_all)
        .map_err(|e| ToolError::invalid(talaria_edit::patch_problem(&shown, &e)))?;
    fs::write(&target.path, &done.content).map_err(|e| target.io_error("write", &e))?;
    Ok(talaria_edit::patched(&shown, &before, &done))
}

/// What `search_files` looks for.
#[derive(Deserialize, JsonSchema, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum SearchTarget {
    // No doc comments on the variants: with them schemars writes `oneOf`/`const`, which some
    // providers reject; without them it writes a plain `enum`.
    #[default]
    Content,
    Files,
}

#[derive(Deserialize, JsonSchema)]
struct SearchFilesArgs {
    /// For target "content": a regular expression (Rust regex syntax), matched against each line.
    /// For target "files": a glob (`*.rs`, `src/**/mod.rs`) or plain text that must appear in the path.
    pattern: String,
    /// Directory (or single file) to search, relative to the workspace or absolute. Default: the workspace.
    path: Option<String>,
    /// "content" (default) to search inside files, "files" to find files by name.
    #[serde(default)]
    target: SearchTarget,
    /// Only look at files matching this glob: `*.rs` matches names, a glob with `/` matches the path
    /// relative to the search directory (`src/**/*.ts`).
    glob: Option<String>,
    /// Match without regard to letter case.
    #[serde(default)]
    case_insensitive: bool,
    /// Most results to return. Default 100, at most 1000.
    limit: Option<usize>,
}

fn search_files(args: SearchFilesArgs, ctx: &Context) -> Result<String, ToolError> {
    if args.pattern.is_empty() {
        return Err(ToolError::invalid("pattern is empty: give a regex (target content) or a glob (target files)"));
    }
    let root = target(ctx, args.path.as_deref().unwrap_or("."))?;
    let limit = args.limit.unwrap_or(DEFAULT_SEARCH_LIMIT).min(MAX_SEARCH_LIMIT);
    if limit == 0 {
        return Err(ToolError::invalid("limit must be at least 1 (default 100, at most 1000)"));
    }
    fs::metadata(&root.path).map_err(|e| root.io_error("search", &e))?;
    let filter = args
        .glob
        .as_deref()
        .map(|g| search::NameFilter::glob(g, args.case_insensitive))
        .transpose()
        .map_err(|e| ToolError::invalid(format!("glob is not a valid glob: {e}")))?;

    let (found, what) = match args.target {
        SearchTarget::Content => {
            let re = RegexBuilder::new(&args.pattern).case_insensitive(args.case_insensitive).build().map_err(|e| {
                ToolError::invalid(format!(
                    "pattern is not a valid regex: {e}\n(to search for literal text, escape regex characters such as ( [ . * with a backslash)"
                ))
            })?;
            (search::content(&root.path, &re, filter.as_ref(), limit), "lines matching")
        }
        SearchTarget::Files => {
            let pattern = search::NameFilter::glob_or_text(&args.pattern, args.case_insensitive)
                .map_err(|e| ToolError::invalid(format!("pattern is not a valid glob: {e}")))?;
            (search::files(&root.path, &pattern, filter.as_ref(), limit), "files matching")
        }
    };
    if found.lines.is_empty() {
        let mut out = format!(
            "no {what} {:?} under {} ({} files looked at; .gitignore'd and hidden files are skipped)",
            args.pattern,
            root.shown(),
            found.files_seen
        );
        if found.unreadable > 0 {
            out.push_str(&format!("; {} files or directories could not be read", found.unreadable));
        }
        return Ok(out);
    }
    Ok(found.render(limit))
}

export_tools! {
    /// Read a text file. Returns its lines, each prefixed with its line number right-aligned and a
    /// tab ("     1\tfirst line"); the numbers are not part of the file. Shows 500 lines by
    /// default (at most 2000): when more remain, the last line says how many lines the file has
    /// and which offset to continue from. Lines over 2000 characters are cut with a marker.
    /// Binary files are refused. Relative paths start at the workspace.
    read_file,
    /// Create or overwrite a file with the given content, creating missing parent directories.
    /// Returns how many bytes and lines were written. To change part of an existing file, prefer
    /// patch.
    write_file,
    /// Edit a file by replacing old_string with new_string, and return a unified diff of the
    /// change. old_string must match exactly once: copy it from the file (without read_file's line
    /// numbers) with enough surrounding lines to be unique, or set replace_all to change every
    /// occurrence. If there is no exact match, lines are matched ignoring trailing whitespace,
    /// then indentation, then whitespace runs, and new_string is re-indented to fit. With an empty
    /// old_string and a path that does not exist yet, the file is created.
    patch,
    /// Search the workspace, skipping hidden files and anything .gitignore'd. With target
    /// "content" (default), pattern is a regex matched line by line and each match is returned as
    /// "path:line:text", paths relative to the searched directory; binary files are skipped. With
    /// target "files", returns the paths of files whose path matches pattern (a glob like
    /// "*.toml", or plain text). glob narrows either mode to matching files. Returns at most limit
    /// results (default 100) and says when more were omitted.
    search_files,
}

#[cfg(test)]
mod tests {
    //! The tools end to end on a temporary workspace (natively, where std::fs is unrestricted).

    use std::path::Path;

    use super::*;

    fn ctx(dir: &Path) -> Context {
        Context { session_id: String::new(), call_id: String::new(), workspace: dir.to_path_buf() }
    }

    fn err_text(e: ToolError) -> String {
        e.to_string()
    }

    #[test]
    fn write_then_read_then_patch() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ctx = ctx(dir.path());
        let wrote = write_file(WriteFileArgs { path: "a/b.txt".into(), content: "one\ntwo\nthree\n".into() }, &ctx);
        assert_eq!(wrote.as_deref(), Ok("wrote 14 bytes (3 lines) to a/b.txt (new file)"));

        let read = read_file(ReadFileArgs { path: "a/b.txt".into(), offset: Some(2), limit: Some(1) }, &ctx);
        assert_eq!(read.as_deref(), Ok("     2\ttwo\n... (file has 3 lines; continue with offset=3)"));

        let patched = patch(
            PatchArgs {
                path: "a/b.txt".into(),
                old_string: "two\n".into(),
                new_string: "2\n".into(),
                replace_all: false,
            },
            &ctx,
        )
        .expect("patch");
        assert!(patched.starts_with("patched a/b.txt (1 replacement, exact match)\n--- a/a/b.txt\n"), "{patched}");
        assert!(patched.contains("-two\n+2\n"), "{patched}");
        assert_eq!(fs::read_to_string(dir.path().join("a/b.txt")).ok().as_deref(), Some("one\n2\nthree\n"));
    }

    #[test]
    fn patch_with_empty_old_creates_a_missing_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ctx = ctx(dir.path());
        let args = PatchArgs {
            path: "new/x.md".into(),
            old_string: String::new(),
            new_string: "hi\n".into(),
            replace_all: false,
        };
        let out = patch(args, &ctx).expect("create");
        assert!(out.starts_with("created new/x.md\n"), "{out}");
        assert_eq!(fs::read_to_string(dir.path().join("new/x.md")).ok().as_deref(), Some("hi\n"));
    }

    #[test]
    fn read_errors_are_explained() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ctx = ctx(dir.path());
        fs::write(dir.path().join("bin"), b"\x7fELF\0\0").expect("write");
        let e = read_file(ReadFileArgs { path: "bin".into(), offset: None, limit: None }, &ctx).map_err(err_text);
        assert!(e.as_ref().is_err_and(|m| m.contains("binary file")), "{e:?}");

        let e =
            read_file(ReadFileArgs { path: "missing.txt".into(), offset: None, limit: None }, &ctx).map_err(err_text);
        assert!(e.as_ref().is_err_and(|m| m.starts_with("cannot read missing.txt: no such file")), "{e:?}");

        let e = read_file(ReadFileArgs { path: "x".into(), offset: Some(0), limit: None }, &ctx);
        assert!(matches!(e, Err(ToolError::InvalidArgs(_))), "{e:?}");

        fs::write(dir.path().join("short"), "a\n").expect("write");
        let e = read_file(ReadFileArgs { path: "short".into(), offset: Some(3), limit: None }, &ctx);
        assert!(matches!(&e, Err(ToolError::InvalidArgs(m)) if m.contains("has 1 lines")), "{e:?}");
    }

    #[test]
    fn paths_escaping_the_workspace_get_the_sandbox_message() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path().join("ws");
        fs::create_dir(&ws).expect("mkdir");
        let ctx = ctx(&ws);
        let e = read_file(ReadFileArgs { path: "../nothing-here".into(), offset: None, limit: None }, &ctx)
            .map_err(err_text);
        let expected = format!("cannot read {}: outside the directories", dir.path().join("nothing-here").display());
        assert!(e.as_ref().is_err_and(|m| m.starts_with(&expected)), "{e:?}");
    }

    #[test]
    fn specs_have_descriptions_and_plain_schemas() {
        use talaria_sdk::__private::ToolSet as _;
        let specs = __TalariaTools::list();
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["read_file", "write_file", "patch", "search_files"]);
        assert!(specs.iter().all(|s| !s.description.is_empty()));
        let search = specs.iter().find(|s| s.name == "search_files").map(|s| s.parameters.as_str()).unwrap_or("");
        assert!(search.contains(r#""enum":["content","files"]"#), "{search}");
        assert!(search.contains(r#""required":["pattern"]"#), "{search}");
    }

    #[test]
    fn search_files_both_modes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ctx = ctx(dir.path());
        fs::create_dir_all(dir.path().join("src")).expect("mkdir");
        fs::write(dir.path().join("src/a.rs"), "fn alpha() {}\nfn beta() {}\n").expect("write");
        fs::write(dir.path().join("notes.txt"), "Alpha notes\n").expect("write");

        let args = |pattern: &str, target, ci| SearchFilesArgs {
            pattern: pattern.into(),
            path: None,
            target,
            glob: None,
            case_insensitive: ci,
            limit: None,
        };
        assert_eq!(
            search_files(args("alpha", SearchTarget::Content, false), &ctx).as_deref(),
            Ok("src/a.rs:1:fn alpha() {}")
        );
        assert_eq!(
            search_files(args("alpha", SearchTarget::Content, true), &ctx).as_deref(),
            Ok("notes.txt:1:Alpha notes\nsrc/a.rs:1:fn alpha() {}")
        );
        assert_eq!(search_files(args("*.rs", SearchTarget::Files, false), &ctx).as_deref(), Ok("src/a.rs"));
        let none = search_files(args("gamma", SearchTarget::Content, false), &ctx).expect("search");
        assert!(none.starts_with("no lines matching \"gamma\" under . (2 files looked at"), "{none}");
        let bad = search_files(args("fn (", SearchTarget::Content, false), &ctx);
        assert!(matches!(&bad, Err(ToolError::InvalidArgs(m)) if m.contains("not a valid regex")), "{bad:?}");
    }
}
