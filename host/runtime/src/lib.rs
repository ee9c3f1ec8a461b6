//! talaria's plugin runtime: the only crate that runs wasmtime (its engine configuration lives
//! in `talaria-engine`).
//!
//! [`Runtime::new`] discovers plugins (bundled, user, trusted project), reads their manifests
//! and the user's grants — without compiling anything. A plugin is compiled (or loaded from the
//! compile cache) the first time it is needed, and its exports are checked against its manifest
//! then: the API version (components built against 0.1.0, 0.2.0 and 0.3.0 all load, each
//! through its own bindings: one module per version, `host::api::since_v0_X_0`) and its
//! [`Kind`]s. Every call runs with the plugin's memory cap, deadline and output cap, seeing only
//! what it was granted.
//!
//! - tools: [`Runtime::tools`] and [`Runtime::call`]; every call in a fresh instance;
//! - hooks: [`Runtime::hook`] sends a [`HookEvent`](talaria_protocol::HookEvent) to a hook
//!   plugin that asked for it, in a fresh instance (10 s deadline by default);
//! - memory providers: `Runtime::memory_*`, on one resident instance per provider, kept across
//!   calls and made again after a trap or a missed deadline;
//! - context engines: `Runtime::context_*`, a fresh instance per call (120 s by default);
//! - platform adapters: one resident [`adapter::Adapter`] per gateway account ([`adapter`]);
//! - the `llm` import: completions through the embedder's [`LlmBackend`]
//!   ([`RuntimeConfig::llm`]), for plugins granted `llm`.
//!
//! Plugins switched off (`enabled = false` in plugin.toml, or by the operator) are listed but
//! never called; [`Runtime::plugins_of_kind`] gives the enabled plugins of a kind.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use talaria_protocol::{HookEvent, PluginSession, ToolCallEvent};
//! use talaria_runtime::{Runtime, RuntimeConfig, ToolContext};
//! let config = RuntimeConfig::new("/home/me/.talaria".into(), std::env::current_dir()?);
//! let runtime = Runtime::new(config, &[])?;
//! let (tools, problems) = runtime.tools().await;
//! let out = runtime.call(&ToolContext::new("read_file", serde_json::json!({"path": "README.md"}))).await?;
//! println!("{}", out.output);
//! let event = HookEvent::PreToolCall(ToolCallEvent { tool: "read_file".into(), ..Default::default() });
//! for hook in runtime.plugins_of_kind("hook") {
//!     if hook.wants(event.kind()) {
//!         let decision = runtime.hook(&hook, &event, &PluginSession::default()).await;
//!         println!("{}: {decision:?}", hook.name());
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! Main types: [`Runtime`], [`Plugin`], [`Manifest`] and [`Kind`], [`Capability`] and
//! [`Grants`], [`CompileCache`], [`ProcessRunner`], [`Approvals`] with their [`Approver`] (dangerous
//! commands and hosts reached through a wildcard grant), [`LlmBackend`].

pub mod adapter;
pub mod approval;
mod args;
pub mod cache;
mod config;
pub use talaria_danger as danger;
pub mod discovery;
mod engine;
mod error;
mod exports;
mod extension;
pub mod fsutil;
pub mod grant;
mod host;
pub mod identity;
mod instance;
pub mod leak;
mod listing;
pub mod llm;
pub mod lock;
mod logline;
pub mod manifest;
mod net;
pub mod pins;
mod plugin;
pub mod process;
mod record;
mod secrets;
pub mod shown;
pub mod stub;
pub mod trust;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use talaria_protocol::{ToolError, ToolSpec};

