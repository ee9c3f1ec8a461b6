//! The loop (reference §1): one [`Agent`] per session. [`Agent::run_turn`] takes the user's
//! message and calls the model until it answers without tools, the budget runs out, the user
//! interrupts, or every provider fails — emitting [`Event`]s all the way.
//!
//! Invariants:
//! - every model call sees a valid history ([`crate::history::repair`]);
//! - the user's message is committed before the first model call (unless it is kept upstream
//!   until the turn is done, [`AgentConfig::message_kept`]: then with the turn's first other
//!   write, or at its end when there is none); an assistant message that asks
//!   for tools is committed before the first tool starts, and the results after the batch, so a
//!   crash loses at most the call in flight and never hides that a tool was started (a call left
//!   without a result reads as stopped, see [`crate::history::repair`]); when every tool asked
//!   for only reads (its manifest says `read_only`), the request is committed with the results in
//!   one transaction, for a crash during them has nothing to hide;
//! - an interrupted model call leaves nothing in history; interrupted tools (Ctrl-C, SIGTERM,
//!   SIGHUP) leave an error result for each call that did not finish, so the model knows;
//! - the model always receives a JSON string (errors are `{"error": "..."}`).
//! - a tool call is known by talaria's own id (unique in the session) everywhere but on the
//!   wire, where the provider's id goes back ([`crate::history::for_wire`]), so a provider that
//!   numbers calls per answer or repeats an id never crosses or loses a result.

mod builtins;
mod calls;
mod extend;
mod lease;
pub(crate) mod registry;
mod request;
mod resting;
mod truncation;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use talaria_protocol::{Event, Message, Outcome, ToolSpec, TurnEnd, Usage};
use talaria_store::{NewSession, SessionInfo, Store};
use tokio_util::sync::CancellationToken;

use crate::approval::Gate;
use crate::builtin::{self, memory::Memory, todo::Todos};
use crate::extensions::{ContextEngine, Hooks, MemoryProvider, NoHooks};
use crate::model::{Chain, ChainState, Client};
use crate::prompt::{self, Platform, PromptInputs};
use crate::tools;
use crate::toolsets::{Selection, Toolset, Toolsets};
use crate::{Emitter, Error};
pub use registry::{Registry, Scope, ToolHandler, ToolOverlay, ToolSource, ToolSources};

use extend::TurnContext;
pub use extend::{CompressError, Compression, ContextBudget, ContextReportError, estimate_tokens};

/// How the loop behaves; the CLI fills it from flags and config.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub home: PathBuf,
    pub workspace: PathBuf,
    /// Where the session came from: `cli`, `acp`, `gateway`, `cron`.
    pub source: String,
    pub platform: Platform,
    /// Model calls per turn before the loop stops and summarizes (reference §1: 90).
    pub max_turns: u32,
    pub child_max_turns: u32,
    /// Child agents running at once.
    pub max_children: usize,
    pub stream: bool,
    /// A result longer than this (chars) is saved to a file and replaced by a preview.
    pub result_cap: usize,
    /// All results of one batch together.
    pub batch_result_cap: usize,
    pub preview_chars: usize,
    pub selection: Selection,
    pub toolsets: Toolsets,
    /// Extra system text from config.
    pub system_message: Option<String>,
    /// The main model's context window in tokens (what the context engine measures against).
    pub context_length: u64,
    /// How long a turn waits while another process answers the same session.
    pub lease_wait: Duration,
    /// What this process is, as another process waiting for a session it answers is told
    /// (`talaria chat -q`, `talaria acp`).
    pub holder: String,
    /// Whether the session shares the owner's memory: MEMORY.md and USER.md in its prompt, the
    /// `memory` tool, and the memory provider. Off for chats a gateway serves to several people,
    /// whose notes must not reach each other.
    pub shared_memory: bool,
    /// Whether the workspace is a project the user trusted, and its skills as they were then:
    /// its `.talaria/skills` are read while they match.
    pub project_skills: crate::skills::ProjectTrust,
    /// The chat the session serves (`ACCOUNT:CHAT[:THREAD]`), if a gateway's: jobs it
    /// schedules deliver there by default.
    pub origin: Option<String>,
    /// Whether each turn's message is kept elsewhere until the turn is done (a gateway's inbox
    /// holds it, and runs the turn again after a crash). The message is then committed with
    /// the turn's first other write (its answer, or its first tool request) instead of on its
    /// own ahead of the model call: one transaction less per turn. A turn that writes nothing
    /// else (failed, interrupted) still commits it, at its end.
    pub message_kept: bool,
}

