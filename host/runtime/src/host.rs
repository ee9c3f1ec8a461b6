//! What a plugin instance sees of the host: the state kept in each instance's `Store`, and the
//! implementations of the `talaria:plugin` imports, each checked against the plugin's grants.
//!
//! Every API version is linked into one linker: [`imports`] implements the 0.2.0 interfaces
//! (and `api::since_v0_3_0::websocket` 0.3.0's), and each older version converts to them
//! ([`api`]), so every check exists once.

pub(crate) mod api;
mod fs;
mod imports;
mod stderr;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::filesystem::WasiFilesystemCtxView;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::approval::Caller;
use crate::grant::{Access, GrantedDir, Grants};
use crate::llm::LlmBackend;
use crate::net::NetHooks;
use crate::process::ProcessRunner;
use crate::record::Recorder;
use crate::secrets::Secrets;
use fs::{FsGuard, GuardedFsView};

pub(crate) use stderr::StderrSink;

/// Bytes of a plugin's stderr kept per call (panic messages land there).
const STDERR_CAP: usize = 64 * 1024;

/// Host services shared by every plugin and call.
pub(crate) struct Services {
    /// `$TALARIA_HOME`, canonical: never visible to a plugin, whatever it was granted, except
    /// for each plugin's own data directory under `plugin-data/`.
    pub home: PathBuf,
    /// Canonical forms of workspaces seen (chosen by the user, never by a plugin).
    pub workspaces: Mutex<std::collections::HashMap<PathBuf, PathBuf>>,
    pub store_at: talaria_store::Location,
    pub store: tokio::sync::OnceCell<Result<talaria_store::Store, String>>,
    pub secrets: Arc<Secrets>,
    pub process: ProcessRunner,
    /// Dangerous commands and new hosts under wildcard grants ask here; shared by both.
    pub approvals: Arc<crate::approval::Approvals>,
    /// Completions for the `llm` import; `None` when no model is configured.
    pub llm: Option<Arc<dyn LlmBackend>>,
    /// Canned HTTP answers, for `talaria plugin test`.
    pub http_stubs: Option<Arc<crate::stub::HttpStubs>>,
    /// Known secret values (see [`crate::leak`]).
    pub scan: Arc<crate::leak::SecretScan>,
}

impl PluginEnv {
    /// Where its secret values come from.
    pub(crate) fn secrets(&self) -> Arc<crate::secrets::Secrets> {
        self.own_secrets.clone().unwrap_or_else(|| self.services.secrets.clone())
    }

    /// The same plugin with other settings and grants: a platform adapter's instance for one
    /// account. Its data stays the plugin's.
    pub(crate) fn for_account(
        &self,
        config: toml::Table,
        grants: Arc<Grants>,
        own_secrets: Option<Arc<crate::secrets::Secrets>>,
    ) -> Self {
        Self {
            own_secrets,
            name: self.name.clone(),
            kv_space: self.kv_space.clone(),
            legacy_space: self.legacy_space.clone(),
            adopted: tokio::sync::OnceCell::new(),
            data_dir: self.data_dir.clone(),
            grants,
            secret_headers: self.secret_headers.clone(),
            config,
            services: self.services.clone(),
            recorder: self.recorder.clone(),
            log_lines: crate::logline::LogLimiter::default(),
        }
    }
}

impl Services {
    fn canonical_workspace(&self, workspace: &Path) -> PathBuf {
        let mut seen = self.workspaces.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        seen.entry(workspace.to_path_buf())
            .or_insert_with(|| workspace.canonicalize().unwrap_or_else(|_| workspace.to_path_buf()))
            .clone()
    }

    async fn store(&self) -> Result<&talaria_store::Store, String> {
        let opened = self.store.get_or_init(|| async { self.store_at.open().await.map_err(|e| e.to_string()) }).await;
        opened.as_ref().map_err(Clone::clone)
    }

