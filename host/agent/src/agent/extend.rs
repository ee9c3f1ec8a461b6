//! The loop's side of hooks, the memory provider and the context engine: what is called when,
//! and what each answer may change.
//!
//! - Hooks observe everything; `pre_tool_call` may block a call or demand a human's approval (a
//!   hook that fails or does not answer in time blocks), `transform_tool_result` may replace a
//!   result, `pre_llm_call` may add context to the user's message for that call only. Nothing a
//!   hook answers can approve a command: approvals stay with the [`Gate`](crate::approval::Gate).
//! - The memory provider's recall is fetched once per turn and added to the user's message for
//!   that turn's calls only; finished turns are synced in the background.
//! - The context engine is asked before every model call; a compression ends the session and
//!   continues in a child session holding the compressed history (the parent stays searchable).
//!   The engine measures only what compression can shrink: the conversation, against the room
//!   the fixed part of every request (system prompt and tool schemas) leaves in the window
//!   ([`ContextBudget`]). When the fixed part alone fills the window, the user is told once and
//!   nothing is compressed.

use std::collections::HashSet;
use std::time::Duration;

use talaria_protocol::{
    CompressRequest, ContextStatus, Event, HookDecision, HookEvent, HookKind, Message, NoticeLevel, Outcome,
    PluginError, PluginSession, SessionReason, SessionStarted, ToolCall, ToolCallEvent, ToolError, ToolResultEvent,
};
use talaria_store::{NewSession, Store};

use super::{Agent, Shared, lock};
use crate::approval::{Ask, Decision};
use crate::model::Chain;
use crate::prompt::Platform;
use crate::{Error, history, tools};

/// Longest text hooks and recall may add to one model call (reference §4: 10,000); more is saved
/// to a file and replaced by a preview.
const CALL_CONTEXT_CAP: usize = 10_000;
/// How long closing a session waits for background memory syncs.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(15);

/// What the current turn carries into each of its model calls.
#[derive(Debug, Default)]
pub(super) struct TurnContext {
    pub user_text: String,
    pub first_turn: bool,
    /// The memory provider's recall for this turn's message.
    pub recall: Option<String>,
}

/// How a compression went, for the front door.
#[derive(Debug, Clone)]
pub struct Compression {
    /// The engine's one-line note.
    pub note: String,
    pub before: usize,
    pub after: usize,
    /// The session that holds the compressed history (the old one was ended).
    pub session_id: String,
}

/// Why [`Agent::compress`] left the history as it was.
#[derive(Debug, thiserror::Error)]
pub enum CompressError {
    /// No context engine is configured (`[context] engine`).
    #[error("no context engine is active (set `engine = \"compressor\"` under [context] in config.toml)")]
    NoEngine,
    /// The conversation has no messages yet.
    #[error("there is nothing to compress yet")]
    Empty,
    /// The engine failed, or could not be called.
    #[error("{error}")]
    Engine { engine: String, error: PluginError },
    /// The engine answered with a history the wire would refuse.
    #[error(
        "context engine '{engine}' returned an invalid history (roles out of order or a tool call without its result); the conversation was left as it was"
    )]
    InvalidHistory { engine: String },
    /// The child session could not be stored.
    #[error(transparent)]
    Store(#[from] Error),
}

/// Why [`Agent::context_report`] has no report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContextReportError {
    /// No context engine is configured (`[context] engine`).
    #[error("no context engine is active")]
    NoEngine,
    /// The engine failed, or could not be called.
    #[error("{error}")]
    Engine { engine: String, error: PluginError },
}

/// Who a plugin is told it is serving: `session_id` on `platform`, with the chain's main model.
pub(super) fn plugin_session(shared: &Shared, chain: &Chain, session_id: &str, platform: Platform) -> PluginSession {
    PluginSession {
        session_id: session_id.to_string(),
        platform: match platform {
            Platform::Subagent => "subagent".into(),
            Platform::Cli | Platform::Acp | Platform::Gateway | Platform::Cron | Platform::Api => {
                shared.config.source.clone()
            }
        },
        workspace: shared.config.workspace.display().to_string(),
        model: chain.primary_model(),
    }
}

