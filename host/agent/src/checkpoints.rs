//! Checkpoints: the files a tool call is about to change, kept before it runs, so a session's
//! changes can be rolled back (`/rollback`, `talaria checkpoints`).
//!
//! - **When.** Before a call of a tool annotated as writing the workspace paths its arguments
//!   name (`write_file`, `patch`, ...): those paths. Before a `terminal` command the
//!   dangerous-command check flags (`rm -rf`, `mv` over files, `find -delete`, ...): every
//!   existing workspace path among its words, directories whole. A path that does not exist is
//!   kept as absent, so a rollback removes what the call created.
//! - **Where.** `$TALARIA_HOME/checkpoints/`, never in the workspace: `objects/SHA256` holds
//!   each content once; `sessions/SESSION.json` lists the session's checkpoints, each with its
//!   files' digests before the call and after it.
//! - **Limits.** At most [`MAX_FILES`] files and [`MAX_FILE_BYTES`] per file in one
//!   checkpoint (what is left out is listed); when the objects pass the cap
//!   (`[checkpoints] max_mb`, default 512), the oldest checkpoints of every session go first.
//! - **Safety.** Files are read below the workspace only (a link leading out is not followed);
//!   a restore writes only below the workspace, through real directories, and never over a file
//!   that changed since the call unless told to.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Digest as _;
use talaria_protocol::ToolAnnotations;

/// Most files one checkpoint keeps.
pub const MAX_FILES: usize = 5000;
/// Largest file a checkpoint keeps.
pub const MAX_FILE_BYTES: u64 = 20 * 1024 * 1024;
/// Default cap of all checkpoints' contents.
pub const DEFAULT_MAX_BYTES: u64 = 512 * 1024 * 1024;

/// One file in a checkpoint: its path below the workspace and its digest before the call
/// (`None`: it did not exist) and after it (`None`: gone; absent when not recorded).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileState {
    pub path: String,
    pub before: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Option<String>>,
}

/// What was kept before one tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// 1, 2, ... within its session.
    pub n: u32,
    /// Unix milliseconds.
    pub at: i64,
    pub tool: String,
    pub call_id: String,
    /// What the call was, in a line: `patch src/main.rs`, `terminal: rm -rf build`.
    pub what: String,
    /// The workspace the paths are below (absolute).
    pub workspace: String,
    pub files: Vec<FileState>,
    /// Paths it did not keep, with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
}

/// A checkpoint being made: the call runs between [`Checkpoints::before`] and
/// [`Checkpoints::after`].
#[derive(Debug)]
pub struct Ticket {
    session: String,
    n: u32,
}

/// Whether a shell command is one to keep files before.
pub type Destructive = Box<dyn Fn(&str) -> bool + Send + Sync>;

/// The checkpoints under one talaria home.
pub struct Checkpoints {
    dir: PathBuf,
    max_bytes: u64,
    destructive: Destructive,
    /// One writer at a time in this process (sessions' files are rewritten whole).
    lock: Mutex<()>,
}

/// Why a restore did not happen.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("{0}")]
    NotFound(String),
    /// Files changed after the call; they are listed.
    #[error("{} changed since that call: restoring would lose those changes (restore anyway with --yes, or `/rollback N force`)", .0.join(", "))]
    Changed(Vec<String>),
    #[error("{0}")]
    Io(String),
}

/// What a restore did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Restored {
    pub written: Vec<String>,
    pub removed: Vec<String>,
}

impl Checkpoints {
    /// The checkpoints in `home/checkpoints`, capped at `max_bytes`; `destructive` says which
    /// shell commands are kept before.
    pub fn new(home: &Path, max_bytes: u64, destructive: Destructive) -> Self {
        Self { dir: home.join("checkpoints"), max_bytes, destructive, lock: Mutex::new(()) }
    }

