//! talaria's composition root: [`Host::open`] opens a home once — its config, its store, its
//! plugins and models — and [`Host::start`] serves any number of concurrent [`Conversation`]s,
//! each with its own approvals, workspace, cancellation and background work.
//!
//! A front door (the terminal, ACP, the gateway) is a producer of [`Op`]s and a renderer of
//! [`Stamped`] events; it never wires an agent itself:
//!
//! ```no_run
//! # async fn demo() -> Result<(), talaria_core::Error> {
//! use talaria_core::{Host, HostOptions, Start};
//! use talaria_protocol::{Event, Op};
//!
//! // 1. Open the host: TALARIA_HOME (or ~/.talaria), with the current directory as the workspace.
//! let host = Host::open(HostOptions::from_env()?).await?;
//! // 2. Start a conversation (a new session here; `Start::resume` continues a stored one).
//! let mut conversation = host.start(Start::default()).await?;
//! // 3. Submit a user turn; every submission gets an id.
//! let turn = conversation.submit(Op::UserTurn { text: "What is in README.md?".into(), images: Vec::new(), sender: None, trace: None });
//! // 4. Render events until that turn ends.
//! while let Some(stamped) = conversation.next_event().await {
//!     match &stamped.event {
//!         Event::TextDelta { text } => print!("{text}"),
//!         Event::ApprovalNeeded(a) => {
//!             // Ask the human, then answer by id.
//!             let decision = talaria_protocol::Decision::Deny;
//!             conversation.submit(Op::Approve { id: a.id, decision });
//!         }
//!         Event::TurnEnd(_) if stamped.turn_id == Some(turn) => break,
//!         _ => {}
//!     }
//! }
//! conversation.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Invariants:
//! 1. Each conversation has its own approval [`Gate`](talaria_agent::approval::Gate): a plugin's
//!    request to run a dangerous command or reach a new host is asked of the conversation whose
//!    session it acts for, never of another; "session" answers cover that session only.
//! 2. Each conversation's background work (memory syncs) is its own: closing one waits for
//!    nothing of the others.
//! 3. Events come out in the order the loop produced them, each stamped with the session it
//!    belongs to (after compression, the child session) and the turn it belongs to.
//!
//! 4. A front end may serve some work itself ([`Start::offered`]): a [`Terminal`] for the
//!    conversation's commands, after the runtime's checks passed, and a [`ToolOverlay`] for some
//!    plugin tools under their own specs. Both owe the limits of what they replace.
//!
//! The front doors built on it: the terminal (`talaria chat`, host/cli/src/chat.rs and
//! repl.rs), the ACP server (`talaria acp`, the `talaria-acp` crate, which also serves an
//! editor's files and terminal), the gateway (`talaria gateway run`, `talaria_gateway::serve`),
//! the scheduled-job runner (`talaria cron tick` and the gateway, the `talaria-scheduler` crate)
//! and `talaria mcp serve` (the `talaria-mcp-serve` crate). See docs/architecture.md.

pub mod adapters;
pub mod budget;
pub mod config;
mod conversation;
pub mod grants;
pub mod kept;
mod layers;
pub mod metrics;
pub mod models;
mod offered;
pub mod plugins;
pub mod prices;
pub mod rollback;
mod router;
mod stats;
pub mod telemetry;
mod title;
pub mod usage;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use talaria_agent::model::Client;
use talaria_runtime::{Approver, Embedded, LlmBackend, Runtime, RuntimeConfig, Unattended};
use talaria_store::Store;

pub use config::ConfigToml;
pub use conversation::{Conversation, Info, Submitter, project_skills};
pub use layers::{agent, cron, edit, listen, market, mcp, runtime, sandbox, store};
pub use models::ModelChoice;
pub use offered::{CommandError, CommandOutput, CommandRun, Offered, Terminal, ToolOverlay};
pub use plugins::Plugins;
pub use talaria_agent::prompt::Platform;
pub use talaria_protocol::{Event, Op, Stamped};

