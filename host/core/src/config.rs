//! `$TALARIA_HOME/config.toml`: raw TOML (`*Toml`) resolved into the runtime's config.
//!
//! ```toml
//! [model]              # the main model (flags --provider/--model/--base-url override)
//! provider = "openai"  # openai | openrouter | anthropic | ollama | custom
//! name = "gpt-4.1-mini"
//! # base_url = "http://localhost:11434/v1"   key_env = "OPENAI_API_KEY"   api_mode = "responses"
//! # connect_timeout_secs = 10   first_byte_timeout_secs = 120   idle_timeout_secs = 60
//! # request_timeout_secs = 600  tool_choice = "auto"   # auto | required | none | off
//!
//! [[fallback_providers]]   # tried in order when the main model keeps failing
//! provider = "anthropic"
//! model = "claude-sonnet-4-5"
//!
//! [agent]
//! max_turns = 90       # model calls per turn
//! toolsets = ["all"]   # or e.g. ["coding", "memory"]; disabled_toolsets = ["web"]
//!
//! [custom_toolsets.review]
//! tools = ["read_file", "search_files"]
//! includes = ["web"]
//!
//! [sandbox]            # host-wide plugin limits
//! memory_mb = 64
//! timeout_secs = 30
//! max_tools_per_plugin = 128   # a plugin listing more offers none
//! max_spec_kb = 64             # nor one listing a larger tool spec
//!
//! [approvals]
//! deny = ["*curl*|*sh*"]      # always refused, even with --yolo
//! allow = ["git-force-push"]  # dangerous-pattern keys approved "always"
//!
//! [process]
//! pass_env = ["JIRA_URL"]     # passed to commands beside PATH, HOME, locale, proxies...
//!
//! [memory]
//! provider = "journal"  # the external memory provider (a memory plugin), or "none"
//!
//! [context]
//! engine = "compressor" # the context engine (a context-engine plugin), or "none"
//!
//! [terminal]
//! busy_input = "interrupt"  # a message sent while a reply runs: interrupt | queue | steer
//!
//! [cron]               # scheduled jobs (`talaria cron`); each job may set its own
//! toolsets = ["files", "web"]
//! timeout_secs = 600
//!
//! [auxiliary]          # the model for summaries, titles and plugins' llm calls (default: [model])
//! provider = "openai"
//! model = "gpt-4.1-nano"
//!
//! [plugins.guard]
//! enabled = true       # the guard and audit hooks are off until enabled
//!
//! [plugins.weather]
//! allow_override = false
//! [plugins.weather.config]
//! base_url = "https://api.weatherapi.com/v1"
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use talaria_agent::model::{ApiMode, ProviderError, ProviderSpec, TimeoutPhase, Timeouts, ToolChoice};
use talaria_runtime::{CommandPolicy, HostLimits, PluginSettings};

use crate::Error;

mod budget;
mod gateway;
mod home;
mod telemetry;

pub use budget::{BudgetToml, Limits};
pub use gateway::{GatewayToml, GroupSessions, LimitsToml, PlatformToml, RouteAuth, RouteToml};
pub use home::{
    ACTIVE_PROFILE_FILE, DEFAULT_PROFILE, base_home, check_profile_name, home, profile, profile_home, set_profile,
};
pub use telemetry::TelemetryToml;

