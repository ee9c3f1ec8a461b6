//! The editor's own side of a session, used where the client offers it (ACP's client
//! capabilities): its terminal runs the session's commands, and its view of the files (unsaved
//! buffers included) serves the `files` plugin's `read_file`, `write_file` and `patch`.
//!
//! Neither widens what the session may do:
//! - a command reaches the editor's terminal only after the runtime's checks (dangerous-command
//!   verdict and approval, secret scan, working directory inside the workspace), and runs under
//!   `env -i` with the same allow-listed environment a local command gets;
//! - a path is served only inside a directory the `files` plugin is granted (writes only where
//!   it may write), never in `.git` or `.talaria` below it nor in talaria's home, after links in
//!   the part that exists were resolved; the editor is given the resolved path.
//!
//! A terminal is embedded in its tool call (`{"type": "terminal"}` content), so the editor shows
//! the command's output live; it is released once the output was read, and killed if the call
//! is abandoned (a cancelled prompt) before the command ended.

use std::collections::HashMap;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use agent_client_protocol_schema::v1::{
    ClientCapabilities, CreateTerminalRequest, CreateTerminalResponse, KillTerminalRequest, ReadTextFileRequest,
    ReadTextFileResponse, ReleaseTerminalRequest, SessionNotification, SessionUpdate, Terminal as TerminalContent,
    TerminalOutputRequest, TerminalOutputResponse, ToolCallContent, ToolCallUpdate, ToolCallUpdateFields,
    WaitForTerminalExitRequest, WriteTextFileRequest,
};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use talaria_core::Host;
use talaria_core::agent::{BoxFuture, Scope, ToolContext, ToolHandler};
use talaria_core::edit::{patch, read};
use talaria_core::runtime::Access;
use talaria_core::{CommandError, CommandOutput, CommandRun, Terminal, ToolOverlay};
use talaria_protocol::{ToolError, ToolSpec};

use crate::lock;
use crate::wire::Out;

/// The plugin whose tools the editor's files serve.
const FILES_PLUGIN: &str = "files";
/// Names below a granted directory that stay out of reach (as in the sandbox).
const PROTECTED: [&str; 2] = [".git", ".talaria"];
/// How long a file request may take before the tool call fails.
const FS_TIMEOUT: Duration = Duration::from_secs(30);
/// How long starting, reading or releasing a terminal may take.
const TERMINAL_TIMEOUT: Duration = Duration::from_secs(30);

/// What the client said it offers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offers {
    pub read: bool,
    pub write: bool,
    pub terminal: bool,
}

impl Offers {
    pub fn of(c: &ClientCapabilities) -> Self {
        Self { read: c.fs.read_text_file, write: c.fs.write_text_file, terminal: c.terminal }
    }

    pub fn any(self) -> bool {
        self.read || self.write || self.terminal
    }
}

/// The directories the files plugin is granted in `workspace`, and how.
pub fn files_grants(host: &Host, workspace: &Path) -> Vec<(PathBuf, Access)> {
    let Ok((plugins, _)) = host.plugins(workspace) else { return Vec::new() };
    let runtime = plugins.runtime();
    let Some(files) = runtime.plugin(FILES_PLUGIN) else { return Vec::new() };
    files
        .grants
        .dirs(workspace, host.home())
        .into_iter()
        .filter(|d| !d.plugin_data)
        .map(|d| (d.path, d.access))
        .collect()
}

/// One session's way to the editor.
pub struct Editor {
    out: Out,
    /// The ACP session id (set once the session started).
    session_id: Mutex<String>,
    offers: Offers,
    /// Directories the files plugin is granted (canonical), and whether it may write there.
    granted: Vec<(PathBuf, bool)>,
    /// talaria's home (canonical): never served.
    home: PathBuf,
    /// Terminals embedded in tool calls, by call id (the call's last update keeps them).
    terminals: Mutex<HashMap<String, String>>,
}

