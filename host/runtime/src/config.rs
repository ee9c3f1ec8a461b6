//! What a runtime is configured with: [`RuntimeConfig`], which its embedder fills in, with the
//! host's limits ([`HostLimits`], [`KindTimeouts`]) and the operator's settings for each plugin
//! ([`PluginSettings`]); and where the runtime's own files lie under `$TALARIA_HOME`: the stamp
//! that tells running hosts their plugins changed ([`CHANGED_STAMP`]) and each plugin's data
//! directory ([`plugin_data_dir`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::approval::{Approver, Unattended};
use crate::danger::CommandPolicy;
use crate::fsutil;
use crate::llm::LlmBackend;
use crate::process::{self, Terminals};
use crate::secrets::Secrets;
use crate::stub::HttpStubs;

/// Host-wide caps and defaults for plugin calls, and for what a plugin may declare.
#[derive(Debug, Clone, Copy)]
pub struct HostLimits {
    pub default_memory_mb: u32,
    pub max_memory_mb: u32,
    pub default_timeout: Duration,
    pub max_timeout: Duration,
    pub default_output_kb: u32,
    pub max_output_kb: u32,
    /// Most tools one plugin may list (128; `[sandbox] max_tools_per_plugin`); a plugin that
    /// lists more offers none.
    pub max_tools_per_plugin: usize,
    /// Largest tool spec (name, description and parameters JSON together) a plugin may list
    /// (64 KiB; `[sandbox] max_spec_kb`); a plugin that lists a larger one offers none.
    pub max_spec_bytes: usize,
}

impl Default for HostLimits {
    fn default() -> Self {
        Self {
            default_memory_mb: 64,
            max_memory_mb: 1024,
            default_timeout: Duration::from_secs(30),
            max_timeout: Duration::from_secs(900),
            default_output_kb: 1024,
            max_output_kb: 16 * 1024,
            max_tools_per_plugin: 128,
            max_spec_bytes: 64 * 1024,
        }
    }
}

/// Deadlines of the plugin kinds beside tools, when the manifest's `[limits] timeout_secs` names
/// none (tools use [`HostLimits::default_timeout`]). All are capped at
/// [`HostLimits::max_timeout`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindTimeouts {
    /// A hook runs on the loop's path: 10 s.
    pub hook: Duration,
    /// A memory provider call: 30 s.
    pub memory: Duration,
    /// A context engine calls the model to summarise: 120 s.
    pub context_engine: Duration,
    /// A platform adapter's call, a long poll included: 60 s.
    pub platform: Duration,
}

impl Default for KindTimeouts {
    fn default() -> Self {
        Self {
            hook: Duration::from_secs(10),
            memory: Duration::from_secs(30),
            context_engine: Duration::from_secs(120),
            platform: Duration::from_secs(60),
        }
    }
}

/// Operator settings for one plugin (`[plugins.NAME]` in config.toml).
#[derive(Debug, Clone, Default)]
pub struct PluginSettings {
    /// `[plugins.NAME.config]`, readable by the plugin.
    pub config: toml::Table,
    /// Let its tools replace same-named tools of other plugins.
    pub allow_override: bool,
    /// `enabled`: turn the plugin on or off whatever its manifest's `enabled` says (`None`:
    /// as the manifest says).
    pub enabled: Option<bool>,
}