impl AgentConfig {
    pub fn new(home: PathBuf, workspace: PathBuf) -> Self {
        Self {
            home,
            workspace,
            source: "cli".into(),
            platform: Platform::Cli,
            max_turns: 90,
            child_max_turns: 50,
            max_children: 3,
            stream: true,
            result_cap: 100_000,
            batch_result_cap: 200_000,
            preview_chars: 1_500,
            selection: Selection::default(),
            toolsets: Toolsets::builtin(),
            system_message: None,
            context_length: DEFAULT_CONTEXT_LENGTH,
            lease_wait: Duration::from_secs(30),
            holder: "talaria".into(),
            shared_memory: true,
            project_skills: crate::skills::ProjectTrust::No,
            origin: None,
            message_kept: false,
        }
    }
}

/// The context window assumed when the configuration names none.
pub const DEFAULT_CONTEXT_LENGTH: u64 = 128_000;

/// What every agent of a process shares, children included.
pub struct Shared {
    pub config: AgentConfig,
    pub client: Client,
    pub chain: Chain,
    pub store: Arc<Store>,
    /// Where tools come from besides the agent's own: plugins, MCP servers, a front end's.
    pub tools: ToolSources,
    pub gate: Arc<Gate>,
    pub memory: Memory,
    pub hooks: Arc<dyn Hooks>,
    /// The external memory provider, if one is active.
    pub memory_provider: Option<Arc<dyn MemoryProvider>>,
    /// The context engine, if one is active.
    pub context_engine: Option<Arc<dyn ContextEngine>>,
    /// Where files are kept before calls that change them ([`crate::checkpoints`]); none: off.
    pub checkpoints: Option<Arc<crate::checkpoints::Checkpoints>>,
    /// Work left running after a turn (memory syncs); [`Agent::close`] waits for it.
    background: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Shared {
    pub fn new(config: AgentConfig, chain: Chain, store: Arc<Store>, tools: ToolSources, gate: Arc<Gate>) -> Self {
        let memory = Memory::new(config.home.join("memories"));
        Self {
            config,
            client: Client::new(),
            chain,
            store,
            tools,
            gate,
            memory,
            hooks: Arc::new(NoHooks),
            memory_provider: None,
            context_engine: None,
            checkpoints: None,
            background: Mutex::new(Vec::new()),
        }
    }

    pub fn with_hooks(mut self, hooks: Arc<dyn Hooks>) -> Self {
        self.hooks = hooks;
        self
    }

    pub fn with_memory_provider(mut self, provider: Option<Arc<dyn MemoryProvider>>) -> Self {
        self.memory_provider = provider;
        self
    }

    pub fn with_context_engine(mut self, engine: Option<Arc<dyn ContextEngine>>) -> Self {
        self.context_engine = engine;
        self
    }

    pub fn with_checkpoints(mut self, checkpoints: Option<Arc<crate::checkpoints::Checkpoints>>) -> Self {
        self.checkpoints = checkpoints;
        self
    }

    /// Run `work` in the background; [`Shared::flush`] waits for it.
    pub fn spawn(&self, work: impl std::future::Future<Output = ()> + Send + 'static) {
        let mut tasks = lock(&self.background);
        tasks.retain(|t| !t.is_finished());
        tasks.push(tokio::spawn(work));
    }

    /// Wait up to `limit` for background work; what is still running then is left to finish
    /// on its own (or with the process).
    pub async fn flush(&self, limit: Duration) {
        let tasks: Vec<_> = lock(&self.background).drain(..).collect();
        if tasks.is_empty() {
            return;
        }
        let all = futures_util::future::join_all(tasks);
        if tokio::time::timeout(limit, all).await.is_err() {
            tracing::warn!("background memory work still running after {limit:?}; not waiting longer");
        }
    }
}

/// How a new agent starts.
#[derive(Debug, Clone, Default)]
pub struct Start {
    /// Continue this stored session instead of starting a new one.
    pub resume: Option<SessionInfo>,
    /// A child agent: its parent session and the toolsets it asked for.
    pub parent: Option<String>,
    pub selection: Option<Selection>,
}

/// The result of a tool call that was stopped (Ctrl-C, a signal) before it finished.
pub const INTERRUPTED_RESULT: &str =
    "interrupted: talaria was stopped (Ctrl-C or a signal) before this call finished; it may have had partial effects";

/// Tools no child agent gets (reference §2: children cannot delegate, ask the user, write memory
/// or schedule jobs).
const CHILD_EXCLUDED: [&str; 5] =
    ["delegate_task", "clarify", "memory", builtin::cronjob::NAME, builtin::skills::MANAGE];

/// One conversation with the model.
pub struct Agent {
    /// The skills it can use (their requirements met), for `skills_list` and `skill_view`.
    skills: Vec<crate::skills::Skill>,
    shared: Arc<Shared>,
    emitter: Emitter,
    session_id: String,
    /// Created in the store on the first turn (an empty chat leaves nothing behind).
    stored: bool,
    parent: Option<String>,
    platform: Platform,
    system_prompt: String,
    history: Vec<Message>,
    tools: Vec<Arc<ToolSpec>>,
    /// What runs each tool (of `tools` and more: only `tools` are offered and run).
    registry: Registry,
    chain: Chain,
    chain_state: ChainState,
    todos: Todos,
    max_turns: u32,
    usage: Usage,
    api_calls: u32,
    warnings: Vec<String>,
    /// Characters of the tool schemas sent with every call (for token estimates).
    tools_chars: usize,
    /// Prompt tokens the provider reported for the last call, and our estimate at that time.
    last_prompt: Option<(u64, u64)>,
    /// Compressions of this conversation (lineage included).
    compressions: u32,
    /// Prompt tokens at which automatic compression last failed.
    compress_failed_at: Option<u64>,
    /// The user was told that the fixed prompt alone fills the context window.
    fixed_prompt_warned: bool,
    /// Tools a human approved for the session after a hook asked.
    hook_approvals: Mutex<HashSet<String>>,
    /// The session's lease while a turn runs (see [`lease`]).
    lease: Option<lease::Held>,
    /// The stored session as this agent last saw it ([`Store::message_mark`]).
    mark: (i64, i64),
    /// Usage of model calls whose answers are not committed yet: it is stored with them.
    unrecorded: Option<(Usage, u32)>,
    /// The turn's message, not committed yet ([`AgentConfig::message_kept`]): it goes ahead of
    /// the turn's next commit.
    unsaved: Option<Message>,
    /// It let go of its history and system prompt ([`Agent::rest`]); [`Agent::wake`] reads
    /// them again.
    resting: bool,
    /// The text the model call in flight has streamed so far: what the user saw of a reply
    /// they cut short.
    streamed: Arc<Mutex<String>>,
}

/// What a turn has done so far.
#[derive(Default)]
struct Turn {
    usage: Usage,
    api_calls: u32,
    /// The last answer stopped at the output-token limit.
    truncated: bool,
    /// What arrived of the last call's answer before its stream broke.
    partial: String,
}

impl Agent {
    /// Start a session (new, resumed, or a child's).
    ///
    /// # Errors
    /// The toolset selection names an unknown toolset, or the store cannot be read.
    pub async fn start(shared: Arc<Shared>, emitter: Emitter, start: Start) -> Result<Self, Error> {
        let cfg = &shared.config;
        let platform = if start.parent.is_some() { Platform::Subagent } else { cfg.platform };
        let mut warnings = Vec::new();
        let own = builtins::handlers();
        let own_count = own.len();
        let registry = Registry::build(own.iter().cloned(), &shared.tools, &mut warnings).await;
        let mut toolsets = cfg.toolsets.clone();
        for spec in &registry.specs()[own_count..] {
            let mut entry = toolsets.get(&spec.plugin).cloned().unwrap_or_else(|| Toolset {
                description: format!("tools of plugin {}", spec.plugin),
                tools: Vec::new(),
                includes: Vec::new(),
            });
            entry.tools.push(spec.name.clone());
            toolsets.insert(spec.plugin.clone(), entry);
        }
        let all = registry.specs().to_vec();
        let names: Vec<String> = all.iter().map(|s| s.name.clone()).collect();
        let selection = start.selection.as_ref().unwrap_or(&cfg.selection);
        let chosen = toolsets.resolve(selection, &names).map_err(Error::Toolsets)?;
        let tools: Vec<Arc<ToolSpec>> = all
            .into_iter()
            .filter(|s| chosen.contains(&s.name))
            .filter(|s| start.parent.is_none() || !CHILD_EXCLUDED.contains(&s.name.as_str()))
            // No job makes jobs, nor skills (with nobody there to see them made).
            .filter(|s| {
                platform != Platform::Cron || (s.name != builtin::cronjob::NAME && s.name != builtin::skills::MANAGE)
            })
            .collect();

        let skills = if tools.iter().any(|t| t.name == builtin::skills::VIEW) {
            crate::skills::usable(&cfg.home, &cfg.workspace, &cfg.project_skills, &toolsets, &tools, &mut warnings)
        } else {
            Vec::new()
        };
        let todos = Todos::default();
        let mut compressions = 0;
        let mut mark = (0, 0);
        let (session_id, stored, system_prompt, history, parent) = match start.resume {
            Some(info) => {
                let (m, history, prompt, c) = crate::on_store(&shared.store, async |store| {
                    let (prompt, stored) = store.history(&info.id).await?;
                    let mark = resting::mark_of(&stored);
                    let history = stored.into_iter().map(|m| m.message).collect::<Vec<_>>();
                    Ok((mark, history, prompt, Agent::compressions_before(store, &info).await))
                })
                .await?;
                mark = m;
                compressions = c;
                todos.restore(&history);
                (info.id, true, prompt, history, info.parent_id)
            }
            None => {
                let session_id = Store::new_session_id();
                let model = shared.chain.primary_model();
                let provider_block = match (&shared.memory_provider, start.parent.is_some()) {
                    (Some(provider), false) => {
                        let session = extend::plugin_session(&shared, &shared.chain, &session_id, platform);
                        match provider.system_prompt_block(&session).await {
                            Ok(block) => Some(block),
                            Err(e) => {
                                warnings
                                    .push(format!("memory provider '{}' gave no prompt block: {e}", provider.name()));
                                None
                            }
                        }
                    }
                    _ => None,
                };
                let snapshot = shared.memory.snapshot();
                let tool_names: Vec<String> = tools.iter().map(|t| t.name.clone()).collect();
                let built = prompt::build(&PromptInputs {
                    home: &cfg.home,
                    workspace: &cfg.workspace,
                    memory: if start.parent.is_some() || !cfg.shared_memory { None } else { Some(&snapshot) },
                    tool_names: &tool_names,
                    system_message: cfg.system_message.as_deref(),
                    platform,
                    now: talaria_store::local_time::now(),
                    model: &model,
                    provider_block: provider_block.as_deref(),
                    skills: crate::skills::index(&skills.iter().collect::<Vec<_>>()).as_deref(),
                });
                warnings.extend(built.warnings);
                (session_id, false, built.text, Vec::new(), start.parent)
            }
        };
        let max_turns =
            if parent.is_some() && platform == Platform::Subagent { cfg.child_max_turns } else { cfg.max_turns };
        let tools_chars = serde_json::to_string(&tools).map_or(0, |t| t.len());
        Ok(Self {
            skills,
            chain: shared.chain.clone(),
            shared,
            emitter,
            session_id,
            stored,
            parent,
            platform,
            system_prompt,
            history,
            tools,
            registry,
            chain_state: ChainState::default(),
            todos,
            max_turns,
            usage: Usage::default(),
            api_calls: 0,
            warnings,
            tools_chars,
            last_prompt: None,
            compressions,
            compress_failed_at: None,
            fixed_prompt_warned: false,
            hook_approvals: Mutex::new(HashSet::new()),
            lease: None,
            mark,
            unrecorded: None,
            unsaved: None,
            resting: false,
            streamed: Arc::default(),
        })
    }

    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    pub fn history(&self) -> &[Message] {
        &self.history
    }

