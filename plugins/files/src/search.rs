//! The `search_files` walk: regex search over file contents, or a listing of matching file
//! names, both honouring `.gitignore`/`.ignore` and skipping hidden entries, like ripgrep.
//!
//! ```ignore
//! let filter = NameFilter::glob("*.rs", false)?;
//! let found = search::content(root, &Regex::new("fn main")?, Some(&filter), 100);
//! print!("{}", found.render()); // "src/main.rs:3:fn main() {"
//! ```

use std::fs::File;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use globset::{GlobBuilder, GlobMatcher};
use ignore::WalkBuilder;
use regex::Regex;

use crate::read;

/// Files larger than this are not searched.
const MAX_FILE_BYTES: u64 = 20 * 1024 * 1024;
/// A matching line is shown up to this many characters.
const MAX_SHOWN_CHARS: usize = 300;

/// Which files a glob or name pattern selects.
#[derive(Debug, Clone)]
pub enum NameFilter {
    /// A glob without `/`, matched against the file name (`*.rs`).
    Name(GlobMatcher),
    /// A glob with `/`, matched against the path relative to the search root (`src/**/*.rs`).
    Path(GlobMatcher),
    /// Plain text, found anywhere in the relative path.
    Substring { text: String, case_insensitive: bool },
}

impl NameFilter {
    /// A glob; an error names what is wrong with it.
    pub fn glob(pattern: &str, case_insensitive: bool) -> Result<Self, globset::Error> {
        let glob = GlobBuilder::new(pattern)
            .case_insensitive(case_insensitive)
            .literal_separator(true)
            .backslash_escape(true)
            .build()?
            .compile_matcher();
        Ok(if pattern.contains('/') { Self::Path(glob) } else { Self::Name(glob) })
    }

    /// A glob when `pattern` has glob syntax, else a substring of the path.
    pub fn glob_or_text(pattern: &str, case_insensitive: bool) -> Result<Self, globset::Error> {
        if pattern.contains(['*', '?', '[', '{']) {
            Self::glob(pattern, case_insensitive)
        } else {
            let text = if case_insensitive { pattern.to_lowercase() } else { pattern.to_string() };
            Ok(Self::Substring { text, case_insensitive })
        }
    }

    fn matches(&self, rel: &Path) -> bool {
        match self {
            Self::Name(glob) => rel.file_name().is_some_and(|n| glob.is_match(n)),
            Self::Path(glob) => glob.is_match(rel),
            Self::Substring { text, case_insensitive } => {
                let rel = rel.to_string_lossy();
                if *case_insensitive { rel.to_lowercase().contains(text) } else { rel.contains(text.as_str()) }
            }
        }
    }
}

/// What a search found.
#[derive(Debug, Default)]
pub struct Found {
    /// Output lines: `path:line:text` or `path`.
    pub lines: Vec<String>,
    /// The limit was reached and more results exist.
    pub more: bool,
    /// Files looked at.
    pub files_seen: usize,
    /// Files or directories that could not be read.
    pub unreadable: usize,
}

impl Found {
    /// The lines, then notes about omitted results and unreadable files.
    pub fn render(&self, limit: usize) -> String {
        let mut out = self.lines.join("\n");
        if self.more {
            out.push_str(&format!(
                "\n... (more results omitted: showing the first {limit}; narrow the search with path, glob or \
                 a more specific pattern, or raise limit)"
            ));
        }
        if self.unreadable > 0 {
            out.push_str(&format!("\n({} files or directories could not be read and were skipped)", self.unreadable));
        }
        out
    }
}

/// Every file under `root` (or `root` itself when it is a file) that ignore rules and `filter`
/// let through, with its path relative to `root`.
fn walk(
    root: &Path,
    filter: Option<&NameFilter>,
    found: &mut Found,
    mut visit: impl FnMut(&Path, &Path, &mut Found) -> bool,
) {
    let walker = WalkBuilder::new(root)
        .hidden(true)
        .ignore(true)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(false)
        .require_git(false)
        .parents(true)
        .follow_links(false)
        .max_filesize(Some(MAX_FILE_BYTES))
        .sort_by_file_name(|a, b| a.cmp(b))
        .build();
    for entry in walker {
        let Ok(entry) = entry else {
            found.unreadable += 1;
            continue;
        };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let rel = relative(root, entry.path());
        if filter.is_some_and(|f| !f.matches(&rel)) {
            continue;
        }
        found.files_seen += 1;
        if !visit(entry.path(), &rel, found) {
            break;
        }
    }
}

fn relative(root: &Path, path: &Path) -> PathBuf {
    match path.strip_prefix(root) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel.to_path_buf(),
        _ => path.file_name().map_or_else(|| path.to_path_buf(), PathBuf::from),
    }
}

/// Lines matching `re`, at most `limit`, as `path:line:text`. Binary files are skipped.
pub fn content(root: &Path, re: &Regex, filter: Option<&NameFilter>, limit: usize) -> Found {
    let mut found = Found::default();
    walk(root, filter, &mut found, |path, rel, found| {
        let reader = match File::open(path).and_then(read::sniff) {
            Ok(Some(reader)) => reader,
            Ok(None) => return true,
            Err(_) => {
                found.unreadable += 1;
                return true;
            }
        };
        search_reader(reader, re, &rel.display().to_string(), limit, found)
    });
    found
}

