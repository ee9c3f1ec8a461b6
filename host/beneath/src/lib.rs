//! Reading content the host does not trust without leaving it.
//!
//! The workspace belongs to the user, but anything in it may have been written by a plugin
//! granted `fs:rw`, or by whoever wrote the repository. The host reads some of it itself: context
//! files (`AGENTS.md`, `.talaria.md`), a project's plugins and lockfile. A link must never lead
//! such a read somewhere else: `AGENTS.md -> ../../home/me/.talaria/.env` or
//! `-> /proc/self/environ` would put the user's secrets into the model's prompt.
//!
//! A [`Root`] is an open directory handle. Every path below it is resolved by `cap-primitives`
//! (the kernel's `openat2(RESOLVE_BENEATH)` where there is one) so that no step leaves the
//! directory: a link that stays inside is followed, one that points out is refused.
//!
//! Invariants:
//! 1. Nothing outside the root is opened through a path below it, whatever links it holds.
//! 2. Only regular files are read (no FIFO that blocks, no device), and never more than the
//!    limit given.
//! 3. A handle, once open, keeps naming the same directory: a directory renamed or swapped for a
//!    link after it was opened is never followed, so there is no window between a check and an
//!    open.
//! 4. A missing file is `Ok(None)`; everything else that stops a read is an [`Error`] naming the
//!    path.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # std::fs::write(dir.path().join("AGENTS.md"), "be brief")?;
//! # std::os::unix::fs::symlink("/etc/passwd", dir.path().join("CLAUDE.md"))?;
//! use std::path::Path;
//! use talaria_beneath::{Error, Root};
//! let root = Root::open(dir.path())?;
//! assert_eq!(root.read(Path::new("AGENTS.md"), 1 << 20)?, Some(b"be brief".to_vec()));
//! assert!(matches!(root.read(Path::new("CLAUDE.md"), 1 << 20), Err(Error::Escapes { .. })));
//! assert_eq!(root.read(Path::new("missing.md"), 1 << 20)?, None);
//! # Ok(()) }
//! ```

use std::fs::File;
use std::io::{self, Read as _};
use std::path::{Path, PathBuf};

use std::os::unix::fs::OpenOptionsExt as _;

use cap_primitives::fs::{FollowSymlinks, OpenOptions, OpenOptionsExt as _};

/// Why something below a root was not read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A link (or `..`) would lead out of the root.
    #[error("{} leads out of {} (through a link or `..`), so it was not read", path.display(), root.display())]
    Escapes { path: PathBuf, root: PathBuf },
    /// A directory, FIFO, socket or device where a file was expected, or a file where a
    /// directory was.
    #[error("{} is not a {expected}, so it was not read", path.display())]
    WrongType { path: PathBuf, expected: &'static str },
    #[error("{} is larger than {limit} bytes, so it was not read", path.display())]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
}

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    /// A real directory (a link to one is not).
    pub is_dir: bool,
}

/// An open directory that paths below it cannot leave.
#[derive(Debug)]
pub struct Root {
    dir: File,
    path: PathBuf,
}

