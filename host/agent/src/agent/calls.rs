//! Running the model's tool calls, every one through the same stages whatever runs it (the
//! agent's own tools, plugins, MCP servers, an editor): its arguments parsed once into a
//! [`ToolContext`]; `pre_tool_call` hooks and a human's approval when one asks; a checkpoint of
//! what it may change; its handler from the [`crate::Registry`]; `post_tool_call` and
//! `transform_tool_result` hooks; events; then, in call order, the result cap (the rest spilled
//! to a file) with what the user steered in.

use std::sync::Mutex;
use std::time::Instant;
use tracing::Instrument as _;

use futures_util::StreamExt as _;
use serde_json::Value;
use talaria_protocol::{Event, Image, Message, NoticeLevel, ToolCall, ToolError, ToolFinished, ToolStarted};
use tokio_util::sync::CancellationToken;

use crate::tools::ToolContext;

use super::{Agent, INTERRUPTED_RESULT, Scope, Selection, Start, builtin, lock, tools};

/// A call's result text and the images it returned.
type Finished = (String, Vec<Image>);

impl Agent {
    /// Run a batch of tool calls; results come back in call order. Returns whether the user
    /// interrupted (unfinished calls then carry an error result).
    pub(super) async fn run_tools(&self, calls: &[ToolCall], cancel: &CancellationToken) -> (Vec<Message>, bool) {
        // Each call parsed once, into what its handler receives.
        let parsed: Vec<Result<ToolContext, ToolError>> = calls
            .iter()
            .map(|call| {
                tools::parse_arguments(call).map(|arguments| ToolContext {
                    tool: call.name.clone(),
                    arguments,
                    session_id: self.session_id.clone(),
                    call_id: call.id.clone(),
                    workspace: self.shared.config.workspace.clone(),
                    images: tools::Attached::default(),
                })
            })
            .collect();
        let annotations = |name: &str| self.tools.iter().find(|t| t.name == name).map(|t| &t.annotations);
        let rows: Vec<_> = calls
            .iter()
            .zip(&parsed)
            .map(|(c, ctx)| (c, ctx.as_ref().ok().map(|ctx| &ctx.arguments), annotations(&c.name)))
            .collect();
        let parallel = tools::parallel_safe(&rows, &self.shared.config.workspace);
        // Each call's result text and the images it returned, once it finished.
        let slots: Mutex<Vec<Option<Finished>>> = Mutex::new(vec![None; calls.len()]);
        // When each call started, for the time an interrupted one ran.
        let starts: Mutex<Vec<Option<Instant>>> = Mutex::new(vec![None; calls.len()]);
        let this = self;
        let run_one = |i: usize| {
            let (slots, starts) = (&slots, &starts);
            let call = &calls[i];
            let ctx = &parsed[i];
            let span = this.tool_span(call);
            async move {
                let started = Instant::now();
                lock(starts)[i] = Some(started);
                this.emitter.emit(Event::ToolStarted(ToolStarted {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    arguments: call.arguments.clone(),
                    preview: tools::preview(&call.name, ctx.as_ref().ok().map(|ctx| &ctx.arguments)),
                }));
                let writes = match (ctx, annotations(&call.name)) {
                    (Ok(ctx), Some(a)) => tools::Snapshot::before(a, &ctx.arguments, &this.shared.config.workspace),
                    _ => tools::Snapshot::default(),
                };
                let mut allowed = true;
                let result = match ctx {
                    Ok(ctx) => match this.tool_allowed(call, &ctx.arguments).await.inspect_err(|_| allowed = false) {
                        Ok(()) => {
                            this.emitter.emit(Event::ToolRunning { call_id: call.id.clone() });
                            let ticket = this.checkpoint(call, &ctx.arguments).await;
                            let result = this.dispatch(ctx, cancel).await;
                            // The result carries the output; what was shown of it as it ran goes.
                            this.shared.gate.take_output(&call.id);
                            if let (Some(ticket), Some(store)) = (ticket, this.shared.checkpoints.clone()) {
                                let _ = tokio::task::spawn_blocking(move || store.after(&ticket)).await;
                            }
                            result
                        }
                        Err(e) => Err(e),
                    },
                    Err(e) => Err(e.clone()),
                };
                let (text, ok) = match result {
                    Ok(text) => (text, true),
                    Err(e) => (e.to_json().to_string(), false),
                };
                let millis = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                let text = this.tool_finished(call, text, ok, millis).await;
                let span = tracing::Span::current();
                let outcome = match (ctx.is_ok(), allowed, ok) {
                    (false, _, _) => "bad_arguments",
                    (true, false, _) => "refused",
                    (true, true, true) => "ok",
                    (true, true, false) => "error",
                };
                span.record("talaria.outcome", outcome);
                if !ok {
                    span.record("otel.status_code", "ERROR");
                }
                if talaria_protocol::trace::content() {
                    span.record("gen_ai.tool.call.arguments", call.arguments.as_str());
                    span.record("gen_ai.tool.call.result", text.as_str());
                }
                this.emitter.emit(Event::ToolFinished(ToolFinished {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    ok,
                    preview: tools::one_line(&text, 100),
                    result: text.clone(),
                    duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                    changes: writes.changes(),
                }));
                let images = match ctx {
                    Ok(ctx) if ok => ctx.images.take(),
                    _ => Vec::new(),
                };
                lock(slots)[i] = Some((text, images));
            }
            .instrument(span)
        };
        let work = async {
            if parallel {
                futures_util::stream::iter(0..calls.len()).map(run_one).buffer_unordered(8).collect::<Vec<()>>().await;
            } else {
                for i in 0..calls.len() {
                    run_one(i).await;
                }
            }
        };
        let interrupted = tokio::select! {
            biased;
            () = cancel.cancelled() => true,
            () = work => false,
        };
        let slots = slots.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
        let starts = starts.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut budget = self.shared.config.batch_result_cap;
        let mut out = Vec::with_capacity(calls.len());
        for ((call, slot), started) in calls.iter().zip(slots).zip(starts) {
            let mut images = Vec::new();
            let text = match slot {
                Some((text, returned)) => {
                    images = returned;
                    self.unseen_images(call, &images);
                    self.cap_result(call, text, &mut budget)
                }
                None => {
                    let text = interrupted_result(&self.shared.gate.take_output(&call.id));
                    self.emitter.emit(Event::ToolFinished(ToolFinished {
                        call_id: call.id.clone(),
                        name: call.name.clone(),
                        ok: false,
                        preview: "interrupted".into(),
                        result: text.clone(),
                        duration_ms: started.map_or(0, |s| u64::try_from(s.elapsed().as_millis()).unwrap_or(u64::MAX)),
                        changes: Vec::new(),
                    }));
                    text
                }
            };
            out.push(Message::Tool { tool_call_id: call.id.clone(), name: call.name.clone(), content: text, images });
        }
        (out, interrupted)
    }