pub use approval::{Allowed, Approval, ApprovalKind, ApprovalRequest, Approvals, Approver, Caller, Unattended};
pub use cache::{CacheOutcome, CompileCache};
pub use config::{
    CHANGED_STAMP, HostLimits, KindTimeouts, PluginSettings, RuntimeConfig, mark_plugins_changed, plugin_data_dir,
    plugins_stamp,
};
pub use danger::CommandPolicy;
pub use discovery::{Embedded, Installed, Precompiled, Problem, Shadowed, project_plugin_dir};
pub use engine::{EngineHandle, start as start_engine};
pub use error::ComponentError;
pub use fsutil::FileError;
pub use grant::{Access, Capability, CapabilityError, GrantFile, GrantedDir, Grants, HostPattern, Scope};
pub use instance::CallLimits;
pub use instance::faults as plugin_faults;
pub use llm::{BoxFuture, LlmBackend, LlmCompletion, LlmRequest, MAX_LLM_CALLS, MAX_LLM_TOKENS, RequestError};
pub use lock::{DirError, LOCK_FILE, LockEntry, Lockfile, reinstall_hint, scope_paths, short_digest};
pub use manifest::{
    ApiError, Kind, Limits, Manifest, ManifestError, NameError, SUPPORTED_API_VERSIONS, check_api, check_name,
};
pub use net::{AddressKind, internal_kind};
pub use plugin::{CallOutput, Plugin};
pub use process::{ChildEnv, CommandError, CommandOutput, CommandRun, ProcessRunner, Terminal, Terminals};
pub use record::RecordedImport;
pub use secrets::Secrets;
pub use shown::visible;
pub use stub::{HttpStub, HttpStubs};
pub use talaria_protocol::PluginError;
pub use talaria_protocol::ToolContext;

use crate::cache::{Listed, Listing};
use crate::discovery::WasmSource;
use crate::exports::Prepared;
use crate::host::api::CallInfo;
use crate::host::{PluginEnv, Services, Site};
use crate::instance::Failure;

/// Failures of the runtime itself (not of a plugin: those are [`Problem`]s and [`ToolError`]s).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// grants.toml cannot be read.
    #[error("{0}")]
    Grants(fsutil::FileError),
    #[error("cannot start the WebAssembly engine: {0}")]
    Engine(String),
}

/// What [`Runtime::check_component`] found.
#[derive(Debug, Clone)]
pub struct ComponentCheck {
    /// Whether it was compiled now or loaded from the cache.
    pub outcome: CacheOutcome,
    pub took: Duration,
    /// Every name it imports, WASI's included (`talaria:plugin/kv@0.2.0`,
    /// `wasi:http/outgoing-handler@0.2.6`, ...).
    pub imports: Vec<String>,
}

/// How a component was obtained and how long it took, when that happened just now.
type Fresh = Option<(CacheOutcome, Duration)>;

/// Deadline for a plugin's `list` export.
const LIST_DEADLINE: Duration = Duration::from_secs(5);
/// Largest component read from a project (a JavaScript or Python plugin is 10-20 MB).
pub(crate) const MAX_COMPONENT_BYTES: u64 = 256 * 1024 * 1024;

/// Which plugin provides each tool.
struct ToolIndex {
    /// Shared with every conversation that lists them (one copy of each schema per process).
    tools: Vec<Arc<ToolSpec>>,
    by_name: HashMap<String, usize>,
    problems: Vec<Problem>,
}

/// The plugin runtime.
pub struct Runtime {
    plugins: Vec<Arc<Plugin>>,
    shadowed: Vec<Shadowed>,
    problems: Vec<Problem>,
    untrusted_project: Option<PathBuf>,
    workspace: PathBuf,
    cache: CompileCache,
    index: tokio::sync::OnceCell<ToolIndex>,
    /// How much each plugin may list.
    spec_limits: listing::SpecLimits,
    args: args::ArgChecker,
    recorder: Option<Arc<record::Recorder>>,
    /// What its plugins' commands and connections were allowed without asking.
    approvals: Arc<Approvals>,
}

impl Runtime {
    /// The answers its plugins' commands and connections are let through by ([`Approvals`]).
    pub fn approvals(&self) -> &Arc<Approvals> {
        &self.approvals
    }