    pub fn tools(&self) -> &[Arc<ToolSpec>] {
        &self.tools
    }

    pub fn system_prompt(&self) -> &str {
        &self.system_prompt
    }

    /// Problems found while starting (a context file refused, a tool name taken).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Tokens and model calls of this process's turns in the session.
    pub fn usage(&self) -> (Usage, u32) {
        (self.usage, self.api_calls)
    }

    /// The context window requests are measured against, in tokens.
    pub fn context_length(&self) -> u64 {
        self.shared.config.context_length
    }

    pub fn chain(&self) -> &Chain {
        &self.chain
    }

    /// Use another model chain from the next call on (`/model`).
    pub fn set_chain(&mut self, chain: Chain) {
        self.chain = chain;
        self.chain_state = ChainState::default();
    }

    pub fn set_max_turns(&mut self, max: u32) {
        self.max_turns = max.max(1);
    }

    /// Forget the last user message and everything after it, here and in the store. Returns the
    /// removed user text.
    ///
    /// # Errors
    /// The store cannot be written.
    pub async fn undo(&mut self) -> Result<Option<String>, Error> {
        let Some(at) = self.history.iter().rposition(|m| matches!(m, Message::User { .. })) else {
            return Ok(None);
        };
        if self.stored {
            let id = &self.session_id;
            self.mark = crate::on_store(&self.shared.store, async |store| {
                store.undo_last_turn(id).await?;
                store.message_mark(id).await
            })
            .await?;
        }
        let text = self.history[at].content().to_string();
        self.history.truncate(at);
        Ok(Some(text))
    }