impl Editor {
    pub fn new(out: Out, session_id: String, offers: Offers, granted: Vec<(PathBuf, Access)>, home: &Path) -> Self {
        let granted =
            granted.into_iter().filter_map(|(p, a)| Some((p.canonicalize().ok()?, a == Access::ReadWrite))).collect();
        Self {
            out,
            session_id: Mutex::new(session_id),
            offers,
            granted,
            home: home.canonicalize().unwrap_or_else(|_| home.to_path_buf()),
            terminals: Mutex::new(HashMap::new()),
        }
    }

    pub fn set_session(&self, id: &str) {
        id.clone_into(&mut lock(&self.session_id));
    }

    fn sid(&self) -> String {
        lock(&self.session_id).clone()
    }

    /// The terminal embedded in `call_id`, if its command ran in the editor.
    pub fn terminal_of(&self, call_id: &str) -> Option<String> {
        lock(&self.terminals).remove(call_id)
    }

    /// Ask the client `method` and read its answer as `T`; errors are sentences.
    async fn ask<T: DeserializeOwned>(&self, method: &str, params: &impl serde::Serialize) -> Result<T, String> {
        match self.out.request(method, params).await {
            Ok(Ok(value)) => serde_json::from_value(value)
                .map_err(|e| format!("the editor answered {method} with something unexpected ({e})")),
            Ok(Err(e)) => Err(e.message),
            Err(_) => Err("the editor closed the connection".into()),
        }
    }

    async fn ask_within<T: DeserializeOwned>(
        &self,
        limit: Duration,
        method: &str,
        params: &impl serde::Serialize,
    ) -> Result<T, String> {
        tokio::time::timeout(limit, self.ask(method, params))
            .await
            .unwrap_or_else(|_| Err(format!("the editor did not answer {method} within {} s", limit.as_secs())))
    }