    /// Discover plugins and resolve their grants. Compiles nothing.
    ///
    /// # Errors
    /// `grants.toml` exists but cannot be read.
    pub fn new(config: RuntimeConfig, bundled: &[Embedded]) -> Result<Self, Error> {
        let grant_file = GrantFile::load(&config.home.join("grants.toml")).map_err(Error::Grants)?;
        let found = discovery::discover(bundled, &config.home, &config.workspace, &grant_file);
        let secrets = Arc::new(config.secrets.unwrap_or_else(|| Secrets::load(&config.home.join(".env"))));
        let mut secret_names = config.secret_names.clone();
        for f in &found.found {
            for cap in &f.manifest.requests {
                if let Capability::Secret { name, .. } = cap {
                    secret_names.push(name.clone());
                }
            }
        }
        let scan = Arc::new(leak::SecretScan::new(secrets.known(&secret_names)));
        let child_env = process::ChildEnv::from_host(&config.pass_env, &scan);
        let approvals = Arc::new(Approvals::new(config.approver, &config.command_policy.allow_keys));
        let services = Arc::new(Services {
            home: config.home.canonicalize().unwrap_or_else(|_| config.home.clone()),
            workspaces: std::sync::Mutex::new(HashMap::new()),
            store_at: config
                .store
                .clone()
                .unwrap_or_else(|| talaria_store::Location::File(config.home.join("state.db"))),
            store: tokio::sync::OnceCell::new(),
            secrets,
            process: ProcessRunner::new(
                config.command_policy,
                approvals.clone(),
                child_env,
                scan.clone(),
                config.commands,
            )
            .with_terminals(config.terminals),
            approvals: approvals.clone(),
            llm: config.llm,
            http_stubs: config.http_stubs,
            scan,
        });
        let recorder = config.record_imports.then(Arc::default);
        let bundled_names: Vec<&str> = bundled.iter().filter_map(|e| manifest_name(e.manifest)).collect();
        let plugins = found
            .found
            .into_iter()
            .map(|f| {
                // An installed plugin's grants are in its scope's lockfile; a plugin placed by
                // hand has them in grants.toml.
                let granted = match &f.installed {
                    Some(installed) => installed.granted.clone(),
                    None => grant_file.recorded(&f.scope, &f.manifest.name).unwrap_or_else(|| match f.scope {
                        Scope::Bundled => f.manifest.requests.clone(),
                        Scope::User | Scope::Project(_) => Vec::new(),
                    }),
                };
                // Operator settings are written for the user's and bundled plugins; a project
                // plugin taking one of their names gets none of them.
                let settings = match f.scope {
                    Scope::Bundled | Scope::User => config.plugins.get(&f.manifest.name).cloned().unwrap_or_default(),
                    Scope::Project(_) => PluginSettings::default(),
                };
                let enabled = settings.enabled.unwrap_or(f.manifest.enabled);
                let publisher = f.installed.as_ref().map(|i| i.publisher.as_str());
                let kv_space = identity::kv_space(&f.scope, &f.manifest.name, publisher);
                let env = Arc::new(PluginEnv {
                    name: f.manifest.name.clone(),
                    data_dir: services.data_dir(&kv_space),
                    legacy_space: identity::legacy_space(&f.scope, &f.manifest.name, &bundled_names),
                    adopted: tokio::sync::OnceCell::new(),
                    kv_space,
                    grants: Arc::new(Grants::effective(&f.manifest.requests, granted)),
                    secret_headers: Arc::new(f.manifest.secret_headers.clone()),
                    own_secrets: None,
                    config: settings.config,
                    services: services.clone(),
                    recorder: recorder.clone(),
                    log_lines: logline::LogLimiter::default(),
                });
                let limits = Kind::ALL.map(|kind| {
                    let default = match kind {
                        Kind::Tool => config.limits.default_timeout,
                        Kind::Memory => config.kind_timeouts.memory,
                        Kind::ContextEngine => config.kind_timeouts.context_engine,
                        Kind::Hook => config.kind_timeouts.hook,
                        Kind::Platform => config.kind_timeouts.platform,
                    };
                    call_limits(&config.limits, &f.manifest.limits, default)
                });
                Arc::new(Plugin::new(
                    f.manifest,
                    f.scope,
                    f.location,
                    f.source,
                    f.installed,
                    f.wasm_pin,
                    env,
                    limits,
                    settings.allow_override,
                    enabled,
                ))
            })
            .collect();
        Ok(Self {
            plugins,
            shadowed: found.shadowed,
            problems: found.problems,
            untrusted_project: found.untrusted_project,
            workspace: config.workspace,
            cache: CompileCache::new(config.cache_dir.unwrap_or_else(|| config.home.join("cache").join("plugins"))),
            index: tokio::sync::OnceCell::new(),
            spec_limits: listing::SpecLimits::from(&config.limits),
            args: args::ArgChecker::default(),
            recorder,
            approvals,
        })
    }

