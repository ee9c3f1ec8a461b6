//! The plugins of one workspace as the loop uses them: tools, hooks, the memory provider and the
//! context engine over one [`Runtime`], shared by every conversation in that workspace.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use talaria_agent::model::{Chain, Client};
use talaria_agent::{ContextEngine, Hooks, MemoryProvider, ToolHost};
use talaria_runtime::{BoxFuture, LlmBackend, LlmCompletion, LlmRequest, Runtime};

use crate::adapters::{AuxLlm, PluginHooks, PluginTools, extensions};
use crate::config::ConfigToml;
use crate::{ModelChoice, models};

/// One workspace's plugins.
pub struct Plugins {
    pub runtime: Arc<Runtime>,
    pub tools: Arc<dyn ToolHost>,
    pub hooks: Arc<dyn Hooks>,
    pub memory: Option<Arc<dyn MemoryProvider>>,
    pub context: Option<Arc<dyn ContextEngine>>,
    /// What went wrong while finding them (a manifest refused, a provider missing), in words;
    /// reported once, to the first conversation.
    warnings: Mutex<Vec<String>>,
}

impl Plugins {
    pub fn new(runtime: Arc<Runtime>, config: &ConfigToml) -> Self {
        let mut warnings: Vec<String> = runtime.problems().iter().map(ToString::to_string).collect();
        let (memory, context) = extensions(&runtime, config.memory.provider(), config.context.engine(), &mut warnings);
        // Every conversation calls these first (the memory provider for its prompt, the context
        // engine before each model call, hooks around each tool call): load them while the
        // conversation opens its session.
        let first: Vec<_> = [config.memory.provider(), config.context.engine()]
            .into_iter()
            .filter_map(|name| runtime.plugin(name).filter(|p| p.enabled).cloned())
            .chain(runtime.plugins_of_kind("hook"))
            .collect();
        runtime.warm(first);
        Self {
            tools: Arc::new(PluginTools { runtime: runtime.clone() }),
            hooks: Arc::new(PluginHooks::new(runtime.clone())),
            runtime,
            memory,
            context,
            warnings: Mutex::new(warnings),
        }
    }

    /// The problems found, the first time this is called (empty afterwards).
    pub fn take_warnings(&self) -> Vec<String> {
        std::mem::take(&mut *crate::lock(&self.warnings))
    }

    /// The plugins a first use will compile (each takes a second or so; cached afterwards).
    pub fn to_compile(&self) -> Vec<String> {
        let rt = &self.runtime;
        rt.plugins().iter().filter(|p| rt.needs_compile(p)).map(|p| p.name().to_string()).collect()
    }
}

/// The auxiliary model for plugins' `llm` calls, resolved from config on the first call (a host
/// with no model configured still opens; such a call then fails saying so).
pub(crate) struct LazyAux {
    home: PathBuf,
    config: Arc<ConfigToml>,
    client: Client,
    aux: OnceLock<Result<AuxLlm, String>>,
}

impl LazyAux {
    pub fn new(home: &Path, config: Arc<ConfigToml>, client: Client) -> Self {
        Self { home: home.to_path_buf(), config, client, aux: OnceLock::new() }
    }

    fn resolve(&self) -> Result<&AuxLlm, String> {
        self.aux
            .get_or_init(|| {
                let mut warnings = Vec::new();
                let main: Chain = models::chain(&self.home, &self.config, &ModelChoice::default(), &mut warnings)
                    .map_err(|e| e.to_string())?;
                let chain = models::auxiliary(&self.home, &self.config, &main, &mut warnings);
                for w in warnings {
                    tracing::warn!("{w}");
                }
                Ok(AuxLlm { chain, client: self.client.clone() })
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

impl LlmBackend for LazyAux {
    fn complete<'a>(&'a self, plugin: &'a str, request: LlmRequest) -> BoxFuture<'a, Result<LlmCompletion, String>> {
        match self.resolve() {
            Ok(aux) => aux.complete(plugin, request),
            Err(e) => Box::pin(async move { Err(format!("no auxiliary model: {e}")) }),
        }
    }
}