    /// `path` as the editor should be given it, if the files plugin may `write` (or read) it.
    fn place(&self, workspace: &Path, path: &str, write: bool) -> Result<Place, ToolError> {
        if path.trim().is_empty() {
            return Err(ToolError::InvalidArgs(
                "path is empty: give a file path, relative to the workspace or absolute".into(),
            ));
        }
        let lexical = talaria_core::runtime::process::normalize(&workspace.join(path));
        let shown = match lexical.strip_prefix(workspace) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
            Ok(rel) => rel.display().to_string(),
            Err(_) => lexical.display().to_string(),
        };
        let real = resolved(&lexical);
        let refuse = |why: String| Err(ToolError::Denied(format!("{shown}: {why}")));
        let Some((root, writable)) = self
            .granted
            .iter()
            .filter(|(root, _)| real.starts_with(root))
            .max_by_key(|(root, _)| root.as_os_str().len())
        else {
            return refuse(format!(
                "outside the directories the files plugin was granted (the workspace is {}); use a path inside the workspace",
                workspace.display()
            ));
        };
        if write && !writable {
            return refuse("the files plugin may only read there".into());
        }
        if let Ok(below) = real.strip_prefix(root)
            && let Some(name) = below.components().find_map(|c| PROTECTED.iter().find(|p| c.as_os_str() == **p))
        {
            return refuse(format!("`{name}` is protected: what is there decides what git or talaria run next"));
        }
        if real.starts_with(&self.home) {
            return refuse("talaria's home is never served to tools".into());
        }
        Ok(Place { real, shown })
    }

    async fn read_text(&self, place: &Place) -> Result<String, ToolError> {
        let request = ReadTextFileRequest::new(self.sid(), place.real.clone());
        let read: ReadTextFileResponse = self
            .ask_within(FS_TIMEOUT, "fs/read_text_file", &request)
            .await
            .map_err(|e| ToolError::Failed(format!("cannot read {}: {e}", place.shown)))?;
        Ok(read.content)
    }

    async fn write_text(&self, place: &Place, content: &str) -> Result<(), ToolError> {
        let request = WriteTextFileRequest::new(self.sid(), place.real.clone(), content);
        self.ask_within::<Value>(FS_TIMEOUT, "fs/write_text_file", &request)
            .await
            .map(|_| ())
            .map_err(|e| ToolError::Failed(format!("cannot write {}: {e}", place.shown)))
    }

    async fn read_file(&self, args: ReadArgs, workspace: &Path) -> Result<String, ToolError> {
        let place = self.place(workspace, &args.path, false)?;
        let offset = args.offset.unwrap_or(1);
        if offset == 0 {
            return Err(ToolError::InvalidArgs(
                "offset counts lines from 1; use offset=1 for the start of the file".into(),
            ));
        }
        let limit = args.limit.unwrap_or(read::DEFAULT_LIMIT).min(read::MAX_LIMIT);
        if limit == 0 {
            return Err(ToolError::InvalidArgs("limit must be at least 1 (default 500, at most 2000)".into()));
        }
        let content = self.read_text(&place).await?;
        match read::render(Cursor::new(content.as_bytes()), offset, limit) {
            Ok(text) => Ok(text),
            Err(read::ReadError::PastEnd { offset, total }) => {
                Err(ToolError::InvalidArgs(talaria_core::edit::past_end(&place.shown, offset, total)))
            }
            Err(read::ReadError::Io(e)) => Err(ToolError::Failed(format!("cannot read {}: {e}", place.shown))),
        }
    }

    async fn write_file(&self, args: WriteArgs, workspace: &Path) -> Result<String, ToolError> {
        let place = self.place(workspace, &args.path, true)?;
        if place.real.is_dir() {
            return Err(ToolError::InvalidArgs(format!(
                "{} is a directory; give the path of a file inside it",
                place.shown
            )));
        }
        let existed = place.real.exists();
        self.write_text(&place, &args.content).await?;
        Ok(talaria_core::edit::written(&place.shown, &args.content, existed))
    }

    async fn patch(&self, args: PatchArgs, workspace: &Path) -> Result<String, ToolError> {
        let place = self.place(workspace, &args.path, true)?;
        if !place.real.exists() {
            if args.old_string.is_empty() {
                self.write_text(&place, &args.new_string).await?;
                return Ok(talaria_core::edit::created(&place.shown, &args.new_string));
            }
            return Err(ToolError::Failed(format!(
                "cannot patch {}: no such file; to create a file use write_file, or patch with an empty old_string",
                place.shown
            )));
        }
        let before = self.read_text(&place).await?;
        let done = patch::apply(&before, &args.old_string, &args.new_string, args.replace_all)
            .map_err(|e| ToolError::InvalidArgs(talaria_core::edit::patch_problem(&place.shown, &e)))?;
        self.write_text(&place, &done.content).await?;
        Ok(talaria_core::edit::patched(&place.shown, &before, &done))
    }
}

/// A path the editor may be asked for.
struct Place {
    /// Absolute, links resolved as far as the path exists.
    real: PathBuf,
    /// As the model is shown it.
    shown: String,
}

#[derive(Deserialize)]
struct ReadArgs {
    path: String,
    offset: Option<usize>,
    limit: Option<usize>,
}

#[derive(Deserialize)]
struct WriteArgs {
    path: String,
    content: String,
}

#[derive(Deserialize)]
struct PatchArgs {
    path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

fn args<T: DeserializeOwned>(ctx: &ToolContext) -> Result<T, ToolError> {
    T::deserialize(&ctx.arguments).map_err(|e| ToolError::InvalidArgs(format!("{}: {e}", ctx.tool)))
}

impl ToolOverlay for Editor {
    fn serves(&self, spec: &ToolSpec) -> bool {
        spec.plugin == FILES_PLUGIN
            && match spec.name.as_str() {
                "read_file" => self.offers.read,
                "write_file" => self.offers.write,
                "patch" => self.offers.read && self.offers.write,
                _ => false,
            }
    }
}

impl ToolHandler for Editor {
    fn call<'a>(&'a self, ctx: &'a ToolContext, _: Scope<'a>) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let workspace = &ctx.workspace;
            match ctx.tool.as_str() {
                "read_file" => self.read_file(args(ctx)?, workspace).await,
                "write_file" => self.write_file(args(ctx)?, workspace).await,
                "patch" => self.patch(args(ctx)?, workspace).await,
                other => Err(ToolError::UnknownTool(other.to_string())),
            }
        })
    }
}

