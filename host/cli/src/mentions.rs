//! `@path` in a message attaches that file of the workspace: its text follows the message in a
//! fence no line of it can close; an image (PNG, JPEG, GIF, WebP, up to [`MAX_IMAGE_BYTES`],
//! its type read from its bytes, not its name) goes with the message as an image, when the model
//! takes images, else it is refused saying so. Only a regular file inside the workspace is read: a path that
//! leads out (`..`, an absolute path elsewhere, a link whose target is outside), a FIFO or
//! device, a file over [`MAX_ATTACHED_BYTES`] or one that is not UTF-8 text is refused with a
//! note, and the message goes without it. `@` inside a word (`me@host`) is not a mention.

use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use talaria_protocol::Image;

/// Most bytes of one attached file.
pub const MAX_ATTACHED_BYTES: u64 = 256 * 1024;
/// Most files one message attaches.
const MAX_FILES: usize = 10;

/// A message with its mentions expanded.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Expanded {
    pub text: String,
    /// What was attached, as the user named it, with its size.
    pub attached: Vec<String>,
    /// Mentions refused, each saying why.
    pub refused: Vec<String>,
    pub images: Vec<Image>,
}

/// Names of image files, by extension.
const IMAGE_EXTENSIONS: &[&str] = &["png", "jpg", "jpeg", "gif", "webp"];

pub use talaria_agent::images::MAX_IMAGE_BYTES;

/// Expand the `@path` mentions of `text` against `workspace`; `images`: `Ok` when the model
/// takes images, else why not.
pub fn expand(text: &str, workspace: &Path, images: &Result<(), String>) -> Expanded {
    let mut out = Expanded { text: text.to_string(), ..Expanded::default() };
    let mut seen: Vec<&str> = Vec::new();
    for word in text.split_whitespace() {
        let Some(path) = word.strip_prefix('@') else { continue };
        let path = path.trim_end_matches([',', '.', ';', ':', '!', '?', ')', ']', '"', '\'']);
        if path.is_empty() || seen.contains(&path) {
            continue;
        }
        seen.push(path);
        if out.attached.len() >= MAX_FILES {
            out.refused.push(format!("@{path}: at most {MAX_FILES} files go with one message"));
            continue;
        }
        let ext = Path::new(path).extension().and_then(|e| e.to_str()).unwrap_or_default().to_ascii_lowercase();
        if IMAGE_EXTENSIONS.contains(&ext.as_str()) {
            match images.as_ref().map_err(Clone::clone).and_then(|()| image(workspace, path)) {
                Ok(image) => {
                    let kib = image.data.len() * 3 / 4 / 1024;
                    out.attached.push(format!("{path} ({}, {kib} KiB)", image.media_type));
                    out.images.push(image);
                }
                Err(why) => out.refused.push(format!("@{path}: {why}")),
            }
            continue;
        }
        match read(workspace, path) {
            Ok(content) => {
                let lines = content.lines().count();
                out.attached.push(format!("{path} ({})", crate::ui::count(lines, "line", "lines")));
                out.text.push_str(&attachment(path, &content));
            }
            Err(why) => out.refused.push(format!("@{path}: {why}")),
        }
    }
    out
}

/// The file's text in a fence its own lines cannot close.
fn attachment(path: &str, content: &str) -> String {
    let longest = content.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    let lang = Path::new(path).extension().and_then(|e| e.to_str()).unwrap_or_default();
    format!("\n\nThe user attached {path}:\n{fence}{lang}\n{}\n{fence}", content.trim_end_matches('\n'))
}

/// The text of `path` (relative to `workspace`, or absolute inside it), or why not.
fn read(workspace: &Path, path: &str) -> Result<String, String> {
    let bytes = bytes_inside(workspace, path, MAX_ATTACHED_BYTES, "ask the model to read the part you need")?;
    if bytes.contains(&0) {
        return Err("it is not text".into());
    }
    String::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".into())
}

/// `path` as an image, its type read from its first bytes.
fn image(workspace: &Path, path: &str) -> Result<Image, String> {
    let bytes = bytes_inside(workspace, path, MAX_IMAGE_BYTES, "make it smaller")?;
    talaria_agent::images::from_bytes(&bytes).map_err(|e| e.to_string())
}

/// The bytes of a regular file inside `workspace`, at most `cap` of them (`smaller`: what to do
/// about a bigger one).
fn bytes_inside(workspace: &Path, path: &str, cap: u64, smaller: &str) -> Result<Vec<u8>, String> {
    let root = workspace.canonicalize().map_err(|e| format!("the workspace cannot be read: {e}"))?;
    let named = root.join(path);
    let real = match named.canonicalize() {
        Ok(real) => real,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err("no such file in the workspace".into()),
        Err(e) => return Err(e.to_string()),
    };
    if !real.starts_with(&root) {
        return Err(format!("it is outside the workspace ({}): only files inside it are attached", shown(&real)));
    }
    // The resolved path has no links left; refuse one swapped in since, and never wait on a FIFO.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&real)
        .map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if meta.is_dir() {
        return Err("it is a directory: name a file in it".into());
    }
    if !meta.is_file() {
        return Err("it is not a regular file (a FIFO, socket or device)".into());
    }
    if meta.len() > cap {
        return Err(format!(
            "it is {} KiB, more than the {} KiB attached at once: {smaller}",
            meta.len() / 1024,
            cap / 1024
        ));
    }
    let mut bytes = Vec::new();
    file.take(cap + 1).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    if bytes.len() as u64 > cap {
        return Err(format!("it grew past {} KiB while being read", cap / 1024));
    }
    Ok(bytes)
}