/// Why `config.toml` could not be read or changed. Each message names the file and the problem.
/// Where it quotes an I/O or TOML error, that error is a field of the variant and not its
/// `source()`: the message already says it, and a front door printing the chain would say it
/// twice.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file is there but cannot be read.
    #[error("cannot read {}: {error}", path.display())]
    Read { path: PathBuf, error: std::io::Error },
    /// The file is not a valid configuration ([`ConfigToml::load`]): not TOML, an unknown key,
    /// a value of the wrong type.
    #[error("{} is not valid: {error}", path.display())]
    Invalid { path: PathBuf, error: toml::de::Error },
    /// A value of the right type that cannot be meant (a negative cost limit).
    #[error("{} is not valid: {what}", path.display())]
    Value { path: PathBuf, what: String },
    /// The file to change ([`edit`]) is not TOML.
    #[error("{} is not valid TOML: {error}", path.display())]
    Parse { path: PathBuf, error: toml_edit::TomlError },
    /// The change given to [`edit`] found the file in a shape it cannot change (a key that is
    /// not a table or a list); the message is the change's own.
    #[error("{0}")]
    Refused(String),
    /// The home directory cannot be created.
    #[error("cannot create {}: {error}", dir.display())]
    CreateDir { dir: PathBuf, error: std::io::Error },
    /// The new text cannot be written beside the file.
    #[error("cannot write {}: {error}", path.display())]
    Write { path: PathBuf, error: std::io::Error },
    /// The new text cannot be put in the file's place.
    #[error("cannot replace {}: {error}", path.display())]
    Replace { path: PathBuf, error: std::io::Error },
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigToml {
    #[serde(default)]
    pub model: Option<ModelToml>,
    #[serde(default)]
    pub fallback_providers: Vec<FallbackToml>,
    #[serde(default)]
    pub agent: AgentToml,
    #[serde(default)]
    pub custom_toolsets: BTreeMap<String, ToolsetToml>,
    #[serde(default)]
    pub sandbox: SandboxToml,
    #[serde(default)]
    pub approvals: ApprovalsToml,
    #[serde(default)]
    pub plugins: BTreeMap<String, PluginToml>,
    #[serde(default)]
    pub memory: MemoryToml,
    #[serde(default)]
    pub context: ContextToml,
    /// The model for side tasks (compression summaries, plugins' `llm` calls); the main model
    /// when absent.
    pub auxiliary: Option<FallbackToml>,
    #[serde(default)]
    pub marketplace: MarketplaceToml,
    #[serde(default)]
    pub process: ProcessToml,
    #[serde(default)]
    pub terminal: TerminalToml,
    #[serde(default)]
    pub acp: AcpToml,
    #[serde(default)]
    pub gateway: GatewayToml,
    #[serde(default)]
    pub cron: CronToml,
    #[serde(default)]
    pub checkpoints: CheckpointsToml,
    #[serde(default)]
    pub skills: SkillsToml,
    #[serde(default)]
    pub store: StoreToml,
    #[serde(default)]
    pub serve: ServeToml,
    /// MCP servers whose tools the agent may use: `[mcp_servers.NAME]`.
    #[serde(default)]
    pub mcp_servers: BTreeMap<String, talaria_mcp::config::ServerToml>,
    /// Spending limits.
    #[serde(default)]
    pub budget: BudgetToml,
    /// Traces over OTLP.
    #[serde(default)]
    pub telemetry: TelemetryToml,
}

/// `[store]`: where sessions, memory, plugin data, jobs and ledgers live.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreToml {
    /// A PostgreSQL database several talaria processes (and machines) share:
    /// `postgres://USER:PASSWORD@HOST:PORT/DATABASE`. Default: `state.db` in the home.
    /// `TALARIA_STORE_URL` wins over it (and keeps the password out of this file).
    pub url: Option<String>,
}

/// `[serve]`: `talaria serve`, the HTTP front door (docs/serve.md).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeToml {
    /// Where it listens: `127.0.0.1:8642` unless set (`--listen` wins).
    pub listen: Option<String>,
    /// How approvals asked during an API turn are answered, nobody being there to ask: `deny`
    /// (the default; the client is told what was refused) or `allow` (as `--yolo` would, for a
    /// client you trust as yourself).
    #[serde(default)]
    pub approvals: ServeApprovals,
    /// Host names a reverse proxy in front forwards (`--allow-host` adds to them).
    #[serde(default)]
    pub hosts: Vec<String>,
    /// More tokens, each with its own approvals (`[[serve.tokens]]`): a client you trust may
    /// have approvals allowed while others' are refused.
    #[serde(default)]
    pub tokens: Vec<ServeTokenToml>,
}

/// `[[serve.tokens]]`: one more API token. Its value is read from an environment variable, never
/// written in config.toml.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeTokenToml {
    /// What it is called in the log.
    pub name: String,
    /// The environment variable that holds it.
    pub env: String,
    /// How approvals asked during its turns are answered (default `deny`).
    #[serde(default)]
    pub approvals: ServeApprovals,
}

/// `[serve] approvals`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServeApprovals {
    #[default]
    Deny,
    Allow,
}

/// `[skills]`: what the agent may do with skills.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkillsToml {
    /// Offer `skill_manage` (the agent creating and editing its skills) in sessions nobody
    /// answers: `chat -q`, scheduled jobs, gateway chats (default false: only where a person
    /// is at the terminal or in the editor). Whatever the agent makes, here or anywhere, stays
    /// out of every session's index until you have seen it (`talaria skills review`).
    #[serde(default)]
    pub manage_unattended: bool,
}