    /// For reading and restoring only (no command is judged).
    pub fn open(home: &Path) -> Self {
        Self::new(home, DEFAULT_MAX_BYTES, Box::new(|_| false))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keep what a call of `tool` with `args` may change in `workspace`, if anything; the call
    /// runs next, and [`Checkpoints::after`] records what it left.
    pub fn before(
        &self,
        session: &str,
        tool: &str,
        call_id: &str,
        args: &Value,
        annotations: Option<&ToolAnnotations>,
        workspace: &Path,
    ) -> Option<Ticket> {
        let (targets, what) = self.targets(tool, args, annotations, workspace)?;
        let root = talaria_beneath::Root::open(workspace).ok()?;
        let mut files = Vec::new();
        let mut skipped = Vec::new();
        for rel in targets {
            self.keep(&root, &rel, &mut files, &mut skipped);
        }
        if files.is_empty() {
            return None;
        }
        let _guard = self.lock();
        let mut list = self.load(session).unwrap_or_default();
        let n = list.last().map_or(1, |c| c.n + 1);
        list.push(Checkpoint {
            n,
            at: jiff::Timestamp::now().as_millisecond(),
            tool: tool.to_string(),
            call_id: call_id.to_string(),
            what,
            workspace: workspace.display().to_string(),
            files,
            skipped,
        });
        if let Err(e) = self.save(session, &list) {
            tracing::warn!("checkpoint not saved: {e}");
            return None;
        }
        if let Err(e) = self.prune() {
            tracing::warn!("checkpoints not pruned: {e}");
        }
        Some(Ticket { session: session.to_string(), n })
    }

    /// Record what the call left of the files its checkpoint kept.
    pub fn after(&self, ticket: &Ticket) {
        let _guard = self.lock();
        let Ok(mut list) = self.load(&ticket.session) else { return };
        let Some(cp) = list.iter_mut().find(|c| c.n == ticket.n) else { return };
        let workspace = PathBuf::from(&cp.workspace);
        let Ok(root) = talaria_beneath::Root::open(&workspace) else { return };
        for f in &mut cp.files {
            f.after = Some(current(&root, Path::new(&f.path)));
        }
        if let Err(e) = self.save(&ticket.session, &list) {
            tracing::warn!("checkpoint not updated: {e}");
        }
    }

    /// The workspace paths (relative) a call may change, and what the call is in a line.
    /// Whether [`Checkpoints::before`] would keep anything for this call: a tool that changes
    /// no file (by its annotations, or a terminal command that destroys nothing) needs no
    /// trip to a blocking thread.
    pub fn may_keep(&self, tool: &str, args: &Value, annotations: Option<&ToolAnnotations>, workspace: &Path) -> bool {
        self.targets(tool, args, annotations, workspace).is_some()
    }

    fn targets(
        &self,
        tool: &str,
        args: &Value,
        annotations: Option<&ToolAnnotations>,
        workspace: &Path,
    ) -> Option<(Vec<PathBuf>, String)> {
        if tool == "terminal" {
            let command = args.get("command")?.as_str()?;
            if !(self.destructive)(command) {
                return None;
            }
            let base = match args.get("workdir").and_then(Value::as_str) {
                Some(dir) => talaria_protocol::lexical(&workspace.join(dir)),
                None => workspace.to_path_buf(),
            };
            let words =
                shlex::split(command).unwrap_or_else(|| command.split_whitespace().map(str::to_string).collect());
            let mut paths = Vec::new();
            for word in words.iter().filter(|w| !w.starts_with('-') && !w.is_empty()) {
                let path = talaria_protocol::lexical(&base.join(word));
                if let Ok(rel) = path.strip_prefix(workspace)
                    && std::fs::symlink_metadata(&path).is_ok()
                    && !paths.contains(&rel.to_path_buf())
                {
                    paths.push(rel.to_path_buf());
                }
            }
            let line: String = command.chars().take(120).collect();
            return (!paths.is_empty()).then(|| (paths, format!("terminal: {line}")));
        }
        let a = annotations?;
        if a.read_only || a.paths.is_empty() {
            return None;
        }
        let paths: Vec<PathBuf> = a
            .touched(args, workspace)
            .into_iter()
            .filter_map(|p| p.strip_prefix(workspace).ok().map(Path::to_path_buf))
            .filter(|rel| !rel.as_os_str().is_empty())
            .collect();
        let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        (!paths.is_empty()).then(|| (paths, format!("{tool} {}", shown.join(" "))))
    }

    /// Keep `rel` (a file, a directory whole, or an absent path) into `files`.
    fn keep(&self, root: &talaria_beneath::Root, rel: &Path, files: &mut Vec<FileState>, skipped: &mut Vec<String>) {
        let shown = rel.display().to_string();
        if files.iter().any(|f| f.path == shown) {
            return;
        }
        if files.len() >= MAX_FILES {
            if skipped.last().is_none_or(|s| !s.starts_with("more than")) {
                skipped.push(format!("more than {MAX_FILES} files: the rest"));
            }
            return;
        }
        let meta = std::fs::symlink_metadata(root.path().join(rel));
        match meta {
            Err(_) => files.push(FileState { path: shown, before: None, mode: None, after: None }),
            Ok(m) if m.file_type().is_symlink() => skipped.push(format!("{shown} (a link)")),
            Ok(m) if m.is_dir() => match root.dir(rel) {
                Ok(Some(dir)) => match dir.entries() {
                    Ok(entries) => {
                        for e in entries {
                            self.keep(root, &rel.join(&e.name), files, skipped);
                        }
                    }
                    Err(e) => skipped.push(format!("{shown} ({e})")),
                },
                Ok(None) => {}
                Err(e) => skipped.push(format!("{shown} ({e})")),
            },
            Ok(m) if m.is_file() => match root.read(rel, MAX_FILE_BYTES) {
                Ok(Some(bytes)) => match self.put(&bytes) {
                    Ok(sha) => {
                        use std::os::unix::fs::PermissionsExt as _;
                        files.push(FileState {
                            path: shown,
                            before: Some(sha),
                            mode: Some(m.permissions().mode() & 0o777),
                            after: None,
                        });
                    }
                    Err(e) => skipped.push(format!("{shown} ({e})")),
                },
                Ok(None) => files.push(FileState { path: shown, before: None, mode: None, after: None }),
                Err(e) => skipped.push(format!("{shown} ({e})")),
            },
            Ok(_) => skipped.push(format!("{shown} (not a regular file)")),
        }
    }

    /// Store `bytes` once; their digest.
    fn put(&self, bytes: &[u8]) -> io::Result<String> {
        let sha = hex(&sha2::Sha256::digest(bytes));
        let path = self.dir.join("objects").join(&sha);
        if !path.exists() {
            private_write(&path, bytes)?;
        }
        Ok(sha)
    }

    /// The content kept under `sha`.
    ///
    /// # Errors
    /// It is not there (pruned, or the store was edited).
    pub fn content(&self, sha: &str) -> io::Result<Vec<u8>> {
        if !sha.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(io::Error::other(format!("`{sha}` is not a digest")));
        }
        std::fs::read(self.dir.join("objects").join(sha))
    }