fn shown(p: &Path) -> String {
    talaria_runtime::visible(&p.display().to_string(), 200)
}

/// Completions for the `@path` being typed (`typed` without its `@`): entries of the named
/// directory of the workspace that start with the last part, directories with a `/`.
pub fn complete(workspace: &Path, typed: &str) -> Vec<String> {
    let (dir, prefix) = match typed.rfind('/') {
        Some(i) => (&typed[..=i], &typed[i + 1..]),
        None => ("", typed),
    };
    let Ok(entries) = std::fs::read_dir(workspace.join(dir)) else { return Vec::new() };
    let mut out: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            if !name.starts_with(prefix) || (name.starts_with('.') && !prefix.starts_with('.')) {
                return None;
            }
            let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
            Some(format!("@{dir}{name}{}", if is_dir { "/" } else { "" }))
        })
        .collect();
    out.sort();
    out.truncate(50);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mention_attaches_the_file_after_the_message() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::create_dir(dir.path().join("src")).expect("mkdir");
        std::fs::write(dir.path().join("src/a.rs"), "fn a() {}\n").expect("write");
        let out = expand("explain @src/a.rs, please (and me@host)", dir.path(), &Ok(()));
        assert_eq!(out.refused, Vec::<String>::new());
        assert_eq!(out.attached, ["src/a.rs (1 line)"]);
        assert_eq!(
            out.text,
            "explain @src/a.rs, please (and me@host)\n\nThe user attached src/a.rs:\n```rs\nfn a() {}\n```"
        );
        assert_eq!(complete(dir.path(), "sr"), ["@src/"]);
        assert_eq!(complete(dir.path(), "src/"), ["@src/a.rs"]);
    }

    #[test]
    fn images_go_as_images_when_the_model_takes_them() {
        let dir = tempfile::tempdir().expect("dir");
        let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
        std::fs::write(dir.path().join("shot.png"), png).expect("write");
        std::fs::write(dir.path().join("fake.jpg"), "<svg onload=alert(1)>").expect("write");
        let out = expand("what is in @shot.png and @fake.jpg", dir.path(), &Ok(()));
        assert_eq!(out.images.len(), 1);
        assert_eq!(out.images[0].media_type, "image/png");
        assert_eq!(out.images[0].data, "iVBORw0KGgoAAAANSUhEUg==");
        assert_eq!(out.text, "what is in @shot.png and @fake.jpg", "images do not go into the text");
        assert_eq!(out.refused, ["@fake.jpg: it is not a PNG, JPEG, GIF or WebP image, whatever it is called"]);
        let no = expand("look @shot.png", dir.path(), &Err("custom/m does not take images".into()));
        assert!(no.images.is_empty());
        assert_eq!(no.refused, ["@shot.png: custom/m does not take images"]);
    }

    #[test]
    fn nothing_outside_the_workspace_or_not_a_file_is_read() {
        let outside = tempfile::tempdir().expect("dir");
        std::fs::write(outside.path().join("secret.txt"), "the secret").expect("write");
        let dir = tempfile::tempdir().expect("dir");
        let ws = dir.path();
        std::os::unix::fs::symlink(outside.path().join("secret.txt"), ws.join("link.txt")).expect("link");
        std::os::unix::fs::symlink(outside.path(), ws.join("out")).expect("link");
        let fifo = ws.join("pipe");
        let c = std::ffi::CString::new(fifo.to_str().expect("utf8")).expect("cstr");
        #[allow(unsafe_code)]
        // SAFETY: a valid NUL-terminated path.
        let made = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
        assert_eq!(made, 0);
        std::fs::write(ws.join("big.log"), vec![b'a'; usize::try_from(MAX_ATTACHED_BYTES).expect("fits") + 1])
            .expect("write");
        std::fs::write(ws.join("bin"), b"a\0b").expect("write");
        let secret = outside.path().join("secret.txt");
        let text = format!(
            "@../{} @link.txt @out/secret.txt @{} @pipe @big.log @bin @missing",
            outside.path().file_name().and_then(|n| n.to_str()).expect("name"),
            secret.display()
        );
        let out = expand(&text, ws, &Ok(()));
        assert!(out.attached.is_empty(), "{:?}", out.attached);
        assert!(!out.text.contains("the secret"), "{}", out.text);
        let why: Vec<&str> = out.refused.iter().map(|r| r.split_once(": ").map_or("", |(_, w)| w)).collect();
        assert!(why[..4].iter().all(|w| w.starts_with("it is outside the workspace")), "{why:?}");
        assert_eq!(why[4], "it is not a regular file (a FIFO, socket or device)");
        assert!(why[5].starts_with("it is 256 KiB, more than the 256 KiB"), "{why:?}");
        assert_eq!(why[6..], ["it is not text", "no such file in the workspace"]);
    }
}