    /// The data directory (`$PLUGIN_DATA`) of the plugin with key-value space `kv_space`.
    pub fn data_dir(&self, kv_space: &str) -> PathBuf {
        crate::plugin_data_dir(&self.home, kv_space)
    }
}

/// One plugin's identity and powers, shared by all its calls.
pub(crate) struct PluginEnv {
    pub name: String,
    /// The plugin's key-value space: its identity (see [`crate::identity`]), so a plugin never
    /// reads another's data by taking its name.
    pub kv_space: String,
    /// Where its data was kept before identities, taken over on first use when the new space
    /// is still empty (see [`PluginEnv::adopt_legacy`]).
    pub legacy_space: Option<String>,
    pub adopted: tokio::sync::OnceCell<()>,
    /// `$PLUGIN_DATA`: `$TALARIA_HOME/plugin-data/<kv_space, `/` replaced by `_`>`.
    pub data_dir: PathBuf,
    pub grants: Arc<Grants>,
    /// The headers each requested secret may be filled into (from the manifest).
    pub secret_headers: Arc<crate::manifest::SecretHeaders>,
    /// Its own secret values instead of the host's (a gateway account's, read from the
    /// environment names the operator mapped them to); `None`: the host's.
    pub own_secrets: Option<Arc<crate::secrets::Secrets>>,
    pub config: toml::Table,
    pub services: Arc<Services>,
    /// Where its import calls are recorded (`talaria plugin test`); `None`: not recorded.
    pub recorder: Option<Arc<Recorder>>,
    /// Its log rate, shared by all its instances and calls.
    pub log_lines: crate::logline::LogLimiter,
}

impl PluginEnv {
    /// Once per process: move data kept under the plugin's name before identities existed into
    /// its identity's space and data directory, when those are still empty.
    pub async fn adopt_legacy(&self) {
        self.adopted
            .get_or_init(|| async {
            let Some(old) = &self.legacy_space else { return };
            if let Ok(store) = self.services.store().await
                && let Ok(moved) = store.kv_adopt(old, &self.kv_space).await
                && moved > 0
            {
                tracing::info!(plugin = %self.name, "moved {moved} key-value entries from `{old}` to `{}`", self.kv_space);
            }
            let old_dir = self.services.data_dir(old);
            if old_dir.is_dir() && !self.data_dir.exists() && std::fs::rename(&old_dir, &self.data_dir).is_ok() {
                tracing::info!(plugin = %self.name, "moved {} to {}", old_dir.display(), self.data_dir.display());
            }
        })
            .await;
    }
}

/// Caps the linear memory of the whole instance (all its memories together); remembers a
/// refused growth so the failure can be named.
pub(crate) struct Limiter {
    pub memory_cap: usize,
    pub used: usize,
    pub refused: Option<usize>,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        let total = self.used.saturating_add(desired.saturating_sub(current));
        if total > self.memory_cap {
            self.refused = Some(total);
            return Ok(false);
        }
        self.used = total;
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 200_000)
    }
}

/// Where an instance runs and for whom: its workspace, and the session (and call) it acts for.
pub(crate) struct Site {
    pub workspace: PathBuf,
    pub caller: Caller,
    /// The instance runs on a thread of its own
    /// ([`on_own_thread`](crate::instance::on_own_thread)): its file operations block that thread
    /// rather than each being handed to another.
    pub own_thread: bool,
}

impl Site {
    /// A site for an instance that runs on the async runtime's threads.
    pub fn shared(workspace: PathBuf, caller: Caller) -> Self {
        Self { workspace, caller, own_thread: false }
    }
}

