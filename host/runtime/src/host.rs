//! What a plugin instance sees of the host: the state kept in each call's `Store`, and the
//! implementations of the `talaria:plugin` imports, each checked against the plugin's grants.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::grant::{Access, Grants};
use crate::net::NetHooks;
use crate::process::{CommandError, CommandRequest, ProcessRunner};
use crate::secrets::Secrets;

pub(crate) mod bindings {
    wasmtime::component::bindgen!({
        path: "../../wit/v0.1.0",
        world: "tool-plugin",
        imports: { default: async },
        exports: { default: async },
    });
}

use bindings::talaria::plugin::{config, kv, log, process, secrets, types};

/// Bytes of a plugin's stderr kept per call (panic messages land there).
const STDERR_CAP: usize = 64 * 1024;

/// Host services shared by every plugin and call.
pub(crate) struct Services {
    /// `$TALARIA_HOME`, canonical: never visible to a plugin, whatever it was granted.
    pub home: PathBuf,
    /// Canonical forms of workspaces seen (chosen by the user, never by a plugin).
    pub workspaces: Mutex<std::collections::HashMap<PathBuf, PathBuf>>,
    pub state_db: PathBuf,
    pub store: OnceLock<Result<talaria_store::Store, String>>,
    pub secrets: Arc<Secrets>,
    pub process: ProcessRunner,
}

impl Services {
    fn canonical_workspace(&self, workspace: &std::path::Path) -> PathBuf {
        let mut seen = self.workspaces.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        seen.entry(workspace.to_path_buf())
            .or_insert_with(|| workspace.canonicalize().unwrap_or_else(|_| workspace.to_path_buf()))
            .clone()
    }

    fn store(&self) -> Result<&talaria_store::Store, String> {
        self.store
            .get_or_init(|| talaria_store::Store::open(&self.state_db).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(Clone::clone)
    }
}

/// One plugin's identity and powers, shared by all its calls.
pub(crate) struct PluginEnv {
    pub name: String,
    /// The plugin's key-value space: its name, or scope and name for project plugins, so a
    /// project plugin never reads a user plugin's data by taking its name.
    pub kv_space: String,
    pub grants: Arc<Grants>,
    pub config: toml::Table,
    pub services: Arc<Services>,
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

/// The data in one call's `Store`.
pub(crate) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    http: WasiHttpCtx,
    hooks: NetHooks,
    pub limiter: Limiter,
    pub stderr: MemoryOutputPipe,
    pub denials: Arc<Mutex<Vec<String>>>,
    env: Arc<PluginEnv>,
    workspace: PathBuf,
}

impl HostState {
    /// State for one call in `workspace`, with exactly the granted directories preopened.
    pub fn new(env: Arc<PluginEnv>, workspace: PathBuf, memory_cap: usize) -> Self {
        let stderr = MemoryOutputPipe::new(STDERR_CAP);
        let mut wasi = WasiCtxBuilder::new();
        wasi.stderr(stderr.clone()).allow_tcp(false).allow_udp(false).allow_ip_name_lookup(false);
        let workspace_real = env.services.canonical_workspace(&workspace);
        for (dir, access) in env.grants.dirs(&workspace) {
            let dir = match checked_dir(&dir, &workspace, &workspace_real, &env.services.home) {
                Ok(dir) => dir,
                Err(why) => {
                    tracing::warn!(plugin = %env.name, "granted directory {} not opened: {why}", dir.display());
                    continue;
                }
            };
            let perms = match access {
                Access::Read => FsPerms::ReadOnly,
                Access::ReadWrite => FsPerms::ReadWrite,
            };
            let Some(guest) = dir.to_str() else { continue };
            if let Err(e) = wasi.preopened_dir(&dir, guest, perms) {
                tracing::warn!(plugin = %env.name, "granted directory {} is unavailable: {e}", dir.display());
            }
        }
        let denials = Arc::new(Mutex::new(Vec::new()));
        let hooks = NetHooks {
            plugin: env.name.clone(),
            grants: env.grants.clone(),
            secrets: env.services.secrets.clone(),
            denials: denials.clone(),
            requests: 0,
        };
        Self {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            http: WasiHttpCtx::new(),
            hooks,
            limiter: Limiter { memory_cap, used: 0, refused: None },
            stderr,
            denials,
            env,
            workspace,
        }
    }
}

/// A granted directory as it may be opened: it must exist, a `$WORKSPACE` subdirectory must
/// stay inside the workspace once symlinks are resolved, and it may neither contain nor lie
/// inside talaria's home (grants, secrets and compiled code live there).
fn checked_dir(
    dir: &std::path::Path,
    workspace: &std::path::Path,
    workspace_real: &std::path::Path,
    home: &std::path::Path,
) -> Result<PathBuf, String> {
    // Subdirectories are resolved every time: a plugin may have made one a symlink since.
    let real =
        if dir == workspace { workspace_real.to_path_buf() } else { dir.canonicalize().map_err(|e| e.to_string())? };
    if dir.starts_with(workspace) && !real.starts_with(workspace_real) {
        return Err(format!("it resolves to {}, outside the workspace", real.display()));
    }
    if home.starts_with(&real) || real.starts_with(home) {
        return Err(format!("it overlaps talaria's home {}; run talaria from a project directory", home.display()));
    }
    Ok(real)
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: &mut self.hooks }
    }
}

