//! The agent's view of the plugin runtime: [`ToolSource`], [`Hooks`], [`MemoryProvider`] and
//! [`ContextEngine`] over [`Runtime`], and auxiliary completions ([`AuxLlm`]) for plugins granted
//! `llm`.

use std::sync::{Arc, RwLock};

use talaria_agent::model::{Chain, ChainState, Client, ModelRequest};
use talaria_agent::{
    BoxFuture, ContextEngine, HookReply, Hooks, MemoryProvider, Scope, ToolContext, ToolHandler, ToolSource,
};
use talaria_protocol::{
    CompressRequest, Compressed, ContextStatus, HookEvent, HookKind, Message, PluginError, PluginSession, Role,
    ToolError, ToolSpec,
};
use talaria_runtime::{LlmBackend, LlmCompletion, LlmRequest, Plugin, Runtime};

/// The runtime a workspace's plugins run in now. [`crate::Plugins::refresh`] replaces it whole
/// when the plugins change on disk; every adapter below asks it for the current one at each
/// call, so a running conversation uses the new plugins from its next call on.
pub struct LiveRuntime {
    current: RwLock<Arc<Runtime>>,
}

impl LiveRuntime {
    pub fn new(runtime: Arc<Runtime>) -> Arc<Self> {
        Arc::new(Self { current: RwLock::new(runtime) })
    }

    /// The runtime in use now.
    pub fn get(&self) -> Arc<Runtime> {
        self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    pub(crate) fn replace(&self, runtime: Arc<Runtime>) {
        *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = runtime;
    }
}

/// Plugin tools, as the loop calls them.
pub struct PluginTools {
    live: Arc<LiveRuntime>,
}

impl PluginTools {
    /// The tools of `runtime`, for good.
    pub fn new(runtime: Arc<Runtime>) -> Self {
        Self { live: LiveRuntime::new(runtime) }
    }

    /// The tools of whichever runtime `live` holds at each call.
    pub fn live(live: Arc<LiveRuntime>) -> Self {
        Self { live }
    }
}

impl ToolSource for PluginTools {
    fn specs(&self) -> BoxFuture<'_, Vec<Arc<ToolSpec>>> {
        Box::pin(async move {
            let (tools, problems) = self.live.get().tools().await;
            for p in problems {
                tracing::warn!("{p}");
            }
            tools
        })
    }
}

impl ToolHandler for PluginTools {
    fn call<'a>(&'a self, ctx: &'a ToolContext, _: Scope<'a>) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let out = self.live.get().call(ctx).await?;
            for d in &out.denials {
                tracing::info!("{}: {d}", ctx.tool);
            }
            Ok(out.output)
        })
    }
}

/// The hook plugins of the current runtime, each called for the events it asked for.
pub struct PluginHooks {
    live: Arc<LiveRuntime>,
}

impl PluginHooks {
    pub fn new(live: Arc<LiveRuntime>) -> Self {
        Self { live }
    }

    /// The hook plugins that want `kind`, in the runtime's order.
    fn wanting(runtime: &Runtime, kind: HookKind) -> Vec<Arc<Plugin>> {
        runtime.plugins_of_kind("hook").into_iter().filter(|p| p.hook_events().contains(&kind)).collect()
    }
}

impl Hooks for PluginHooks {
    fn wants(&self, kind: HookKind) -> bool {
        !Self::wanting(&self.live.get(), kind).is_empty()
    }

    fn dispatch<'a>(&'a self, event: &'a HookEvent, session: &'a PluginSession) -> BoxFuture<'a, Vec<HookReply>> {
        Box::pin(async move {
            let runtime = self.live.get();
            let plugins = Self::wanting(&runtime, event.kind());
            let mut replies = Vec::with_capacity(plugins.len());
            for plugin in plugins {
                use tracing::Instrument as _;
                let span = tracing::info_span!(
                    target: talaria_protocol::trace::TARGET,
                    "hook",
                    otel.name = format!("hook {}", event.kind().name()),
                    talaria.hook.event = event.kind().name(),
                    talaria.plugin = plugin.name(),
                    talaria.hook.decision = tracing::field::Empty,
                    otel.status_code = tracing::field::Empty,
                );
                let decision = runtime.hook(&plugin, event, session).instrument(span.clone()).await;
                match &decision {
                    Ok(decision) => span.record("talaria.hook.decision", decision.name()),
                    Err(_) => span.record("otel.status_code", "ERROR"),
                };
                // The loop reports failures (it knows what each one meant: a block, a skipped
                // context); here they are only logged for -vv.
                if let Err(e) = &decision {
                    tracing::debug!(plugin = plugin.name(), "hook {}: {e}", event.kind().name());
                }
                replies.push(HookReply { plugin: plugin.name().to_string(), decision });
            }
            replies
        })
    }
}