impl Terminal for Editor {
    fn run(&self, run: CommandRun) -> BoxFuture<'_, Result<CommandOutput, CommandError>> {
        Box::pin(async move {
            let mut args = vec!["-i".to_string()];
            args.extend(run.env.iter().map(|(k, v)| format!("{k}={v}")));
            args.extend(["sh".to_string(), "-c".to_string(), run.command.clone()]);
            let create = CreateTerminalRequest::new(self.sid(), "env")
                .args(args)
                .cwd(run.cwd.clone())
                .output_byte_limit(run.output_cap as u64);
            let created: CreateTerminalResponse =
                self.ask_within(TERMINAL_TIMEOUT, "terminal/create", &create)
                    .await
                    .map_err(|e| CommandError::Failed(format!("the editor could not start the command: {e}")))?;
            let id = created.terminal_id;
            let mut guard = Abandoned { out: &self.out, session_id: self.sid(), terminal_id: Some(id.to_string()) };
            lock(&self.terminals).insert(run.call_id.clone(), id.to_string());
            let shown =
                ToolCallUpdateFields::new().content(vec![ToolCallContent::Terminal(TerminalContent::new(id.clone()))]);
            let update = SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(run.call_id.clone(), shown));
            self.out.notify("session/update", &SessionNotification::new(self.sid(), update));

            let wait = WaitForTerminalExitRequest::new(self.sid(), id.clone());
            let waited = tokio::time::timeout(run.timeout, self.ask::<Value>("terminal/wait_for_exit", &wait)).await;
            let timed_out = waited.is_err();
            if timed_out {
                let kill = KillTerminalRequest::new(self.sid(), id.clone());
                let _ = self.ask_within::<Value>(TERMINAL_TIMEOUT, "terminal/kill", &kill).await;
            }
            let request = TerminalOutputRequest::new(self.sid(), id.clone());
            let output: Result<TerminalOutputResponse, String> =
                self.ask_within(TERMINAL_TIMEOUT, "terminal/output", &request).await;
            guard.terminal_id = None;
            let release = ReleaseTerminalRequest::new(self.sid(), id.clone());
            let _ = self.ask_within::<Value>(TERMINAL_TIMEOUT, "terminal/release", &release).await;
            let output =
                output.map_err(|e| CommandError::Failed(format!("the editor did not give the output: {e}")))?;
            let exit_code = output.exit_status.as_ref().and_then(|s| s.exit_code).and_then(|c| i32::try_from(c).ok());
            let stderr = if timed_out {
                format!("[command timed out after {}s and was killed]", run.timeout.as_secs())
            } else {
                match output.exit_status.and_then(|s| s.signal) {
                    Some(signal) => format!("[killed by {signal}]"),
                    None => String::new(),
                }
            };
            Ok(CommandOutput { exit_code, stdout: output.output, stderr, truncated: output.truncated, timed_out })
        })
    }
}

/// Kills and releases a terminal whose command was abandoned before its output was read.
struct Abandoned<'a> {
    out: &'a Out,
    session_id: String,
    terminal_id: Option<String>,
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.terminal_id.take() {
            // Nobody waits for the answers.
            drop(self.out.request("terminal/kill", &KillTerminalRequest::new(self.session_id.clone(), id.clone())));
            drop(self.out.request("terminal/release", &ReleaseTerminalRequest::new(self.session_id.clone(), id)));
        }
    }
}