    fn session_file(&self, session: &str) -> PathBuf {
        let safe: String =
            session.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
        self.dir.join("sessions").join(format!("{safe}.json"))
    }

    /// The checkpoints of `session`, oldest first (none when it has none).
    ///
    /// # Errors
    /// Its file cannot be read or is not valid.
    pub fn load(&self, session: &str) -> io::Result<Vec<Checkpoint>> {
        match std::fs::read(self.session_file(session)) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(io::Error::other),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    fn save(&self, session: &str, list: &[Checkpoint]) -> io::Result<()> {
        let path = self.session_file(session);
        if list.is_empty() {
            return match std::fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            };
        }
        private_write(&path, &serde_json::to_vec_pretty(list).map_err(io::Error::other)?)
    }

    /// Every session with checkpoints, with them.
    ///
    /// # Errors
    /// The store cannot be read.
    pub fn all(&self) -> io::Result<BTreeMap<String, Vec<Checkpoint>>> {
        let mut out = BTreeMap::new();
        let entries = match std::fs::read_dir(self.dir.join("sessions")) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e),
        };
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(session) = name.strip_suffix(".json") else { continue };
            out.insert(session.to_string(), self.load(session)?);
        }
        Ok(out)
    }

    /// Bytes the kept contents take.
    ///
    /// # Errors
    /// The objects cannot be listed.
    pub fn size(&self) -> io::Result<u64> {
        let mut total = 0;
        match std::fs::read_dir(self.dir.join("objects")) {
            Ok(entries) => {
                for e in entries.filter_map(Result::ok) {
                    total += e.metadata().map(|m| m.len()).unwrap_or(0);
                }
                Ok(total)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// While the contents pass the cap, drop the oldest checkpoint of any session, then the
    /// contents nothing refers to.
    fn prune(&self) -> io::Result<()> {
        if self.size()? <= self.max_bytes {
            return Ok(());
        }
        let mut all = self.all()?;
        loop {
            let referenced: BTreeSet<String> =
                all.values().flatten().flat_map(|c| c.files.iter().filter_map(|f| f.before.clone())).collect();
            let mut total = 0;
            for entry in std::fs::read_dir(self.dir.join("objects"))?.filter_map(Result::ok) {
                let name = entry.file_name().to_string_lossy().into_owned();
                if referenced.contains(&name) {
                    total += entry.metadata().map(|m| m.len()).unwrap_or(0);
                } else {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
            if total <= self.max_bytes {
                return Ok(());
            }
            let oldest =
                all.iter().filter_map(|(s, list)| list.first().map(|c| (c.at, s.clone()))).min().map(|(_, s)| s);
            let Some(session) = oldest else { return Ok(()) };
            if let Some(list) = all.get_mut(&session) {
                list.remove(0);
                self.save(&session, list)?;
            }
        }
    }

    /// Put the files of checkpoint `n` of `session` back as they were before its call: each
    /// kept content is written, each path that was absent is removed. A file that changed
    /// after the call (it is neither what the call left nor what it found) stops the restore,
    /// unless `force`.
    ///
    /// # Errors
    /// No such checkpoint, a changed file (without `force`), a content pruned, or a path that
    /// cannot be written below the workspace.
    pub fn restore(&self, session: &str, n: u32, force: bool) -> Result<Restored, RestoreError> {
        let list = self.load(session).map_err(|e| RestoreError::Io(e.to_string()))?;
        let cp = list
            .iter()
            .find(|c| c.n == n)
            .ok_or_else(|| RestoreError::NotFound(format!("session {session} has no checkpoint {n}")))?;
        let workspace = PathBuf::from(&cp.workspace);
        let root = talaria_beneath::Root::open(&workspace)
            .map_err(|e| RestoreError::Io(format!("cannot open {}: {e}", workspace.display())))?;
        if !force {
            let changed: Vec<String> = cp
                .files
                .iter()
                .filter(|f| {
                    let now = current(&root, Path::new(&f.path));
                    now != f.before && f.after.as_ref().is_some_and(|after| *after != now)
                })
                .map(|f| f.path.clone())
                .collect();
            if !changed.is_empty() {
                return Err(RestoreError::Changed(changed));
            }
        }
        let mut done = Restored::default();
        for f in &cp.files {
            let rel = Path::new(&f.path);
            if current(&root, rel) == f.before {
                continue;
            }
            match &f.before {
                Some(sha) => {
                    let bytes = self
                        .content(sha)
                        .map_err(|e| RestoreError::Io(format!("the content of {} is no longer kept ({e})", f.path)))?;
                    write_below(&workspace, rel, &bytes, f.mode)
                        .map_err(|e| RestoreError::Io(format!("{}: {e}", f.path)))?;
                    done.written.push(f.path.clone());
                }
                None => {
                    remove_below(&workspace, rel).map_err(|e| RestoreError::Io(format!("{}: {e}", f.path)))?;
                    done.removed.push(f.path.clone());
                }
            }
        }
        Ok(done)
    }
}

/// The digest of the regular file `rel` now (`None`: absent, or not a file it can read).
fn current(root: &talaria_beneath::Root, rel: &Path) -> Option<String> {
    match root.read(rel, MAX_FILE_BYTES) {
        Ok(Some(bytes)) => Some(hex(&sha2::Sha256::digest(&bytes))),
        _ => None,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `rel` is plain: no `..`, not absolute, not empty.
fn plain(rel: &Path) -> bool {
    !rel.as_os_str().is_empty() && rel.components().all(|c| matches!(c, Component::Normal(_)))
}

/// The directory `rel`'s parent under `workspace`, made of real directories (made where missing);
/// a link or a file on the way is refused.
fn real_parent(workspace: &Path, rel: &Path) -> io::Result<PathBuf> {
    if !plain(rel) {
        return Err(io::Error::other("not a plain path below the workspace"));
    }
    let mut dir = workspace.to_path_buf();
    if let Some(parent) = rel.parent() {
        for part in parent.components() {
            dir.push(part);
            match std::fs::symlink_metadata(&dir) {
                Ok(m) if m.is_dir() && !m.file_type().is_symlink() => {}
                Ok(_) => return Err(io::Error::other(format!("{} is not a directory", dir.display()))),
                Err(e) if e.kind() == io::ErrorKind::NotFound => std::fs::create_dir(&dir)?,
                Err(e) => return Err(e),
            }
        }
    }
    Ok(dir)
}

fn write_below(workspace: &Path, rel: &Path, bytes: &[u8], mode: Option<u32>) -> io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let dir = real_parent(workspace, rel)?;
    let name = rel.file_name().ok_or_else(|| io::Error::other("no file name"))?;
    let target = dir.join(name);
    if std::fs::symlink_metadata(&target).is_ok_and(|m| m.is_dir()) {
        return Err(io::Error::other("a directory is there now"));
    }
    let tmp = dir.join(format!(".{}.talaria-restore", name.to_string_lossy()));
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    if let Some(mode) = mode {
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode & 0o777))?;
    }
    std::fs::rename(&tmp, &target)
}

fn remove_below(workspace: &Path, rel: &Path) -> io::Result<()> {
    let dir = real_parent(workspace, rel)?;
    let target = dir.join(rel.file_name().ok_or_else(|| io::Error::other("no file name"))?);
    match std::fs::symlink_metadata(&target) {
        Ok(m) if m.is_dir() => Err(io::Error::other("a directory is there now")),
        Ok(_) => std::fs::remove_file(&target),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn private_write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    file.write_all(bytes)?;
    drop(file);
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Place {
        _tmp: tempfile::TempDir,
        home: PathBuf,
        ws: PathBuf,
    }

    fn place() -> Place {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (home, ws) = (tmp.path().join("home"), tmp.path().join("ws"));
        std::fs::create_dir_all(&home).expect("home");
        std::fs::create_dir_all(&ws).expect("ws");
        let ws = ws.canonicalize().expect("canonical");
        Place { _tmp: tmp, home, ws }
    }

    fn rm_is_destructive() -> Destructive {
        Box::new(|c: &str| c.starts_with("rm "))
    }

    #[test]
    fn only_a_call_that_may_change_files_is_worth_keeping() {
        let p = place();
        let store = Checkpoints::new(&p.home, DEFAULT_MAX_BYTES, rm_is_destructive());
        let args = json!({"path": "a.txt"});
        let may_keep = |tool: &str, args: &Value, a: Option<&ToolAnnotations>| store.may_keep(tool, args, a, &p.ws);
        assert!(may_keep("patch", &args, Some(&ToolAnnotations::writes(&["path"]))));
        assert!(!may_keep("read_file", &args, Some(&ToolAnnotations::reads(&["path"]))));
        assert!(!may_keep("mystery", &args, None), "a tool that says nothing names no file to keep");
        std::fs::write(p.ws.join("build"), "x").expect("write");
        assert!(may_keep("terminal", &json!({"command": "rm build"}), None));
        assert!(!may_keep("terminal", &json!({"command": "ls build"}), None));
        // And what may_keep refuses, before keeps nothing of.
        let read = ToolAnnotations::reads(&["path"]);
        assert!(store.before("s1", "read_file", "c1", &args, Some(&read), &p.ws).is_none());
    }

    #[test]
    fn a_write_is_undone_byte_for_byte_and_a_created_file_removed() {
        let p = place();
        let store = Checkpoints::new(&p.home, DEFAULT_MAX_BYTES, rm_is_destructive());
        let original = b"line one\n\xff binary tail\n".to_vec();
        std::fs::write(p.ws.join("a.txt"), &original).expect("write");
        let writes = ToolAnnotations::writes(&["path"]);
        let t = store.before("s1", "patch", "c1", &json!({"path": "a.txt"}), Some(&writes), &p.ws).expect("kept");
        std::fs::write(p.ws.join("a.txt"), "changed\n").expect("tool");
        store.after(&t);
        let t2 =
            store.before("s1", "write_file", "c2", &json!({"path": "new/b.txt"}), Some(&writes), &p.ws).expect("kept");
        std::fs::create_dir_all(p.ws.join("new")).expect("mkdir");
        std::fs::write(p.ws.join("new/b.txt"), "made\n").expect("tool");
        store.after(&t2);

        let list = store.load("s1").expect("list");
        assert_eq!(list.iter().map(|c| c.what.as_str()).collect::<Vec<_>>(), ["patch a.txt", "write_file new/b.txt"]);
        let done = store.restore("s1", 2, false).expect("restored");
        assert_eq!(done.removed, ["new/b.txt"]);
        assert!(!p.ws.join("new/b.txt").exists());
        store.restore("s1", 1, false).expect("restored");
        assert_eq!(std::fs::read(p.ws.join("a.txt")).expect("read"), original);
    }

    #[test]
    fn a_file_changed_since_the_call_is_not_overwritten_unless_forced() {
        let p = place();
        let store = Checkpoints::new(&p.home, DEFAULT_MAX_BYTES, rm_is_destructive());
        std::fs::write(p.ws.join("a.txt"), "v1").expect("write");
        let writes = ToolAnnotations::writes(&["path"]);
        let t = store.before("s", "patch", "c", &json!({"path": "a.txt"}), Some(&writes), &p.ws).expect("kept");
        std::fs::write(p.ws.join("a.txt"), "v2").expect("tool");
        store.after(&t);
        std::fs::write(p.ws.join("a.txt"), "v3 by hand").expect("later");
        let e = store.restore("s", 1, false).expect_err("refused").to_string();
        assert!(e.starts_with("a.txt changed since that call: restoring would lose those changes"), "{e}");
        assert_eq!(std::fs::read_to_string(p.ws.join("a.txt")).expect("read"), "v3 by hand");
        store.restore("s", 1, true).expect("forced");
        assert_eq!(std::fs::read_to_string(p.ws.join("a.txt")).expect("read"), "v1");
    }

    #[test]
    fn a_recursive_delete_keeps_the_directory_whole_and_safe_commands_keep_nothing() {
        let p = place();
        let store = Checkpoints::new(&p.home, DEFAULT_MAX_BYTES, rm_is_destructive());
        std::fs::create_dir_all(p.ws.join("build/deep")).expect("mkdir");
        std::fs::write(p.ws.join("build/a.o"), "A").expect("write");
        std::fs::write(p.ws.join("build/deep/b.o"), "B").expect("write");
        assert!(store.before("s", "terminal", "c0", &json!({"command": "ls build"}), None, &p.ws).is_none());
        let t = store.before("s", "terminal", "c1", &json!({"command": "rm -rf build"}), None, &p.ws).expect("kept");
        std::fs::remove_dir_all(p.ws.join("build")).expect("the command");
        store.after(&t);
        let cp = &store.load("s").expect("list")[0];
        assert_eq!(cp.what, "terminal: rm -rf build");
        assert_eq!(cp.files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), ["build/a.o", "build/deep/b.o"]);
        store.restore("s", 1, false).expect("restored");
        assert_eq!(std::fs::read_to_string(p.ws.join("build/deep/b.o")).expect("read"), "B");
    }

    #[test]
    fn nothing_outside_the_workspace_is_kept_or_written() {
        let p = place();
        let outside = p.home.join("secret.txt");
        std::fs::write(&outside, "private").expect("write");
        let store = Checkpoints::new(&p.home, DEFAULT_MAX_BYTES, Box::new(|_| true));
        let writes = ToolAnnotations::writes(&["path"]);
        let up = store.before("s", "patch", "c", &json!({"path": "../home/secret.txt"}), Some(&writes), &p.ws);
        assert!(up.is_none(), "a path leading out is not kept");
        std::os::unix::fs::symlink(&p.home, p.ws.join("link")).expect("link");
        assert!(store.before("s", "terminal", "c", &json!({"command": "rm -rf link"}), None, &p.ws).is_none());
        // A checkpoint whose directory became a link to elsewhere is not written through it.
        std::fs::create_dir(p.ws.join("d")).expect("dir");
        std::fs::write(p.ws.join("d/f"), "kept").expect("write");
        let t = store.before("s", "patch", "c", &json!({"path": "d/f"}), Some(&writes), &p.ws).expect("kept");
        std::fs::remove_dir_all(p.ws.join("d")).expect("rm");
        store.after(&t);
        std::os::unix::fs::symlink(&p.home, p.ws.join("d")).expect("link");
        let e = store.restore("s", 1, true).expect_err("refused").to_string();
        assert!(e.contains("is not a directory"), "{e}");
        assert!(!p.home.join("f").exists());
    }

    #[test]
    fn the_oldest_checkpoints_go_when_the_contents_pass_the_cap() {
        let p = place();
        let store = Checkpoints::new(&p.home, 10_000, Box::new(|_| false));
        let writes = ToolAnnotations::writes(&["path"]);
        for i in 0..8 {
            let name = format!("f{i}.txt");
            std::fs::write(p.ws.join(&name), format!("{i}").repeat(3000)).expect("write");
            store
                .before(&format!("s{}", i % 2), "patch", "c", &json!({"path": name}), Some(&writes), &p.ws)
                .expect("kept");
            assert!(store.size().expect("size") <= 10_000, "over the cap after {i}");
        }
        let all = store.all().expect("all");
        let kept: Vec<String> = all.values().flatten().map(|c| c.what.clone()).collect();
        assert_eq!(kept.len(), 3, "{kept:?}");
        assert!(kept.contains(&"patch f7.txt".to_string()) && !kept.contains(&"patch f0.txt".to_string()), "{kept:?}");
    }
}
