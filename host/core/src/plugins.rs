//! The plugins of one workspace as the loop uses them: tools, hooks, the memory provider and the
//! context engine over one [`Runtime`], shared by every conversation in that workspace.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use talaria_agent::model::{Chain, Client};
use talaria_agent::{ContextEngine, Hooks, MemoryProvider, ToolSource};
use talaria_runtime::{BoxFuture, LlmBackend, LlmCompletion, LlmRequest, Runtime};

use crate::adapters::{AuxLlm, LiveRuntime, PluginHooks, PluginTools, extensions};
use crate::config::ConfigToml;
use crate::{ModelChoice, models};

/// Makes the workspace's runtime again from what is on disk now.
pub type Remake = Box<dyn Fn() -> Result<Runtime, talaria_runtime::Error> + Send + Sync>;

/// One workspace's plugins. Conversations hold its adapters, which call whichever runtime is
/// current; [`Plugins::refresh`] swaps in a new one when the plugins changed on disk.
pub struct Plugins {
    live: Arc<LiveRuntime>,
    pub tools: Arc<dyn ToolSource>,
    pub hooks: Arc<dyn Hooks>,
    pub memory: Option<Arc<dyn MemoryProvider>>,
    pub context: Option<Arc<dyn ContextEngine>>,
    /// What went wrong while finding them (a manifest refused, a provider missing), in words;
    /// reported once, to the first conversation.
    warnings: Mutex<Vec<String>>,
    /// The home whose [`talaria_runtime::CHANGED_STAMP`] tells that plugins changed, its text
    /// when the current runtime was made, and how to make a new one.
    reload: Option<Reload>,
}

struct Reload {
    home: PathBuf,
    stamp: tokio::sync::Mutex<String>,
    remake: Remake,
    memory: String,
    context: String,
}

impl Plugins {
    /// The plugins of `runtime`. With `remake`, [`Plugins::refresh`] makes a new runtime when
    /// the stamp under `home` moves.
    pub fn new(runtime: Arc<Runtime>, config: &ConfigToml, remake: Option<(PathBuf, Remake)>) -> Self {
        let mut warnings: Vec<String> = runtime.problems().iter().map(ToString::to_string).collect();
        let live = LiveRuntime::new(runtime.clone());
        let (memory, context) = extensions(&live, config.memory.provider(), config.context.engine(), &mut warnings);
        warm(&runtime, config.memory.provider(), config.context.engine());
        let reload = remake.map(|(home, remake)| Reload {
            stamp: tokio::sync::Mutex::new(talaria_runtime::plugins_stamp(&home)),
            home,
            remake,
            memory: config.memory.provider().to_string(),
            context: config.context.engine().to_string(),
        });
        Self {
            tools: Arc::new(PluginTools::live(live.clone())),
            hooks: Arc::new(PluginHooks::new(live.clone())),
            live,
            memory,
            context,
            warnings: Mutex::new(warnings),
            reload,
        }
    }

    /// The runtime in use now.
    pub fn runtime(&self) -> Arc<Runtime> {
        self.live.get()
    }

    /// The problems found, the first time this is called (empty afterwards).
    pub fn take_warnings(&self) -> Vec<String> {
        std::mem::take(&mut *crate::lock(&self.warnings))
    }

    /// The plugins a first use will compile (each takes a second or so; cached afterwards).
    pub fn to_compile(&self) -> Vec<String> {
        let rt = self.live.get();
        rt.plugins().iter().filter(|p| rt.needs_compile(p)).map(|p| p.name().to_string()).collect()
    }