/// `path` (absolute, normalised) with links resolved in the longest part that exists.
fn resolved(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            return rest.iter().rev().fold(real, |p, name: &std::ffi::OsString| p.join(name));
        }
        match (existing.file_name().map(ToOwned::to_owned), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn editor(root: &Path, access: Access, home: &Path) -> Editor {
        let (out, _task) = Out::new(tokio::io::sink());
        let offers = Offers { read: true, write: true, terminal: true };
        Editor::new(out, "s".into(), offers, vec![(root.to_path_buf(), access)], home)
    }

    fn denied(r: Result<Place, ToolError>) -> String {
        match r {
            Err(ToolError::Denied(m)) => m,
            Err(other) => panic!("expected a refusal, got {other:?}"),
            Ok(p) => panic!("expected a refusal, got {}", p.real.display()),
        }
    }

    #[tokio::test]
    async fn paths_are_served_only_where_the_files_plugin_may_go() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("ws")).expect("mkdir");
        let ws = dir.path().join("ws").canonicalize().expect("canon");
        let home = dir.path().join("home");
        std::fs::create_dir_all(ws.join("src")).expect("mkdir");
        std::fs::create_dir_all(ws.join(".git/hooks")).expect("mkdir");
        std::fs::create_dir_all(&home).expect("mkdir");
        std::fs::write(dir.path().join("secret.txt"), "s").expect("write");
        std::os::unix::fs::symlink(dir.path().join("secret.txt"), ws.join("link.txt")).expect("symlink");
        std::os::unix::fs::symlink(&home, ws.join("home")).expect("symlink");
        let e = editor(&ws, Access::ReadWrite, &home);

        let ok = e.place(&ws, "src/new/file.rs", true).expect("inside");
        assert_eq!(ok.real, ws.join("src/new/file.rs"));
        assert_eq!(ok.shown, "src/new/file.rs");
        assert!(denied(e.place(&ws, "../secret.txt", false)).contains("outside the directories"));
        assert!(denied(e.place(&ws, "link.txt", false)).contains("outside the directories"), "a link out is followed");
        assert!(denied(e.place(&ws, ".git/hooks/pre-commit", true)).contains("`.git` is protected"));
        assert!(denied(e.place(&ws, "src/../.talaria/plugins.toml", false)).contains("`.talaria` is protected"));
        assert!(denied(e.place(&ws, "/etc/passwd", false)).contains("outside"));
        assert!(matches!(e.place(&ws, " ", false), Err(ToolError::InvalidArgs(_))));

        // A workspace that holds talaria's home never serves it.
        let e = editor(dir.path(), Access::ReadWrite, &home);
        assert!(denied(e.place(dir.path(), "home/grants.toml", false)).contains("talaria's home"));

        // A read-only grant serves reads only.
        let e = editor(&ws, Access::Read, &home);
        e.place(&ws, "src/a.rs", false).expect("reads");
        assert!(denied(e.place(&ws, "src/a.rs", true)).contains("only read"));
    }

    #[test]
    fn only_the_files_plugin_tools_the_client_can_serve_are_taken_over() {
        let (out, _) = {
            let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
            let _enter = rt.enter();
            Out::new(tokio::io::sink())
        };
        let spec = |plugin: &str, name: &str| ToolSpec {
            name: name.into(),
            description: String::new(),
            parameters: Value::Null,
            plugin: plugin.into(),
            annotations: Default::default(),
        };
        let read_only =
            Editor::new(out, "s".into(), Offers { read: true, ..Offers::default() }, Vec::new(), Path::new("/h"));
        assert!(read_only.serves(&spec("files", "read_file")));
        assert!(!read_only.serves(&spec("files", "write_file")));
        assert!(!read_only.serves(&spec("files", "patch")), "a patch reads and writes");
        assert!(!read_only.serves(&spec("files", "search_files")));
        assert!(!read_only.serves(&spec("other", "read_file")), "only the files plugin's tool");
    }
}