/// Everything the runtime needs from its embedder.
pub struct RuntimeConfig {
    /// `$TALARIA_HOME`.
    pub home: PathBuf,
    /// The working directory: where project plugins are looked for, and `$WORKSPACE` by default.
    pub workspace: PathBuf,
    pub limits: HostLimits,
    pub plugins: BTreeMap<String, PluginSettings>,
    /// Dangerous commands; its `allow_keys` (`[approvals] allow`) also approve hosts for good
    /// (`net:HOST`).
    pub command_policy: CommandPolicy,
    /// Answers dangerous commands and new hosts reached through a wildcard network grant.
    pub approver: Arc<dyn Approver>,
    /// Secret values; by default the environment, then `$TALARIA_HOME/.env`.
    pub secrets: Option<Secrets>,
    /// Where compiled components go; by default `$TALARIA_HOME/cache/plugins`.
    pub cache_dir: Option<PathBuf>,
    /// Completions for plugins granted `llm`; `None` when no model is configured (their
    /// `llm.complete` then fails saying so).
    pub llm: Option<Arc<dyn LlmBackend>>,
    /// Deadlines of hooks, memory providers and context engines.
    pub kind_timeouts: KindTimeouts,
    /// Record every host import plugins call, for
    /// [`Runtime::take_recorded_imports`](crate::Runtime::take_recorded_imports) (off by
    /// default: then nothing is recorded).
    pub record_imports: bool,
    /// Canned HTTP answers (`talaria plugin test`): while they hold stubs, plugins' requests are
    /// answered from them and never reach the network. `None`: requests go out.
    pub http_stubs: Option<Arc<HttpStubs>>,
    /// Environment variables that hold secrets beside those the leak scan recognises by name
    /// (the model providers' `key_env`s): their values never leave through a plugin.
    pub secret_names: Vec<String>,
    /// Environment variables commands get beside [`process::PASSED_ENV`] (`[process] pass_env`).
    pub pass_env: Vec<String>,
    /// Terminals front ends offer, by session (an editor's), and how each session's commands
    /// are confined; `None`: every command runs here, as `commands` says.
    pub terminals: Option<Arc<dyn Terminals>>,
    /// How commands run: in the OS sandbox (the default: bubblewrap from `PATH`, this
    /// executable as its helper, so a binary embedding the runtime must call
    /// [`talaria_sandbox::helper::main`] when started with [`talaria_sandbox::bwrap::HELPER_ARG`]),
    /// or unconfined.
    pub commands: process::CommandSandbox,
    /// Where plugins' key-value data lives; by default `$TALARIA_HOME/state.db`.
    pub store: Option<talaria_store::Location>,
}

impl RuntimeConfig {
    /// Defaults: unattended approvals without yolo, default limits, no plugin settings.
    pub fn new(home: PathBuf, workspace: PathBuf) -> Self {
        let commands = process::CommandSandbox::confined(&home);
        Self {
            home,
            workspace,
            limits: HostLimits::default(),
            plugins: BTreeMap::new(),
            command_policy: CommandPolicy::default(),
            approver: Arc::new(Unattended { yolo: false }),
            secrets: None,
            cache_dir: None,
            llm: None,
            kind_timeouts: KindTimeouts::default(),
            record_imports: false,
            http_stubs: None,
            secret_names: Vec::new(),
            pass_env: Vec::new(),
            terminals: None,
            commands,
            store: None,
        }
    }
}

/// The file whose text changes each time plugins are installed, removed, regranted or rebuilt
/// by `talaria plugin dev`: running hosts compare it before each turn and reload their plugins
/// when it moved.
pub const CHANGED_STAMP: &str = "plugins.changed";

/// Tell running hosts that the plugins under `home` changed (see [`CHANGED_STAMP`]).
///
/// # Errors
/// The stamp cannot be written.
pub fn mark_plugins_changed(home: &Path) -> std::io::Result<()> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let text = format!("{}.{:09} {}\n", now.as_secs(), now.subsec_nanos(), std::process::id());
    fsutil::write_private_cached(&home.join(CHANGED_STAMP), text.as_bytes())
}

/// The stamp's text now ("" when plugins never changed since the home was made).
pub fn plugins_stamp(home: &Path) -> String {
    std::fs::read_to_string(home.join(CHANGED_STAMP)).unwrap_or_default()
}

/// A plugin's private directory (`$PLUGIN_DATA`) for its key-value space.
pub fn plugin_data_dir(home: &Path, kv_space: &str) -> PathBuf {
    home.join("plugin-data").join(kv_space.replace('/', "_"))
}
