//! The agent's view of the plugin runtime: [`ToolHost`], [`Hooks`], [`MemoryProvider`] and
//! [`ContextEngine`] over [`Runtime`], and auxiliary completions ([`AuxLlm`]) for plugins granted
//! `llm`.

use std::collections::HashMap;
use std::sync::Arc;

use talaria_agent::model::{Chain, ChainState, Client, ModelRequest};
use talaria_agent::{BoxFuture, ContextEngine, HookReply, Hooks, MemoryProvider, ToolContext, ToolHost};
use talaria_protocol::{
    CompressRequest, Compressed, ContextStatus, HookEvent, HookKind, Message, PluginSession, Role, ToolError, ToolSpec,
};
use talaria_runtime::{CallContext, LlmBackend, LlmCompletion, LlmRequest, Plugin, Runtime};

/// Plugin tools, as the loop calls them.
pub struct PluginTools {
    pub runtime: Arc<Runtime>,
}

impl ToolHost for PluginTools {
    fn specs(&self) -> BoxFuture<'_, Vec<ToolSpec>> {
        Box::pin(async move {
            let (tools, problems) = self.runtime.tools().await;
            for p in problems {
                tracing::warn!("{p}");
            }
            tools
        })
    }

    fn call<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a str,
        ctx: ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let ctx = CallContext { session_id: ctx.session_id, call_id: ctx.call_id, workspace: ctx.workspace };
            let out = self.runtime.call(name, arguments, ctx).await?;
            for d in &out.denials {
                tracing::info!("{name}: {d}");
            }
            Ok(out.output)
        })
    }
}

/// The hook plugins, by the events they asked for.
pub struct PluginHooks {
    runtime: Arc<Runtime>,
    by_kind: HashMap<HookKind, Vec<Arc<Plugin>>>,
}

impl PluginHooks {
    pub fn new(runtime: Arc<Runtime>) -> Self {
        let mut by_kind: HashMap<HookKind, Vec<Arc<Plugin>>> = HashMap::new();
        for plugin in runtime.plugins_of_kind("hook") {
            for kind in plugin.hook_events() {
                by_kind.entry(*kind).or_default().push(plugin.clone());
            }
        }
        Self { runtime, by_kind }
    }
}

impl Hooks for PluginHooks {
    fn wants(&self, kind: HookKind) -> bool {
        self.by_kind.contains_key(&kind)
    }

    fn dispatch<'a>(&'a self, event: &'a HookEvent, session: &'a PluginSession) -> BoxFuture<'a, Vec<HookReply>> {
        Box::pin(async move {
            let Some(plugins) = self.by_kind.get(&event.kind()) else { return Vec::new() };
            let mut replies = Vec::with_capacity(plugins.len());
            for plugin in plugins {
                let decision = self.runtime.hook(plugin, event, session).await;
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

/// The active memory provider plugin.
pub struct PluginMemory {
    runtime: Arc<Runtime>,
    plugin: Arc<Plugin>,
}

impl MemoryProvider for PluginMemory {
    fn name(&self) -> &str {
        self.plugin.name()
    }

    fn system_prompt_block<'a>(&'a self, session: &'a PluginSession) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(self.runtime.memory_prompt_block(&self.plugin, session))
    }

    fn prefetch<'a>(&'a self, query: &'a str, session: &'a PluginSession) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(self.runtime.memory_prefetch(&self.plugin, query, session))
    }

    fn sync_turn<'a>(
        &'a self,
        user: &'a str,
        assistant: &'a str,
        session: &'a PluginSession,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(self.runtime.memory_sync_turn(&self.plugin, user, assistant, session))
    }

    fn on_pre_compress<'a>(
        &'a self,
        messages: &'a [Message],
        session: &'a PluginSession,
    ) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(self.runtime.memory_pre_compress(&self.plugin, messages, session))
    }

    fn on_session_end<'a>(
        &'a self,
        messages: &'a [Message],
        session: &'a PluginSession,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(self.runtime.memory_session_end(&self.plugin, messages, session))
    }

    fn on_memory_write<'a>(
        &'a self,
        action: &'a str,
        target: &'a str,
        content: &'a str,
        session: &'a PluginSession,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(self.runtime.memory_on_write(&self.plugin, action, target, content, session))
    }
}

/// The active context engine plugin.
pub struct PluginContext {
    runtime: Arc<Runtime>,
    plugin: Arc<Plugin>,
}

impl ContextEngine for PluginContext {
    fn name(&self) -> &str {
        self.plugin.name()
    }

    fn should_compress<'a>(
        &'a self,
        status: ContextStatus,
        session: &'a PluginSession,
    ) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(self.runtime.context_should_compress(&self.plugin, status, session))
    }

    fn compress<'a>(
        &'a self,
        request: CompressRequest,
        session: &'a PluginSession,
    ) -> BoxFuture<'a, Result<Compressed, String>> {
        Box::pin(self.runtime.context_compress(&self.plugin, request, session))
    }

    fn report<'a>(
        &'a self,
        status: ContextStatus,
        session: &'a PluginSession,
    ) -> BoxFuture<'a, Result<Vec<(String, String)>, String>> {
        Box::pin(self.runtime.context_report(&self.plugin, status, session))
    }
}

/// The plugin named `name` if it is active and of `kind`; `Err` says why not.
pub fn single(runtime: &Runtime, kind: &str, name: &str) -> Result<Arc<Plugin>, String> {
    let found = runtime.plugins_of_kind(kind);
    if let Some(p) = found.iter().find(|p| p.name() == name) {
        return Ok(p.clone());
    }
    let others: Vec<&str> = found.iter().map(|p| p.name()).collect();
    let why = match runtime.plugin(name) {
        Some(p) => format!("plugin '{name}' is not a {kind} plugin (it is: {})", p.manifest.kinds.join(", ")),
        None => format!("no active plugin named '{name}'"),
    };
    Err(if others.is_empty() { why } else { format!("{why}; {kind} plugins available: {}", others.join(", ")) })
}

/// The active memory provider and context engine, each optional.
pub type Extensions = (Option<Arc<dyn MemoryProvider>>, Option<Arc<dyn ContextEngine>>);

/// The memory provider and context engine chosen in config (`none` turns one off). A chosen
/// plugin that is missing is reported in `warnings` and left out.
pub fn extensions(runtime: &Arc<Runtime>, memory: &str, context: &str, warnings: &mut Vec<String>) -> Extensions {
    let memory = match memory {
        "" | "none" => None,
        name => match single(runtime, "memory", name) {
            Ok(plugin) => Some(Arc::new(PluginMemory { runtime: runtime.clone(), plugin }) as Arc<dyn MemoryProvider>),
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
        name => match single(runtime, "context-engine", name) {
            Ok(plugin) => Some(Arc::new(PluginContext { runtime: runtime.clone(), plugin }) as Arc<dyn ContextEngine>),
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
