//! One conversation: an [`Agent`] run by a task of its own, fed [`Op`]s and reporting
//! [`Stamped`] events.
//!
//! The task carries out one op at a time, in order. While a turn runs it still takes the ops
//! that cannot wait ([`Op::immediate`]: interrupt, approval and clarify answers, yolo); the others
//! wait for the turn to end. Dropping the [`Conversation`] closes its session as `exit`.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use talaria_agent::approval::Gate;
use talaria_agent::channel::{Receiver, Sender, unbounded};
use talaria_agent::model::{Chain, Provider};
use talaria_agent::toolsets::{Selection, Toolset, Toolsets};
use talaria_agent::{Agent, AgentConfig, Emitter, Shared, ToolSources};
use talaria_protocol::{
    Event, Message, NoticeLevel, Op, SessionReason, SessionStarted, Stamped, ToolSpec, TurnEnd, Usage,
};
use talaria_store::{SessionInfo, Store};
use tokio_util::sync::CancellationToken;

use crate::config::{self, ConfigToml};
use crate::router::{Route, Router};
use crate::{Error, Host, ModelChoice, Platform, Start, canonical_workspace, lock, models};

/// How many recent user and assistant messages [`Info::tail`] keeps.
const TAIL: usize = 12;

/// A conversation's handle: submit ops, read events.
pub struct Conversation {
    submitter: Submitter,
    events: Receiver<Stamped>,
    info: Arc<Mutex<Info>>,
    gate: Arc<Gate>,
}

/// Submits ops to a conversation; cheap to clone (a signal handler can hold one).
#[derive(Clone)]
pub struct Submitter {
    ops: Sender<(u64, Op)>,
    next: Arc<AtomicU64>,
}

impl Submitter {
    /// Queue `op`; returns its id, which the events it brings carry ([`Stamped::op`]). After
    /// the conversation stopped, nothing happens.
    pub fn submit(&self, op: Op) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        // A conversation that stopped takes nothing more; its stream has ended.
        let _ = self.ops.send((id, op));
        id
    }
}

/// Where a conversation stands, as of the last op it finished.
#[derive(Debug, Clone, Default)]
pub struct Info {
    pub session_id: String,
    /// The main model (its label, API mode and URL), if any.
    pub provider: Option<Provider>,
    /// Shared with the agent (and every conversation that offers the same tools).
    pub tools: Vec<Arc<ToolSpec>>,
    /// Tokens and model calls of this conversation's turns.
    pub usage: Usage,
    pub api_calls: u32,
    /// The last user and assistant messages (to show where a resumed session stands); none
    /// when the conversation rests between ops ([`Start::rest_after`]).
    pub tail: Vec<Message>,
    /// Messages in the session.
    pub messages: usize,
    pub workspace: PathBuf,
    /// The model's context window in tokens (`[model] context_length`).
    pub context_length: u64,
    /// The session's history was let go of ([`Start::rest_after`]) and is read back from the
    /// store by the next op; `messages` and `tail` still say what it held.
    pub resting: bool,
}

impl Conversation {
    /// Queue `op` (see [`Submitter::submit`]).
    pub fn submit(&self, op: Op) -> u64 {
        self.submitter.submit(op)
    }

    /// A handle to submit from elsewhere (a signal handler, another task).
    pub fn submitter(&self) -> Submitter {
        self.submitter.clone()
    }

    /// The next event; `None` once the conversation has stopped and everything was read.
    pub async fn next_event(&mut self) -> Option<Stamped> {
        self.events.recv().await
    }

    /// The warnings its start gave (a plugin that did not load, a context file refused), read
    /// up to its [`Event::SessionStarted`]; for a front door that shows them before anything
    /// else.
    pub async fn start_warnings(&mut self) -> Vec<String> {
        let mut warnings = Vec::new();
        while let Some(stamped) = self.next_event().await {
            match stamped.event {
                Event::Notice { level: NoticeLevel::Warn, text } => warnings.push(text),
                Event::SessionStarted(_) => break,
                _ => {}
            }
        }
        warnings
    }

    /// The next event if one is waiting.
    pub fn try_next_event(&mut self) -> Option<Stamped> {
        self.events.try_recv()
    }

    /// Where the conversation stands.
    pub fn info(&self) -> Info {
        lock(&self.info).clone()
    }

    /// Whether dangerous commands and new hosts go ahead without asking.
    pub fn yolo(&self) -> bool {
        self.gate.yolo()
    }