/// How a request shares the context window: the fixed part every call sends (system prompt and
/// tool schemas), and the conversation, the only part compression can shrink.
///
/// ```
/// use talaria_agent::ContextBudget;
/// let budget = ContextBudget { fixed_tokens: 3_600, conversation_tokens: 200, context_length: 4_096 };
/// let status = budget.engine_status(4, 0);
/// assert_eq!((status.prompt_tokens, status.context_length), (200, 496));
/// assert!(!budget.fixed_fills_window());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContextBudget {
    /// System prompt and tool schemas.
    pub fixed_tokens: u64,
    /// The history (what compression works on).
    pub conversation_tokens: u64,
    /// The model's window.
    pub context_length: u64,
}

impl ContextBudget {
    /// Estimated at 4 characters a token.
    pub fn estimate(
        system_prompt: &str,
        tools: &[std::sync::Arc<talaria_protocol::ToolSpec>],
        messages: &[Message],
        context_length: u64,
    ) -> Self {
        let tools_chars = serde_json::to_string(tools).map_or(0, |t| t.len());
        Self {
            fixed_tokens: chars_to_tokens(system_prompt.len() + tools_chars),
            conversation_tokens: chars_to_tokens(message_chars(messages)),
            context_length,
        }
    }

    /// What the window leaves for the conversation.
    pub fn room(&self) -> u64 {
        self.context_length.saturating_sub(self.fixed_tokens)
    }

    /// The fixed part alone fills the window: no compression can make a request fit.
    pub fn fixed_fills_window(&self) -> bool {
        self.context_length > 0 && self.fixed_tokens >= self.context_length
    }

    /// What a context engine measures: the conversation, against [`ContextBudget::room`] (0,
    /// "unknown", when the fixed part fills the window, so no engine compresses).
    pub fn engine_status(&self, message_count: u32, compressions: u32) -> ContextStatus {
        ContextStatus {
            prompt_tokens: self.conversation_tokens,
            context_length: self.room(),
            message_count,
            compressions,
        }
    }

    /// The line `/context` and `talaria context status` show about the fixed part.
    pub fn describe(&self) -> String {
        if self.fixed_fills_window() {
            format!(
                "≈{} tokens (system prompt and tool schemas), more than the {}-token window: compression cannot help",
                self.fixed_tokens, self.context_length
            )
        } else {
            format!(
                "≈{} tokens (system prompt and tool schemas; not compressible); the engine measures the \
                 conversation against the {} tokens left",
                self.fixed_tokens,
                self.room()
            )
        }
    }
}

/// ≈ tokens of a request with this system prompt, tools and history (4 characters a token).
pub fn estimate_tokens(
    system_prompt: &str,
    tools: &[std::sync::Arc<talaria_protocol::ToolSpec>],
    messages: &[Message],
) -> u64 {
    let tools_chars = serde_json::to_string(tools).map_or(0, |t| t.len());
    chars_to_tokens(system_prompt.len() + tools_chars + message_chars(messages))
}

fn chars_to_tokens(chars: usize) -> u64 {
    u64::try_from(chars / 4).unwrap_or(u64::MAX)
}

/// Characters of `messages` as the model sees them, for token estimates.
pub(super) fn message_chars(messages: &[Message]) -> usize {
    messages
        .iter()
        .map(|m| match m {
            Message::Assistant { content, tool_calls, .. } => {
                content.len() + tool_calls.iter().map(|c| c.name.len() + c.arguments.len() + 16).sum::<usize>()
            }
            other => other.content().len() + 8,
        })
        .sum()
}

impl Agent {
    /// Who a plugin is told it is serving.
    pub fn plugin_session(&self) -> PluginSession {
        plugin_session(&self.shared, &self.chain, &self.session_id, self.platform)
    }