/// The plugin called `name` of `kind` in the current runtime; after a reload that lost it, an
/// error saying so.
fn current(live: &LiveRuntime, name: &str, kind: &str) -> Result<(Arc<Runtime>, Arc<Plugin>), PluginError> {
    let runtime = live.get();
    let plugin = runtime.plugins_of_kind(kind).into_iter().find(|p| p.name() == name).ok_or_else(|| {
        PluginError::Unavailable(format!("the {kind} plugin '{name}' is gone since the plugins were reloaded"))
    })?;
    Ok((runtime, plugin))
}

/// The active memory provider plugin.
pub struct PluginMemory {
    live: Arc<LiveRuntime>,
    name: String,
}

impl MemoryProvider for PluginMemory {
    fn name(&self) -> &str {
        &self.name
    }

    fn system_prompt_block<'a>(&'a self, session: &'a PluginSession) -> BoxFuture<'a, Result<String, PluginError>> {
        Box::pin(async move {
            let (runtime, plugin) = current(&self.live, &self.name, "memory")?;
            runtime.memory_prompt_block(&plugin, session).await
        })
    }

    fn prefetch<'a>(
        &'a self,
        query: &'a str,
        session: &'a PluginSession,
    ) -> BoxFuture<'a, Result<String, PluginError>> {
        Box::pin(async move {
            let (runtime, plugin) = current(&self.live, &self.name, "memory")?;
            runtime.memory_prefetch(&plugin, query, session).await
        })
    }

    fn sync_turn<'a>(
        &'a self,
        user: &'a str,
        assistant: &'a str,
        session: &'a PluginSession,
    ) -> BoxFuture<'a, Result<(), PluginError>> {
        Box::pin(async move {
            let (runtime, plugin) = current(&self.live, &self.name, "memory")?;
            runtime.memory_sync_turn(&plugin, user, assistant, session).await
        })
    }

    fn on_pre_compress<'a>(
        &'a self,
        messages: &'a [Message],
        session: &'a PluginSession,
    ) -> BoxFuture<'a, Result<String, PluginError>> {
        Box::pin(async move {
            let (runtime, plugin) = current(&self.live, &self.name, "memory")?;
            runtime.memory_pre_compress(&plugin, messages, session).await
        })
    }

    fn on_session_end<'a>(
        &'a self,
        messages: &'a [Message],
        session: &'a PluginSession,
    ) -> BoxFuture<'a, Result<(), PluginError>> {
        Box::pin(async move {
            let (runtime, plugin) = current(&self.live, &self.name, "memory")?;
            runtime.memory_session_end(&plugin, messages, session).await
        })
    }

    fn on_memory_write<'a>(
        &'a self,
        action: &'a str,
        target: &'a str,
        content: &'a str,
        session: &'a PluginSession,
    ) -> BoxFuture<'a, Result<(), PluginError>> {
        Box::pin(async move {
            let (runtime, plugin) = current(&self.live, &self.name, "memory")?;
            runtime.memory_on_write(&plugin, action, target, content, session).await
        })
    }
}

/// The active context engine plugin.
pub struct PluginContext {
    live: Arc<LiveRuntime>,
    name: String,
}

impl ContextEngine for PluginContext {
    fn name(&self) -> &str {
        &self.name
    }

    fn should_compress<'a>(
        &'a self,
        status: ContextStatus,
        session: &'a PluginSession,
    ) -> BoxFuture<'a, Result<bool, PluginError>> {
        Box::pin(async move {
            let (runtime, plugin) = current(&self.live, &self.name, "context-engine")?;
            runtime.context_should_compress(&plugin, status, session).await
        })
    }

    fn compress<'a>(
        &'a self,
        request: CompressRequest,
        session: &'a PluginSession,
    ) -> BoxFuture<'a, Result<Compressed, PluginError>> {
        Box::pin(async move {
            let (runtime, plugin) = current(&self.live, &self.name, "context-engine")?;
            runtime.context_compress(&plugin, request, session).await
        })
    }

    fn report<'a>(
        &'a self,
        status: ContextStatus,
        session: &'a PluginSession,
    ) -> BoxFuture<'a, Result<Vec<(String, String)>, PluginError>> {
        Box::pin(async move {
            let (runtime, plugin) = current(&self.live, &self.name, "context-engine")?;
            runtime.context_report(&plugin, status, session).await
        })
    }
}