    /// Mark the session ended in the store (when it was saved at all).
    ///
    /// # Errors
    /// The store cannot be written.
    pub async fn end(&self, reason: &str) -> Result<(), Error> {
        if self.stored {
            crate::on_store(&self.shared.store, async |store| store.end_session(&self.session_id, reason).await)
                .await?;
        }
        Ok(())
    }

    /// Run one user message to the end of the turn.
    pub async fn run_turn(&mut self, text: &str, cancel: &CancellationToken) -> TurnEnd {
        self.run_turn_with(text, Vec::new(), cancel).await
    }

    /// [`Agent::run_turn`] for a message with images.
    pub async fn run_turn_with(
        &mut self,
        text: &str,
        images: Vec<talaria_protocol::Image>,
        cancel: &CancellationToken,
    ) -> TurnEnd {
        // Notes sent before this turn began were meant for another.
        for text in self.shared.gate.take_steers() {
            self.emitter.emit(Event::Steered { text, delivered: false });
        }
        let end = self.turn(text, images, cancel).await;
        // A turn that ended before its answer stores its message now, under its lease: a
        // process whose lease was taken over stores nothing, and the one that took it runs the
        // turn again.
        if self.unsaved.is_some()
            && let Err(e) = self.commit_last(&[], None).await
        {
            self.emitter.warn(format!("the message of a turn that ended before its answer was not stored: {e}"));
        }
        for text in self.shared.gate.take_steers() {
            self.emitter.emit(Event::Steered { text, delivered: false });
        }
        self.after_turn(text, &end.outcome, &end.text).await;
        if let Some(held) = self.lease.take() {
            held.release().await;
        }
        end
    }