/// The data in one instance's `Store`. A fresh instance lives for one call; a memory
/// provider's resident instance lives across calls, and [`HostState::begin_call`] resets what
/// is counted per call.
pub(crate) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    http: WasiHttpCtx,
    hooks: NetHooks,
    fs_guard: FsGuard,
    pub limiter: Limiter,
    pub stderr: StderrSink,
    pub denials: Arc<Mutex<Vec<String>>>,
    /// Why granted directories were not opened: said with every failed call, since the guest
    /// sees only that the path does not exist.
    unopened: Vec<String>,
    env: Arc<PluginEnv>,
    workspace: PathBuf,
    /// Who the plugin acts for: where its approval requests go.
    caller: Caller,
    /// `llm.complete` calls made during this call.
    llm_calls: u32,
    /// WebSockets open in this instance.
    sockets: usize,
}

impl HostState {
    /// State for an instance in `workspace`, with exactly the granted directories preopened.
    ///
    /// Each granted directory is opened once, here, by handle: a `$WORKSPACE` subdirectory
    /// beneath the workspace's own handle (a link leading out of it is refused), the plugin's data
    /// directory beneath its own, and WASI is handed that very directory (through
    /// `/proc/self/fd`), so nothing renamed or swapped for a link after the check is followed.
    pub fn new(env: Arc<PluginEnv>, site: Site, memory_cap: usize) -> Self {
        let Site { workspace, caller, own_thread } = site;
        let stderr = StderrSink::new(STDERR_CAP);
        let mut wasi = WasiCtxBuilder::new();
        wasi.stderr(stderr.clone()).allow_tcp(false).allow_udp(false).allow_ip_name_lookup(false);
        // On a thread of its own, a file operation blocks that thread (see `on_own_thread`).
        wasi.allow_blocking_current_thread(own_thread);
        let workspace_real = env.services.canonical_workspace(&workspace);
        let mut data_dir_opened = false;
        let mut roots = Vec::new();
        let mut workspace_root = None;
        let mut unopened = Vec::new();
        for GrantedDir { path, access, plugin_data } in env.grants.dirs(&workspace, &env.data_dir) {
            let opened = if plugin_data {
                open_data_dir(&path, &env.data_dir)
            } else {
                open_granted(&path, &workspace, &workspace_real, &mut workspace_root, &env.services.home)
            };
            let (dir, real) = match opened {
                Ok(opened) => opened,
                Err(why) => {
                    tracing::warn!(plugin = %env.name, "granted directory {} not opened: {why}", path.display());
                    unopened.push(format!("plugin '{}' was not given {}: {why}", env.name, path.display()));
                    continue;
                }
            };
            let perms = match access {
                Access::Read => FsPerms::ReadOnly,
                Access::ReadWrite => FsPerms::ReadWrite,
            };
            let Some(guest) = real.to_str() else { continue };
            let handle = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&dir));
            match wasi.preopened_dir(&handle, guest, perms) {
                Ok(_) => {
                    data_dir_opened |= plugin_data;
                    roots.push(real);
                }
                Err(e) => {
                    tracing::warn!(plugin = %env.name, "granted directory {} is unavailable: {e}", real.display())
                }
            }
        }
        // The plugin learns where its data directory is from `PLUGIN_DATA`.
        if data_dir_opened && let Some(dir) = env.data_dir.to_str() {
            wasi.env("PLUGIN_DATA", dir);
        }
        let denials = Arc::new(Mutex::new(unopened.clone()));
        let fs_guard = FsGuard {
            plugin: env.name.clone(),
            roots,
            home: env.services.home.clone(),
            data_dir: env.data_dir.clone(),
            denials: denials.clone(),
            own_thread,
        };
        let hooks = NetHooks {
            plugin: env.name.clone(),
            grants: env.grants.clone(),
            secrets: env.secrets(),
            secret_headers: env.secret_headers.clone(),
            approvals: env.services.approvals.clone(),
            caller: caller.clone(),
            denials: denials.clone(),
            requests: 0,
            recorder: env.recorder.clone(),
            stubs: env.services.http_stubs.clone(),
            scan: env.services.scan.clone(),
        };
        Self {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            http: WasiHttpCtx::new(),
            hooks,
            fs_guard,
            limiter: Limiter { memory_cap, used: 0, refused: None },
            stderr,
            denials,
            unopened,
            env,
            workspace,
            caller,
            llm_calls: 0,
            sockets: 0,
        }
    }

    /// Act for `caller` from the next call on (a resident instance serving another session).
    pub fn act_for(&mut self, caller: Caller) {
        self.hooks.caller = caller.clone();
        self.caller = caller;
    }

    /// Start a new call: stderr, refusals and the per-call counts start empty.
    pub fn begin_call(&mut self) {
        self.stderr.clear();
        let mut denials = self.denials.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        denials.clear();
        denials.extend(self.unopened.iter().cloned());
        drop(denials);
        self.hooks.requests = 0;
        self.limiter.refused = None;
        self.llm_calls = 0;
    }

    /// The workspace this instance was made for.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// Record a call of `interface.function` when recording is on; only then is `describe`
    /// run, giving its summary and outcome.
    fn record(&self, interface: &str, function: &str, describe: impl FnOnce() -> (String, Option<String>)) {
        if let Some(recorder) = &self.env.recorder {
            let (summary, outcome) = describe();
            recorder.push(&self.env.name, interface, function, summary, outcome);
        }
    }
}