/// `[checkpoints]`: files kept before tool calls change them, for `/rollback`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointsToml {
    /// Keep them (default true).
    pub enabled: Option<bool>,
    /// Cap of all kept contents, in MiB (default 512); the oldest checkpoints go first.
    pub max_mb: Option<u64>,
}

/// `[cron]`: how scheduled jobs run (each job may set its own toolsets, turns and timeout).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CronToml {
    /// The toolsets of jobs that name none (default: `[agent] toolsets`). The `cronjob` tool
    /// is never among them: no job makes jobs.
    pub toolsets: Option<Vec<String>>,
    /// How long a run may take before it is stopped (default 600 s).
    pub timeout_secs: Option<u64>,
    /// Model calls per run (default: `[agent] max_turns`).
    pub max_turns: Option<u32>,
    /// Jobs (by id) whose commands run outside the OS sandbox; every other job's are confined,
    /// whatever `[sandbox] commands` says.
    #[serde(default)]
    pub unconfined_jobs: Vec<String>,
}

/// `[terminal]`: how `talaria chat` behaves at a terminal.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TerminalToml {
    /// What a message sent while a turn runs does (default `interrupt`, as the reference's).
    #[serde(default)]
    pub busy_input: BusyInput,
    /// Show the model's reasoning as it streams (default true).
    pub show_reasoning: Option<bool>,
}

/// What a message sent while a turn runs does.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BusyInput {
    /// Stop the turn and send the message in its place.
    #[default]
    Interrupt,
    /// Send it once the turn is done.
    Queue,
    /// Add it to the running turn (the model reads it with the next tool result).
    Steer,
}

/// `[process]`: the commands plugins run (the terminal tool's, say).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessToml {
    /// Environment variables commands get beside the default allow-list (PATH, HOME, locale,
    /// proxies, toolchains...). A variable named like a credential is never passed.
    #[serde(default)]
    pub pass_env: Vec<String>,
}

/// `[marketplace]`: where `talaria plugins install NAME` and `search` look, and size limits.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MarketplaceToml {
    /// Registry index URLs (https, or http to this machine), searched in order.
    #[serde(default)]
    pub registries: Vec<String>,
    /// Largest bundle to download, and largest file in it, in MiB (default 64).
    pub max_bundle_mb: Option<u64>,
}

/// `[memory]`: the external memory provider (MEMORY.md and USER.md stay on beside it).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryToml {
    /// A memory plugin's name, or "none"; default "journal".
    pub provider: Option<String>,
}

impl MemoryToml {
    pub fn provider(&self) -> &str {
        self.provider.as_deref().unwrap_or("journal")
    }
}

/// `[context]`: the context engine that compresses long conversations.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextToml {
    /// A context-engine plugin's name, or "none"; default "compressor".
    pub engine: Option<String>,
}

impl ContextToml {
    pub fn engine(&self) -> &str {
        self.engine.as_deref().unwrap_or("compressor")
    }
}

/// `[model]`: the main provider.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelToml {
    pub provider: Option<String>,
    /// The model's name as the provider knows it.
    pub name: Option<String>,
    pub base_url: Option<String>,
    pub api_mode: Option<String>,
    pub key_env: Option<String>,
    /// The output-token limit of every request; unset, a whole (`stream = false`) reply gets
    /// 4096 and a streamed one the server's default (Anthropic: 8192 either way).
    pub max_tokens: Option<u32>,
    /// The model's context window in tokens (default 128000); compression measures against it.
    pub context_length: Option<u64>,
    /// Longest wait for the connection (TCP and TLS), in seconds (default 10).
    pub connect_timeout_secs: Option<f64>,
    /// Longest wait from sending a request to the first byte of the answer (default 120).
    pub first_byte_timeout_secs: Option<f64>,
    /// Longest silence between two pieces of a streamed answer (default 60).
    pub idle_timeout_secs: Option<f64>,
    /// Longest a whole call may take, the streamed answer included (default 600).
    pub request_timeout_secs: Option<f64>,
    /// Send a request again after a first-byte, idle or total limit ran out (default false:
    /// the server accepted it and may still be generating, so the next fallback is tried).
    pub retry_timeouts: Option<bool>,
    /// `tool_choice` sent with the tools: auto (default), required, none, or off (not sent).
    pub tool_choice: Option<String>,
    /// Whether the model takes images (`@photo.png` in the terminal, images MCP tools return);
    /// default: guessed from its name (gpt-4o, gpt-4.1, gpt-5, claude, gemini, llava, ...-vl ...).
    pub vision: Option<bool>,
    /// US dollars per million input tokens, for the cost the terminal shows (overrides the
    /// bundled price table).
    pub input_price: Option<f64>,
    /// US dollars per million output tokens.
    pub output_price: Option<f64>,
    /// US dollars per million input tokens read from the provider's cache (default: the input
    /// price).
    pub cache_read_price: Option<f64>,
}