    async fn turn(&mut self, text: &str, images: Vec<talaria_protocol::Image>, cancel: &CancellationToken) -> TurnEnd {
        let mut turn = Turn::default();
        self.chain_state.new_turn();
        if let Err(e) = self.ensure_session().await {
            return self.finish(Outcome::Failed(e.to_string()), String::new(), &turn);
        }
        if let Err(outcome) = self.hold(cancel).await {
            return self.finish(outcome, String::new(), &turn);
        }
        let first_turn = !self.history.iter().any(|m| matches!(m, Message::User { .. }));
        let user = Message::User { content: text.to_string(), images };
        if self.shared.config.message_kept {
            self.unsaved = Some(user.clone());
        } else if let Err(e) = self.commit(std::slice::from_ref(&user)).await {
            return self.finish(Outcome::Failed(e.to_string()), String::new(), &turn);
        }
        self.history.push(user);
        if first_turn {
            self.observe(talaria_protocol::HookEvent::SessionStart).await;
        }
        let ctx = TurnContext { user_text: text.to_string(), first_turn, recall: self.prefetch(text).await };
        loop {
            if turn.api_calls >= self.max_turns {
                return self.budget_summary(&mut turn, cancel).await;
            }
            tokio::select! {
                biased;
                () = cancel.cancelled() => return self.finish(Outcome::Interrupted, String::new(), &turn),
                () = self.maybe_compress() => {}
            }
            let extra = self.call_context(&ctx).await;
            let call = self.call_model(&mut turn, true, &extra);
            let reply = tokio::select! {
                biased;
                () = cancel.cancelled() => {
                    self.cut_short(&mut turn);
                    return self.finish(Outcome::Interrupted, String::new(), &turn);
                }
                reply = call => reply,
            };
            let message = match reply {
                Ok(message) => message,
                Err(e) => return self.finish(Outcome::Failed(e), String::new(), &turn),
            };
            if self.shared.hooks.wants(talaria_protocol::HookKind::PostLlmCall) {
                let model = self.chain.primary_model();
                self.observe(talaria_protocol::HookEvent::PostLlmCall {
                    user_message: text.to_string(),
                    assistant_response: message.content().to_string(),
                    model,
                })
                .await;
            }
            if message.tool_calls().is_empty() {
                let answer = message.content().to_string();
                let (outcome, shown) = completed(&turn, &answer);
                if let Err(e) = self.commit_last(std::slice::from_ref(&message), Some(&shown)).await {
                    return self.finish(Outcome::Failed(e.to_string()), answer, &turn);
                }
                self.history.push(message);
                return self.turn_end(outcome, shown, &turn);
            }
            // The request for tools that may change something is on disk before any starts:
            // even a kill -9 during them leaves a record that they were started. Tools that
            // only read change nothing a crash could hide: their request is committed with
            // their results, one transaction less per turn.
            let calls = message.tool_calls().to_vec();
            let only_reads = calls.iter().all(|c| self.reads_only(&c.name));
            let request = if only_reads {
                Some(message.clone())
            } else {
                if let Err(e) = self.commit(std::slice::from_ref(&message)).await {
                    return self.finish(Outcome::Failed(e.to_string()), String::new(), &turn);
                }
                None
            };
            self.history.push(message);
            let (mut results, interrupted) = self.run_tools(&calls, cancel).await;
            self.add_steers(&mut results);
            let committed = match request {
                Some(request) => self.commit(&[std::slice::from_ref(&request), &results].concat()).await,
                None => self.commit(&results).await,
            };
            if let Err(e) = committed {
                if only_reads {
                    // Neither is stored: the history the next turn sees says the same.
                    self.history.pop();
                }
                return self.finish(Outcome::Failed(e.to_string()), String::new(), &turn);
            }
            self.history.extend(results);
            if interrupted {
                return self.finish(Outcome::Interrupted, String::new(), &turn);
            }
        }
    }