    /// Submit `op` and hand every event to `on_event` until the op is finished
    /// ([`Op::finished_by`]); returns that last event (`None` if the conversation stopped first).
    pub async fn run(&mut self, op: Op, mut on_event: impl FnMut(&Stamped)) -> Option<Stamped> {
        let id = self.submit(op.clone());
        while let Some(stamped) = self.next_event().await {
            on_event(&stamped);
            if stamped.op == id && op.finished_by(&stamped.event) {
                return Some(stamped);
            }
        }
        None
    }

    /// Close the session as `reason` (empty: `exit`) and stop; events until then go to
    /// `on_event`.
    pub async fn shutdown_with(&mut self, reason: &str, on_event: impl FnMut(&Stamped)) {
        self.run(Op::Shutdown { reason: reason.to_string() }, on_event).await;
    }

    /// Close the session as `exit` and stop, dropping the events until then.
    pub async fn shutdown(&mut self) {
        self.shutdown_with("", |_| {}).await;
    }
}

/// Start a conversation for `host` (see [`Host::start`]).
pub(crate) async fn start(host: &Host, start: Start) -> Result<Conversation, Error> {
    let workspace = match &start.workspace {
        Some(dir) => canonical_workspace(dir)?,
        None => host.workspace.clone(),
    };
    let mut warnings = Vec::new();
    let chain = if start.no_model {
        Chain { providers: Vec::new(), retries: 0, base_delay: Duration::ZERO, max_delay: Duration::ZERO }
    } else {
        models::chain(&host.home, &host.config, &start.model, &mut warnings)?
    };
    // A front door serving many workspaces of its own making (the gateway's chats) shares one
    // set of plugins; any other workspace has its own (its project's plugins differ).
    let (plugins, _) = host.plugins(start.plugins_from.as_deref().unwrap_or(&workspace))?;
    warnings.extend(plugins.take_warnings());
    let store = host.store.clone();
    let mut resume = match &start.resume {
        Some(key) => Some(on_store(&store, async |s| s.resolve_session(key).await).await?),
        None => None,
    };
    let mut reason = if resume.is_some() { SessionReason::Resumed } else { SessionReason::New };
    if start.fork {
        let Some(from) = resume.take() else {
            return Err(Error::Usage(
                "--fork needs a session to start from: add --continue, or --resume ID|TITLE|latest".into(),
            ));
        };
        let fork = on_store(&store, async |s| s.fork_session(&from.id, &Store::new_session_id()).await).await?;
        reason = SessionReason::Forked { from: from.id };
        resume = Some(fork);
    }

    let (emitter, agent_events) = Emitter::channel();
    let home = host.home.clone();
    let gate = Arc::new(
        Gate::new(start.interactive)
            .with_allowed(start.allow.clone())
            .with_saver(Box::new(move |key| config::allow_always(&home, key).map_err(|e| e.to_string())))
            .with_emitter(emitter.clone()),
    );
    gate.set_yolo(start.yolo);
    let agent_config = agent_config(&host.home, &host.config, &start, workspace.clone());
    let mut tools = ToolSources { sources: vec![plugins.tools.clone()], overlay: start.offered.tools.clone() };
    if start.configured_mcp && !host.mcp.is_empty() {
        // Their tool lists (cached, or listed by starting them) before the agent lists tools.
        host.mcp.prepare().await;
        warnings.extend(host.mcp.take_warnings());
        tools.sources.push(host.mcp.clone());
    }
    if !start.mcp_servers.is_empty() {
        let own =
            Arc::new(crate::mcp_servers(&host.home, &workspace, &host.config, &start.mcp_servers, host.router.clone()));
        own.prepare().await;
        warnings.extend(own.take_warnings());
        tools.sources.push(own);
    }
    let mut shared = Shared::new(agent_config, chain, store.clone(), tools, gate.clone())
        .with_hooks(plugins.hooks.clone())
        .with_memory_provider(if start.memory { plugins.memory.clone() } else { None })
        .with_context_engine(plugins.context.clone())
        .with_checkpoints(host.checkpoints.clone());
    shared.client = host.client.clone();
    let shared = Arc::new(shared);
    let agent =
        Agent::start(shared.clone(), emitter.clone(), talaria_agent::Start { resume, ..Default::default() }).await?;
    warnings.extend(agent.warnings().iter().cloned());

    let (ops_tx, ops) = unbounded();
    let (out, events) = unbounded();
    let info = Arc::new(Mutex::new(Info { workspace, ..Info::default() }));
    let mut outbox = Outbox {
        out,
        op: 0,
        turn: None,
        session_id: agent.session_id().to_string(),
        router: host.router.clone(),
        route: Route::new(&gate, start.offered.terminal.as_ref(), commands_confinement(&start)),
        _terminal: start.offered.terminal.clone(),
        gate: gate.clone(),
        agent_events,
        metrics: host.metrics.clone(),
        watch: crate::metrics::Watch::default(),
        source: start.source.clone(),
        config: host.config.clone(),
    };
    for text in warnings {
        outbox.send(Event::Notice { level: NoticeLevel::Warn, text });
    }
    outbox.send(session_started(&agent, reason));
    let actor = Actor {
        agent,
        inbox: Inbox { ops, queue: VecDeque::new(), open: true },
        outbox,
        shared,
        emitter,
        home: host.home.clone(),
        config: host.config.clone(),
        last_prompt: None,
        info: info.clone(),
        aux: (start.auto_title && host.config.agent.auto_title.unwrap_or(true)).then(|| host.aux_for(&start.model)),
        titled: false,
        plugins: plugins.clone(),
        rest_after: start.rest_after,
        kept: start.kept.clone().map(crate::kept::Share::new),
        stats: host.stats.clone(),
        last_sender: None,
        job: start.job.clone(),
        trace: None,
    };
    actor.update_info();
    tokio::spawn(actor.run());
    Ok(Conversation { submitter: Submitter { ops: ops_tx, next: Arc::new(AtomicU64::new(1)) }, events, info, gate })
}