impl ModelToml {
    /// The timeouts, `retry_timeouts` and `tool_choice` of `[model]`, onto `spec`.
    ///
    /// # Errors
    /// A timeout that is not a number of seconds above 0, or an unknown `tool_choice`.
    pub fn wire(&self, spec: ProviderSpec) -> Result<ProviderSpec, ProviderError> {
        wire(
            spec,
            [
                self.connect_timeout_secs,
                self.first_byte_timeout_secs,
                self.idle_timeout_secs,
                self.request_timeout_secs,
            ],
            self.retry_timeouts,
            self.tool_choice.as_deref(),
        )
    }
}

/// Sets the four timeouts (connect, first byte, idle, total; seconds), `retry_timeouts` and
/// `tool_choice`.
fn wire(
    mut spec: ProviderSpec,
    secs: [Option<f64>; 4],
    retry_timeouts: Option<bool>,
    tool_choice: Option<&str>,
) -> Result<ProviderSpec, ProviderError> {
    let phases = [TimeoutPhase::Connect, TimeoutPhase::FirstByte, TimeoutPhase::Idle, TimeoutPhase::Total];
    let mut limits = [None; 4];
    for ((limit, phase), secs) in limits.iter_mut().zip(phases).zip(secs) {
        if let Some(secs) = secs {
            *limit = Some(Timeouts::secs(phase, secs)?);
        }
    }
    let [connect, first_byte, idle, total] = limits;
    spec.connect_timeout = connect.or(spec.connect_timeout);
    spec.first_byte_timeout = first_byte.or(spec.first_byte_timeout);
    spec.idle_timeout = idle.or(spec.idle_timeout);
    spec.request_timeout = total.or(spec.request_timeout);
    spec.retry_timeouts = retry_timeouts.or(spec.retry_timeouts);
    if let Some(choice) = tool_choice {
        spec.tool_choice = Some(ToolChoice::parse(choice)?);
    }
    Ok(spec)
}

/// One entry of `fallback_providers`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FallbackToml {
    pub provider: Option<String>,
    pub model: String,
    pub base_url: Option<String>,
    pub api_mode: Option<String>,
    pub key_env: Option<String>,
    pub max_tokens: Option<u32>,
    /// As under `[model]`.
    pub connect_timeout_secs: Option<f64>,
    pub first_byte_timeout_secs: Option<f64>,
    pub idle_timeout_secs: Option<f64>,
    pub request_timeout_secs: Option<f64>,
    pub retry_timeouts: Option<bool>,
    pub tool_choice: Option<String>,
    /// Whether this model takes images (default: guessed from its name).
    pub vision: Option<bool>,
}

impl FallbackToml {
    /// This entry as a provider to resolve, with its `api_mode` already parsed.
    ///
    /// # Errors
    /// A timeout that is not a number of seconds above 0, or an unknown `tool_choice`.
    pub fn spec(&self, api_mode: Option<ApiMode>) -> Result<ProviderSpec, ProviderError> {
        let spec = ProviderSpec {
            provider: self.provider.clone(),
            model: self.model.clone(),
            base_url: self.base_url.clone(),
            api_mode,
            key_env: self.key_env.clone(),
            max_tokens: self.max_tokens,
            vision: self.vision,
            ..ProviderSpec::default()
        };
        wire(
            spec,
            [
                self.connect_timeout_secs,
                self.first_byte_timeout_secs,
                self.idle_timeout_secs,
                self.request_timeout_secs,
            ],
            self.retry_timeouts,
            self.tool_choice.as_deref(),
        )
    }
}