    /// Whether the offered tool `name` only reads (its manifest's `read_only`); a name not
    /// offered is taken to change something.
    fn reads_only(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t.name == name && t.annotations.read_only)
    }

    /// Add what the user sent to the running turn (`Op::Steer`) to the last of `results`, marked
    /// as theirs, so the model reads it with the tools' output.
    fn add_steers(&self, results: &mut [Message]) {
        let Some(Message::Tool { content, .. }) = results.last_mut() else { return };
        for text in self.shared.gate.take_steers() {
            content.push_str(&format!("\n\n[The user sent this while you worked; it is not tool output]\n{text}"));
            self.emitter.emit(Event::Steered { text, delivered: true });
        }
    }

    async fn ensure_session(&mut self) -> Result<(), Error> {
        if self.stored {
            return Ok(());
        }
        let provider = self.chain.providers.first();
        let new = NewSession {
            id: self.session_id.clone(),
            source: if self.platform == Platform::Subagent {
                "subagent".into()
            } else {
                self.shared.config.source.clone()
            },
            model: provider.map(|p| p.model.clone()).unwrap_or_default(),
            provider: provider.map(|p| p.name.clone()).unwrap_or_default(),
            system_prompt: self.system_prompt.clone(),
            parent_id: self.parent.clone(),
            cwd: self.shared.config.workspace.display().to_string(),
        };
        crate::on_store(&self.shared.store, async |store| store.create_session(&new).await).await?;
        self.stored = true;
        Ok(())
    }

