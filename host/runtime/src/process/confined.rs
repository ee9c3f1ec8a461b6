//! Commands in the OS sandbox ([`talaria_sandbox`]): its settings, one kept sandbox per session,
//! plugin and workspace, and the gate its proxy asks.
//!
//! A plugin's commands see the workspace (with `.git/config`, `.git/hooks` and `.talaria/`
//! read-only), the system, the toolchain places and the directories its filesystem grants name,
//! and reach hosts through the egress proxy under its network grants and the runtime's
//! approvals (`net:HOST`, shared with plugins' own HTTP). Approvals answer the dangerous-command
//! classifier and the proxy; nothing here widens what the sandbox shows: only [`CommandSandbox`]
//! (`[sandbox]` in config) does.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use talaria_sandbox::proxy::{Gate, Refusal};
use talaria_sandbox::{Launcher, Limits, Policy, Sandbox, Unavailable};

use crate::approval::{Approvals, Caller};
use crate::grant::{Access, Grants, HostPattern};

/// Whether commands run in the sandbox (`[sandbox] commands`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confinement {
    /// In the OS sandbox; refused where it cannot start.
    Confined,
    /// As the user, with all the user's files, processes and network: an explicit opt-out.
    Unconfined,
}

impl Confinement {
    pub fn name(self) -> &'static str {
        match self {
            Self::Confined => "confined",
            Self::Unconfined => "unconfined",
        }
    }
}

/// Toolchain places under the home directory that commands may read by default.
pub const DEFAULT_TOOLCHAINS: &[&str] = &[".cargo", ".rustup", ".npm", ".cache/pip", ".pyenv", ".nvm", ".volta"];

/// Variables that move a toolchain elsewhere: where they are set, their place is readable too.
const TOOLCHAIN_VARS: &[&str] = &["CARGO_HOME", "RUSTUP_HOME", "PYENV_ROOT", "NVM_DIR", "VOLTA_HOME"];

/// The default toolchain places: under `home`, and wherever the toolchains' variables say.
pub fn default_toolchains(home: Option<&Path>) -> Vec<PathBuf> {
    let under_home = home.into_iter().flat_map(|h| DEFAULT_TOOLCHAINS.iter().map(move |t| h.join(t)));
    let moved = TOOLCHAIN_VARS.iter().filter_map(std::env::var_os).filter(|v| !v.is_empty()).map(PathBuf::from);
    let mut places: Vec<PathBuf> = Vec::new();
    for place in under_home.chain(moved) {
        if !places.contains(&place) {
            places.push(place);
        }
    }
    places
}

/// How commands are confined: from `[sandbox]`.
#[derive(Debug, Clone)]
pub struct CommandSandbox {
    /// For sessions that do not say otherwise (a gateway chat or a scheduled job is confined
    /// unless its own settings say so).
    pub confinement: Confinement,
    /// How sandboxes start; why they cannot, where they cannot.
    pub launcher: Result<Launcher, Unavailable>,
    /// Readable places beside the workspace (toolchains, `[sandbox] read`).
    pub read: Vec<PathBuf>,
    /// Writable places beside the workspace (`[sandbox] write`).
    pub write: Vec<PathBuf>,
    /// Never visible: talaria's homes.
    pub hidden: Vec<PathBuf>,
    /// The home's skills, read-only, so that a skill's scripts can be run by their path (the
    /// one part of talaria's home commands see; `None`: not even that).
    pub skills: Option<PathBuf>,
    /// The user's home directory.
    pub home: Option<PathBuf>,
    pub limits: Limits,
    /// Hosts that resolve to an address of the operator's own network (a package mirror, a
    /// proxy): commands reach those addresses once the host is allowed (`[sandbox] local_hosts`).
    pub local_hosts: Vec<HostPattern>,
}

impl CommandSandbox {
    /// Confined, with bubblewrap from `PATH`, talaria's own executable as the helper, the
    /// default toolchain places, and `talaria_home` (and the default home, `~/.talaria`,
    /// with every profile in it) hidden.
    pub fn confined(talaria_home: &Path) -> Self {
        let helper = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("talaria"));
        let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
        let mut hidden = vec![talaria_home.to_path_buf()];
        if let Some(h) = &home {
            hidden.push(h.join(".talaria"));
        }
        let read = default_toolchains(home.as_deref());
        Self {
            skills: Some(talaria_home.join("skills")),
            confinement: Confinement::Confined,
            launcher: Launcher::find(None, helper),
            read,
            write: Vec::new(),
            hidden,
            home,
            limits: Limits::default(),
            local_hosts: Vec::new(),
        }
    }

    /// Commands run as the user (tests of what happens before a command runs, and the opt-out).
    pub fn unconfined() -> Self {
        Self {
            confinement: Confinement::Unconfined,
            launcher: Err(Unavailable { reason: "not configured".into(), fix: String::new() }),
            read: Vec::new(),
            write: Vec::new(),
            hidden: Vec::new(),
            skills: None,
            home: None,
            limits: Limits::default(),
            local_hosts: Vec::new(),
        }
    }

    /// The policy for a command of a plugin with `grants` in `workspace`.
    pub fn policy(&self, workspace: &Path, grants: &Grants) -> Policy {
        let mut read = self.read.clone();
        read.extend(self.skills.clone());
        let mut write = self.write.clone();
        for dir in grants.dirs(workspace, Path::new("")) {
            // A plugin's data directory is inside talaria's home: never shown to commands.
            if dir.plugin_data || dir.path.starts_with(workspace) {
                continue;
            }
            match dir.access {
                Access::Read => read.push(dir.path),
                Access::ReadWrite => write.push(dir.path),
            }
        }
        let canonical = |p: PathBuf| p.canonicalize().unwrap_or(p);
        Policy {
            workspace: canonical(workspace.to_path_buf()),
            read: read.into_iter().map(canonical).collect(),
            write: write.into_iter().map(canonical).collect(),
            hidden: self.hidden.iter().cloned().map(canonical).collect(),
            home: self.home.clone().map(canonical),
            scratch: Vec::new(),
            limits: self.limits,
        }
    }
}