    /// If the plugins changed on disk since the current runtime was made (installed, removed,
    /// regranted, or rebuilt by `talaria plugin dev`), make a new runtime and use it from the
    /// next call on; a call running keeps the old one to its end. Returns what to tell the
    /// user, or `None` when nothing changed. Cheap when nothing did: one small file read.
    pub async fn refresh(&self) -> Option<String> {
        let reload = self.reload.as_ref()?;
        let mut seen = reload.stamp.lock().await;
        let now = talaria_runtime::plugins_stamp(&reload.home);
        if now == *seen {
            return None;
        }
        *seen = now;
        let old = self.live.get();
        let made = match (reload.remake)() {
            Ok(runtime) => Arc::new(runtime),
            Err(e) => return Some(format!("the plugins changed on disk, but they could not be reloaded: {e}")),
        };
        warm(&made, &reload.memory, &reload.context);
        let changed = changed(&old, &made);
        let problems: Vec<String> = made.problems().iter().map(ToString::to_string).collect();
        self.live.replace(made);
        let mut text = if changed.is_empty() {
            "reloaded the plugins (their grants or settings changed)".to_string()
        } else {
            format!("reloaded the plugins: {}", changed.join(", "))
        };
        for p in problems {
            text.push_str(&format!("\n{p}"));
        }
        Some(text)
    }
}

/// Start loading what every conversation calls first: the memory provider for its prompt, the
/// context engine before each model call, hooks around each tool call.
fn warm(runtime: &Arc<Runtime>, memory: &str, context: &str) {
    let first: Vec<_> = [memory, context]
        .into_iter()
        .filter_map(|name| runtime.plugin(name).filter(|p| p.enabled).cloned())
        .chain(runtime.plugins_of_kind("hook"))
        .collect();
    runtime.warm(first);
}

/// What differs between two runtimes' plugins, in words: `NAME (new)`, `NAME (removed)`,
/// `NAME (rebuilt)`, `NAME 0.1.0 → 0.2.0`.
fn changed(old: &Runtime, new: &Runtime) -> Vec<String> {
    let mut out = Vec::new();
    for p in new.plugins() {
        match old.plugin(p.name()) {
            None => out.push(format!("{} (new)", p.name())),
            Some(before) if before.manifest.version != p.manifest.version => {
                out.push(format!("{} {} → {}", p.name(), before.manifest.version, p.manifest.version));
            }
            Some(before) if differs(before, p) => out.push(format!("{} (rebuilt)", p.name())),
            Some(_) => {}
        }
    }
    for p in old.plugins() {
        if new.plugin(p.name()).is_none() {
            out.push(format!("{} (removed)", p.name()));
        }
    }
    out
}

/// Whether `new` is another build, grant or place of the plugin `old` was: its component (by
/// digest: `old`'s was taken when it was first loaded), its grants, or where it was loaded from
/// changed.
pub fn differs(old: &talaria_runtime::Plugin, new: &talaria_runtime::Plugin) -> bool {
    old.manifest.version != new.manifest.version
        || old.location != new.location
        || old.sha256().ok() != new.sha256().ok()
        || old.grants.caps != new.grants.caps
        || old.enabled != new.enabled
}

/// The auxiliary model for plugins' `llm` calls and session titles, resolved on the first call
/// (a host with no model configured still opens; such a call then fails saying so): `[auxiliary]`,
/// else the main model as config and a front door's choice make it.
pub(crate) struct LazyAux {
    home: PathBuf,
    config: Arc<ConfigToml>,
    client: Client,
    /// The front door's choice over `[model]` (`--model`, `--base-url`...), for the main model.
    choice: ModelChoice,
    aux: OnceLock<Result<AuxLlm, String>>,
}

impl LazyAux {
    pub fn new(home: &Path, config: Arc<ConfigToml>, client: Client) -> Self {
        Self::chosen(home, config, client, ModelChoice::default())
    }

    /// The auxiliary model of a conversation whose main model is `choice` over config.
    pub fn chosen(home: &Path, config: Arc<ConfigToml>, client: Client, choice: ModelChoice) -> Self {
        Self { home: home.to_path_buf(), config, client, choice, aux: OnceLock::new() }
    }

    fn resolve(&self) -> Result<&AuxLlm, String> {
        self.aux
            .get_or_init(|| {
                let mut warnings = Vec::new();
                let main: Chain =
                    models::chain(&self.home, &self.config, &self.choice, &mut warnings).map_err(|e| e.to_string())?;
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