    /// A main-conversation agent (not a child) uses the memory provider.
    fn memory_provider(&self) -> Option<&std::sync::Arc<dyn crate::MemoryProvider>> {
        if self.platform == Platform::Subagent { None } else { self.shared.memory_provider.as_ref() }
    }

    /// Send an event every interested hook only observes; answers other than proceed are noted.
    pub(super) async fn observe(&self, event: HookEvent) {
        if self.shared.hooks.wants(event.kind()) {
            self.observe_as(event, &self.plugin_session()).await;
        }
    }

    /// [`Agent::observe`] on behalf of `session` (an ended one, after a compression).
    async fn observe_as(&self, event: HookEvent, session: &PluginSession) {
        let hooks = &self.shared.hooks;
        if !hooks.wants(event.kind()) {
            return;
        }
        for reply in hooks.dispatch(&event, session).await {
            match reply.decision {
                Ok(HookDecision::Proceed) => {}
                Ok(other) => self.hook_misanswer(&reply.plugin, event.kind(), &other),
                Err(e) => self.emitter.warn(format!("hook '{}' ({}): {e}", reply.plugin, event.kind().name())),
            }
        }
    }

    fn hook_misanswer(&self, plugin: &str, kind: HookKind, decision: &HookDecision) {
        self.emitter.warn(format!(
            "hook '{plugin}' answered {} to {}, where it does not count; ignored",
            decision.name(),
            kind.name()
        ));
    }