/// A few steps on the store as one step of the conversation.
async fn on_store<T>(
    store: &Store,
    f: impl AsyncFnOnce(&Store) -> Result<T, talaria_store::Error>,
) -> Result<T, Error> {
    Ok(talaria_agent::on_store(store, f).await?)
}

/// Whether the workspace is trusted, with its skills as the user reviewed them.
pub fn project_skills(home: &std::path::Path, workspace: &std::path::Path) -> talaria_agent::skills::ProjectTrust {
    match talaria_runtime::GrantFile::load(&home.join("grants.toml")) {
        Ok(g) if g.is_trusted(workspace) => {
            talaria_agent::skills::ProjectTrust::Pinned(g.project_pins(workspace).and_then(|p| p.skills.clone()))
        }
        _ => talaria_agent::skills::ProjectTrust::No,
    }
}

/// The loop's settings from config and the start options.
fn agent_config(home: &std::path::Path, config: &ConfigToml, start: &Start, workspace: PathBuf) -> AgentConfig {
    let a = &config.agent;
    let mut cfg = AgentConfig::new(home.to_path_buf(), workspace);
    cfg.source = start.source.clone();
    cfg.platform = start.platform;
    cfg.holder = start.holder.clone();
    cfg.shared_memory = start.memory;
    cfg.message_kept = start.message_kept;
    cfg.project_skills = project_skills(home, &cfg.workspace);
    cfg.origin.clone_from(&start.origin);
    cfg.max_turns = start.max_turns.or(a.max_turns).unwrap_or(cfg.max_turns).max(1);
    cfg.stream = start.stream.unwrap_or(true) && a.stream.unwrap_or(true);
    cfg.system_message = a.system_message.clone();
    if let Some(n) = a.max_result_chars {
        cfg.result_cap = n.max(1_000);
    }
    if let Some(n) = a.max_children {
        cfg.max_children = n.clamp(1, 10);
    }
    cfg.selection = Selection {
        enabled: start.toolsets.clone().or(a.toolsets.clone()),
        disabled: if start.toolsets.is_some() { Vec::new() } else { a.disabled_toolsets.clone() },
    };
    // Nobody can look at a skill the agent writes where nobody answers: unless the operator
    // wants it, the tool is not offered there.
    if !start.interactive && !config.skills.manage_unattended {
        cfg.selection.disabled.push(talaria_agent::builtin::skills::MANAGE.to_string());
    }
    let mut sets = Toolsets::builtin();
    for (name, t) in &config.custom_toolsets {
        sets.insert(
            name.clone(),
            Toolset { description: t.description.clone(), tools: t.tools.clone(), includes: t.includes.clone() },
        );
    }
    cfg.toolsets = sets;
    if let Some(n) = config.model.as_ref().and_then(|m| m.context_length) {
        cfg.context_length = n.max(1_000);
    }
    if let Some(secs) = a.session_wait_secs {
        cfg.lease_wait = Duration::from_secs(secs);
    }
    cfg
}

fn session_started(agent: &Agent, reason: SessionReason) -> Event {
    let model = agent.chain().providers.first().map(Provider::label).unwrap_or_default();
    Event::SessionStarted(SessionStarted {
        session_id: agent.session_id().to_string(),
        reason,
        model,
        messages: agent.history().len(),
    })
}

