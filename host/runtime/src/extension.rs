//! The plugin kinds beside tools, as the agent calls them: memory providers (one resident
//! instance each), context engines and hooks (a fresh instance per call). Every method speaks
//! the protocol types, refuses a disabled plugin or one of another kind, runs under the kind's
//! deadline, caps what the plugin returns at its output cap, and reports any failure as a
//! sentence naming the plugin.

use std::path::PathBuf;
use std::sync::Arc;

use talaria_protocol::{CompressRequest, Compressed, ContextStatus, HookDecision, HookEvent, Message, PluginSession};
use wasmtime::Store;

use crate::Runtime;
use crate::approval::Caller;
use crate::engine::EngineHandle;
use crate::exports::Prepared;
use crate::host::HostState;
use crate::host::Site;
use crate::host::api::GuestError;
use crate::host::api::since_v0_2_0::convert;
use crate::host::api::since_v0_2_0::exports::talaria::plugin::{context, memory};
use crate::instance::{self, CallLimits, over_cap};
use crate::manifest::Kind;
use crate::plugin::Plugin;
use talaria_protocol::PluginError;

/// Idle instances kept per context engine for `should_compress`: as many as there are
/// conversations asking at the same moment, within reason.
const MAX_KEPT_DECIDERS: usize = 8;

/// Longest `note` a context engine may give.
const MAX_NOTE_CHARS: usize = 1000;

/// What a call on a plugin of one kind starts from ([`Runtime::setup`]).
struct Setup<'a, I> {
    engine: &'a EngineHandle,
    prepared: &'a Prepared,
    /// The interface the plugin exports for the kind.
    indices: &'a I,
    limits: CallLimits,
    site: Site,
}

/// How a plugin of `kind` is named in messages.
fn who(plugin: &Plugin, kind: Kind) -> String {
    let label = match kind {
        Kind::Tool => "tool plugin",
        Kind::Memory => "memory plugin",
        Kind::ContextEngine => "context engine",
        Kind::Hook => "hook plugin",
        Kind::Platform => "platform adapter",
    };
    format!("{label} '{}'", plugin.name())
}

impl Runtime {
    /// Enabled plugins of `kind` (a manifest kind name: `tool`, `memory`, `context-engine`,
    /// `hook`), in scope order; none for a name that is not a kind.
    pub fn plugins_of_kind(&self, kind: &str) -> Vec<Arc<Plugin>> {
        let Some(kind) = Kind::parse(kind) else { return Vec::new() };
        self.plugins.iter().filter(|p| p.enabled && p.is(kind)).cloned().collect()
    }

    /// Plugins that are installed but off (`enabled = false`); they are never called.
    pub fn disabled(&self) -> Vec<Arc<Plugin>> {
        self.plugins.iter().filter(|p| !p.enabled).cloned().collect()
    }