    /// What to add to the user's message for one model call: the turn's recall and the
    /// `pre_llm_call` hooks' context, capped.
    pub(super) async fn call_context(&self, ctx: &TurnContext) -> String {
        let mut parts: Vec<String> = ctx.recall.iter().cloned().collect();
        let hooks = &self.shared.hooks;
        if hooks.wants(HookKind::PreLlmCall) {
            let event = HookEvent::PreLlmCall {
                user_message: ctx.user_text.clone(),
                is_first_turn: ctx.first_turn,
                model: self.chain.primary_model(),
                message_count: u32::try_from(self.history.len()).unwrap_or(u32::MAX),
            };
            let session = self.plugin_session();
            for reply in hooks.dispatch(&event, &session).await {
                match reply.decision {
                    Ok(HookDecision::AddContext(text)) if !text.trim().is_empty() => {
                        parts.push(format!("[context from hook {}]\n{}", reply.plugin, text.trim()));
                    }
                    Ok(HookDecision::Proceed | HookDecision::AddContext(_)) => {}
                    Ok(other) => self.hook_misanswer(&reply.plugin, HookKind::PreLlmCall, &other),
                    Err(e) => self.emitter.warn(format!("hook '{}' (pre_llm_call): {e}", reply.plugin)),
                }
            }
        }
        let text = parts.join("\n\n");
        if text.chars().count() <= CALL_CONTEXT_CAP {
            return text;
        }
        // Too long for the message: the whole text goes to a file, the model gets a preview.
        let cfg = &self.shared.config;
        let dir = cfg.home.join("results").join(&self.session_id);
        let path = dir.join(format!("context-{}.txt", self.api_calls + 1));
        let head: String = text.chars().take(cfg.preview_chars).collect();
        let note = match std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, &text)) {
            Ok(()) => format!("the whole text is in {}", path.display()),
            Err(e) => format!("it could not be saved ({e})"),
        };
        format!("{head}\n[added context cut: {} characters in all; {note}]", text.chars().count())
    }

    /// The memory provider's recall for a new user message (`None` when there is none).
    pub(super) async fn prefetch(&self, text: &str) -> Option<String> {
        let provider = self.memory_provider()?;
        let session = self.plugin_session();
        match provider.prefetch(text, &session).await {
            Ok(recall) if !recall.trim().is_empty() => Some(recall.trim().to_string()),
            Ok(_) => None,
            Err(e) => {
                self.emitter.warn(format!("memory provider '{}' could not recall: {e}", provider.name()));
                None
            }
        }
    }

    /// After a turn: remember it (in the background) and tell the hooks.
    pub(super) async fn after_turn(&self, user: &str, outcome: &Outcome, answer: &str) {
        if *outcome == Outcome::Completed
            && let Some(provider) = self.memory_provider()
        {
            let provider = provider.clone();
            let session = self.plugin_session();
            let (user, answer) = (user.to_string(), answer.to_string());
            self.shared.spawn(async move {
                if let Err(e) = provider.sync_turn(&user, &answer, &session).await {
                    tracing::warn!(provider = provider.name(), "memory sync failed: {e}");
                }
            });
        }
        self.observe(HookEvent::SessionEnd { reason: outcome.name().into() }).await;
    }

    /// Tell the memory provider about a change the built-in memory tool made.
    pub(super) fn memory_written(&self, args: &serde_json::Value) {
        let Some(provider) = self.memory_provider() else { return };
        let field = |k: &str| args.get(k).and_then(serde_json::Value::as_str).unwrap_or_default().to_string();
        let (action, target, content) = (field("action"), field("target"), field("content"));
        let provider = provider.clone();
        let session = self.plugin_session();
        self.shared.spawn(async move {
            if let Err(e) = provider.on_memory_write(&action, &target, &content, &session).await {
                tracing::warn!(provider = provider.name(), "on_memory_write failed: {e}");
            }
        });
    }

    /// The `pre_tool_call` hooks' verdict: `Err` when the call must not run.
    pub(super) async fn tool_allowed(&self, call: &ToolCall, args: &serde_json::Value) -> Result<(), ToolError> {
        let hooks = &self.shared.hooks;
        if !hooks.wants(HookKind::PreToolCall) {
            return Ok(());
        }
        let event = HookEvent::PreToolCall(self.call_event(call));
        let session = self.plugin_session();
        let mut reasons: Vec<(String, String)> = Vec::new();
        for reply in hooks.dispatch(&event, &session).await {
            match reply.decision {
                Ok(HookDecision::Proceed) => {}
                Ok(HookDecision::Block(message)) => {
                    return Err(ToolError::Failed(format!("blocked by hook '{}': {message}", reply.plugin)));
                }
                Ok(HookDecision::RequireApproval(reason)) => reasons.push((reply.plugin, reason)),
                Ok(other) => self.hook_misanswer(&reply.plugin, HookKind::PreToolCall, &other),
                Err(e) => {
                    return Err(ToolError::Failed(format!(
                        "blocked: hook '{}' failed ({e}); a pre_tool_call hook that fails blocks the call",
                        reply.plugin
                    )));
                }
            }
        }
        if reasons.is_empty() {
            return Ok(());
        }
        let key = format!("hook:{}", call.name);
        if lock(&self.hook_approvals).contains(&key) {
            return Ok(());
        }
        let who: Vec<&str> = reasons.iter().map(|(p, _)| p.as_str()).collect();
        let why: Vec<&str> = reasons.iter().map(|(_, r)| r.as_str()).collect();
        let command = format!("{} {}", call.name, tools::one_line(&args.to_string(), 300));
        let (who, why) = (who.join(", "), why.join("; "));
        let ask = Ask { call_id: &call.id, ..Ask::command(&who, &command, &why) };
        let decision = self.shared.gate.ask_human(&ask).await;
        match decision {
            Decision::Once => Ok(()),
            Decision::Session | Decision::Always => {
                lock(&self.hook_approvals).insert(key);
                Ok(())
            }
            Decision::Deny => Err(ToolError::Failed(format!(
                "not run: hook '{}' requires a human's approval for this call ({}), and it was not given",
                who, why
            ))),
        }
    }

    /// After a tool ran: `post_tool_call` observes, `transform_tool_result` may replace the text.
    pub(super) async fn tool_finished(&self, call: &ToolCall, text: String, ok: bool, duration_ms: u64) -> String {
        let hooks = &self.shared.hooks;
        let post = hooks.wants(HookKind::PostToolCall);
        let transform = hooks.wants(HookKind::TransformToolResult);
        if !post && !transform {
            return text;
        }
        let result = ToolResultEvent { call: self.call_event(call), result: text, ok, duration_ms };
        if post {
            self.observe(HookEvent::PostToolCall(result.clone())).await;
        }
        if !transform {
            return result.result;
        }
        let session = self.plugin_session();
        let event = HookEvent::TransformToolResult(result);
        let mut replaced = None;
        for reply in hooks.dispatch(&event, &session).await {
            match reply.decision {
                Ok(HookDecision::ReplaceResult(text)) if replaced.is_none() && !text.is_empty() => {
                    replaced = Some(text)
                }
                Ok(HookDecision::Proceed | HookDecision::ReplaceResult(_)) => {}
                Ok(other) => self.hook_misanswer(&reply.plugin, HookKind::TransformToolResult, &other),
                Err(e) => self.emitter.warn(format!("hook '{}' (transform_tool_result): {e}", reply.plugin)),
            }
        }
        let HookEvent::TransformToolResult(result) = event else { unreachable!("built above") };
        replaced.unwrap_or(result.result)
    }

    fn call_event(&self, call: &ToolCall) -> ToolCallEvent {
        let plugin = self.tools.iter().find(|t| t.name == call.name).map(|t| t.plugin.clone()).unwrap_or_default();
        ToolCallEvent { tool: call.name.clone(), plugin, arguments: call.arguments.clone(), call_id: call.id.clone() }
    }

    /// Where the conversation stands: the last reported prompt tokens plus an estimate of what
    /// was added since, or an estimate of the whole when nothing was reported yet.
    pub fn context_status(&self) -> ContextStatus {
        let estimate = self.estimate_tokens();
        let prompt_tokens = match self.last_prompt {
            Some((reported, estimated_then)) => reported.saturating_add(estimate.saturating_sub(estimated_then)),
            None => estimate,
        };
        ContextStatus {
            prompt_tokens,
            context_length: self.shared.config.context_length,
            message_count: u32::try_from(self.history.len()).unwrap_or(u32::MAX),
            compressions: self.compressions,
        }
    }

    /// ≈ tokens of the next request: system prompt, tool schemas and history, at 4 chars a token.
    pub(super) fn estimate_tokens(&self) -> u64 {
        chars_to_tokens(self.system_prompt.len() + self.tools_chars + message_chars(&self.history))
    }

    /// How the next request shares the window. The fixed part is estimated, scaled by how the
    /// provider's last reported prompt size compared with the estimate at the time.
    pub fn context_budget(&self) -> ContextBudget {
        let total = self.context_status().prompt_tokens;
        let estimated_fixed = chars_to_tokens(self.system_prompt.len() + self.tools_chars);
        let fixed = match self.last_prompt {
            Some((reported, estimated_then)) if estimated_then > 0 => {
                let scaled = u128::from(estimated_fixed) * u128::from(reported) / u128::from(estimated_then);
                u64::try_from(scaled).unwrap_or(u64::MAX)
            }
            _ => estimated_fixed,
        };
        ContextBudget {
            fixed_tokens: fixed,
            conversation_tokens: total.saturating_sub(fixed),
            context_length: self.shared.config.context_length,
        }
    }

    /// What the context engine is shown: the conversation against the room left for it.
    fn engine_status(&self) -> ContextStatus {
        let message_count = u32::try_from(self.history.len()).unwrap_or(u32::MAX);
        self.context_budget().engine_status(message_count, self.compressions)
    }

    /// Before a model call: compress when the engine says so. A failure is reported and not
    /// retried until the conversation has grown by a tenth. When the fixed part of the prompt
    /// alone fills the window, say so once and never ask the engine.
    pub(super) async fn maybe_compress(&mut self) {
        let budget = self.context_budget();
        if budget.fixed_fills_window() {
            if !self.fixed_prompt_warned {
                self.fixed_prompt_warned = true;
                self.emitter.warn(format!(
                    "the system prompt and tool schemas alone take ≈{} tokens, more than the model's context \
                     window of {} tokens (context_length under [model]): requests may be refused or cut, and \
                     compressing the conversation cannot help. Raise context_length if the model allows more, \
                     or offer fewer tools (--toolsets, [agent] toolsets)",
                    budget.fixed_tokens, budget.context_length
                ));
            }
            return;
        }
        let Some(engine) = self.shared.context_engine.clone() else { return };
        let status = self.engine_status();
        if let Some(at) = self.compress_failed_at
            && status.prompt_tokens < at.saturating_add(at / 10)
        {
            return;
        }
        let session = self.plugin_session();
        match engine.should_compress(status, &session).await {
            Ok(true) => {
                if let Err(e) = self.compress(None, false).await {
                    self.emitter.warn(format!("could not compress the conversation: {e}"));
                    self.compress_failed_at = Some(status.prompt_tokens);
                }
            }
            Ok(false) => {}
            Err(e) => {
                self.emitter.warn(format!("context engine '{}' failed: {e}", engine.name()));
                self.compress_failed_at = Some(status.prompt_tokens);
            }
        }
    }

    /// Compress the history now (`/compress [focus]` forces it). The session is ended and the
    /// conversation continues in a child session holding the compressed history.
    ///
    /// # Errors
    /// No engine, nothing to compress, the engine failed or returned an invalid history, or the
    /// store could not be written ([`CompressError`]); the history is then left as it was.
    pub async fn compress(&mut self, focus: Option<&str>, force: bool) -> Result<Compression, CompressError> {
        let engine = self.shared.context_engine.clone().ok_or(CompressError::NoEngine)?;
        if self.history.is_empty() {
            return Err(CompressError::Empty);
        }
        let session = self.plugin_session();
        let memory_context = match self.memory_provider() {
            Some(p) => p.on_pre_compress(&self.history, &session).await.unwrap_or_else(|e| {
                self.emitter.warn(format!("memory provider '{}' (on_pre_compress): {e}", p.name()));
                String::new()
            }),
            None => String::new(),
        };
        let status = self.engine_status();
        let before = self.history.len();
        self.emitter.emit(Event::Notice {
            level: NoticeLevel::Info,
            text: format!(
                "compressing the conversation ({before} messages, ≈{} tokens)…",
                self.context_status().prompt_tokens
            ),
        });
        let request = CompressRequest {
            messages: self.history.clone(),
            focus: focus.map(str::trim).filter(|f| !f.is_empty()).map(str::to_string),
            status,
            force,
            memory_context,
            carry: self.todos.render_unfinished().unwrap_or_default(),
        };
        let mut out = engine
            .compress(request, &session)
            .await
            .map_err(|error| CompressError::Engine { engine: engine.name().to_string(), error })?;
        history::keep_host_fields(&self.history, &mut out.messages);
        if out.messages.is_empty() || !history::is_valid(&out.messages) {
            return Err(CompressError::InvalidHistory { engine: engine.name().to_string() });
        }
        let old = self.session_id.clone();
        let child = Store::new_session_id();
        if self.stored {
            // The turn's message, if it waits, belongs to the session that ends here.
            self.save_message().await?;
            self.continue_in(&old, &child, &out.messages).await?;
        }
        // The agent moves to the child before anything can be interrupted; then the old
        // session's plugins hear that it ended.
        let old_history = std::mem::replace(&mut self.history, out.messages);
        self.session_id = child.clone();
        self.lease_moved().await;
        self.emitter.emit(Event::SessionStarted(SessionStarted {
            session_id: child.clone(),
            reason: SessionReason::Compressed { from: old.clone() },
            model: self.chain.primary_model(),
            messages: self.history.len(),
        }));
        self.compressions += 1;
        self.last_prompt = None;
        self.compress_failed_at = None;
        if let Some(provider) = self.memory_provider() {
            let (provider, session) = (provider.clone(), session.clone());
            self.shared.spawn(async move {
                if let Err(e) = provider.on_session_end(&old_history, &session).await {
                    tracing::warn!(provider = provider.name(), "on_session_end failed: {e}");
                }
            });
        }
        self.observe_as(HookEvent::SessionFinalize { reason: "compressed".into() }, &session).await;
        Ok(Compression { note: out.note, before, after: self.history.len(), session_id: child })
    }

    /// End `old` as compressed and store `messages` as its child `child`, title carried over.
    async fn continue_in(&self, old: &str, child: &str, messages: &[Message]) -> Result<(), Error> {
        let provider = self.chain.providers.first();
        let mut new = NewSession {
            id: child.to_string(),
            source: self.shared.config.source.clone(),
            model: provider.map(|p| p.model.clone()).unwrap_or_default(),
            provider: provider.map(|p| p.name.clone()).unwrap_or_default(),
            system_prompt: self.system_prompt.clone(),
            parent_id: Some(old.to_string()),
            cwd: self.shared.config.workspace.display().to_string(),
        };
        let compressions = self.compressions;
        crate::on_store(&self.shared.store, async |store| {
            let info = store.session(old).await?;
            if let Some(i) = &info {
                new.source.clone_from(&i.source);
            }
            store.create_session(&new).await?;
            store.append_messages(child, messages).await?;
            store.end_session(old, "compressed").await?;
            if let Some(title) = info.and_then(|i| i.title) {
                let base = title
                    .rsplit_once(" #")
                    .filter(|(_, n)| n.parse::<u32>().is_ok())
                    .map_or(title.as_str(), |(b, _)| b);
                for n in (compressions + 2)..(compressions + 50) {
                    if store.set_title(child, &format!("{base} #{n}")).await.is_ok() {
                        break;
                    }
                }
            }
            Ok(())
        })
        .await
    }

    /// How many compressions led to `session` (its ancestors that ended compressed).
    pub async fn compressions_before(store: &Store, session: &talaria_store::SessionInfo) -> u32 {
        let mut count = 0;
        let mut seen = HashSet::new();
        let mut parent = session.parent_id.clone();
        while let Some(id) = parent {
            if !seen.insert(id.clone()) {
                break;
            }
            match store.session(&id).await {
                Ok(Some(p)) if p.end_reason.as_deref() == Some("compressed") => {
                    count += 1;
                    parent = p.parent_id;
                }
                _ => break,
            }
        }
        count
    }

    /// The context engine's report on this conversation: the whole prompt's status, and the
    /// engine's lines about the part it measures (the first line says how big the fixed part is).
    ///
    /// # Errors
    /// No engine, or it failed ([`ContextReportError`]).
    pub async fn context_report(&self) -> Result<(String, ContextStatus, Vec<(String, String)>), ContextReportError> {
        let engine = self.shared.context_engine.clone().ok_or(ContextReportError::NoEngine)?;
        let mut lines = vec![("fixed prompt".to_string(), self.context_budget().describe())];
        let report = engine.report(self.engine_status(), &self.plugin_session()).await;
        lines.extend(report.map_err(|error| ContextReportError::Engine { engine: engine.name().to_string(), error })?);
        Ok((engine.name().to_string(), self.context_status(), lines))
    }

    /// Close the session for good in this process: wait for background memory syncs, tell the
    /// memory provider and the hooks (`/new` also counts as a reset), and mark it ended.
    ///
    /// # Errors
    /// The store cannot be written.
    pub async fn close(&mut self, reason: &str) -> Result<(), Error> {
        self.shared.flush(FLUSH_TIMEOUT).await;
        if self.stored {
            if let Some(provider) = self.memory_provider() {
                let session = self.plugin_session();
                if let Err(e) = provider.on_session_end(&self.history, &session).await {
                    tracing::warn!(provider = provider.name(), "on_session_end failed: {e}");
                }
            }
            if reason == "new" {
                self.observe(HookEvent::SessionReset).await;
            }
            self.observe(HookEvent::SessionFinalize { reason: reason.to_string() }).await;
        }
        self.end(reason).await
    }
}