/// How long an unused sandbox is kept.
const IDLE: Duration = Duration::from_secs(10 * 60);
/// Most sandboxes kept at once (the least recently used goes first).
const MAX_KEPT: usize = 32;

/// A sandbox kept for one session's commands of one plugin in one workspace.
struct Kept {
    sandbox: Arc<Sandbox>,
    gate: Arc<CommandGate>,
    /// What was protected when it started: a sandbox is out of date once this changes (a
    /// repository was made, `.talaria/` appeared).
    protected: Vec<PathBuf>,
    used: Instant,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    session: String,
    plugin: String,
    workspace: PathBuf,
}

/// The kept sandboxes.
pub(crate) struct Sandboxes {
    pub settings: CommandSandbox,
    kept: tokio::sync::Mutex<HashMap<Key, Kept>>,
}

impl Sandboxes {
    pub fn new(settings: CommandSandbox) -> Self {
        Self { settings, kept: tokio::sync::Mutex::new(HashMap::new()) }
    }

    /// The sandbox for `caller`'s commands of `plugin` in `workspace`, started now if there is
    /// none (or it ended, or what it protects changed).
    ///
    /// # Errors
    /// The sandbox cannot start here: why, and how to fix it.
    pub async fn get(
        &self,
        plugin: &str,
        grants: &Arc<Grants>,
        approvals: &Arc<Approvals>,
        workspace: &Path,
        caller: &Caller,
    ) -> Result<Arc<Sandbox>, Unavailable> {
        let launcher = self.settings.launcher.as_ref().map_err(Clone::clone)?;
        let policy = self.settings.policy(workspace, grants);
        let protected = policy.protected_now();
        let key =
            Key { session: caller.session_id.clone(), plugin: plugin.to_string(), workspace: policy.workspace.clone() };
        let mut kept = self.kept.lock().await;
        let now = Instant::now();
        kept.retain(|_, k| k.sandbox.is_alive() && now.duration_since(k.used) < IDLE);
        if let Some(k) = kept.get_mut(&key)
            && k.protected == protected
        {
            k.used = now;
            k.gate.acting_for(caller);
            return Ok(k.sandbox.clone());
        }
        kept.remove(&key);
        if kept.len() >= MAX_KEPT
            && let Some(oldest) = kept.iter().min_by_key(|(_, k)| k.used).map(|(key, _)| key.clone())
        {
            kept.remove(&oldest);
        }
        let gate = Arc::new(
            CommandGate::new(plugin, grants.clone(), approvals.clone(), caller.clone())
                .with_local_hosts(self.settings.local_hosts.clone()),
        );
        let sandbox = Arc::new(Sandbox::start(launcher, &policy, gate.clone()).await?);
        kept.insert(key, Kept { sandbox: sandbox.clone(), gate, protected, used: now });
        Ok(sandbox)
    }
}

/// What the proxy of a sandbox asks before each connection its commands make: hosts the
/// owner's grants name are allowed, others asked through the approvals on behalf of the
/// session its latest command acts for, internal addresses refused unless named.
pub struct CommandGate {
    plugin: String,
    grants: Arc<Grants>,
    local_hosts: Vec<HostPattern>,
    approvals: Arc<Approvals>,
    /// Who its commands act for now (the latest command's tool call).
    caller: Mutex<Caller>,
}

impl CommandGate {
    /// The gate of a sandbox acting for `owner` (a plugin, or `mcp:SERVER`).
    pub fn new(owner: &str, grants: Arc<Grants>, approvals: Arc<Approvals>, caller: Caller) -> Self {
        Self { plugin: owner.to_string(), grants, local_hosts: Vec::new(), approvals, caller: Mutex::new(caller) }
    }

    /// Names whose internal addresses may be reached ([`CommandSandbox::local_hosts`]).
    #[must_use]
    pub fn with_local_hosts(mut self, hosts: Vec<HostPattern>) -> Self {
        self.local_hosts = hosts;
        self
    }

    /// Ask on behalf of `caller` from now on.
    pub fn acting_for(&self, caller: &Caller) {
        *self.caller.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = caller.clone();
    }
}

impl Gate for CommandGate {
    fn admit<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> Pin<Box<dyn std::future::Future<Output = Result<SocketAddr, Refusal>> + Send + 'a>> {
        let caller = self.caller.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        Box::pin(async move {
            crate::net::admit_command(
                &self.plugin,
                &self.grants,
                &self.local_hosts,
                &self.approvals,
                &caller,
                host,
                port,
            )
            .await
        })
    }
}