    /// Plugins in scope order (bundled, user, project), the disabled ones too (see
    /// [`Plugin::enabled`]; they are never called).
    pub fn plugins(&self) -> &[Arc<Plugin>] {
        &self.plugins
    }

    pub fn plugin(&self, name: &str) -> Option<&Arc<Plugin>> {
        self.plugins.iter().find(|p| p.name() == name)
    }

    /// Plugins hidden by a later scope.
    pub fn shadowed(&self) -> &[Shadowed] {
        &self.shadowed
    }

    /// Plugins that could not be loaded at discovery (bad manifest, missing wasm, ...).
    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }

    /// A project plugin directory ignored because the project is not trusted.
    pub fn untrusted_project(&self) -> Option<&Path> {
        self.untrusted_project.as_deref()
    }

    pub fn cache(&self) -> &CompileCache {
        &self.cache
    }

    fn engine(&self) -> Result<&'static engine::Shared, ToolError> {
        engine::shared().map_err(|e| ToolError::Unavailable(format!("cannot start the WebAssembly engine: {e}")))
    }

    /// Start the engine and compile or load `plugins` on a thread of its own, so that whoever
    /// calls one of them first finds it ready, or waits only for what is left (preparation
    /// happens once: a call that arrives meanwhile waits for it rather than doing it again).
    /// Failures are left for that first call to report.
    pub fn warm(self: &Arc<Self>, plugins: Vec<Arc<Plugin>>) {
        if plugins.is_empty() {
            return;
        }
        let runtime = self.clone();
        let spawned = std::thread::Builder::new().name("talaria-warm".into()).spawn(move || {
            for plugin in &plugins {
                let _ = runtime.prepare(plugin);
            }
        });
        if let Err(e) = spawned {
            tracing::debug!("plugins are prepared on first use: no thread to warm them ({e})");
        }
    }

    /// Compile (or load from cache) and link a plugin. Returns how it was obtained and how long
    /// it took, the first time; later calls are free. Its exports are checked against its
    /// manifest (API version and kinds) here.
    ///
    /// # Errors
    /// [`ToolError::Unavailable`] naming the plugin and what is wrong with its component.
    pub fn prepare(&self, plugin: &Plugin) -> Result<Option<(CacheOutcome, Duration)>, ToolError> {
        self.prepared(plugin).map(|(_, fresh)| fresh).map_err(ToolError::Unavailable)
    }

    /// The compiled and checked component, and how it was obtained if that happened now.
    fn prepared<'p>(&self, plugin: &'p Plugin) -> Result<(&'p Prepared, Fresh), String> {
        let mut fresh = None;
        let pre = plugin.pre.get_or_init(|| {
            let (engine, linker) = self.engine().map_err(|e| e.to_string())?;
            let started = Instant::now();
            let sha = plugin.sha256().map_err(|e| e.to_string())?;
            let (component, outcome) = match embedded_code(plugin, engine) {
                Some(component) => (component, CacheOutcome::Precompiled),
                None => self
                    .cache
                    .load_or_compile(&engine.engine, &engine.fingerprint, sha, || plugin.wasm_bytes())
                    .map_err(|e| format!("not a valid WebAssembly component: {e}"))?,
            };
            let pre =
                exports::prepare(&engine.engine, linker.instantiate_pre(&component), &component, &plugin.manifest);
            fresh = Some((outcome, started.elapsed()));
            pre
        });
        match pre {
            Ok(prepared) => Ok((prepared, fresh)),
            Err(e) => Err(format!("plugin '{}' ({}): {e}", plugin.name(), plugin.location)),
        }
    }

    /// Compile `wasm` into the compile cache (or find it there) and check it against `manifest`
    /// as loading it would: API version, kinds, and the imports this host provides. An install
    /// calls this before switching versions, so a plugin that would not load is never
    /// switched to and its first call does not wait for a compile.
    ///
    /// # Errors
    /// What is wrong with the component, in a sentence.
    pub fn check_component(&self, manifest: &Manifest, wasm: &[u8]) -> Result<ComponentCheck, ComponentError> {
        let (engine, linker) = self.engine().map_err(|e| ComponentError::Engine(e.to_string()))?;
        let started = Instant::now();
        let (component, outcome) = self
            .cache
            .load_or_compile(&engine.engine, &engine.fingerprint, &fsutil::sha256_hex(wasm), || Ok(wasm.to_vec()))
            .map_err(ComponentError::Invalid)?;
        exports::prepare(&engine.engine, linker.instantiate_pre(&component), &component, manifest)
            .map_err(ComponentError::Mismatch)?;
        Ok(ComponentCheck { outcome, took: started.elapsed(), imports: exports::imports(&engine.engine, &component) })
    }

    /// Whether `wasm` is compiled in the compile cache already (then [`Runtime::check_component`]
    /// only loads it).
    pub fn is_compiled(&self, wasm: &[u8]) -> bool {
        self.engine().is_ok_and(|(engine, _)| self.cache.entry(&fsutil::sha256_hex(wasm), &engine.fingerprint).exists())
    }

    /// The host imports plugins called since the last drain, oldest first (none unless
    /// [`RuntimeConfig::record_imports`] is on). Calls running at the same time interleave.
    pub fn take_recorded_imports(&self) -> Vec<RecordedImport> {
        self.recorder.as_ref().map(|r| r.take()).unwrap_or_default()
    }

    /// Whether listing this plugin's tools needs a compile (nothing cached for it yet).
    pub fn needs_compile(&self, plugin: &Plugin) -> bool {
        let precompiled = matches!(plugin.source, WasmSource::Embedded { precompiled: Some(_), .. });
        !precompiled
            && plugin.enabled
            && plugin.may_offer_tools()
            && plugin.pre.get().is_none()
            && plugin.specs.get().is_none()
            && plugin.sha256().is_ok_and(|sha| !self.cache.specs_file(sha).exists())
    }

    /// Refuse a disabled plugin.
    fn check_enabled(plugin: &Plugin) -> Result<(), String> {
        if plugin.enabled {
            return Ok(());
        }
        let name = plugin.name();
        Err(format!(
            "plugin '{name}' is disabled; enable it with `enabled = true` under [plugins.{name}] in config.toml"
        ))
    }

    /// The tools a plugin offers (from the spec cache when possible); none for kinds that
    /// offer no tools.
    ///
    /// A `list` that traps, misses its deadline or is refused is remembered by the component's
    /// hash (see [`cache`]): later starts report it without running the plugin, until its
    /// component or the `[sandbox]` limits change.
    ///
    /// # Errors
    /// The plugin is disabled, cannot be compiled, or its `list` fails or returns specs over
    /// the limits or malformed (now, or remembered from an earlier start).
    pub async fn plugin_tools(&self, plugin: &Plugin) -> Result<Vec<ToolSpec>, ToolError> {
        Self::check_enabled(plugin).map_err(ToolError::Unavailable)?;
        if !plugin.may_offer_tools() {
            return Ok(Vec::new());
        }
        let specs = plugin.specs.get_or_init(|| self.listed_tools(plugin)).await;
        specs.clone()
    }

    /// A plugin's tools from the kept listing, else from its `list` export (the outcome is kept).
    async fn listed_tools(&self, plugin: &Plugin) -> Result<Vec<ToolSpec>, ToolError> {
        let sha = plugin.sha256().map_err(|e| ToolError::Unavailable(e.to_string()))?.to_string();
        let limits = self.spec_limits;
        if let Some(kept) = self.cache.listing(&sha) {
            // The same component may sit behind another manifest: check it against this one.
            exports::check(&kept.surface, &plugin.manifest).map_err(|e| {
                ToolError::Unavailable(format!("plugin '{}' ({}): {e}", plugin.name(), plugin.location))
            })?;
            match kept.listed {
                Listed::Tools(tools) => {
                    if kept.limits != limits {
                        listing::recheck(plugin.name(), &tools, limits)
                            .map_err(|e| ToolError::Unavailable(e.to_string()))?;
                    }
                    return Ok(annotated(plugin, tools));
                }
                Listed::Failed(error) if kept.limits == limits => {
                    return Err(ToolError::Unavailable(format!(
                        "{error} (remembered from an earlier start: it is tried again when the plugin's component or the [sandbox] limits change)"
                    )));
                }
                // Checked under other limits: it may pass now.
                Listed::Failed(_) => {}
            }
        }
        let (prepared, _) = self.prepared(plugin).map_err(ToolError::Unavailable)?;
        let (engine, _) = self.engine()?;
        let listed = match self.list_specs(engine, plugin, prepared).await {
            Ok(tools) => Listed::Tools(tools),
            Err(error) => Listed::Failed(error),
        };
        let kept = Listing { surface: prepared.surface.clone(), limits, listed };
        if let Err(e) = self.cache.keep_listing(&sha, &kept) {
            cache::not_kept(&e, || format!("could not keep the tool listing of plugin '{}': {e}", plugin.name()));
        }
        match kept.listed {
            Listed::Tools(tools) => Ok(annotated(plugin, tools)),
            Listed::Failed(error) => Err(ToolError::Unavailable(error)),
        }
    }

    /// The checked tool specs from a plugin's `list` export, or why there are none: a failure
    /// of the plugin's own making (a trap, the deadline, a refused listing), worth remembering.
    async fn list_specs(
        &self,
        engine: &EngineHandle,
        plugin: &Plugin,
        prepared: &Prepared,
    ) -> Result<Vec<ToolSpec>, String> {
        let Some(tools) = &prepared.tools else { return Ok(Vec::new()) };
        // Listing is quick for any honest plugin; a hanging one must not hold up every tool.
        let limits = CallLimits { timeout: plugin.limits.timeout.min(LIST_DEADLINE), ..plugin.limits };
        let (raw, _) = instance::run_fresh(
            engine,
            &plugin.env,
            &prepared.pre,
            Site::shared(self.workspace.clone(), Caller::default()),
            limits,
            async |store, instance| Ok(Ok(tools.list(store, instance).await?)),
        )
        .await
        .map_err(|e| {
            let e = e.into_tool_error(plugin.name(), limits);
            format!("plugin '{}' could not list its tools: {e}", plugin.name())
        })?;
        listing::check(plugin.name(), raw, self.spec_limits).map_err(|e| e.to_string())
    }

    /// Every tool of every usable plugin, and the problems met while finding them.
    pub async fn tools(&self) -> (Vec<Arc<ToolSpec>>, Vec<Problem>) {
        let index = self.index().await;
        (index.tools.clone(), index.problems.clone())
    }

    async fn index(&self) -> &ToolIndex {
        self.index
            .get_or_init(|| async {
                let mut index = ToolIndex { tools: Vec::new(), by_name: HashMap::new(), problems: Vec::new() };
                for (i, plugin) in self.plugins.iter().enumerate() {
                    if !plugin.enabled || !plugin.may_offer_tools() {
                        continue;
                    }
                    let specs = match self.plugin_tools(plugin).await {
                        Ok(s) => s,
                        Err(e) => {
                            index.problems.push(Problem {
                                plugin: Some(plugin.name().to_string()),
                                location: plugin.location.clone(),
                                message: e.to_string(),
                            });
                            continue;
                        }
                    };
                    for spec in specs {
                        match index.by_name.get(&spec.name).copied() {
                            Some(owner) if !plugin.allow_override => index.problems.push(Problem {
                                plugin: Some(plugin.name().to_string()),
                                location: plugin.location.clone(),
                                message: format!(
                                    "tool `{}` is already provided by plugin '{}'; it was not registered (set `allow_override = true` under [plugins.{}] in config.toml to let it replace it)",
                                    spec.name,
                                    self.plugins[owner].name(),
                                    plugin.name()
                                ),
                            }),
                            Some(_) => {
                                index.tools.retain(|t| t.name != spec.name);
                                index.by_name.insert(spec.name.clone(), i);
                                index.tools.push(Arc::new(spec));
                            }
                            None => {
                                index.by_name.insert(spec.name.clone(), i);
                                index.tools.push(Arc::new(spec));
                            }
                        }
                    }
                }
                index
            })
            .await
    }

    /// Run `ctx.tool` with `ctx.arguments` in a fresh instance of the plugin that provides it.
    ///
    /// # Errors
    /// Unknown tool, arguments that are not a JSON object, or whatever the plugin call returns.
    pub async fn call(&self, ctx: &ToolContext) -> Result<CallOutput, ToolError> {
        let index = self.index().await;
        let Some(&owner) = index.by_name.get(&ctx.tool) else {
            let mut names: Vec<&str> = index.tools.iter().map(|t| t.name.as_str()).collect();
            names.sort_unstable();
            return Err(ToolError::UnknownTool(format!("{} (available: {})", ctx.tool, names.join(", "))));
        };
        let plugin = self.plugins[owner].clone();
        self.call_plugin(&plugin, ctx).await
    }

    /// Run `ctx.tool` of a given plugin.
    ///
    /// # Errors
    /// As for [`Runtime::call`].
    pub async fn call_plugin(&self, plugin: &Arc<Plugin>, ctx: &ToolContext) -> Result<CallOutput, ToolError> {
        Self::check_enabled(plugin).map_err(ToolError::Unavailable)?;
        let (tool, args) = (ctx.tool.clone(), &ctx.arguments);
        if !args.is_object() {
            return Err(ToolError::InvalidArgs(format!("arguments must be a JSON object, not {}", json_kind(args))));
        }
        // The guest reads the arguments as JSON text.
        let args_json = args.to_string();
        let scan = &plugin.env.services.scan;
        if let Some(secret) = scan.find(&args_json) {
            return Err(ToolError::Denied(format!(
                "the arguments carry the value of the secret {secret}, which talaria never hands to a plugin; the call was refused"
            )));
        }
        // A tool the plugin does not list still reaches it: the plugin answers for unknown names.
        if let Ok(specs) = self.plugin_tools(plugin).await
            && let Some(spec) = specs.iter().find(|s| s.name == tool)
        {
            self.args.check(spec, args)?;
        }
        let (prepared, _) = self.prepared(plugin).map_err(ToolError::Unavailable)?;
        let (engine, _) = self.engine()?;
        if prepared.tools.is_none() {
            return Err(ToolError::UnknownTool(format!("{tool} (plugin '{}' offers no tools)", plugin.name())));
        }
        let workspace =
            if ctx.workspace.as_os_str().is_empty() { self.workspace.clone() } else { ctx.workspace.clone() };
        let caller = Caller { session_id: ctx.session_id.clone(), call_id: ctx.call_id.clone() };
        let info = CallInfo {
            session_id: ctx.session_id.clone(),
            call_id: ctx.call_id.clone(),
            workspace: workspace.to_string_lossy().into_owned(),
        };
        let started = Instant::now();
        let limits = plugin.limits;
        let site = Site { workspace, caller, own_thread: true };
        let owner = plugin.clone();
        let (output, denials) = instance::on_own_thread(limits, async move {
            let Some(Ok(Prepared { pre, tools: Some(tools), .. })) = owner.pre.get() else {
                return Err(Failure::Crashed("lost its prepared code".into()));
            };
            instance::run_fresh(engine, &owner.env, pre, site, limits, async |store, instance| {
                tools.call(store, instance, &tool, &args_json, info).await
            })
            .await
        })
        .await
        .map_err(|e| redact_error(scan, e.into_tool_error(plugin.name(), limits)))?;
        if let Some(refusal) = instance::over_cap(&format!("plugin '{}'", plugin.name()), output.len(), limits) {
            return Err(ToolError::Crashed(refusal));
        }
        // Whatever the plugin came across (a command's output, a page), secret values do not go
        // on to the model, the store or the terminal.
        let output = scan.redacted(output);
        let denials = denials.into_iter().map(|d| scan.redacted(d)).collect();
        Ok(CallOutput { output, denials, elapsed: started.elapsed() })
    }
}