/// Ops waiting to be carried out.
struct Inbox {
    ops: Receiver<(u64, Op)>,
    queue: VecDeque<(u64, Op)>,
    /// False once the handle was dropped.
    open: bool,
}

impl Inbox {
    async fn next(&mut self) -> Option<(u64, Op)> {
        if let Some(next) = self.queue.pop_front() {
            return Some(next);
        }
        if !self.open {
            return None;
        }
        let next = self.ops.recv().await;
        self.open = next.is_some();
        next
    }
}

/// Events on their way out, stamped with what they belong to.
struct Outbox {
    out: Sender<Stamped>,
    /// The op being carried out, and the turn running.
    op: u64,
    turn: Option<u64>,
    session_id: String,
    router: Arc<Router>,
    /// Where runtime requests for this conversation's sessions go.
    route: Route,
    /// The front end's terminal (held here: the router keeps only a weak reference).
    _terminal: Option<Arc<dyn talaria_runtime::Terminal>>,
    gate: Arc<Gate>,
    /// What the agent (and the gate) emit.
    agent_events: Receiver<Event>,
    /// Where every event is counted, as a conversation of `source`.
    metrics: Arc<crate::metrics::Metrics>,
    watch: crate::metrics::Watch,
    source: String,
    config: Arc<ConfigToml>,
}

impl Outbox {
    fn send(&mut self, event: Event) {
        if let Event::SessionStarted(s) = &event {
            self.session_id.clone_from(&s.session_id);
            self.router.route(&s.session_id, &self.route);
        }
        let Self { metrics, watch, source, config, .. } = self;
        let price = |model: &str, usage: &talaria_protocol::Usage| {
            crate::prices::Prices::of_model(config, model).map(|p| p.cost(usage))
        };
        metrics.observe(source, &event, watch, price);
        let stamped = Stamped { op: self.op, session_id: self.session_id.clone(), turn_id: self.turn, event };
        // A front door that went away just stops listening.
        let _ = self.out.send(stamped);
    }

    /// Pass on what the agent emitted so far.
    fn pump(&mut self) {
        while let Some(event) = self.agent_events.try_recv() {
            self.send(event);
        }
    }

    fn error(&mut self, text: impl Into<String>) {
        self.send(Event::Error { text: text.into() });
    }
}

/// The task that owns the agent.
struct Actor {
    agent: Agent,
    inbox: Inbox,
    outbox: Outbox,
    shared: Arc<Shared>,
    emitter: Emitter,
    home: PathBuf,
    config: Arc<ConfigToml>,
    /// The last user message sent (what `Retry` sends when there is nothing to undo).
    last_prompt: Option<(String, Vec<talaria_protocol::Image>)>,
    info: Arc<Mutex<Info>>,
    /// The auxiliary model, when sessions get automatic titles.
    aux: Option<Arc<dyn talaria_runtime::LlmBackend>>,
    /// A title was asked for (or found) for the current session.
    titled: bool,
    /// The workspace's plugins, reloaded before an op when they changed on disk.
    plugins: Arc<crate::Plugins>,
    /// The agent rests after this long without an op ([`Start::rest_after`]).
    rest_after: Option<std::time::Duration>,
    /// Its part of what the front door's resting conversations keep ([`Start::kept`]).
    kept: Option<crate::kept::Share>,
    /// Where each turn's figures go.
    stats: Arc<crate::stats::Recorder>,
    /// Who sent the last user message ([`Op::UserTurn::sender`]); a retry is theirs too.
    last_sender: Option<String>,
    /// The scheduled job this conversation runs ([`Start::job`]).
    job: Option<String>,
    /// The trace the next turn continues ([`Op::UserTurn::trace`]); a retry starts its own.
    trace: Option<String>,
}

impl Actor {
    async fn run(mut self) {
        self.outbox.router.route(self.agent.session_id(), &self.outbox.route);
        while let Some((id, op)) = self.next_op().await {
            self.outbox.op = id;
            if op.immediate() {
                immediate(op, &mut self.outbox, None);
                continue;
            }
            let stop = matches!(op, Op::Shutdown { .. });
            if stop && let Some(share) = &mut self.kept {
                // Given back before the shutdown is answered.
                share.release();
            }
            // Boxed: the run's own future stays small while the session waits for its next op.
            Box::pin(self.carry_out(op)).await;
            self.outbox.pump();
            self.update_info();
            if stop {
                return;
            }
        }
        // The handle was dropped: close the session as a user leaving would.
        Box::pin(self.close("exit")).await;
    }