    /// Append `messages` to the stored session (behind the turn's message, when it waits to be
    /// committed), with the usage of the model calls that produced them in the same
    /// transaction.
    async fn commit(&mut self, messages: &[Message]) -> Result<(), Error> {
        let usage = self.unrecorded;
        let unsaved = self.unsaved.take();
        let all = with_unsaved(unsaved.as_ref(), messages);
        let ids = crate::on_store(&self.shared.store, async |store| {
            store.append_messages_with_usage(&self.session_id, &all, usage.as_ref().map(|(u, n)| (u, *n))).await
        })
        .await;
        match ids {
            Ok(ids) => {
                self.committed(&ids);
                Ok(())
            }
            Err(e) => {
                self.unsaved = unsaved;
                Err(e)
            }
        }
    }

    /// Commit the turn's message if it still waits ([`AgentConfig::message_kept`]): before the
    /// stored history is used in another way mid-turn.
    pub(super) async fn save_message(&mut self) -> Result<(), Error> {
        if self.unsaved.is_none() { Ok(()) } else { self.commit(&[]).await }
    }

    /// Messages (and the usage) were committed under `ids`.
    fn committed(&mut self, ids: &[i64]) {
        self.unrecorded = None;
        if let Some(last) = ids.last() {
            // Nobody else writes the session while this agent holds its lease.
            self.mark = (self.mark.0 + i64::try_from(ids.len()).unwrap_or(0), *last);
        }
    }

    /// Commit the turn's answer (or, ending without one, its message if it waits), giving the
    /// session's lease back in the same transaction (the hooks after it need no lease). `answer`
    /// is the answer's text as the turn's end shows it: an inbox entry waiting for it is marked
    /// done in the same transaction ([`Store::append_answer`]). When that fails, the lease is
    /// still held.
    async fn commit_last(&mut self, messages: &[Message], answer: Option<&str>) -> Result<(), Error> {
        let held = self.lease.take();
        let usage = self.unrecorded;
        let unsaved = self.unsaved.take();
        let all = with_unsaved(unsaved.as_ref(), messages);
        let token = held.as_ref().map(|h| h.token());
        let committed = crate::on_store(&self.shared.store, async |store| {
            let usage = usage.as_ref().map(|(u, n)| (u, *n));
            match answer {
                Some(text) => store.append_answer(&self.session_id, &all, usage, token, text).await,
                None => store.append_and_release(&self.session_id, &all, usage, token).await,
            }
        })
        .await;
        match committed {
            Ok(ids) => {
                if let Some(held) = held {
                    held.given_back();
                }
                self.committed(&ids);
                Ok(())
            }
            Err(e) => {
                self.lease = held;
                self.unsaved = unsaved;
                Err(e)
            }
        }
    }