/// Search one file's lines; false once the limit is passed.
fn search_reader(mut reader: impl BufRead, re: &Regex, shown: &str, limit: usize, found: &mut Found) -> bool {
    let mut buf = Vec::new();
    let mut number = 0usize;
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(_) => {
                found.unreadable += 1;
                return true;
            }
        }
        number += 1;
        let raw = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let line = String::from_utf8_lossy(raw);
        if re.is_match(&line) {
            if found.lines.len() == limit {
                found.more = true;
                return false;
            }
            let text = shorten(line.trim_end(), MAX_SHOWN_CHARS);
            found.lines.push(format!("{shown}:{number}:{text}"));
        }
    }
}

fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((cut, _)) => format!("{} …", &text[..cut]),
    }
}

/// Paths of files that `pattern` (and `filter`) select, at most `limit`.
pub fn files(root: &Path, pattern: &NameFilter, filter: Option<&NameFilter>, limit: usize) -> Found {
    let mut found = Found::default();
    walk(root, filter, &mut found, |_, rel, found| {
        if !pattern.matches(rel) {
            return true;
        }
        if found.lines.len() == limit {
            found.more = true;
            return false;
        }
        found.lines.push(rel.display().to_string());
        true
    });
    found
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        let files: &[(&str, &[u8])] = &[
            ("src/main.rs", b"fn main() {\n    helper();\n}\n"),
            ("src/lib/helper.rs", b"pub fn helper() {}\n// Helper docs\n"),
            ("README.md", b"call helper() here\n"),
            ("target/out.rs", b"fn helper() {}\n"),
            (".hidden/x.rs", b"fn helper() {}\n"),
            ("image.bin", b"helper\0\x01\x02"),
            (".gitignore", b"target/\n"),
        ];
        for (path, body) in files {
            let path = dir.path().join(path);
            fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            fs::write(path, body).expect("write");
        }
        dir
    }

    fn re(p: &str) -> Regex {
        Regex::new(p).expect("regex")
    }

    #[test]
    fn content_search_respects_gitignore_hidden_and_binary() {
        let dir = tree();
        let found = content(dir.path(), &re("helper"), None, 100);
        assert_eq!(
            found.lines,
            vec![
                "README.md:1:call helper() here",
                "src/lib/helper.rs:1:pub fn helper() {}",
                "src/main.rs:2:    helper();"
            ]
        );
        assert!(!found.more);
    }

    #[test]
    fn content_search_with_glob_and_limit() {
        let dir = tree();
        let rs = NameFilter::glob("*.rs", false).expect("glob");
        let found = content(dir.path(), &re("(?i)helper"), Some(&rs), 2);
        assert_eq!(found.lines, vec!["src/lib/helper.rs:1:pub fn helper() {}", "src/lib/helper.rs:2:// Helper docs"]);
        assert!(found.more);
        assert!(found.render(2).contains("more results omitted: showing the first 2"));
    }

    #[test]
    fn content_search_of_a_subdirectory_is_relative_to_it() {
        let dir = tree();
        let found = content(&dir.path().join("src"), &re("helper"), None, 100);
        assert_eq!(found.lines, vec!["lib/helper.rs:1:pub fn helper() {}", "main.rs:2:    helper();"]);
    }

    #[test]
    fn content_search_of_a_single_file_shows_its_name() {
        let dir = tree();
        let found = content(&dir.path().join("src/main.rs"), &re("main"), None, 100);
        assert_eq!(found.lines, vec!["main.rs:1:fn main() {"]);
    }

    #[test]
    fn files_by_glob_and_by_text() {
        let dir = tree();
        let pattern = NameFilter::glob_or_text("*.rs", false).expect("glob");
        assert_eq!(files(dir.path(), &pattern, None, 100).lines, vec!["src/lib/helper.rs", "src/main.rs"]);
        let pattern = NameFilter::glob_or_text("src/**/*.rs", false).expect("glob");
        assert_eq!(files(dir.path(), &pattern, None, 100).lines, vec!["src/lib/helper.rs", "src/main.rs"]);
        let pattern = NameFilter::glob_or_text("HELPER", true).expect("text");
        assert_eq!(files(dir.path(), &pattern, None, 100).lines, vec!["src/lib/helper.rs"]);
        let pattern = NameFilter::glob_or_text("HELPER", false).expect("text");
        assert!(files(dir.path(), &pattern, None, 100).lines.is_empty());
    }

    #[test]
    fn name_glob_does_not_cross_directories_but_path_glob_does() {
        let name = NameFilter::glob("*.rs", false).expect("glob");
        assert!(name.matches(Path::new("a/b/c.rs")));
        let path = NameFilter::glob("src/*.rs", false).expect("glob");
        assert!(path.matches(Path::new("src/main.rs")));
        assert!(!path.matches(Path::new("src/lib/helper.rs")));
    }

    #[test]
    fn long_matching_lines_are_shortened() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(dir.path().join("min.js"), format!("{}needle{}\n", "a".repeat(400), "b".repeat(400))).expect("write");
        let found = content(dir.path(), &re("needle"), None, 10);
        assert_eq!(found.lines.len(), 1);
        assert!(found.lines[0].ends_with(" …"));
        assert!(found.lines[0].chars().count() < 320);
    }
}