    /// The next op. A conversation that rests lets go of its session once none came for
    /// [`Start::rest_after`]: a chat in full flow keeps its history from turn to turn (each
    /// turn would read it back from the store otherwise), one that waits holds little.
    async fn next_op(&mut self) -> Option<(u64, Op)> {
        if let Some(after) = self.rest_after
            && !self.agent.is_resting()
        {
            // Kept only while the front door's conversations keep less than its limit.
            let bytes = self.agent.held_bytes();
            if self.kept.as_mut().is_none_or(|share| share.hold(bytes))
                && let Ok(next) = tokio::time::timeout(after, self.inbox.next()).await
            {
                return next;
            }
            self.agent.rest();
            if let Some(share) = &mut self.kept {
                share.release();
            }
            lock(&self.info).resting = self.agent.is_resting();
        }
        self.inbox.next().await
    }

    async fn carry_out(&mut self, op: Op) {
        // A turn reads what it let go of itself, and ends as failed if it cannot; any other op
        // needs it first.
        if !matches!(op, Op::UserTurn { .. })
            && let Err(e) = self.agent.wake().await
        {
            return self.outbox.error(format!("cannot read the session back from the store: {e}"));
        }
        if !matches!(op, Op::Shutdown { .. })
            && let Some(text) = self.plugins.refresh().await
        {
            self.outbox.send(Event::Notice { level: NoticeLevel::Info, text });
        }
        match op {
            Op::UserTurn { text, images, sender, trace } => {
                self.last_sender = sender;
                self.trace = trace;
                let end = self.turn(text.clone(), images).await;
                if matches!(end.outcome, talaria_protocol::Outcome::Completed) {
                    self.title_soon(text, end.text);
                }
            }
            Op::Retry => match self.agent.undo().await {
                Ok(undone) => {
                    let Some(text) = undone.clone().or_else(|| self.last_prompt.as_ref().map(|(t, _)| t.clone()))
                    else {
                        return self.outbox.error("nothing to retry");
                    };
                    self.outbox.send(Event::Undone { text: undone });
                    // The images go again with the message they came with.
                    let images = match &self.last_prompt {
                        Some((last, images)) if *last == text => images.clone(),
                        _ => Vec::new(),
                    };
                    self.turn(text, images).await;
                }
                Err(e) => self.outbox.error(e.to_string()),
            },
            Op::Rollback { steps, force } => {
                let event = self.rollback(steps, force).await;
                self.outbox.send(event);
            }
            Op::Undo => match self.agent.undo().await {
                Ok(text) => self.outbox.send(Event::Undone { text }),
                Err(e) => self.outbox.error(e.to_string()),
            },
            Op::Compact { focus } => {
                let result = self.agent.compress(focus.as_deref().filter(|f| !f.is_empty()), true).await;
                self.outbox.pump();
                match result {
                    Ok(done) => self.outbox.send(Event::Compacted {
                        note: done.note,
                        before: done.before,
                        after: done.after,
                        session_id: done.session_id,
                    }),
                    Err(e) => self.outbox.error(e.to_string()),
                }
            }
            Op::SetModel { model } => self.set_model(&model),
            Op::SetTitle { title } => self.set_title(title).await,
            Op::NewSession => self.replace(None, "new").await,
            Op::Resume { key } => {
                let found = on_store(&self.shared.store, async move |s| s.resolve_session(&key).await).await;
                match found {
                    Ok(info) => self.replace(Some(info), "resume").await,
                    Err(e) => self.outbox.error(e.to_string()),
                }
            }
            Op::CallTool { name, arguments } => {
                let cancel = CancellationToken::new();
                let Self { agent, inbox, outbox, .. } = self;
                during(inbox, outbox, &cancel, agent.call_tool(&name, &arguments, &cancel)).await;
            }
            Op::ContextReport => {
                let report = self.agent.context_report().await;
                self.outbox.pump();
                match report {
                    Ok((engine, status, lines)) => self.outbox.send(Event::ContextReport { engine, status, lines }),
                    Err(e) => self.outbox.error(e.to_string()),
                }
            }
            Op::Shutdown { reason } => {
                self.close(if reason.is_empty() { "exit" } else { &reason }).await;
                self.outbox.send(Event::ShutdownComplete);
            }
            op @ (Op::Interrupt | Op::Approve { .. } | Op::Answer { .. } | Op::SetYolo { .. } | Op::Steer { .. }) => {
                immediate(op, &mut self.outbox, None);
            }
        }
    }

