//! What the file tools do to text, apart from where the text lives: numbered reads
//! ([`read::render`]), find-and-replace with whitespace tolerance ([`patch::apply`]) and the
//! sentences that report a write or a patch.
//!
//! The bundled `files` plugin uses it inside the sandbox on the workspace's files; `talaria acp`
//! uses it on the editor's buffers (ACP's `fs` capability), so the model sees the same tools
//! behave the same way through either.
//!
//! ```
//! let done = talaria_edit::patch::apply("a = 1\n", "a = 1", "a = 2", false).expect("matches");
//! assert_eq!(done.content, "a = 2\n");
//! assert!(talaria_edit::patched("x.py", "a = 1\n", &done).starts_with("patched x.py (1 replacement, exact match)"));
//! ```

pub mod patch;
pub mod read;

/// Largest diff a patch report carries, in characters.
pub const MAX_DIFF_CHARS: usize = 20_000;

/// What `write_file` reports after writing `content` to `shown`.
pub fn written(shown: &str, content: &str, existed: bool) -> String {
    let lines = content.lines().count();
    let what = if existed { "replaced the previous content" } else { "new file" };
    format!("wrote {} bytes ({lines} {}) to {shown} ({what})", content.len(), if lines == 1 { "line" } else { "lines" },)
}

/// What `patch` reports after creating `shown` with `content`.
pub fn created(shown: &str, content: &str) -> String {
    format!("created {shown}\n{}", patch::unified_diff(shown, "", content, MAX_DIFF_CHARS))
}

/// What `patch` reports after changing `before` into `done`.
pub fn patched(shown: &str, before: &str, done: &patch::Patched) -> String {
    let diff = patch::unified_diff(shown, before, &done.content, MAX_DIFF_CHARS);
    let times = if done.replacements == 1 {
        "1 replacement".to_string()
    } else {
        format!("{} replacements", done.replacements)
    };
    format!("patched {shown} ({times}, {})\n{diff}", done.fuzz)
}

/// Why `read_file` refused `offset`.
pub fn past_end(shown: &str, offset: usize, total: usize) -> String {
    format!("offset {offset} is past the end of {shown}, which has {total} lines; use an offset from 1 to {total}")
}

/// Why a patch did not apply, as the sentence the model gets (the model's arguments are at
/// fault: they do not match the file).
pub fn patch_problem(shown: &str, e: &patch::PatchError) -> String {
    match e {
        patch::PatchError::Identical | patch::PatchError::EmptyOld => e.to_string(),
        patch::PatchError::NotFound { .. } | patch::PatchError::Ambiguous { .. } => format!("{shown}: {e}"),
    }
}