    /// The span of one tool call, named as OpenTelemetry's GenAI conventions name it.
    fn tool_span(&self, call: &ToolCall) -> tracing::Span {
        use tracing::field::Empty;
        let plugin = self.tools.iter().find(|t| t.name == call.name).map_or("", |t| t.plugin.as_str());
        tracing::info_span!(
            target: talaria_protocol::trace::TARGET,
            "execute_tool",
            otel.name = format!("execute_tool {}", call.name),
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %call.name,
            gen_ai.tool.call.id = %call.id,
            talaria.plugin = plugin,
            talaria.outcome = Empty,
            gen_ai.tool.call.arguments = Empty,
            gen_ai.tool.call.result = Empty,
            otel.status_code = Empty,
        )
    }

    /// Run one tool as the model would call it, without the model (`talaria tools call`):
    /// every stage a call of the model passes (`run_tools`), the result cap included; the
    /// events carry the whole result; `cancel` stops it as an interrupt stops a turn. Nothing is
    /// added to the history.
    pub async fn call_tool(&self, name: &str, arguments: &str, cancel: &CancellationToken) {
        let call = ToolCall::new(crate::model::new_call_id(), name, arguments);
        self.run_tools(&[call], cancel).await;
    }

    /// Keep the files `call` may change, when checkpoints are on and it changes any.
    async fn checkpoint(&self, call: &ToolCall, args: &Value) -> Option<crate::checkpoints::Ticket> {
        let store = self.shared.checkpoints.clone()?;
        let annotations = self.tools.iter().find(|t| t.name == call.name).map(|t| t.annotations.clone());
        let workspace = self.shared.config.workspace.clone();
        if !store.may_keep(&call.name, args, annotations.as_ref(), &workspace) {
            return None;
        }
        let (session, tool, id, args) = (self.session_id.clone(), call.name.clone(), call.id.clone(), args.clone());
        tokio::task::spawn_blocking(move || store.before(&session, &tool, &id, &args, annotations.as_ref(), &workspace))
            .await
            .ok()
            .flatten()
    }

    /// Run an offered tool with the handler the registry holds for it.
    async fn dispatch(&self, ctx: &ToolContext, cancel: &CancellationToken) -> Result<String, ToolError> {
        let handler = self.tools.iter().any(|t| t.name == ctx.tool).then(|| self.registry.handler(&ctx.tool)).flatten();
        let Some(handler) = handler else {
            let known: Vec<&str> = self.tools.iter().map(|t| t.name.as_str()).collect();
            return Err(ToolError::UnknownTool(format!("{}; the tools available are: {}", ctx.tool, known.join(", "))));
        };
        handler.call(ctx, Scope { agent: self, cancel }).await
    }