    /// Run one turn in its span (the root of its trace, or a child of the request's), which
    /// ends with its outcome, tokens and calls; text only with `[telemetry] content`.
    async fn turn(&mut self, text: String, images: Vec<talaria_protocol::Image>) -> TurnEnd {
        use tracing::Instrument as _;
        use tracing::field::Empty;
        let span = tracing::info_span!(
            target: talaria_protocol::trace::TARGET,
            "turn",
            talaria.source = %self.shared.config.source,
            gen_ai.conversation.id = self.agent.session_id(),
            talaria.outcome = Empty,
            talaria.api_calls = Empty,
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            talaria.prompt = Empty,
            talaria.answer = Empty,
            otel.status_code = Empty,
            otel.status_description = Empty,
        );
        crate::telemetry::set_parent(&span, self.trace.take().as_deref());
        let content = talaria_protocol::trace::content();
        if content {
            span.record("talaria.prompt", text.as_str());
        }
        let end = self.turn_in_span(text, images).instrument(span.clone()).await;
        span.record("talaria.outcome", end.outcome.name());
        span.record("talaria.api_calls", i64::from(end.api_calls));
        span.record("gen_ai.usage.input_tokens", talaria_protocol::trace::int(end.usage.input_tokens));
        span.record("gen_ai.usage.output_tokens", talaria_protocol::trace::int(end.usage.output_tokens));
        if content {
            span.record("talaria.answer", end.text.as_str());
        }
        if let talaria_protocol::Outcome::Failed(e) = &end.outcome {
            span.record("otel.status_code", "ERROR");
            // Why can quote a provider's or a tool's words: text, sent only when allowed.
            if content {
                span.record("otel.status_description", e.as_str());
            }
        }
        end
    }