/// `[agent]`: how the loop behaves.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentToml {
    pub max_turns: Option<u32>,
    /// Give each new chat session a short title from the auxiliary model after its first
    /// answer (default true; the terminal and editors ask for it, one-shots do not).
    pub auto_title: Option<bool>,
    pub stream: Option<bool>,
    /// Retries of a failing model call before falling back.
    pub retries: Option<u32>,
    /// First retry delay; later ones double (with jitter).
    pub retry_delay_ms: Option<u64>,
    /// Extra text for the system prompt.
    pub system_message: Option<String>,
    pub toolsets: Option<Vec<String>>,
    #[serde(default)]
    pub disabled_toolsets: Vec<String>,
    /// Characters of one tool result kept in the conversation before it is saved to a file.
    pub max_result_chars: Option<usize>,
    /// Child agents running at once for delegate_task.
    pub max_children: Option<usize>,
    /// How long a turn waits while another talaria process is answering the same session.
    pub session_wait_secs: Option<u64>,
    /// Append each session that ends (exit, `/new`, `/resume`) to
    /// `trajectories/completed.jsonl` or `trajectories/failed.jsonl` in the home, as a ShareGPT
    /// training trajectory (default false).
    pub save_trajectories: Option<bool>,
}

/// `[custom_toolsets.NAME]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsetToml {
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub tools: Vec<String>,
    #[serde(default)]
    pub includes: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxToml {
    pub memory_mb: Option<u32>,
    pub max_memory_mb: Option<u32>,
    pub timeout_secs: Option<u64>,
    pub max_timeout_secs: Option<u64>,
    pub output_kb: Option<u32>,
    /// Most tools one plugin may list.
    pub max_tools_per_plugin: Option<usize>,
    /// Largest tool spec (name, description and parameters) a plugin may list, in KiB.
    pub max_spec_kb: Option<usize>,
    /// How commands run: `"confined"` (the default) or `"unconfined"` (as you, with all your
    /// files and network). Gateway chats and scheduled jobs stay confined unless their platform
    /// or job says otherwise.
    pub commands: Option<CommandsMode>,
    /// Toolchain places commands may read (default: `~/.cargo`, `~/.rustup`, `~/.npm`,
    /// `~/.cache/pip`, `~/.pyenv`, `~/.nvm`, `~/.volta`); `[]` for none.
    pub toolchains: Option<Vec<String>>,
    /// More places commands may read.
    #[serde(default)]
    pub read: Vec<String>,
    /// Places commands may change beside the workspace.
    #[serde(default)]
    pub write: Vec<String>,
    /// Processes (and threads) one sandbox may hold at once.
    pub max_processes: Option<u64>,
    /// Largest file a command may write, in MiB.
    pub max_file_mb: Option<u64>,
    /// Size of a sandbox's private /tmp, in MiB.
    pub tmp_mb: Option<u64>,
    /// The bubblewrap executable (default: `bwrap` on PATH).
    pub bwrap: Option<PathBuf>,
    /// Hosts that resolve to an address of your own network (a package mirror, a proxy):
    /// commands may reach those addresses once the host is allowed. Other names that resolve
    /// to loopback, private or link-local addresses are refused.
    #[serde(default)]
    pub local_hosts: Vec<String>,
}

/// `[acp]`: what talaria takes from an editor.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcpToml {
    /// Run commands in the editor's terminal when it offers one. The editor runs them outside
    /// talaria's sandbox (as you, with your files and network), so while commands are confined
    /// this is off unless set; with `[sandbox] commands = "unconfined"` the editor's terminal is
    /// used whenever offered.
    #[serde(default)]
    pub editor_terminal: bool,
}

impl ConfigToml {
    /// Whether an editor's terminal may run this home's commands (see [`AcpToml`]).
    pub fn editor_terminal(&self) -> bool {
        self.acp.editor_terminal || self.sandbox.commands == Some(CommandsMode::Unconfined)
    }
}

/// `[sandbox] commands`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CommandsMode {
    Confined,
    Unconfined,
}