/// A tool error with secret values taken out.
fn redact_error(scan: &leak::SecretScan, e: ToolError) -> ToolError {
    match e {
        ToolError::InvalidArgs(m) => ToolError::InvalidArgs(scan.redacted(m)),
        ToolError::UnknownTool(m) => ToolError::UnknownTool(scan.redacted(m)),
        ToolError::Failed(m) => ToolError::Failed(scan.redacted(m)),
        ToolError::Denied(m) => ToolError::Denied(scan.redacted(m)),
        ToolError::Crashed(m) => ToolError::Crashed(scan.redacted(m)),
        ToolError::Unavailable(m) => ToolError::Unavailable(scan.redacted(m)),
    }
}

fn call_limits(host: &HostLimits, wanted: &Limits, default_timeout: Duration) -> CallLimits {
    let mb = wanted.memory_mb.unwrap_or(host.default_memory_mb).min(host.max_memory_mb);
    let secs = wanted.timeout_secs.map_or(default_timeout, |s| Duration::from_secs(u64::from(s)));
    let kb = wanted.output_kb.unwrap_or(host.default_output_kb).min(host.max_output_kb);
    CallLimits {
        memory_bytes: usize::try_from(mb).unwrap_or(usize::MAX).saturating_mul(1024 * 1024),
        timeout: secs.min(host.max_timeout),
        output_bytes: usize::try_from(kb).unwrap_or(usize::MAX).saturating_mul(1024),
    }
}