    /// Run one turn, taking immediate ops meanwhile and queueing the rest; refused without a
    /// model call when a spending limit covering it is reached ([`crate::budget`]).
    async fn turn_in_span(&mut self, text: String, images: Vec<talaria_protocol::Image>) -> TurnEnd {
        self.last_prompt = Some((text.clone(), images.clone()));
        self.outbox.turn = Some(self.outbox.op);
        self.outbox.send(Event::TurnStarted { text: text.clone() });
        if let Some(reached) = self.over_budget().await {
            let end = TurnEnd {
                outcome: talaria_protocol::Outcome::Refused(reached.text),
                text: String::new(),
                partial: String::new(),
                usage: talaria_protocol::Usage::default(),
                api_calls: 0,
            };
            self.outbox.send(Event::TurnEnd(end.clone()));
            self.outbox.turn = None;
            return end;
        }
        let cancel = CancellationToken::new();
        let started = std::time::Instant::now();
        let Self { agent, inbox, outbox, .. } = self;
        let end = during(inbox, outbox, &cancel, agent.run_turn_with(&text, images, &cancel)).await;
        outbox.turn = None;
        let model = self.agent.chain().providers.first().map(|p| p.model.clone()).unwrap_or_default();
        let cost = crate::prices::Prices::of_model(&self.config, &model).map(|p| p.cost(&end.usage));
        self.stats.record(talaria_store::turns::TurnStat {
            session_id: self.agent.session_id().to_string(),
            source: self.shared.config.source.clone(),
            model,
            ended_at: jiff::Timestamp::now().as_millisecond(),
            duration_ms: i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX),
            outcome: end.outcome.name().to_string(),
            usage: end.usage,
            api_calls: end.api_calls,
            sender: self.last_sender.clone(),
            job: self.job.clone(),
            cost,
        });
        end
    }

    /// The spending limit that keeps the next turn from starting, told to the owner.
    async fn over_budget(&self) -> Option<crate::budget::Reached> {
        let budget = &self.config.budget;
        if !budget.is_set() {
            return None;
        }
        // The turns that ended count before they are kept in their batch.
        self.stats.flush().await;
        let whose = crate::budget::Whose {
            source: &self.shared.config.source,
            sender: self.last_sender.as_deref(),
            job: self.job.as_deref(),
        };
        let reached = crate::budget::reached(budget, &self.shared.store, whose, &jiff::Zoned::now()).await?;
        crate::budget::tell_owner(&self.shared.store, &reached).await;
        Some(reached)
    }

    fn set_model(&mut self, text: &str) {
        let current = self.agent.chain().providers.first().cloned();
        let choice = ModelChoice::parse(text, current.as_ref());
        let mut warnings = Vec::new();
        match models::chain(&self.home, &self.config, &choice, &mut warnings) {
            Ok(chain) => {
                for w in warnings {
                    self.outbox.send(Event::Notice { level: NoticeLevel::Warn, text: w });
                }
                let label = chain.providers.first().map(Provider::label).unwrap_or_default();
                self.agent.set_chain(chain);
                self.outbox.send(Event::ModelChanged { model: label });
            }
            Err(e) => self.outbox.error(e.to_string()),
        }
    }

    async fn set_title(&mut self, title: String) {
        let title = title.trim().to_string();
        if title.is_empty() {
            return self.outbox.error("a title cannot be empty: /title NAME");
        }
        let id = self.agent.session_id();
        let done = on_store(&self.shared.store, async |s| {
            if s.session(id).await?.is_none() {
                return Ok(false);
            }
            s.set_title(id, &title).await.map(|()| true)
        })
        .await;
        match done {
            Ok(true) => self.outbox.send(Event::TitleChanged { title }),
            Ok(false) => self.outbox.error("this session is not saved yet: send a message first"),
            Err(e) => self.outbox.error(e.to_string()),
        }
    }

    /// Close the session and continue in a new one (or `resume`), keeping the model.
    /// After a completed turn: ask for the session's title in the background, once per
    /// session, unless titles are off (or it has one: [`crate::title::suggest`] checks).
    fn title_soon(&mut self, prompt: String, answer: String) {
        let Some(aux) = self.aux.clone() else { return };
        if std::mem::replace(&mut self.titled, true) {
            return;
        }
        let id = self.agent.session_id().to_string();
        let store = self.shared.store.clone();
        let work = crate::title::suggest(aux, store, id, prompt, answer, self.emitter.clone());
        self.shared.spawn(work);
    }

    async fn replace(&mut self, resume: Option<SessionInfo>, reason: &str) {
        self.titled = false;
        let why = if resume.is_some() { SessionReason::Resumed } else { SessionReason::New };
        let chain: Chain = self.agent.chain().clone();
        let start = talaria_agent::Start { resume, ..Default::default() };
        let mut agent = match Agent::start(self.shared.clone(), self.emitter.clone(), start).await {
            Ok(agent) => agent,
            Err(e) => return self.outbox.error(e.to_string()),
        };
        agent.set_chain(chain);
        let mut old = std::mem::replace(&mut self.agent, agent);
        if let Err(e) = old.close(reason).await {
            self.outbox.send(Event::Notice { level: NoticeLevel::Warn, text: e.to_string() });
        }
        self.save_trajectory(old.session_id().to_string()).await;
        self.outbox.pump();
        for w in self.agent.warnings().to_vec() {
            self.outbox.send(Event::Notice { level: NoticeLevel::Warn, text: w });
        }
        let started = session_started(&self.agent, why);
        self.outbox.send(started);
    }

    async fn close(&mut self, reason: &str) {
        if let Err(e) = self.agent.wake().await {
            tracing::warn!(session_id = self.agent.session_id(), "closing without its history: {e}");
        }
        if let Err(e) = self.agent.close(reason).await {
            self.outbox.send(Event::Notice { level: NoticeLevel::Warn, text: e.to_string() });
        }
        self.save_trajectory(self.agent.session_id().to_string()).await;
        // A closing conversation keeps its turns' figures now: the process may end next.
        self.stats.flush().await;
        self.outbox.pump();
    }

    /// `Rollback`: with `steps`, undo the session's last `steps` checkpoints, newest first;
    /// without, list them.
    async fn rollback(&self, steps: Option<u32>, force: bool) -> Event {
        let Some(store) = self.shared.checkpoints.clone() else {
            return Event::RolledBack { text: "checkpoints are off ([checkpoints] enabled = false)".into(), ok: false };
        };
        let session = self.agent.session_id().to_string();
        tokio::task::spawn_blocking(move || crate::rollback::run(&store, &session, steps, force))
            .await
            .unwrap_or_else(|e| Event::RolledBack { text: format!("the rollback stopped: {e}"), ok: false })
    }

    /// With `[agent] save_trajectories`, append the session that ended to the home's
    /// `trajectories/completed.jsonl` (its last message is an answer) or `failed.jsonl`.
    async fn save_trajectory(&mut self, session_id: String) {
        if self.config.agent.save_trajectories != Some(true) {
            return;
        }
        let dir = self.home.join("trajectories");
        let saved = on_store(&self.shared.store, async move |s| {
            let info = s.resolve_session(&session_id).await?;
            let messages = s.messages(&info.id).await?;
            let prompt = s.system_prompt(&info.id).await?;
            Ok((!messages.is_empty()).then(|| talaria_store::trajectory::session(&info, &prompt, &messages)))
        })
        .await;
        let line = match saved {
            Ok(Some(line)) => line,
            Ok(None) => return,
            Err(e) => {
                return self.outbox.send(Event::Notice {
                    level: NoticeLevel::Warn,
                    text: format!("the trajectory was not saved: {e}"),
                });
            }
        };
        let file = dir.join(if line["completed"] == true { "completed.jsonl" } else { "failed.jsonl" });
        let written = talaria_runtime::fsutil::private_dir(&dir).and_then(|()| {
            use std::io::Write as _;
            let mut out = std::fs::OpenOptions::new().create(true).append(true).open(&file)?;
            // One write per line, so two processes appending never interleave inside a line.
            out.write_all(format!("{line}\n").as_bytes())
        });
        if let Err(e) = written {
            self.outbox.send(Event::Notice {
                level: NoticeLevel::Warn,
                text: format!("the trajectory was not saved to {}: {e}", file.display()),
            });
        }
    }

    fn update_info(&self) {
        let agent = &self.agent;
        let (usage, api_calls) = agent.usage();
        let history = agent.history();
        let shown = if self.rest_after.is_some() { 0 } else { TAIL };
        let mut tail: Vec<Message> = history
            .iter()
            .rev()
            .filter(|m| {
                matches!(m, Message::User { .. }) || (matches!(m, Message::Assistant { .. }) && !m.content().is_empty())
            })
            .take(shown)
            .cloned()
            .collect();
        tail.reverse();
        let mut info = lock(&self.info);
        info.session_id = agent.session_id().to_string();
        info.provider = agent.chain().providers.first().cloned();
        info.tools = agent.tools().to_vec();
        info.usage = usage;
        info.api_calls = api_calls;
        info.tail = tail;
        info.messages = history.len();
        info.context_length = agent.context_length();
        info.resting = agent.is_resting();
    }
}