    /// `skill_manage`: checked, asked about when the skill is the user's, done, and told.
    pub(super) async fn manage_skill(&self, ctx: &ToolContext) -> Result<String, ToolError> {
        let cfg = &self.shared.config;
        let plan = crate::skills::manage::plan(&cfg.home, &cfg.workspace, &cfg.project_skills, &ctx.arguments)
            .map_err(|e| ToolError::InvalidArgs(e.to_string()))?;
        if let Some(what) = &plan.ask {
            let gate = &self.shared.gate;
            if !gate.interactive() {
                return Err(ToolError::Failed(format!(
                    "nobody here can allow you to {what}; it was not changed (the user can, with `talaria skills edit`)"
                )));
            }
            let ask = crate::approval::Ask {
                kind: talaria_protocol::ApprovalKind::Skill,
                plugin: builtin::PROVIDER,
                command: what,
                reason: "the user wrote it; the agent changes only its own skills without asking",
                call_id: &ctx.call_id,
            };
            if matches!(gate.ask_human(&ask).await, crate::approval::Decision::Deny) {
                return Err(ToolError::Failed(format!(
                    "the user did not allow you to {what}; it was not changed. Do not try again unless they ask"
                )));
            }
        }
        let notice = plan.notice();
        let home = cfg.home.clone();
        let done = match tokio::task::spawn_blocking(move || plan.apply(&home)).await {
            Ok(done) => done.map_err(|e| ToolError::Failed(e.to_string()))?,
            Err(e) => return Err(ToolError::Failed(format!("skill_manage stopped: {e}"))),
        };
        self.emitter.emit(Event::Notice { level: NoticeLevel::Info, text: notice });
        Ok(done.to_string())
    }

    /// `delegate_task`: child agents with their own budget and a restricted toolset, run
    /// concurrently; only each child's final answer comes back.
    pub(super) async fn delegate(&self, args: &Value, cancel: &CancellationToken) -> Result<Value, ToolError> {
        let tasks = builtin::delegate::tasks(args)?;
        let limit = self.shared.config.max_children.max(1);
        let runs = futures_util::stream::iter(tasks.into_iter().enumerate())
            .map(|(i, task)| {
                let shared = self.shared.clone();
                let shared_hooks = self.shared.hooks.clone();
                let emitter = self.emitter.child(format!("child {}", i + 1));
                let parent = self.session_id.clone();
                let cancel = cancel.child_token();
                async move {
                    let selection = task.toolsets.clone().map(|t| Selection { enabled: Some(t), disabled: Vec::new() });
                    let start = Start { resume: None, parent: Some(parent), selection };
                    let started = Instant::now();
                    let child = Agent::start(shared, emitter, start).await;
                    let mut child = match child {
                        Ok(c) => c,
                        Err(e) => return builtin::delegate::failed(i, &task, &e.to_string()),
                    };
                    let end = Box::pin(child.run_turn(&task.prompt(), &cancel)).await;
                    if shared_hooks.wants(talaria_protocol::HookKind::SubagentStop) {
                        self.observe(talaria_protocol::HookEvent::SubagentStop {
                            parent_session_id: self.session_id.clone(),
                            child_session_id: child.session_id().to_string(),
                            goal: task.goal.clone(),
                            summary: end.text.clone(),
                            status: end.outcome.name().to_string(),
                            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                        })
                        .await;
                    }
                    builtin::delegate::report(i, &task, child.session_id(), &end, started.elapsed())
                }
            })
            .buffered(limit)
            .collect::<Vec<Value>>()
            .await;
        Ok(serde_json::json!({ "results": runs }))
    }

    /// Tell the user when a call returned images the model will not see (the model is told
    /// too, with the request; see `model::reply::tool_text`).
    fn unseen_images(&self, call: &ToolCall, images: &[Image]) {
        // No model at all (`tools call`): nobody to tell.
        if images.is_empty() || self.chain.providers.is_empty() {
            return;
        }
        let provider = self.chain.active(&self.chain_state);
        if provider.vision {
            return;
        }
        self.emitter.warn(format!(
            "{} returned {} that {} will not see: it does not take images, as far as talaria knows \
             (set vision = true under [model] in config.toml if it does)",
            call.name,
            crate::images::counted(images.len()),
            provider.label()
        ));
    }

    /// Results over the cap go to a file; the model gets a preview and the path.
    fn cap_result(&self, call: &ToolCall, text: String, budget: &mut usize) -> String {
        let cfg = &self.shared.config;
        let len = text.chars().count();
        let cap = cfg.result_cap.min(*budget);
        if len <= cap {
            *budget = budget.saturating_sub(len);
            return text;
        }
        let spilled = crate::tools::spill(&cfg.home, &self.session_id, &call.id, &text, cfg.preview_chars);
        *budget = budget.saturating_sub(spilled.head_len);
        if let Some(path) = &spilled.saved {
            self.emitter.emit(Event::Notice {
                level: NoticeLevel::Info,
                text: format!("{} returned {len} chars; saved to {}", call.name, path.display()),
            });
        }
        spilled.text
    }
}

/// The result of a call cut short: the error, and what its command had printed by then (the
/// last [`crate::approval::OUTPUT_KEPT`] bytes of it).
fn interrupted_result(output: &str) -> String {
    if output.is_empty() {
        serde_json::json!({"error": INTERRUPTED_RESULT}).to_string()
    } else {
        serde_json::json!({"error": INTERRUPTED_RESULT, "output_so_far": output}).to_string()
    }
}