impl Root {
    /// Open `path` itself (links in `path` are followed: whoever names the root chose it).
    ///
    /// # Errors
    /// It does not exist or is not a directory.
    pub fn open(path: &Path) -> io::Result<Root> {
        let dir =
            std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC).open(path)?;
        Ok(Root { dir, path: path.to_path_buf() })
    }

    /// The path the root was opened as, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open directory.
    pub fn as_file(&self) -> &File {
        &self.dir
    }

    /// The open directory, taken.
    pub fn into_file(self) -> File {
        self.dir
    }

    /// The directory `rel` below this one, or `None` when there is none.
    ///
    /// # Errors
    /// It leads out, is not a directory, or cannot be opened.
    pub fn dir(&self, rel: &Path) -> Result<Option<Root>, Error> {
        match cap_primitives::fs::open_dir(&self.dir, rel) {
            Ok(dir) => Ok(Some(Root { dir, path: self.path.join(rel) })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
                Err(Error::WrongType { path: self.path.join(rel), expected: "directory" })
            }
            Err(e) => Err(self.error(rel, e)),
        }
    }

    /// The whole of the regular file `rel`, if it exists and is at most `limit` bytes.
    ///
    /// # Errors
    /// It leads out, is not a regular file, is larger than `limit`, or cannot be read.
    pub fn read(&self, rel: &Path, limit: u64) -> Result<Option<Vec<u8>>, Error> {
        let mut options = OpenOptions::new();
        // Non-blocking, so a FIFO planted under a file's name cannot hold the host up at open.
        // Links are followed (as long as they stay inside).
        options.read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
        let file = match cap_primitives::fs::open(&self.dir, rel, &options) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.error(rel, e)),
        };
        let path = || self.path.join(rel);
        let meta = file.metadata().map_err(|source| Error::Io { path: path(), source })?;
        if !meta.is_file() {
            return Err(Error::WrongType { path: path(), expected: "regular file" });
        }
        if meta.len() > limit {
            return Err(Error::TooLarge { path: path(), limit });
        }
        let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
        file.take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|source| Error::Io { path: path(), source })?;
        if bytes.len() as u64 > limit {
            return Err(Error::TooLarge { path: path(), limit });
        }
        Ok(Some(bytes))
    }

    /// Whether `rel` is a regular file (links inside the root followed).
    ///
    /// # Errors
    /// It leads out, or cannot be looked at.
    pub fn is_file(&self, rel: &Path) -> Result<bool, Error> {
        match cap_primitives::fs::stat(&self.dir, rel, FollowSymlinks::Yes) {
            Ok(meta) => Ok(meta.is_file()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(self.error(rel, e)),
        }
    }

    /// The entries of this directory, sorted by name; names that are not UTF-8 are left out.
    ///
    /// # Errors
    /// It cannot be listed.
    pub fn entries(&self) -> Result<Vec<Entry>, Error> {
        let io = |source| Error::Io { path: self.path.clone(), source };
        let mut entries = Vec::new();
        for entry in cap_primitives::fs::read_base_dir(&self.dir).map_err(io)? {
            let entry = entry.map_err(io)?;
            let Ok(name) = entry.file_name().into_string() else { continue };
            let is_dir = entry.file_type().map_err(io)?.is_dir();
            entries.push(Entry { name, is_dir });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    fn error(&self, rel: &Path, e: io::Error) -> Error {
        let path = self.path.join(rel);
        if is_escape(&e) { Error::Escapes { path, root: self.path.clone() } } else { Error::Io { path, source: e } }
    }
}

/// Whether `e` is `cap-primitives` refusing a path that leads out of its directory (its own error,
/// which carries no OS error code, or the kernel's `EXDEV` from `RESOLVE_BENEATH`), or a link loop.
pub fn is_escape(e: &io::Error) -> bool {
    match e.raw_os_error() {
        None => e.kind() == io::ErrorKind::PermissionDenied,
        Some(code) => code == libc::EXDEV || code == libc::ELOOP,
    }
}

/// Where an open file or directory really is now (through `/proc/self/fd`), whatever path it
/// was opened by.
///
/// # Errors
/// `/proc` is not mounted, or the file is gone.
pub fn real_path(file: &File) -> io::Result<PathBuf> {
    use std::os::fd::AsRawFd as _;
    std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is the test failing
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    const LIMIT: u64 = 1 << 20;

    fn setup() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("docs")).unwrap();
        std::fs::write(dir.path().join("secret.env"), "KEY=s3cret").unwrap();
        std::fs::write(ws.join("docs/guide.md"), "guide").unwrap();
        (dir, ws)
    }

    #[test]
    fn links_inside_are_followed_and_links_out_are_refused() {
        let (_dir, ws) = setup();
        symlink("docs/guide.md", ws.join("AGENTS.md")).unwrap();
        symlink("../secret.env", ws.join("CLAUDE.md")).unwrap();
        symlink("/proc/self/environ", ws.join("env.md")).unwrap();
        symlink("docs/../../secret.env", ws.join("sneaky.md")).unwrap();
        let root = Root::open(&ws).unwrap();
        assert_eq!(root.read(Path::new("AGENTS.md"), LIMIT).unwrap(), Some(b"guide".to_vec()));
        for name in ["CLAUDE.md", "env.md", "sneaky.md", "../secret.env"] {
            match root.read(Path::new(name), LIMIT) {
                Err(Error::Escapes { path, .. }) => assert_eq!(path, ws.join(name)),
                other => panic!("{name}: {other:?}"),
            }
        }
        let e = root.read(Path::new("CLAUDE.md"), LIMIT).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "{} leads out of {} (through a link or `..`), so it was not read",
                ws.join("CLAUDE.md").display(),
                ws.display()
            )
        );
    }

    #[test]
    fn only_small_regular_files_are_read() {
        let (_dir, ws) = setup();
        let root = Root::open(&ws).unwrap();
        assert!(matches!(root.read(Path::new("docs"), LIMIT), Err(Error::WrongType { .. })));
        let fifo = std::ffi::CString::new(ws.join("pipe.md").as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo only reads the NUL-terminated path.
        #[allow(unsafe_code)]
        let made = unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) };
        assert_eq!(made, 0);
        assert!(matches!(root.read(Path::new("pipe.md"), LIMIT), Err(Error::WrongType { .. })));
        std::fs::write(ws.join("big.md"), vec![b'x'; 100]).unwrap();
        assert!(matches!(root.read(Path::new("big.md"), 99), Err(Error::TooLarge { limit: 99, .. })));
        assert_eq!(root.read(Path::new("big.md"), 100).unwrap().map(|b| b.len()), Some(100));
        assert_eq!(root.read(Path::new("nothing.md"), LIMIT).unwrap(), None);
    }

    #[test]
    fn a_directory_swapped_for_a_link_after_opening_is_not_followed() {
        let (dir, ws) = setup();
        let root = Root::open(&ws).unwrap();
        let docs = root.dir(Path::new("docs")).unwrap().unwrap();
        // Move the real directory away and put a link to the outside in its place.
        std::fs::rename(ws.join("docs"), ws.join("moved")).unwrap();
        symlink(dir.path(), ws.join("docs")).unwrap();
        assert_eq!(docs.read(Path::new("guide.md"), LIMIT).unwrap(), Some(b"guide".to_vec()));
        assert_eq!(real_path(docs.as_file()).unwrap(), ws.canonicalize().unwrap().join("moved"));
        assert!(matches!(root.dir(Path::new("docs")), Err(Error::Escapes { .. })));
        let names: Vec<String> = root.entries().unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["docs", "moved"]);
    }
}