    /// The engine and the checked component, for a call of `kind`.
    fn ready<'p>(&self, plugin: &'p Plugin, kind: Kind) -> Result<(&EngineHandle, &'p Prepared), PluginError> {
        Self::check_enabled(plugin).map_err(PluginError::Unavailable)?;
        if !plugin.is(kind) {
            let kinds: Vec<&str> = plugin.kinds().iter().map(|k| k.name()).collect();
            return Err(PluginError::Unavailable(format!(
                "plugin '{}' is not a {kind} plugin (its kinds: {})",
                plugin.name(),
                kinds.join(", ")
            )));
        }
        let (prepared, _) = self.prepared(plugin).map_err(PluginError::Unavailable)?;
        let (engine, _) = self.engine().map_err(|e| PluginError::Unavailable(e.to_string()))?;
        Ok((engine, prepared))
    }

    fn session_workspace(&self, session: &PluginSession) -> PathBuf {
        if session.workspace.is_empty() { self.workspace.clone() } else { PathBuf::from(&session.workspace) }
    }

    /// What a call on `plugin` as a `kind` starts from: the plugin checked and ready, the
    /// interface it exports for the kind (`export` picks it), its limits, and where it runs.
    fn setup<'a, I>(
        &'a self,
        plugin: &'a Plugin,
        kind: Kind,
        session: &PluginSession,
        export: impl FnOnce(&'a Prepared) -> Option<&'a I>,
    ) -> Result<Setup<'a, I>, PluginError> {
        let (engine, prepared) = self.ready(plugin, kind)?;
        let indices = export(prepared)
            .ok_or_else(|| PluginError::Unavailable(format!("{} exports no {}", who(plugin, kind), kind.name())))?;
        let site = Site::shared(self.session_workspace(session), caller_of(session));
        Ok(Setup { engine, prepared, indices, limits: plugin.limits_for(kind), site })
    }

    /// A call on the memory provider's resident instance.
    async fn memory_call<T>(
        &self,
        plugin: &Plugin,
        session: &PluginSession,
        f: impl AsyncFnOnce(&mut Store<HostState>, &memory::Guest) -> wasmtime::Result<Result<T, String>>,
    ) -> Result<T, PluginError> {
        let Setup { engine, prepared, indices, limits, site } =
            self.setup(plugin, Kind::Memory, session, |p| p.memory.as_ref())?;
        instance::run_resident(
            engine,
            &plugin.env,
            instance::ResidentSlot {
                slot: &mut *plugin.resident.lock().await,
                pre: &prepared.pre,
                load: |store: &mut Store<HostState>, instance: &wasmtime::component::Instance| {
                    indices.load(store, instance)
                },
            },
            site,
            limits,
            async |store, guest| Ok(f(store, guest).await?.map_err(GuestError::Failed)),
        )
        .await
        .map(|(value, _)| value)
        .map_err(|e| e.into_plugin_error(&who(plugin, Kind::Memory), limits).map_text(|m| redact(plugin, m)))
    }

    /// A call on a fresh instance of a context engine.
    async fn context_call<T>(
        &self,
        plugin: &Plugin,
        session: &PluginSession,
        f: impl AsyncFnOnce(&mut Store<HostState>, &context::Guest) -> wasmtime::Result<Result<T, String>>,
    ) -> Result<T, PluginError> {
        let Setup { engine, prepared, indices, limits, site } =
            self.setup(plugin, Kind::ContextEngine, session, |p| p.context.as_ref())?;
        instance::run_fresh(engine, &plugin.env, &prepared.pre, site, limits, async |store, instance| {
            let guest = indices.load(&mut *store, instance)?;
            Ok(f(store, &guest).await?.map_err(GuestError::Failed))
        })
        .await
        .map(|(value, _)| value)
        .map_err(|e| e.into_plugin_error(&who(plugin, Kind::ContextEngine), limits).map_text(|m| redact(plugin, m)))
    }

    /// `Err` when `bytes` is over the plugin's output cap for `kind`.
    fn capped(plugin: &Plugin, kind: Kind, bytes: usize) -> Result<(), PluginError> {
        over_cap(&who(plugin, kind), bytes, plugin.limits_for(kind)).map_or(Ok(()), |m| Err(PluginError::BadAnswer(m)))
    }

    /// Text for the system prompt of a new session ("" for none).
    ///
    /// # Errors
    /// The plugin is disabled, not a memory provider, failed, trapped, ran out of time or
    /// returned more than its output cap; the text says which.
    pub async fn memory_prompt_block(&self, plugin: &Plugin, session: &PluginSession) -> Result<String, PluginError> {
        let info = convert::session(session);
        let text = self.memory_call(plugin, session, async |s, m| m.call_system_prompt_block(s, &info).await).await?;
        Self::capped(plugin, Kind::Memory, text.len())?;
        Ok(redact(plugin, text))
    }

    /// Recall for the user's new message `query` ("" for none).
    ///
    /// # Errors
    /// As for [`Runtime::memory_prompt_block`].
    pub async fn memory_prefetch(
        &self,
        plugin: &Plugin,
        query: &str,
        session: &PluginSession,
    ) -> Result<String, PluginError> {
        let info = convert::session(session);
        let text = self.memory_call(plugin, session, async |s, m| m.call_prefetch(s, query, &info).await).await?;
        Self::capped(plugin, Kind::Memory, text.len())?;
        Ok(redact(plugin, text))
    }

    /// A finished turn: the user's message and the final answer.
    ///
    /// # Errors
    /// As for [`Runtime::memory_prompt_block`].
    pub async fn memory_sync_turn(
        &self,
        plugin: &Plugin,
        user: &str,
        assistant: &str,
        session: &PluginSession,
    ) -> Result<(), PluginError> {
        let info = convert::session(session);
        self.memory_call(plugin, session, async |s, m| m.call_sync_turn(s, user, assistant, &info).await).await
    }

    /// Notes on `messages`, which are about to be compressed away ("" for none).
    ///
    /// # Errors
    /// As for [`Runtime::memory_prompt_block`].
    pub async fn memory_pre_compress(
        &self,
        plugin: &Plugin,
        messages: &[Message],
        session: &PluginSession,
    ) -> Result<String, PluginError> {
        let (info, wit) = (convert::session(session), convert::messages(messages));
        let text = self.memory_call(plugin, session, async |s, m| m.call_on_pre_compress(s, &wit, &info).await).await?;
        Self::capped(plugin, Kind::Memory, text.len())?;
        Ok(redact(plugin, text))
    }

    /// The session ended with `messages`.
    ///
    /// # Errors
    /// As for [`Runtime::memory_prompt_block`].
    pub async fn memory_session_end(
        &self,
        plugin: &Plugin,
        messages: &[Message],
        session: &PluginSession,
    ) -> Result<(), PluginError> {
        let (info, wit) = (convert::session(session), convert::messages(messages));
        self.memory_call(plugin, session, async |s, m| m.call_on_session_end(s, &wit, &info).await).await
    }

    /// The built-in memory tool changed MEMORY.md or USER.md (`action`: add | replace |
    /// remove; `target`: memory | user).
    ///
    /// # Errors
    /// As for [`Runtime::memory_prompt_block`].
    pub async fn memory_on_write(
        &self,
        plugin: &Plugin,
        action: &str,
        target: &str,
        content: &str,
        session: &PluginSession,
    ) -> Result<(), PluginError> {
        let info = convert::session(session);
        self.memory_call(plugin, session, async |s, m| m.call_on_memory_write(s, action, target, content, &info).await)
            .await
    }

    /// Whether the history should be compressed before the next model call.
    ///
    /// It is asked before every model call, so it runs on an instance kept from an earlier
    /// `should_compress` when one is idle, made for the same workspace unless nothing of the
    /// plugin depends on it ([`Grants::bound_to_workspace`](crate::grant::Grants::bound_to_workspace)): a fresh one otherwise, and
    /// after a call that trapped or ran out of time): making an instance cost more than the
    /// question. Such an instance only ever sees the numbers of [`ContextStatus`] and the
    /// session's description; `compress` and `report`, which see the conversation, always get
    /// a fresh one. What it could carry from one session's question to another's it could keep
    /// in its `kv` as well.
    ///
    /// # Errors
    /// The plugin is disabled, not a context engine, trapped or ran out of time.
    pub async fn context_should_compress(
        &self,
        plugin: &Plugin,
        status: ContextStatus,
        session: &PluginSession,
    ) -> Result<bool, PluginError> {
        let Setup { engine, prepared, indices, limits, site } =
            self.setup(plugin, Kind::ContextEngine, session, |p| p.context.as_ref())?;
        let (info, status) = (convert::session(session), convert::status(status));
        let mut kept = {
            let mut idle = plugin.deciders.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            idle.iter().position(|r| r.serves(&site.workspace, &plugin.env)).map(|at| idle.swap_remove(at))
        };
        let result = instance::run_resident(
            engine,
            &plugin.env,
            instance::ResidentSlot {
                slot: &mut kept,
                pre: &prepared.pre,
                load: |store: &mut Store<HostState>, instance: &wasmtime::component::Instance| {
                    indices.load(store, instance)
                },
            },
            site,
            limits,
            async |store, guest: &context::Guest| Ok(Ok(guest.call_should_compress(store, status, &info).await?)),
        )
        .await;
        if let Some(resident) = kept {
            let mut idle = plugin.deciders.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if idle.len() < MAX_KEPT_DECIDERS {
                idle.push(resident);
            }
        }
        result
            .map(|(value, _)| value)
            .map_err(|e| e.into_plugin_error(&who(plugin, Kind::ContextEngine), limits).map_text(|m| redact(plugin, m)))
    }

    /// Rewrite the history. The messages that come back are checked one by one (roles and
    /// fields); whether they make a valid conversation is the agent's check.
    ///
    /// # Errors
    /// As for [`Runtime::context_should_compress`], and: the plugin returned an error, more than
    /// its output cap, or a malformed message.
    pub async fn context_compress(
        &self,
        plugin: &Plugin,
        request: CompressRequest,
        session: &PluginSession,
    ) -> Result<Compressed, PluginError> {
        let sent = convert::messages(&request.messages);
        let known = convert::extras(&sent);
        let wit = context::CompressRequest {
            messages: sent,
            focus: request.focus,
            status: convert::status(request.status),
            force: request.force,
            memory_context: request.memory_context,
            carry: request.carry,
            session: convert::session(session),
        };
        let out = self.context_call(plugin, session, async |s, c| c.call_compress(s, &wit).await).await?;
        let who = who(plugin, Kind::ContextEngine);
        Self::capped(
            plugin,
            Kind::ContextEngine,
            out.note.len() + out.messages.iter().map(convert::message_bytes).sum::<usize>(),
        )?;
        let messages = out
            .messages
            .into_iter()
            .enumerate()
            .map(|(i, m)| {
                convert::message_back(m, &known, plugin.name())
                    .map(|m| redact_message(plugin, m))
                    .map_err(|e| PluginError::BadAnswer(format!("{who} returned an invalid history: message {i}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Compressed { messages, note: redact(plugin, instance::clip(out.note, MAX_NOTE_CHARS)) })
    }

    /// Labelled lines for `talaria context status`.
    ///
    /// # Errors
    /// As for [`Runtime::context_should_compress`], and more than its output cap.
    pub async fn context_report(
        &self,
        plugin: &Plugin,
        status: ContextStatus,
        session: &PluginSession,
    ) -> Result<Vec<(String, String)>, PluginError> {
        let info = convert::session(session);
        let status = convert::status(status);
        let lines =
            self.context_call(plugin, session, async |s, c| c.call_report(s, status, &info).await.map(Ok)).await?;
        Self::capped(plugin, Kind::ContextEngine, lines.iter().map(|(k, v)| k.len() + v.len()).sum())?;
        Ok(lines)
    }

    /// Send `event` to a hook plugin, in a fresh instance under its deadline, and return its
    /// answer. Which answers count for which event is the agent's business.
    ///
    /// # Errors
    /// The plugin is disabled, not a hook plugin, did not ask for this event, trapped, did not
    /// answer in time ("hook plugin 'x' did not answer within 10s ...") or answered with more
    /// than its output cap.
    pub async fn hook(
        &self,
        plugin: &Plugin,
        event: &HookEvent,
        session: &PluginSession,
    ) -> Result<HookDecision, PluginError> {
        let Setup { engine, prepared, indices, limits, site } =
            self.setup(plugin, Kind::Hook, session, |p| p.hooks.as_ref())?;
        let who = who(plugin, Kind::Hook);
        if !plugin.hook_events().contains(&event.kind()) {
            return Err(PluginError::NotSubscribed(format!("{who} did not ask for {} events", event.kind().name())));
        }
        let wit = convert::event(event, session);
        let (decision, _) = instance::run_fresh(engine, &plugin.env, &prepared.pre, site, limits, async |s, i| {
            indices.load(&mut *s, i)?.call_on_event(&mut *s, &wit).await.map(Ok)
        })
        .await
        .map_err(|e| e.into_plugin_error(&who, limits).map_text(|m| redact(plugin, m)))?;
        let (decision, bytes) = convert::decision(decision);
        Self::capped(plugin, Kind::Hook, bytes)?;
        Ok(match decision {
            HookDecision::Proceed => HookDecision::Proceed,
            HookDecision::Block(m) => HookDecision::Block(redact(plugin, m)),
            HookDecision::RequireApproval(m) => HookDecision::RequireApproval(redact(plugin, m)),
            HookDecision::AddContext(m) => HookDecision::AddContext(redact(plugin, m)),
            HookDecision::ReplaceResult(m) => HookDecision::ReplaceResult(redact(plugin, m)),
        })
    }
}

/// Text a plugin returned, with known secret values taken out (see [`crate::leak`]).
/// Hooks, memory providers and context engines act for a session, in no tool call.
fn caller_of(session: &PluginSession) -> Caller {
    Caller { session_id: session.session_id.clone(), call_id: String::new() }
}

fn redact(plugin: &Plugin, text: String) -> String {
    plugin.env.services.scan.redacted(text)
}

/// A message a context engine returned, with known secret values taken out of its text.
fn redact_message(plugin: &Plugin, message: Message) -> Message {
    match message {
        Message::System { content } => Message::System { content: redact(plugin, content) },
        Message::User { content, images } => Message::User { content: redact(plugin, content), images },
        Message::Assistant { content, tool_calls, reasoning, extra } => {
            Message::Assistant { content: redact(plugin, content), tool_calls, reasoning, extra }
        }
        Message::Tool { tool_call_id, name, content, images } => {
            Message::Tool { tool_call_id, name, content: redact(plugin, content), images }
        }
    }
}