/// The `name` of a bundled manifest, without parsing all of it.
fn manifest_name(manifest: &str) -> Option<&str> {
    manifest.lines().find_map(|l| l.strip_prefix("name = \"")?.strip_suffix('"'))
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// `tools` as `plugin` provides them: named after it, with the annotations its manifest
/// declares (`[tools.NAME]`; the cautious defaults for a tool it says nothing about). A
/// component never annotates its own tools: only the manifest the operator sees does.
fn annotated(plugin: &Plugin, tools: Vec<ToolSpec>) -> Vec<ToolSpec> {
    tools
        .into_iter()
        .map(|s| ToolSpec {
            plugin: plugin.name().to_string(),
            annotations: plugin.manifest.tools.get(&s.name).cloned().unwrap_or_default(),
            ..s
        })
        .collect()
}

/// The plugin's code compiled into the binary, when there is some for this engine; `None` (and
/// the component is compiled as any other) when there is none or wasmtime refuses it.
fn embedded_code(plugin: &Plugin, engine: &EngineHandle) -> Option<wasmtime::component::Component> {
    let WasmSource::Embedded { precompiled: Some(code), .. } = &plugin.source else { return None };
    if code.fingerprint != engine.fingerprint {
        tracing::debug!(plugin = plugin.name(), "built for another engine: compiling it");
        return None;
    }
    match cache::deserialize_static(&engine.engine, code.code) {
        Ok(component) => Some(component),
        Err(e) => {
            tracing::warn!(plugin = plugin.name(), "its precompiled code would not load ({e}); compiling it");
            None
        }
    }
}