/// Run `work` (a turn, a tool call) to its end, passing on its events as they come and
/// carrying out the ops that cannot wait meanwhile (an approval's answer, an interrupt, which
/// fires `cancel`); the others wait in the queue. A dropped handle fires `cancel` too.
async fn during<T>(
    inbox: &mut Inbox,
    outbox: &mut Outbox,
    cancel: &CancellationToken,
    work: impl std::future::Future<Output = T>,
) -> T {
    tokio::pin!(work);
    let end = loop {
        tokio::select! {
            biased;
            Some(event) = outbox.agent_events.recv() => outbox.send(event),
            next = inbox.ops.recv(), if inbox.open => match next {
                Some((id, op)) if op.immediate() => {
                    let during = outbox.op;
                    outbox.op = id;
                    immediate(op, outbox, Some(cancel));
                    outbox.op = during;
                }
                Some(waiting) => inbox.queue.push_back(waiting),
                None => {
                    // The handle was dropped: stop the work; the session is closed after.
                    inbox.open = false;
                    cancel.cancel();
                }
            },
            end = &mut work => break end,
        }
    };
    outbox.pump();
    end
}

/// An op that cannot wait: carried out at once, during a turn too.
fn immediate(op: Op, outbox: &mut Outbox, cancel: Option<&CancellationToken>) {
    match op {
        Op::Interrupt => {
            if let Some(cancel) = cancel {
                cancel.cancel();
            }
        }
        Op::Approve { id, decision } => {
            if !outbox.gate.approve(id, decision) {
                tracing::debug!("approval {id} was answered after it stopped waiting");
            }
        }
        Op::Answer { id, text } => {
            if !outbox.gate.clarify(id, text) {
                tracing::debug!("question {id} was answered after it stopped waiting");
            }
        }
        Op::SetYolo { on } => {
            outbox.gate.set_yolo(on);
            outbox.send(Event::YoloChanged { on });
        }
        Op::Steer { text } => outbox.gate.steer(text),
        other @ (Op::UserTurn { .. }
        | Op::Compact { .. }
        | Op::Undo
        | Op::Retry
        | Op::SetModel { .. }
        | Op::SetTitle { .. }
        | Op::NewSession
        | Op::Resume { .. }
        | Op::Rollback { .. }
        | Op::ContextReport
        | Op::CallTool { .. }
        | Op::Shutdown { .. }) => tracing::warn!("{other:?} is not carried out at once"),
    }
}

/// How a conversation's commands run: a gateway chat's, a scheduled job's and an API client's
/// (`talaria serve`) in the sandbox unless the operator set that platform or job unconfined
/// (never `[sandbox] commands` alone); the others' as `[sandbox] commands` says.
fn commands_confinement(start: &Start) -> Option<talaria_runtime::process::Confinement> {
    use talaria_runtime::process::Confinement;
    match start.platform {
        Platform::Gateway | Platform::Cron | Platform::Api => {
            Some(if start.unconfined_commands { Confinement::Unconfined } else { Confinement::Confined })
        }
        Platform::Cli | Platform::Acp | Platform::Subagent => None,
    }
}