/// Open a granted directory that is not the plugin's data directory: a `$WORKSPACE` grant
/// beneath the workspace's handle (opened once per instance, in `workspace_root`), so that a
/// subdirectory made a link leading out is refused; any other path as the operator named it. It
/// may neither contain nor lie inside talaria's home (grants, secrets and compiled code live
/// there). Returns the open directory and where it really is.
fn open_granted(
    dir: &Path,
    workspace: &Path,
    workspace_real: &Path,
    workspace_root: &mut Option<talaria_beneath::Root>,
    home: &Path,
) -> Result<(std::fs::File, PathBuf), String> {
    let file = match dir.strip_prefix(workspace) {
        Ok(rel) => {
            if workspace_root.is_none() {
                *workspace_root = Some(talaria_beneath::Root::open(workspace_real).map_err(|e| e.to_string())?);
            }
            let root = workspace_root.as_ref().ok_or("the workspace could not be opened")?;
            if rel.as_os_str().is_empty() {
                root.as_file().try_clone().map_err(|e| e.to_string())?
            } else {
                match root.dir(rel) {
                    Ok(Some(sub)) => sub.into_file(),
                    Ok(None) => return Err("it does not exist".to_string()),
                    Err(talaria_beneath::Error::Escapes { .. }) => {
                        return Err("it resolves outside the workspace (through a link)".to_string());
                    }
                    Err(e) => return Err(e.to_string()),
                }
            }
        }
        Err(_) => talaria_beneath::Root::open(dir).map_err(|e| e.to_string())?.into_file(),
    };
    let real = talaria_beneath::real_path(&file).map_err(|e| e.to_string())?;
    if real == home {
        return Err("it is talaria's home".to_string());
    }
    if real.starts_with(home) {
        return Err(format!("it is inside talaria's home {}", home.display()));
    }
    if home.starts_with(&real) {
        return Err(format!(
            "it holds talaria's home {}, which no plugin may reach: start talaria in a project directory (or set \
             TALARIA_HOME outside this one)",
            home.display()
        ));
    }
    Ok((file, real))
}

/// Open the plugin's data directory (or a directory inside it, created if missing): the data
/// directory by its path, which no plugin can change, and the rest beneath it.
fn open_data_dir(dir: &Path, data_dir: &Path) -> Result<(std::fs::File, PathBuf), String> {
    let real = checked_data_dir(dir, data_dir)?;
    let root = talaria_beneath::Root::open(data_dir).map_err(|e| e.to_string())?;
    let rest = dir.strip_prefix(data_dir).map_err(|_| "it is not inside the plugin's data directory".to_string())?;
    let file = if rest.as_os_str().is_empty() {
        root.into_file()
    } else {
        match root.dir(rest) {
            Ok(Some(sub)) => sub.into_file(),
            Ok(None) => return Err("it vanished while it was being opened".to_string()),
            Err(e) => return Err(e.to_string()),
        }
    };
    Ok((file, real))
}