/// Why [`single`] has no plugin of the kind and name chosen in config. `available` are the
/// active plugins of that kind (the message lists them, when there are any).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChoiceError {
    /// An active plugin of that name is of other kinds (`kinds`).
    #[error("plugin '{name}' is not a {kind} plugin (it is: {}){}", kinds.join(", "), listed(kind, available))]
    WrongKind { name: String, kind: String, kinds: Vec<String>, available: Vec<String> },
    /// No active plugin has that name.
    #[error("no active plugin named '{name}'{}", listed(kind, available))]
    NotActive { name: String, kind: String, available: Vec<String> },
}

/// "; KIND plugins available: A, B", or nothing when there are none.
fn listed(kind: &str, available: &[String]) -> String {
    if available.is_empty() { String::new() } else { format!("; {kind} plugins available: {}", available.join(", ")) }
}

/// The plugin named `name` if it is active and of `kind`.
///
/// # Errors
/// [`ChoiceError`]: there is no such active plugin, or it is of another kind.
pub fn single(runtime: &Runtime, kind: &str, name: &str) -> Result<Arc<Plugin>, ChoiceError> {
    let found = runtime.plugins_of_kind(kind);
    if let Some(p) = found.iter().find(|p| p.name() == name) {
        return Ok(p.clone());
    }
    let available = found.iter().map(|p| p.name().to_string()).collect();
    let (name, kind) = (name.to_string(), kind.to_string());
    Err(match runtime.plugin(&name) {
        Some(p) => ChoiceError::WrongKind { name, kind, kinds: p.manifest.kinds.clone(), available },
        None => ChoiceError::NotActive { name, kind, available },
    })
}

/// The active memory provider and context engine, each optional.
pub type Extensions = (Option<Arc<dyn MemoryProvider>>, Option<Arc<dyn ContextEngine>>);

/// The memory provider and context engine chosen in config (`none` turns one off). A chosen
/// plugin that is missing is reported in `warnings` and left out.
pub fn extensions(live: &Arc<LiveRuntime>, memory: &str, context: &str, warnings: &mut Vec<String>) -> Extensions {
    let runtime = live.get();
    let memory = match memory {
        "" | "none" => None,
        name => match single(&runtime, "memory", name) {
            Ok(plugin) => Some(Arc::new(PluginMemory { live: live.clone(), name: plugin.name().to_string() })
                as Arc<dyn MemoryProvider>),
            Err(e) => {
                warnings.push(format!(
                    "memory provider not loaded: {e} (set `provider` under [memory] in config.toml, or \"none\")"
                ));
                None
            }
        },
    };
    let context = match context {
        "" | "none" => None,
        name => match single(&runtime, "context-engine", name) {
            Ok(plugin) => Some(Arc::new(PluginContext { live: live.clone(), name: plugin.name().to_string() })
                as Arc<dyn ContextEngine>),
            Err(e) => {
                warnings.push(format!(
                    "context engine not loaded: {e} (set `engine` under [context] in config.toml, or \"none\")"
                ));
                None
            }
        },
    };
    (memory, context)
}

/// Auxiliary completions for plugins with the `llm` capability, over a model chain of their own.
pub struct AuxLlm {
    pub chain: Chain,
    pub client: Client,
}

impl LlmBackend for AuxLlm {
    fn complete<'a>(&'a self, plugin: &'a str, request: LlmRequest) -> BoxFuture<'a, Result<LlmCompletion, String>> {
        Box::pin(async move {
            let mut system = String::new();
            let mut messages = Vec::with_capacity(request.messages.len());
            for (role, text) in request.messages {
                match role {
                    Role::System => system = text,
                    Role::Assistant => messages.push(Message::assistant(text)),
                    Role::User | Role::Tool => messages.push(Message::user(text)),
                }
            }
            let mut chain = self.chain.clone();
            if let Some(max) = request.max_tokens {
                for p in &mut chain.providers {
                    p.max_tokens = Some(p.max_tokens.map_or(max, |m| m.min(max)));
                }
            }
            let model_request = ModelRequest { system: &system, messages: &messages, tools: &[], stream: false };
            let mut state = ChainState::default();
            let notice = |text: String| tracing::info!(plugin, "auxiliary model: {text}");
            let reply = chain
                .complete(&self.client, &mut state, &model_request, &|_| {}, &notice)
                .await
                .map_err(|e| e.to_string())?;
            tracing::info!(
                plugin,
                purpose = %request.purpose,
                input = reply.usage.input_tokens,
                output = reply.usage.output_tokens,
                "auxiliary completion"
            );
            Ok(LlmCompletion {
                text: reply.message.content().to_string(),
                model: reply.model,
                input_tokens: reply.usage.input_tokens,
                output_tokens: reply.usage.output_tokens,
            })
        })
    }
}