    /// The budget is spent: one last call without tools asks for a summary of the work.
    async fn budget_summary(&mut self, turn: &mut Turn, cancel: &CancellationToken) -> TurnEnd {
        let spent = turn.api_calls;
        let calls = if spent == 1 { "model call" } else { "model calls" };
        self.emitter.warn(format!("stopping: this turn used its budget of {spent} {calls} (--max-turns)"));
        self.history.push(Message::user(format!(
            "[talaria] You have used this turn's budget of {spent} {calls}, so tools are no longer available. \
             Reply now with a summary for the user: what you did, what is left unfinished, and what they should do next."
        )));
        let call = self.call_model(turn, false, "");
        let reply = tokio::select! {
            biased;
            () = cancel.cancelled() => None,
            reply = call => reply.ok(),
        };
        self.history.pop();
        let text = match reply {
            Some(m) if !m.content().trim().is_empty() => m.content().to_string(),
            _ => format!("I stopped after {spent} {calls} (the turn's budget) before finishing."),
        };
        let message = Message::assistant(text.clone());
        if let Err(e) = self.commit(std::slice::from_ref(&message)).await {
            self.emitter.warn(format!("could not save the summary: {e}"));
        }
        self.history.push(message);
        self.finish(Outcome::BudgetExhausted, text, turn)
    }

    /// The model call in flight was cut short by the user: what it streamed becomes the turn's
    /// partial reply (shown marked as cut, never kept), and the call counts, its tokens
    /// estimated, as the provider still bills it. The history is still what the call was sent
    /// (a call adds to it only when it completes), so its prompt is estimated now, not before
    /// every call.
    fn cut_short(&mut self, turn: &mut Turn) {
        let text = std::mem::take(&mut *lock(&self.streamed));
        let usage = Usage {
            input_tokens: self.context_status().prompt_tokens,
            output_tokens: u64::try_from(text.len().div_ceil(4)).unwrap_or(u64::MAX),
            estimated: true,
            ..Usage::default()
        };
        turn.usage.add(&usage);
        self.usage.add(&usage);
        turn.api_calls += 1;
        self.api_calls += 1;
        let (mut unrecorded, calls) = self.unrecorded.take().unwrap_or_default();
        unrecorded.add(&usage);
        self.unrecorded = Some((unrecorded, calls + 1));
        turn.partial = text;
    }

    fn finish(&self, outcome: Outcome, text: String, turn: &Turn) -> TurnEnd {
        let (outcome, text) = match outcome {
            Outcome::Completed => completed(turn, &text),
            other => (other, text),
        };
        self.turn_end(outcome, text, turn)
    }

    /// Tell the turn's end, `text` as it is shown.
    fn turn_end(&self, outcome: Outcome, text: String, turn: &Turn) -> TurnEnd {
        let partial = match outcome {
            Outcome::Failed(_) | Outcome::Interrupted => turn.partial.clone(),
            _ => String::new(),
        };
        let end = TurnEnd { outcome, text, partial, usage: turn.usage, api_calls: turn.api_calls };
        self.emitter.emit(Event::TurnEnd(end.clone()));
        end
    }
}

/// How a turn that answered `answer` ends: cut short by the model's output limit, the answer
/// shown without the marker the history keeps.
fn completed(turn: &Turn, answer: &str) -> (Outcome, String) {
    if turn.truncated {
        (Outcome::Truncated, truncation::unmarked(answer).to_string())
    } else {
        (Outcome::Completed, answer.to_string())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `messages`, behind the turn's message when it waits to be committed with them.
fn with_unsaved<'a>(unsaved: Option<&Message>, messages: &'a [Message]) -> std::borrow::Cow<'a, [Message]> {
    match unsaved {
        Some(message) => std::iter::once(message).chain(messages).cloned().collect::<Vec<_>>().into(),
        None => messages.into(),
    }
}