impl types::Host for HostState {}

impl log::Host for HostState {
    async fn log(&mut self, level: log::Level, message: String) {
        let plugin = self.env.name.as_str();
        let message: String = message.chars().take(4096).collect();
        match level {
            log::Level::Trace => tracing::trace!(plugin, "{message}"),
            log::Level::Debug => tracing::debug!(plugin, "{message}"),
            log::Level::Info => tracing::info!(plugin, "{message}"),
            log::Level::Warn => tracing::warn!(plugin, "{message}"),
            log::Level::Error => tracing::error!(plugin, "{message}"),
        }
    }
}

impl config::Host for HostState {
    async fn get(&mut self, key: String) -> Option<String> {
        let value = self.env.config.get(&key)?;
        serde_json::to_string(value).ok()
    }
}

impl HostState {
    fn kv_store(&self) -> Result<&talaria_store::Store, String> {
        if !self.env.grants.has_kv() {
            let name = &self.env.name;
            return Err(format!(
                "the kv capability is not granted to plugin '{name}' (request `kv = true` in plugin.toml and grant it: `talaria plugins grant {name} kv`)"
            ));
        }
        self.env.services.store()
    }
}

impl kv::Host for HostState {
    async fn get(&mut self, key: String) -> Result<Option<Vec<u8>>, String> {
        self.kv_store()?.kv_get(&self.env.kv_space, &key).map_err(|e| e.to_string())
    }

    async fn set(&mut self, key: String, value: Vec<u8>) -> Result<(), String> {
        self.kv_store()?.kv_set(&self.env.kv_space, &key, &value).map_err(|e| e.to_string())
    }

    async fn delete(&mut self, key: String) -> Result<(), String> {
        self.kv_store()?.kv_delete(&self.env.kv_space, &key).map_err(|e| e.to_string())
    }

    async fn list_keys(&mut self, prefix: String) -> Result<Vec<String>, String> {
        self.kv_store()?.kv_keys(&self.env.kv_space, &prefix).map_err(|e| e.to_string())
    }
}

impl secrets::Host for HostState {
    async fn exists(&mut self, name: String) -> bool {
        self.env.grants.secret_host(&name).is_some() && self.env.services.secrets.value(&name).is_some()
    }
}

impl process::Host for HostState {
    async fn run(&mut self, cmd: process::Command) -> Result<process::Output, process::ProcessError> {
        let name = &self.env.name;
        if !self.env.grants.has_process() {
            return Err(process::ProcessError::Denied(format!(
                "the process capability is not granted to plugin '{name}' (grant it: `talaria plugins grant {name} process`)"
            )));
        }
        let request = CommandRequest {
            command: cmd.command,
            cwd: cmd.cwd,
            timeout: cmd.timeout_ms.map(|ms| Duration::from_millis(u64::from(ms))),
        };
        match self.env.services.process.run(name, &self.workspace, request).await {
            Ok(o) => Ok(process::Output {
                exit_code: o.exit_code,
                stdout: o.stdout,
                stderr: o.stderr,
                truncated: o.truncated,
                timed_out: o.timed_out,
            }),
            Err(CommandError::Denied(m)) => Err(process::ProcessError::Denied(m)),
            Err(CommandError::Failed(m)) => Err(process::ProcessError::Failed(m)),
        }
    }
}