/// The plugin's data directory (or a directory inside it), the one place in talaria's home a
/// plugin may see: created (mode 0700) on first use, and opened only if it is a real directory
/// at exactly that path. Each step below the data directory is checked before anything is
/// created, so a symlink the plugin planted there is refused, never followed.
fn checked_data_dir(dir: &Path, data_dir: &Path) -> Result<PathBuf, String> {
    use std::os::unix::fs::DirBuilderExt;
    let rest = dir.strip_prefix(data_dir).map_err(|_| "it is not inside the plugin's data directory".to_string())?;
    if let Some(parent) = data_dir.parent() {
        crate::fsutil::private_dir(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    let mut at = data_dir.to_path_buf();
    for step in std::iter::once(None).chain(rest.components().map(Some)) {
        if let Some(part) = step {
            at.push(part);
        }
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.file_type().is_symlink() => return Err(format!("{} is a symlink", at.display())),
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => return Err(format!("{} is not a directory", at.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&at)
                .map_err(|e| format!("cannot create {}: {e}", at.display()))?,
            Err(e) => return Err(format!("{}: {e}", at.display())),
        }
    }
    let real = dir.canonicalize().map_err(|e| e.to_string())?;
    if real != dir {
        return Err(format!("it resolves to {}, not inside the plugin's own data directory", real.display()));
    }
    Ok(real)
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl HostState {
    /// The filesystem as the plugin sees it: wasmtime-wasi's, behind the guard.
    fn guarded_fs(&mut self) -> GuardedFsView<'_> {
        GuardedFsView {
            inner: WasiFilesystemCtxView { ctx: self.wasi.filesystem(), table: &mut self.table },
            guard: &self.fs_guard,
        }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: &mut self.hooks }
    }
}

/// Link every import of every supported API version (and WASI) into `linker`.
pub(crate) fn add_to_linker(linker: &mut wasmtime::component::Linker<HostState>) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_async(linker)?;
    // The filesystem goes through the guard: replace wasmtime-wasi's `wasi:filesystem/types`.
    linker.allow_shadowing(true);
    wasmtime_wasi::p2::bindings::filesystem::types::add_to_linker::<HostState, fs::GuardedFs>(
        linker,
        HostState::guarded_fs,
    )?;
    linker.allow_shadowing(false);
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)?;
    crate::host::api::add_to_linker(linker)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_directory_is_created_private_and_never_through_a_symlink() {
        use std::os::unix::fs::PermissionsExt;
        let home = tempfile::tempdir().expect("home");
        let home = home.path().canonicalize().expect("canon");
        let data = home.join("plugin-data/notes");
        assert_eq!(checked_data_dir(&data, &data), Ok(data.clone()));
        assert_eq!(std::fs::metadata(&data).expect("made").permissions().mode() & 0o777, 0o700);
        let index = data.join("index/v1");
        assert_eq!(checked_data_dir(&index, &data), Ok(index.clone()));

        // The plugin made `cache` a symlink out: refused, and nothing is created over there.
        let outside = home.join("outside");
        std::fs::create_dir(&outside).expect("dir");
        std::os::unix::fs::symlink(&outside, data.join("cache")).expect("symlink");
        let e = checked_data_dir(&data.join("cache/sub"), &data).expect_err("refused");
        assert!(e.ends_with("cache is a symlink"), "{e}");
        assert!(!outside.join("sub").exists());

        let linked = home.join("plugin-data/linked");
        std::os::unix::fs::symlink(&outside, &linked).expect("symlink");
        assert!(checked_data_dir(&linked, &linked).expect_err("refused").ends_with("linked is a symlink"));
    }
}