/// What can stop the host from opening or a conversation from starting. Each says what was
/// wrong and how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Where home is could not be worked out.
    #[error("{0}")]
    Home(String),
    /// config.toml cannot be read or is not valid.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// No model, or one that cannot be used.
    #[error("{0}")]
    Model(String),
    #[error(transparent)]
    Store(#[from] talaria_store::Error),
    #[error(transparent)]
    Agent(#[from] talaria_agent::Error),
    #[error(transparent)]
    Runtime(#[from] talaria_runtime::Error),
    /// A workspace that does not exist, a session that cannot be forked...
    #[error("{0}")]
    Usage(String),
}

/// Where the host lives and its default workspace.
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// `$TALARIA_HOME`, else `~/.talaria`.
    pub home: PathBuf,
    /// The workspace of conversations that name none (absolute, canonical).
    pub workspace: PathBuf,
}

impl HostOptions {
    /// Home from the environment, the current directory as the workspace.
    ///
    /// # Errors
    /// Home cannot be worked out, or the current directory cannot be read.
    pub fn from_env() -> Result<Self, Error> {
        let home = config::home()?;
        let cwd =
            std::env::current_dir().map_err(|e| Error::Usage(format!("cannot read the current directory: {e}")))?;
        Ok(Self { home, workspace: canonical_workspace(&cwd)? })
    }
}

/// `dir` as a workspace: absolute and canonical.
///
/// # Errors
/// It does not exist.
pub fn canonical_workspace(dir: &Path) -> Result<PathBuf, Error> {
    dir.canonicalize().map_err(|e| Error::Usage(format!("workspace {} does not exist ({e})", dir.display())))
}

/// How a conversation starts.
#[derive(Debug, Clone)]
pub struct Start {
    /// Its working directory (`$WORKSPACE` for tools, where project plugins and context files
    /// are found); `None`: the host's.
    pub workspace: Option<PathBuf>,
    /// Where sessions come from in the store: `cli`, `acp`, `gateway`, `cron`.
    pub source: String,
    pub platform: Platform,
    /// What this process is, as another process waiting for the same session is told.
    pub holder: String,
    /// Whether a human can answer approvals and questions (else they are denied / unanswered).
    pub interactive: bool,
    /// Approve dangerous commands and new hosts without asking.
    pub yolo: bool,
    pub model: ModelChoice,
    /// Toolsets to enable (over `[agent] toolsets`).
    pub toolsets: Option<Vec<String>>,
    pub max_turns: Option<u32>,
    /// Stream replies (default: `[agent] stream`, else yes).
    pub stream: Option<bool>,
    /// Continue this stored session: an id, a unique prefix, a title or `latest`.
    pub resume: Option<String>,
    /// With `resume`: carry on in a copy of it (a child session), leaving it as it is.
    pub fork: bool,
    /// What the front end serves itself (an editor's terminal and files).
    pub offered: Offered,
    /// Title new sessions after their first answer (unless `[agent] auto_title = false`).
    pub auto_title: bool,
    /// Share the owner's memory (MEMORY.md, USER.md, the memory provider) with this session;
    /// off for chats strangers may be in.
    pub memory: bool,
    /// Take the plugins of this directory (found there once, shared) instead of the
    /// workspace's: for workspaces a front door makes itself, which hold no project of their own
    /// (the gateway's chats). Tools still act in `workspace`.
    pub plugins_from: Option<PathBuf>,
    /// Approval keys answered yes without asking (`rm-recursive`, `net:HOST`): the allowances
    /// a user confirmed for a scheduled job. Every other approval is asked as usual.
    pub allow: Vec<String>,
    /// The chat this conversation serves (`ACCOUNT:CHAT[:THREAD]`): jobs it schedules deliver
    /// there unless told otherwise, and are made by that chat.
    pub origin: Option<String>,
    /// MCP servers of this conversation only, beside `[mcp_servers]` (an editor's, over ACP);
    /// they stop when it ends.
    pub mcp_servers: std::collections::BTreeMap<String, talaria_mcp::config::ServerToml>,
    /// Offer the tools of the home's `[mcp_servers]` (starting those servers when first
    /// needed); off for a front door that serves the plugins' tools only (`mcp serve`).
    pub configured_mcp: bool,
    /// Run this conversation's commands outside the OS sandbox. A gateway chat or scheduled
    /// job is confined whatever `[sandbox] commands` says, unless its own platform or job set
    /// this (the operator's decision for that very place).
    pub unconfined_commands: bool,
    /// Let go of the session's history and system prompt once no op came for this long (they
    /// are read again from the store when the next op comes): for a front door holding many
    /// sessions that mostly wait (the gateway's chats), each then costs little while it waits,
    /// and one in full flow keeps its history from turn to turn. Its
    /// [`Info::tail`](crate::conversation::Info::tail) stays empty.
    pub rest_after: Option<std::time::Duration>,
    /// What the conversations of this front door that rest may keep between turns, together
    /// (see [`kept`]): past it, one rests as soon as its turn is done.
    pub kept: Option<std::sync::Arc<kept::Kept>>,
    /// Each turn's message is kept elsewhere until its turn is done, and the turn is run again
    /// when a crash cuts it short (the gateway's inbox): it is then committed with the turn's
    /// answer instead of on its own before the model is called
    /// ([`AgentConfig::message_kept`](talaria_agent::AgentConfig::message_kept)).
    pub message_kept: bool,
    /// A conversation that never calls the model (`talaria tools`, which runs tools through
    /// [`talaria_protocol::Op::CallTool`]): no model needs to be configured, and none is read.
    pub no_model: bool,
    /// The scheduled job it runs (by id): its turns count against the job's `[budget]`.
    pub job: Option<String>,
}

impl Default for Start {
    fn default() -> Self {
        Self {
            workspace: None,
            source: "cli".into(),
            platform: Platform::Cli,
            holder: "talaria".into(),
            interactive: false,
            yolo: false,
            model: ModelChoice::default(),
            toolsets: None,
            max_turns: None,
            stream: None,
            resume: None,
            fork: false,
            offered: Offered::default(),
            auto_title: false,
            memory: true,
            plugins_from: None,
            allow: Vec::new(),
            origin: None,
            mcp_servers: std::collections::BTreeMap::new(),
            configured_mcp: true,
            unconfined_commands: false,
            rest_after: None,
            kept: None,
            message_kept: false,
            no_model: false,
            job: None,
        }
    }
}

/// An open talaria home: config, store, plugins per workspace, and the model client every
/// conversation shares.
pub struct Host {
    home: PathBuf,
    workspace: PathBuf,
    config: Arc<ConfigToml>,
    store: Arc<Store>,
    client: Client,
    router: Arc<router::Router>,
    /// The auxiliary model (session titles), resolved on first use.
    aux: Arc<dyn LlmBackend>,
    /// Plugins by workspace (project plugins differ), made on first use (the default
    /// workspace's when the host opens); whether nobody has asked for them yet.
    plugins: Mutex<HashMap<PathBuf, (Arc<Plugins>, bool)>>,
    /// The `[mcp_servers]`, started when a conversation first needs their tools.
    mcp: Arc<talaria_mcp::client::Servers>,
    /// Where files are kept before tool calls change them; none when `[checkpoints]` is off.
    checkpoints: Option<Arc<talaria_agent::checkpoints::Checkpoints>>,
    /// What each turn took, kept in batches.
    stats: Arc<stats::Recorder>,
    /// Every conversation's events, counted for `/metrics`.
    metrics: Arc<metrics::Metrics>,
}

/// The checkpoints of `home`, as `[checkpoints]` says: kept before file-writing tools and before
/// shell commands the dangerous-command check flags.
fn checkpoints(home: &Path, config: &ConfigToml) -> Option<Arc<talaria_agent::checkpoints::Checkpoints>> {
    if config.checkpoints.enabled == Some(false) {
        return None;
    }
    let max = config.checkpoints.max_mb.map_or(talaria_agent::checkpoints::DEFAULT_MAX_BYTES, |mb| mb * 1024 * 1024);
    // Every command the check would stop, whatever was approved "always": a rollback is wanted
    // most after one that was let through.
    let policy = talaria_danger::CommandPolicy { home: Some(home.to_path_buf()), ..Default::default() };
    let destructive = Box::new(move |command: &str| {
        !matches!(talaria_danger::check(command, &policy), talaria_danger::Verdict::Safe)
    });
    Some(Arc::new(talaria_agent::checkpoints::Checkpoints::new(home, max, destructive)))
}

/// The plugins as seen from `workspace`; those every conversation calls first start loading.
fn make_plugins(
    home: &Path,
    workspace: &Path,
    config: &Arc<ConfigToml>,
    client: &Client,
    router: &Arc<router::Router>,
) -> Result<Arc<Plugins>, Error> {
    let approver: Arc<dyn Approver> = router.clone();
    let llm: Arc<dyn LlmBackend> = Arc::new(plugins::LazyAux::new(home, config.clone(), client.clone()));
    let stamp_home = home.to_path_buf();
    let (home, workspace, config_, router) =
        (home.to_path_buf(), workspace.to_path_buf(), config.clone(), router.clone());
    let remake: plugins::Remake = Box::new(move || {
        let mut rc = runtime_config(&home, &workspace, &config_, approver.clone(), Some(llm.clone()));
        rc.terminals = Some(router.clone());
        Runtime::new(rc, &bundled())
    });
    let runtime = Arc::new(remake()?);
    Ok(Arc::new(Plugins::new(runtime, config, Some((stamp_home, remake)))))
}

impl Host {
    /// Open `options.home`: read config.toml, open the store (a damaged one is reported here,
    /// before any plugin touches its data). Meanwhile the default workspace's plugins are
    /// discovered, and the WebAssembly engine, the memory provider, the context engine and the
    /// hooks start loading on threads of their own (a plugin not compiled yet is compiled there);
    /// other workspaces' plugins are discovered when a conversation there first needs them.
    ///
    /// # Errors
    /// config.toml is not valid, or the store cannot be opened.
    pub async fn open(options: HostOptions) -> Result<Self, Error> {
        // Every conversation runs plugins: the engine is made meanwhile.
        talaria_runtime::start_engine();
        let config = Arc::new(ConfigToml::load(&options.home)?);
        let client = Client::new();
        let router = Arc::new(router::Router::new());
        // The store opens (schema check, WAL) while the default workspace's plugins are found,
        // and those the first conversation calls first start loading.
        let finding = {
            let (home, workspace) = (options.home.clone(), options.workspace.clone());
            let (config, client, router) = (config.clone(), client.clone(), router.clone());
            tokio::task::spawn_blocking(move || make_plugins(&home, &workspace, &config, &client, &router))
        };
        let store = open_store(&options.home, &config).await;
        let default = finding.await.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        let store = Arc::new(store?);
        router.set_store(store.clone());
        let mut plugins = HashMap::new();
        // A problem finding them (grants.toml unreadable) is reported when they are asked for.
        if let Ok(made) = default {
            plugins.insert(options.workspace.clone(), (made, true));
        }
        let aux = Arc::new(plugins::LazyAux::new(&options.home, config.clone(), client.clone()));
        let mcp =
            Arc::new(mcp_servers(&options.home, &options.workspace, &config, &config.mcp_servers, router.clone()));
        let checkpoints = checkpoints(&options.home, &config);
        let stats = stats::Recorder::new(store.clone());
        Ok(Self {
            home: options.home,
            workspace: options.workspace,
            config,
            store,
            stats,
            metrics: Arc::default(),
            client,
            router,
            aux,
            plugins: Mutex::new(plugins),
            mcp,
            checkpoints,
        })
    }

    /// What commands, connections and MCP calls of `session_id` (working in `workspace`) are
    /// let through without asking, each key once.
    ///
    /// # Errors
    /// The workspace's plugins cannot be found.
    pub fn allowed(&self, workspace: &Path, session_id: &str) -> Result<Vec<talaria_runtime::Allowed>, Error> {
        let runtime = self.plugins(workspace)?.0.runtime();
        let mut all = runtime.approvals().allowed(session_id);
        all.extend(self.mcp.approvals().allowed(session_id));
        all.sort();
        all.dedup_by(|a, b| a.key == b.key && a.scope == b.scope);
        Ok(all)
    }

    /// Ask about `key` again in `session_id` (and, when it was allowed always, in every session
    /// while this host runs); whether it was allowed at all. The config keeps what it says.
    ///
    /// # Errors
    /// The workspace's plugins cannot be found.
    pub fn forget(&self, workspace: &Path, session_id: &str, key: &str) -> Result<bool, Error> {
        let runtime = self.plugins(workspace)?.0.runtime();
        let here = runtime.approvals().forget(session_id, key);
        let mcp = self.mcp.approvals().forget(session_id, key);
        Ok(here || mcp)
    }

    /// The configured MCP servers (`[mcp_servers]`), shared by every conversation.
    pub fn mcp(&self) -> &Arc<talaria_mcp::client::Servers> {
        &self.mcp
    }

    pub fn home(&self) -> &Path {
        &self.home
    }

    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    pub fn config(&self) -> &ConfigToml {
        &self.config
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// What every conversation of this host did, counted (for `/metrics`).
    pub fn metrics(&self) -> &Arc<metrics::Metrics> {
        &self.metrics
    }

    /// The auxiliary model of a conversation whose main model is `choice`: the host's own when
    /// config alone chooses it, else one resolved on first use from the choice (a session
    /// started with `--model` flags and no `[model]` still gets its title).
    fn aux_for(&self, choice: &ModelChoice) -> Arc<dyn LlmBackend> {
        if *choice == ModelChoice::default() {
            return self.aux.clone();
        }
        Arc::new(plugins::LazyAux::chosen(&self.home, self.config.clone(), self.client.clone(), choice.clone()))
    }

    /// The plugins as seen from `workspace` (made on first use, then shared by every
    /// conversation there). The second value is whether they were made just now (so their
    /// problems have not been reported yet).
    ///
    /// # Errors
    /// grants.toml cannot be read.
    pub fn plugins(&self, workspace: &Path) -> Result<(Arc<Plugins>, bool), Error> {
        let mut all = lock(&self.plugins);
        if let Some((p, unseen)) = all.get_mut(workspace) {
            // Made when the host opened: new to whoever asks first.
            return Ok((p.clone(), std::mem::take(unseen)));
        }
        let made = make_plugins(&self.home, workspace, &self.config, &self.client, &self.router)?;
        all.insert(workspace.to_path_buf(), (made.clone(), false));
        Ok((made, true))
    }

    /// Start a conversation. Problems worth knowing (a plugin that did not load, a context file
    /// refused) arrive as warning notices before its [`Event::SessionStarted`].
    ///
    /// # Errors
    /// No usable model, an unknown toolset, a session to resume that is not found, a workspace
    /// that does not exist, or the store cannot be read.
    pub async fn start(&self, start: Start) -> Result<Conversation, Error> {
        conversation::start(self, start).await
    }
}

/// The runtime's configuration for `workspace` from config.toml.
pub fn runtime_config(
    home: &Path,
    workspace: &Path,
    config: &ConfigToml,
    approver: Arc<dyn Approver>,
    llm: Option<Arc<dyn LlmBackend>>,
) -> RuntimeConfig {
    let mut rc = RuntimeConfig::new(home.to_path_buf(), workspace.to_path_buf());
    rc.limits = config.limits();
    rc.plugins = config.plugin_settings();
    rc.command_policy = config.command_policy(home);
    rc.approver = approver;
    rc.llm = llm;
    rc.secret_names = config.secret_names();
    rc.pass_env = config.process.pass_env.clone();
    rc.commands = config.command_sandbox(home);
    rc.store = Some(config.store_location(home));
    rc
}

/// A runtime for commands that run plugins with no one to ask (`talaria tools call`,
/// `plugins list`...): dangerous commands and new hosts are refused unless `yolo`.
///
/// # Errors
/// grants.toml cannot be read.
pub fn unattended_runtime(home: &Path, workspace: &Path, config: &ConfigToml, yolo: bool) -> Result<Runtime, Error> {
    let rc = runtime_config(home, workspace, config, Arc::new(Unattended { yolo }), None);
    Ok(Runtime::new(rc, &bundled())?)
}

/// The MCP servers of `servers` (config.toml's, or a conversation's own) for `workspace`,
/// started when first used, their dangerous calls asked of `approver`.
pub fn mcp_servers(
    home: &Path,
    workspace: &Path,
    config: &ConfigToml,
    servers: &std::collections::BTreeMap<String, talaria_mcp::config::ServerToml>,
    approver: Arc<dyn Approver>,
) -> talaria_mcp::client::Servers {
    talaria_mcp::client::Servers::new(
        home,
        workspace,
        servers,
        approver,
        &config.approvals.allow,
        config.command_sandbox(home),
    )
}

/// The store config.toml names (`state.db` in home, or `[store] url`), open to read and write.
///
/// # Errors
/// It cannot be opened or is not a talaria store.
pub async fn open_store(home: &Path, config: &ConfigToml) -> Result<Store, talaria_store::Error> {
    config.store_location(home).open().await
}

/// The store config.toml names, open only to read (a read-only home, `doctor`).
///
/// # Errors
/// It cannot be opened or is not a talaria store.
pub async fn open_store_for_reading(home: &Path, config: &ConfigToml) -> Result<Store, talaria_store::Error> {
    config.store_location(home).open_for_reading().await
}

/// What `talaria plugin test` runs one plugin in: a scratch home and workspace of its own.
#[derive(Clone)]
pub struct ScratchPlugin {
    /// The scratch home and workspace (the user's home stays hidden from its commands too).
    pub home: PathBuf,
    pub workspace: PathBuf,
    /// The plugin and its settings from the test case.
    pub plugin: String,
    pub config: toml::Table,
    /// The canned HTTP answers it gets instead of the network.
    pub stubs: Arc<talaria_runtime::HttpStubs>,
    /// The model its LLM calls reach, if the case gives one.
    pub llm: Option<Arc<dyn LlmBackend>>,
}

/// A runtime for `talaria plugin test`: only `scratch`'s plugin, in its scratch home and
/// workspace, under the user's limits, command policy and command sandbox, with the user's
/// secrets and compile cache (what it compiles is reused by `plugins install` and chat). It
/// records every host import the plugin calls, and its HTTP gets the canned answers.
///
/// # Errors
/// The plugin cannot be set up.
pub fn scratch_runtime(home: &Path, config: &ConfigToml, scratch: ScratchPlugin) -> Result<Runtime, Error> {
    let mut rc = RuntimeConfig::new(scratch.home.clone(), scratch.workspace);
    rc.limits = config.limits();
    rc.command_policy = config.command_policy(home);
    let mut commands = config.command_sandbox(home);
    commands.hidden.push(scratch.home);
    rc.commands = commands;
    rc.secrets = Some(talaria_runtime::Secrets::load(&home.join(".env")));
    rc.cache_dir = Some(home.join("cache").join("plugins"));
    rc.record_imports = true;
    rc.http_stubs = Some(scratch.stubs);
    let settings =
        talaria_runtime::PluginSettings { config: scratch.config, allow_override: false, enabled: Some(true) };
    rc.plugins.insert(scratch.plugin, settings);
    rc.llm = scratch.llm;
    Ok(Runtime::new(rc, &[])?)
}

/// The plugins compiled into the binary.
pub fn bundled() -> Vec<Embedded> {
    talaria_bundled::embedded()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