impl CommandsMode {
    pub fn confinement(self) -> talaria_runtime::process::Confinement {
        match self {
            Self::Confined => talaria_runtime::process::Confinement::Confined,
            Self::Unconfined => talaria_runtime::process::Confinement::Unconfined,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalsToml {
    #[serde(default)]
    pub deny: Vec<String>,
    #[serde(default)]
    pub allow: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginToml {
    #[serde(default)]
    pub allow_override: bool,
    /// Turn the plugin on or off (some bundled plugins, like the guard and audit hooks, are off
    /// until enabled).
    pub enabled: Option<bool>,
    #[serde(default)]
    pub config: toml::Table,
}

impl ConfigToml {
    /// Where `home`'s state lives (see [`StoreToml`]).
    pub fn store_location(&self, home: &std::path::Path) -> talaria_store::Location {
        talaria_store::Location::of_home(home, self.store.url.as_deref())
    }

    /// Read `home/config.toml`; a missing file means defaults.
    ///
    /// # Errors
    /// The file cannot be read or is not valid (the message names the file and the problem).
    pub fn load(home: &Path) -> Result<Self, Error> {
        let path = home.join("config.toml");
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let config: Self =
                    toml::from_str(&text).map_err(|error| ConfigError::Invalid { path: path.clone(), error })?;
                config.budget.check().map_err(|what| ConfigError::Value { path, what })?;
                Ok(config)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(error) => Err(ConfigError::Read { path, error }.into()),
        }
    }

    pub fn limits(&self) -> HostLimits {
        let d = HostLimits::default();
        let s = &self.sandbox;
        HostLimits {
            default_memory_mb: s.memory_mb.unwrap_or(d.default_memory_mb),
            max_memory_mb: s.max_memory_mb.unwrap_or(d.max_memory_mb),
            default_timeout: s.timeout_secs.map_or(d.default_timeout, Duration::from_secs),
            max_timeout: s.max_timeout_secs.map_or(d.max_timeout, Duration::from_secs),
            default_output_kb: s.output_kb.unwrap_or(d.default_output_kb),
            max_output_kb: d.max_output_kb,
            max_tools_per_plugin: s.max_tools_per_plugin.unwrap_or(d.max_tools_per_plugin),
            max_spec_bytes: s.max_spec_kb.map_or(d.max_spec_bytes, |kb| kb.saturating_mul(1024)),
        }
    }

    /// The environment variables named as model keys (`key_env` of the model, its fallbacks
    /// and the auxiliary model): their values are secrets the leak scan looks for.
    pub fn secret_names(&self) -> Vec<String> {
        let main = self.model.as_ref().and_then(|m| m.key_env.clone());
        let others = self.fallback_providers.iter().chain(self.auxiliary.as_ref()).filter_map(|f| f.key_env.clone());
        main.into_iter().chain(others).collect()
    }

    /// How commands are confined, from `[sandbox]`: talaria's homes (this one, the base home
    /// with its profiles, and `~/.talaria`) are never visible to them.
    pub fn command_sandbox(&self, home: &Path) -> talaria_runtime::process::CommandSandbox {
        use talaria_runtime::process::{CommandLimits, CommandSandbox, Confinement, default_toolchains};
        let s = &self.sandbox;
        let mut sandbox = CommandSandbox::confined(home);
        if let Ok(base) = base_home()
            && !sandbox.hidden.contains(&base)
        {
            sandbox.hidden.push(base);
        }
        sandbox.confinement = s.commands.map_or(Confinement::Confined, CommandsMode::confinement);
        let user_home = sandbox.home.clone();
        let expand = |p: &String| match (p.strip_prefix("~/"), &user_home) {
            (Some(rest), Some(h)) => h.join(rest),
            _ if p == "~" => user_home.clone().unwrap_or_else(|| PathBuf::from(p)),
            _ => PathBuf::from(p),
        };
        if let Some(toolchains) = &s.toolchains {
            sandbox.read = toolchains.iter().map(expand).collect();
        } else {
            sandbox.read = default_toolchains(user_home.as_deref());
        }
        sandbox.read.extend(s.read.iter().map(expand));
        sandbox.write = s.write.iter().map(expand).collect();
        let d = CommandLimits::default();
        sandbox.limits = CommandLimits {
            max_processes: s.max_processes.unwrap_or(d.max_processes),
            max_file_mb: s.max_file_mb.unwrap_or(d.max_file_mb),
            tmp_mb: s.tmp_mb.unwrap_or(d.tmp_mb),
        };
        sandbox.local_hosts =
            s.local_hosts.iter().filter_map(|h| talaria_runtime::HostPattern::parse(h).ok()).collect();
        if let Some(bwrap) = &s.bwrap {
            let helper = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("talaria"));
            sandbox.launcher = talaria_runtime::process::Launcher::find(Some(bwrap), helper);
        }
        sandbox
    }

    pub fn command_policy(&self, home: &Path) -> CommandPolicy {
        CommandPolicy {
            deny: self.approvals.deny.clone(),
            allow_keys: self.approvals.allow.clone(),
            home: Some(home.to_path_buf()),
        }
    }

    pub fn plugin_settings(&self) -> BTreeMap<String, PluginSettings> {
        self.plugins
            .iter()
            .map(|(name, p)| {
                (
                    name.clone(),
                    PluginSettings { config: p.config.clone(), allow_override: p.allow_override, enabled: p.enabled },
                )
            })
            .collect()
    }
}

/// Add `key` to `[approvals] allow` in `home/config.toml`, keeping the file's comments and layout.
///
/// # Errors
/// The file cannot be read, parsed or written, or `[approvals]` or its `allow` is not what it
/// should be ([`ConfigError::Refused`]).
pub fn allow_always(home: &Path, key: &str) -> Result<(), ConfigError> {
    edit(home, |doc| {
        let approvals = doc.entry("approvals").or_insert_with(|| toml_edit::Item::Table(toml_edit::Table::new()));
        let Some(table) = approvals.as_table_like_mut() else {
            return Err(ConfigError::Refused("[approvals] is not a table".to_string()));
        };
        let allow = table.entry("allow").or_insert(toml_edit::value(toml_edit::Array::new()));
        let Some(list) = allow.as_array_mut() else {
            return Err(ConfigError::Refused("approvals.allow is not a list".to_string()));
        };
        if !list.iter().any(|v| v.as_str() == Some(key)) {
            list.push(key);
        }
        Ok(())
    })
}

/// Take `key` out of `[approvals] allow` in `home/config.toml`, keeping the file's comments and
/// layout; whether it was there.
///
/// # Errors
/// The file cannot be read, parsed or written.
pub fn disallow(home: &Path, key: &str) -> Result<bool, ConfigError> {
    let mut found = false;
    edit(home, |doc| {
        if let Some(list) = doc.get_mut("approvals").and_then(|a| a.get_mut("allow")).and_then(|a| a.as_array_mut()) {
            let before = list.len();
            list.retain(|v| v.as_str() != Some(key));
            found = list.len() != before;
        }
        Ok(())
    })?;
    Ok(found)
}

/// Change `home/config.toml` with `f`, preserving comments; written atomically.
///
/// # Errors
/// The file cannot be read, parsed or written, or `f` refuses (what it returned, usually
/// [`ConfigError::Refused`]).
pub fn edit(
    home: &Path,
    f: impl FnOnce(&mut toml_edit::DocumentMut) -> Result<(), ConfigError>,
) -> Result<(), ConfigError> {
    let path = home.join("config.toml");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(error) => return Err(ConfigError::Read { path, error }),
    };
    let mut doc: toml_edit::DocumentMut = match text.parse() {
        Ok(doc) => doc,
        Err(error) => return Err(ConfigError::Parse { path, error }),
    };
    f(&mut doc)?;
    std::fs::create_dir_all(home).map_err(|error| ConfigError::CreateDir { dir: home.to_path_buf(), error })?;
    let tmp = path.with_extension("toml.tmp");
    if let Err(error) = std::fs::write(&tmp, doc.to_string()) {
        return Err(ConfigError::Write { path: tmp, error });
    }
    std::fs::rename(&tmp, &path).map_err(|error| ConfigError::Replace { path, error })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_limits_on_what_plugins_declare() {
        let defaults = ConfigToml::default().limits();
        assert_eq!((defaults.max_tools_per_plugin, defaults.max_spec_bytes), (128, 64 * 1024));
        let set: ConfigToml =
            toml::from_str("[sandbox]\nmax_tools_per_plugin = 300\nmax_spec_kb = 256\n").expect("valid");
        let limits = set.limits();
        assert_eq!((limits.max_tools_per_plugin, limits.max_spec_bytes), (300, 256 * 1024));
    }

    #[test]
    fn timeouts_retry_timeouts_and_tool_choice_are_read_per_provider() {
        let parsed: ConfigToml = toml::from_str(
            "[model]\nname = \"m\"\nfirst_byte_timeout_secs = 2.5\ntool_choice = \"off\"\nretry_timeouts = true\n\
             [[fallback_providers]]\nmodel = \"f\"\nidle_timeout_secs = 5\n\
             [[fallback_providers]]\nmodel = \"g\"\nretry_timeouts = false\n",
        )
        .expect("valid");
        let spec = parsed.model.as_ref().expect("model").wire(ProviderSpec::default()).expect("wire");
        assert_eq!(spec.first_byte_timeout, Some(Duration::from_millis(2500)));
        assert_eq!(spec.tool_choice, Some(ToolChoice::Off));
        assert_eq!(spec.retry_timeouts, Some(true));
        assert_eq!(spec.connect_timeout, None, "unset keys keep the defaults");
        let fallback = parsed.fallback_providers[0].spec(None).expect("spec");
        assert_eq!(fallback.idle_timeout, Some(Duration::from_secs(5)));
        assert_eq!((fallback.tool_choice, fallback.retry_timeouts), (None, None), "not inherited from [model]");
        assert_eq!(parsed.fallback_providers[1].spec(None).expect("spec").retry_timeouts, Some(false));

        let bad: ConfigToml =
            toml::from_str("[model]\nconnect_timeout_secs = 0\ntool_choice = \"auto\"\n").expect("toml");
        let err = bad.model.as_ref().expect("model").wire(ProviderSpec::default()).expect_err("zero");
        assert!(err.to_string().contains("connect_timeout_secs = 0 is not a number of seconds above 0"), "{err}");
        let bad: ConfigToml = toml::from_str("[model]\ntool_choice = \"maybe\"\n").expect("toml");
        let err = bad.model.as_ref().expect("model").wire(ProviderSpec::default()).expect_err("unknown");
        assert!(err.to_string().contains("use auto, required, none or off"), "{err}");
    }

    #[test]
    fn always_approvals_are_saved_keeping_comments() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("config.toml"), "# mine\n[approvals]\ndeny = [\"*x*\"] # keep\n")
            .expect("write");
        allow_always(dir.path(), "rm-recursive").expect("save");
        allow_always(dir.path(), "rm-recursive").expect("again");
        let text = std::fs::read_to_string(dir.path().join("config.toml")).expect("read");
        assert!(text.starts_with("# mine\n") && text.contains("# keep"), "{text}");
        let parsed = ConfigToml::load(dir.path()).expect("valid");
        assert_eq!(parsed.approvals.allow, vec!["rm-recursive".to_string()]);
        let fresh = tempfile::tempdir().expect("tempdir");
        allow_always(fresh.path(), "k").expect("new file");
        assert_eq!(ConfigToml::load(fresh.path()).expect("valid").approvals.allow, vec!["k".to_string()]);
        assert!(disallow(dir.path(), "rm-recursive").expect("taken out"));
        assert!(!disallow(dir.path(), "rm-recursive").expect("not there"));
        let text = std::fs::read_to_string(dir.path().join("config.toml")).expect("read");
        assert!(text.starts_with("# mine\n") && text.contains("# keep"), "{text}");
        assert!(ConfigToml::load(dir.path()).expect("valid").approvals.allow.is_empty());
    }

    #[test]
    fn budgets_name_their_scopes_and_refuse_a_cost_below_zero() {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |text: &str| std::fs::write(dir.path().join("config.toml"), text).expect("write");
        write(
            "[budget]\nmonthly_cost = 50.0\n[budget.sources.gateway]\ndaily_cost = 5\n\
             [budget.per_user]\ndaily_tokens = 1000\n[budget.users.\"telegram:7\"]\ndaily_tokens = 9000\n",
        );
        let budget = ConfigToml::load(dir.path()).expect("valid").budget;
        assert!(budget.is_set());
        assert_eq!(budget.all().monthly_cost, Some(50.0));
        assert_eq!(budget.sources["gateway"].daily_cost, Some(5.0));
        assert_eq!(budget.user("telegram:7").and_then(|l| l.daily_tokens), Some(9000), "named over per_user");
        assert_eq!(budget.user("telegram:8").and_then(|l| l.daily_tokens), Some(1000));
        assert_eq!(budget.job("any"), None);
        assert!(!BudgetToml::default().is_set());

        write("[budget.jobs.nightly]\ndaily_cost = -1.0\n");
        let err = ConfigToml::load(dir.path()).expect_err("negative");
        assert!(
            err.to_string().ends_with("[budget.jobs.nightly] daily_cost = -1: a cost limit is US dollars, 0 or more"),
            "{err}"
        );
        write("[budget]\ndaily_dollars = 3\n");
        let err = ConfigToml::load(dir.path()).expect_err("unknown key");
        assert!(err.to_string().contains("unknown field `daily_dollars`"), "{err}");
    }
}
