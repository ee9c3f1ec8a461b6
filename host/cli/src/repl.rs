//! The interactive chat: lines from [`crate::lines`], slash commands from [`crate::slash`], streamed
//! answers, and approvals answered in place.
//!
//! While a turn runs, the editor is idle and [`BusyInput`] reads whole lines; [`crate::during`]
//! says what each means (an answer, `/stop`, or a message for the busy-input policy).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::process::ExitCode;
use std::rc::Rc;

use owo_colors::OwoColorize as _;
use talaria_agent::model::Provider;
use talaria_core::config::BusyInput as BusyPolicy;
use talaria_protocol::{Event, Image, Message, Op, Outcome, Stamped};

use crate::busy::{BusyInput, KeysHeld};
use crate::chat::{self, ChatArgs, Session, Step, drive};
use crate::during::{Busy, Waiting, approval_prompt, busy_hint, decision, describe, question_prompt};
use crate::lines::{Input, Lines};
use crate::render::Renderer;
use crate::slash::{COMMANDS, lookup, parse_slash, yolo_state};
use crate::{Ctx, ui};

/// What the REPL keeps between turns.
struct Repl {
    session: Session,
    renderer: Renderer,
    /// Lines typed while a turn ran, and `/retry`'s message, to send next.
    queue: VecDeque<String>,
    /// `[model]` input, output and cached-input prices per million tokens.
    prices: (Option<f64>, Option<f64>, Option<f64>),
    /// What a message typed during a turn does.
    busy_policy: BusyPolicy,
    /// Typed during the last turn and not sent: the next prompt starts with it.
    typed: String,
    /// At a terminal, its keys for as long as the REPL runs.
    keys: Option<KeysHeld>,
}

/// Run the REPL until Ctrl-D or /exit.
pub async fn run(ctx: &Ctx, session: Session, _args: &ChatArgs) -> anyhow::Result<ExitCode> {
    let mut lines = Lines::new(ctx);
    if lines.interactive() {
        // Code highlighting loads its grammars once; do it before the first code block needs them.
        let _ = std::thread::Builder::new().name("highlight".into()).spawn(crate::markdown::warm_up);
    }
    let renderer = Renderer::new(true)
        .with_workspace(ctx.workspace.clone())
        .with_reasoning(ctx.config.terminal.show_reasoning.unwrap_or(true));
    let prices =
        ctx.config.model.as_ref().map_or((None, None, None), |m| (m.input_price, m.output_price, m.cache_read_price));
    let mut repl = Repl {
        session,
        renderer,
        queue: VecDeque::new(),
        prices,
        busy_policy: ctx.config.terminal.busy_input,
        typed: String::new(),
        keys: lines.interactive().then(KeysHeld::take),
    };
    if let Some(held) = &mut repl.keys {
        let (ended, rest) = held.typed_ahead();
        repl.queue.extend(ended);
        repl.typed = rest;
    }
    repl.banner(lines.interactive());
    if let Some(note) = sandbox_note(ctx) {
        ui::warn(&note);
    }
    let stop = repl.session.stop.clone();
    loop {
        if stop.signal().is_some() {
            break;
        }
        let line = match repl.queue.pop_front() {
            Some(l) => {
                // Typed during the last turn: shown as it goes out.
                putln!(anstream::stdout(), "{} {}", "›".bold(), talaria_runtime::visible(&l, 2_000));
                l
            }
            None => {
                let prefill = std::mem::take(&mut repl.typed);
                let input = tokio::select! {
                    input = lines.next(prefill) => input,
                    () = stop.arrived() => break,
                };
                match input {
                    Input::Line(l) => l,
                    Input::Cancelled => continue,
                    Input::Eof => break,
                    Input::HungUp => {
                        stop.hang_up();
                        break;
                    }
                }
            }
        };
        let line = line.trim().to_string();
        if line.is_empty() {
            continue;
        }
        if line.starts_with('/') {
            match repl.slash(&line, lines.interactive()).await {
                Ok(true) => continue,
                Ok(false) => break,
                Err(e) => {
                    ui::error(&format!("{e:#}"));
                    continue;
                }
            }
        }
        let vision = vision(repl.session.conversation.info().provider.as_ref());
        let (text, images) = attach(&line, &ctx.workspace, &vision);
        repl.turn(Op::UserTurn { text, images, sender: None, trace: None }, lines.interactive()).await;
    }
    let reason = if stop.signal().is_some() { "signal" } else { "exit" };
    let info = repl.session.conversation.info();
    chat::close(&mut repl.session, reason).await;
    if info.messages > 0 {
        // The session it ends in (compression may have moved it on), by title when it has one.
        let key = match repl.session.host.store().session(&info.session_id).await {
            Ok(Some(s)) => s.title.unwrap_or(s.id),
            _ => info.session_id.clone(),
        };
        let hint = format!("resume this conversation with: talaria chat --resume {}", ui::shell_quote(&key));
        putln!(anstream::stdout(), "{}", hint.dimmed());
    }
    if let Some(code) = stop.exit_code() {
        // A read of the terminal may still be blocked in another thread: leave without waiting.
        crate::signals::exit_now(code);
    }
    Ok(ExitCode::SUCCESS)
}

/// What the banner says about where commands run, when it is not the confined default.
fn sandbox_note(ctx: &Ctx) -> Option<String> {
    use talaria_runtime::process::Confinement;
    let sandbox = ctx.config.command_sandbox(&ctx.home);
    match (sandbox.confinement, &sandbox.launcher) {
        (Confinement::Unconfined, _) => Some(
            "commands run UNCONFINED ([sandbox] commands = \"unconfined\"): as you, with all your files, processes and network"
                .into(),
        ),
        (Confinement::Confined, Err(e)) => Some(format!("shell commands will be refused: {e}")),
        (Confinement::Confined, Ok(_)) => None,
    }
}

impl Repl {
    fn banner(&self, interactive: bool) {
        let info = self.session.conversation.info();
        let model = info.provider.as_ref().map_or_else(String::new, Provider::label);
        let state = if info.messages == 0 { "new session".to_string() } else { format!("resumed {}", info.session_id) };
        let line = format!("talaria · {model} · {} tools · {state}", info.tools.len());
        if interactive {
            putln!(anstream::stdout(), "{}", line.bold());
            let keys = [
                "/help for commands",
                "Alt-Enter or Ctrl-J for a new line",
                "Esc or Ctrl-C stops a reply",
                "Ctrl-D leaves",
            ]
            .map(String::from);
            putln!(anstream::stdout(), "{}", ui::fit_joined(&keys, " · ", 0).dimmed());
        } else {
            putln!(std::io::stdout(), "{line}");
        }
        if info.messages > 0 {
            show_tail(&info.tail, 6);
        }
    }

    /// Run a turn (`op`: a message, or `/retry`), answering approvals and questions in place.
    /// At a terminal, what is typed meanwhile stays in the footer's input line; Enter hands it
    /// to the busy-input policy (see [`Busy`]).
    async fn turn(&mut self, op: Op, interactive: bool) {
        let policy = self.busy_policy;
        if interactive {
            crate::screen::begin(ui::color_wanted(), busy_hint(policy));
        }
        let mut busy = self.keys.as_ref().map(|k| BusyInput::start(std::mem::take(&mut self.typed), k));
        let answer_keys = busy.as_ref().map(BusyInput::answer_keys);
        let yolo = Rc::new(std::cell::Cell::new(self.session.conversation.yolo()));
        let state: Rc<RefCell<Busy>> = Rc::new(RefCell::new(Busy::default()));
        let mut handler = {
            let state = state.clone();
            let yolo = yolo.clone();
            move |step: Step<'_>, r: &mut Renderer, submit: &talaria_core::Submitter| {
                let mut st = state.borrow_mut();
                let keys = |on: bool| {
                    if let Some(k) = &answer_keys {
                        k.store(on, std::sync::atomic::Ordering::Relaxed);
                    }
                };
                match step {
                    Step::Event(Stamped { event: Event::ApprovalNeeded(a), .. }) => {
                        r.progress(&ui::wrap_block(&approval_prompt(a), crate::screen::terminal_size().0));
                        st.waiting = Waiting::Approval(a.id);
                        keys(true);
                    }
                    Step::Event(Stamped { event: Event::ClarifyNeeded(q), .. }) => {
                        r.progress(&question_prompt(q));
                        st.waiting = Waiting::Question(q.id, q.choices.clone());
                    }
                    Step::Event(Stamped { event: Event::Steered { text, delivered }, .. }) => {
                        st.steering.retain(|t| t != text);
                        if *delivered {
                            r.progress(&format!("{} {}", "↳ the model was told:".dimmed(), ui::first_line(text, 80)));
                        } else {
                            st.queued.push(text.clone());
                        }
                    }
                    Step::Event(Stamped { event: Event::Error { text }, .. }) => r.error(text),
                    Step::Event(_) => {}
                    Step::Line(line) if line == crate::busy::STOP_KEY => {
                        keys(false);
                        st.waiting = Waiting::None;
                        submit.submit(Op::Interrupt);
                        r.progress("stopping… (Esc)");
                    }
                    Step::Line(line) => match std::mem::replace(&mut st.waiting, Waiting::None) {
                        Waiting::Approval(id) => {
                            keys(false);
                            let d = decision(&line);
                            submit.submit(Op::Approve { id, decision: d });
                            r.progress(&format!("  → {}", describe(d)));
                        }
                        Waiting::Question(id, choices) => {
                            let answer = line
                                .trim()
                                .parse::<usize>()
                                .ok()
                                .and_then(|n| choices.get(n.wrapping_sub(1)).cloned())
                                .unwrap_or_else(|| line.trim().to_string());
                            submit.submit(Op::Answer { id, text: answer });
                        }
                        Waiting::None => st.typed_line(line, policy, r, submit, &yolo),
                    },
                }
                crate::screen::update(|f| f.pending = st.pending());
            }
        };
        let end =
            drive(&mut self.session, &mut self.renderer, op, busy.as_mut().map(|b| &mut b.lines), &mut handler).await;
        let mut st = std::mem::take(&mut *state.borrow_mut());
        if let Some(b) = busy.as_mut() {
            self.typed = b.stop();
            // Lines sent after the last event: after the turn, in order.
            while let Ok(line) = b.lines.try_recv() {
                if !line.trim().is_empty() && !matches!(st.waiting, Waiting::Approval(_)) {
                    st.queued.push(line);
                }
            }
            crate::screen::end();
        }
        // Approvals left waiting (the turn ended first) are denied by the gate's timeout.
        let interrupted = end.as_ref().is_some_and(|e| matches!(e.outcome, Outcome::Interrupted));
        if let Some(next) = st.interrupt_with.take() {
            st.queued.insert(0, next);
        } else if interrupted && !st.queued.is_empty() {
            // Stopped by the user (Ctrl-C, /stop): nothing they queued goes out by surprise.
            let back = st.queued.join("\n");
            self.typed = if self.typed.is_empty() { back } else { format!("{back}\n{}", self.typed) };
            st.queued.clear();
            ui::note("not sent: what you queued is back in the input line");
        }
        self.queue.extend(st.queued);
        if interactive && let Some(end) = &end {
            self.status(&end.usage);
        }
        if end.is_some_and(|end| matches!(end.outcome, Outcome::BudgetExhausted)) {
            ui::note("the turn's model-call budget ran out (raise it with --max-turns or [agent] max_turns)");
        }
    }

    /// Run a slash command; false means leave.
    async fn slash(&mut self, line: &str, interactive: bool) -> anyhow::Result<bool> {
        let Some((name, arg)) = parse_slash(line) else { return Ok(true) };
        let Some(cmd) = lookup(name) else {
            if let Some(text) = self.skill_message(name, arg) {
                ui::note(&format!("loading skill {name}"));
                self.turn(Op::UserTurn { text, images: Vec::new(), sender: None, trace: None }, interactive).await;
                return Ok(true);
            }
            let close: Vec<String> = COMMANDS
                .iter()
                .filter(|c| c.name.starts_with(&name[..name.len().min(2)]))
                .map(|c| format!("/{}", c.name))
                .collect();
            let hint = if close.is_empty() { String::new() } else { format!(" (did you mean {}?)", close.join(", ")) };
            anyhow::bail!("unknown command /{name}{hint}; /help lists them");
        };
        match cmd.name {
            "help" => {
                for c in COMMANDS {
                    let head = format!("/{} {}", c.name, c.args);
                    let aliases = if c.aliases.is_empty() {
                        String::new()
                    } else {
                        format!(" (also /{})", c.aliases.join(", /"))
                    };
                    let help = ui::fit(&format!("{}{}", c.help, aliases.dimmed()), 31, 31);
                    putln!(anstream::stdout(), "  {:<28} {help}", head.trim_end().bold());
                }
                putln!(
                    anstream::stdout(),
                    "  {:<28} load a skill into the conversation (`talaria skills list` shows them)",
                    "/SKILL-NAME [REQUEST]".bold()
                );
            }
            "exit" => return Ok(false),
            "new" => {
                if let Event::SessionStarted(s) = self.request(Op::NewSession).await? {
                    ui::note(&format!("new session {}", s.session_id));
                }
            }
            "sessions" => self.list_sessions().await?,
            "resume" if arg.is_empty() && !interactive => self.list_sessions().await?,
            "resume" => {
                let key = if arg.is_empty() {
                    let store = self.session.host.store().clone();
                    match crate::sessions::pick(&store, &self.session.conversation.info().workspace).await? {
                        Some(id) => id,
                        None => return Ok(true),
                    }
                } else {
                    arg.to_string()
                };
                if let Event::SessionStarted(s) = self.request(Op::Resume { key }).await? {
                    ui::note(&format!("resumed {}", s.session_id));
                    show_tail(&self.session.conversation.info().tail, 6);
                }
            }
            "model" if arg.is_empty() => {
                let Some(p) = self.session.conversation.info().provider else { return Ok(true) };
                putln!(std::io::stdout(), "{} ({}, {})", p.label(), p.api_mode.as_str(), p.base_url);
                let Some(model) = pick_model(&p, interactive).await else { return Ok(true) };
                if let Event::ModelChanged { model } = self.request(Op::SetModel { model }).await? {
                    ui::note(&format!("now using {model}"));
                }
            }
            "model" => {
                if let Event::ModelChanged { model } = self.request(Op::SetModel { model: arg.to_string() }).await? {
                    ui::note(&format!("now using {model}"));
                }
            }
            "tools" => {
                let rows: Vec<Vec<String>> = self
                    .session
                    .conversation
                    .info()
                    .tools
                    .iter()
                    .map(|t| vec![t.name.clone(), t.plugin.clone(), ui::first_line(&t.description, 70)])
                    .collect();
                ui::table(&["TOOL", "FROM", "DESCRIPTION"], &rows);
            }
            "undo" => match self.request(Op::Undo).await? {
                Event::Undone { text: Some(text) } => ui::note(&format!("forgot: {}", ui::first_line(&text, 70))),
                _ => ui::note("nothing to undo"),
            },
            "retry" => self.turn(Op::Retry, interactive).await,
            "rollback" => {
                let (steps, force) = parse_rollback(arg)?;
                match self.request(Op::Rollback { steps, force }).await? {
                    Event::RolledBack { text, ok: true } => {
                        for line in text.lines() {
                            ui::note(line);
                        }
                    }
                    Event::RolledBack { text, ok: false } => ui::warn(&text),
                    _ => {}
                }
            }
            "prompt" => {
                let mut words = arg.split_whitespace();
                let (Some(server), Some(name)) = (words.next(), words.next()) else {
                    anyhow::bail!(
                        "usage: /prompt SERVER NAME [ARG=VALUE...] (the mcp_SERVER_prompts_list tool lists them)"
                    );
                };
                let mut arguments = serde_json::Map::new();
                for pair in words {
                    let Some((key, value)) = pair.split_once('=') else {
                        anyhow::bail!("`{pair}`: give prompt arguments as NAME=VALUE");
                    };
                    arguments.insert(key.to_string(), serde_json::Value::String(value.to_string()));
                }
                let text = self.session.host.mcp().prompt(server, name, arguments).await?;
                ui::note(&format!("sending prompt {name} of {server} ({} chars)", text.chars().count()));
                self.turn(Op::UserTurn { text, images: Vec::new(), sender: None, trace: None }, interactive).await;
            }
            "stop" => ui::note("nothing is running"),
            "permissions" => self.permissions(arg)?,
            "expand" => {
                let n = arg.parse::<usize>().map_err(|_| {
                    anyhow::anyhow!(
                        "usage: /expand N, N the number a folded output names (`… 12 more lines · /expand 3`)"
                    )
                })?;
                self.renderer.expand(n).map_err(anyhow::Error::msg)?;
            }
            "usage" => self.usage().await?,
            "title" if arg.is_empty() => anyhow::bail!("usage: /title NAME"),
            "title" => {
                if let Event::TitleChanged { title } = self.request(Op::SetTitle { title: arg.to_string() }).await? {
                    ui::note(&format!("titled \"{title}\""));
                }
            }
            "compress" => {
                let focus = (!arg.is_empty()).then(|| arg.to_string());
                match self.request(Op::Compact { focus }).await {
                    Ok(Event::Compacted { note, before, after, .. }) if after >= before => {
                        ui::note(&format!("{note} ({before} messages, left as they were)"));
                    }
                    Ok(Event::Compacted { note, before, after, session_id }) => {
                        ui::note(&format!("{note} ({before} → {after} messages); continuing in session {session_id}"));
                    }
                    Ok(_) => {}
                    // A short conversation is a state, not a failure.
                    Err(e) if e.to_string().starts_with("there is nothing to compress") => ui::note(&e.to_string()),
                    Err(e) => return Err(e),
                }
            }
            "context" => {
                if let Event::ContextReport { engine, status, lines } = self.request(Op::ContextReport).await? {
                    putln!(std::io::stdout(), "{}", crate::context::status_lines(&engine, &status, &lines));
                }
            }
            "yolo" => putln!(std::io::stdout(), "{}", yolo_state(self.session.conversation.yolo())),
            other => anyhow::bail!("/{other} is not available here"),
        }
        Ok(true)
    }

    /// `/<skill-name> [request]`: the message loading the skill, if there is one of that name.
    fn skill_message(&self, name: &str, request: &str) -> Option<String> {
        let host = &self.session.host;
        let trust = talaria_core::project_skills(host.home(), host.workspace());
        let found = talaria_agent::skills::discover(host.home(), host.workspace(), &trust);
        let skill = found.skills.iter().find(|s| s.name == name)?;
        Some(talaria_agent::skills::load_message(skill, request))
    }

    /// What a million tokens of `model` cost: `[model]`'s prices, else the bundled table's.
    fn prices_of(&self, model: &str) -> Option<crate::status::Prices> {
        let (input, output, cached) = self.prices;
        crate::status::Prices::find(model, input, output, cached)
    }

    /// The status line after a turn that used `turn`.
    fn status(&self, turn: &talaria_protocol::Usage) {
        let info = self.session.conversation.info();
        let Some(provider) = &info.provider else { return };
        let context = self.renderer.last_call.as_ref().map_or(0, |u| u.input_tokens + u.output_tokens);
        let status = crate::status::Status {
            model: &provider.label(),
            context: (context, info.context_length),
            turn,
            session: &info.usage,
            prices: self.prices_of(&provider.model),
        };
        putln!(anstream::stdout(), "{}", ui::fit_joined(&status.parts(), " · ", 2).dimmed());
    }

    /// Submit `op` and wait for its answer, rendering what comes before it; an error answer
    /// becomes `Err`.
    async fn request(&mut self, op: Op) -> anyhow::Result<Event> {
        let renderer = &mut self.renderer;
        let last = self.session.conversation.run(op, |stamped| renderer.handle(&stamped.event)).await;
        match last.map(|s| s.event) {
            Some(Event::Error { text }) => Err(anyhow::anyhow!(text)),
            Some(event) => Ok(event),
            None => Err(anyhow::anyhow!("the conversation has stopped")),
        }
    }

    async fn usage(&self) -> anyhow::Result<()> {
        let info = self.session.conversation.info();
        let (usage, calls) = (info.usage, info.api_calls);
        let stored = self.session.host.store().session(&info.session_id).await?;
        let line = match stored {
            Some(s) => format!(
                "session {}: {}, {}{} input tokens ({} cached), {}{} output tokens; this run: {}, {}{} in / {}{} out{}",
                s.id,
                ui::count(s.api_call_count, "model call", "model calls"),
                s.usage.approx(),
                s.usage.input_tokens,
                s.usage.cache_read_tokens,
                s.usage.approx(),
                s.usage.output_tokens,
                ui::count(calls, "call", "calls"),
                usage.approx(),
                usage.input_tokens,
                usage.approx(),
                usage.output_tokens,
                if s.usage.estimated || usage.estimated {
                    " (~ estimated: the provider reported no usage)"
                } else {
                    ""
                }
            ),
            None => "nothing sent yet".to_string(),
        };
        putln!(std::io::stdout(), "{}", ui::fit(&line, 2, 0));
        if let Some(provider) = &info.provider {
            let prices = match self.prices_of(&provider.model) {
                Some(p) if p.bundled => format!(
                    "prices: ${} in, ${} out per million tokens, from the bundled table of {} (set [model] input_price and output_price to correct them)",
                    p.input,
                    p.output,
                    crate::status::TABLE_DATE
                ),
                Some(p) => format!("prices: ${} in, ${} out per million tokens, from [model]", p.input, p.output),
                None => format!(
                    "no prices known for {}: set [model] input_price and output_price (US dollars per million tokens) to see costs",
                    provider.model
                ),
            };
            putln!(anstream::stdout(), "{}", ui::fit(&prices, 2, 0).dimmed());
        }
        Ok(())
    }

    /// `/permissions`: what runs without asking in this session, by key; `/permissions remove
    /// KEY`: ask again (an always rule is taken out of config.toml as well).
    fn permissions(&self, arg: &str) -> anyhow::Result<()> {
        let host = &self.session.host;
        let info = self.session.conversation.info();
        let mut words = arg.split_whitespace();
        match (words.next(), words.next()) {
            (None, _) => {
                let allowed = host.allowed(&info.workspace, &info.session_id)?;
                if allowed.is_empty() {
                    ui::note("nothing runs without asking: every dangerous command and new host is asked about");
                    return Ok(());
                }
                let rows: Vec<Vec<String>> = allowed
                    .iter()
                    .map(|a| {
                        let scope = match (a.scope, a.configured) {
                            (talaria_runtime::Approval::Session, _) => "this session",
                            (_, true) => "always (config.toml)",
                            _ => "always (saved in config.toml)",
                        };
                        vec![a.key.clone(), scope.to_string()]
                    })
                    .collect();
                ui::table(&["KEY", "ALLOWED"], &rows);
                ui::note("`/permissions remove KEY` asks about it again");
            }
            (Some("remove"), Some(key)) => {
                let forgotten = host.forget(&info.workspace, &info.session_id, key)?;
                let saved = talaria_core::config::disallow(host.home(), key)?;
                match (forgotten || saved, saved) {
                    (false, _) => anyhow::bail!("`{key}` is not allowed without asking (see /permissions)"),
                    (true, true) => ui::note(&format!("`{key}` is asked about again; taken out of config.toml")),
                    (true, false) => ui::note(&format!("`{key}` is asked about again in this session")),
                }
            }
            _ => anyhow::bail!("usage: /permissions, or /permissions remove KEY"),
        }
        Ok(())
    }

    async fn list_sessions(&self) -> anyhow::Result<()> {
        let list = self.session.host.store().list_sessions(10, 0).await?;
        if list.is_empty() {
            ui::note("no sessions yet");
        }
        let rows: Vec<Vec<String>> = list
            .iter()
            .map(|s| {
                let name = crate::sessions::display_title(s);
                vec![s.id.clone(), ui::first_line(&name, 50), s.message_count.to_string()]
            })
            .collect();
        ui::table(&["ID", "TITLE", "MESSAGES"], &rows);
        Ok(())
    }
}

/// At a terminal, a model of those `provider`'s endpoint lists, chosen by the user (the one in
/// use marked first); `None` when they leave the list, or it cannot be had (said why).
async fn pick_model(provider: &talaria_agent::model::Provider, interactive: bool) -> Option<String> {
    if !interactive {
        return None;
    }
    let client = talaria_agent::model::Client::try_new().ok()?;
    let listed = match client.models(provider).await {
        Ok(Some(listed)) if !listed.is_empty() => listed,
        Ok(_) => {
            ui::note("the endpoint lists no models: /model NAME changes it");
            return None;
        }
        Err(e) => {
            ui::warn(&format!("cannot list the endpoint's models ({e}): /model NAME changes it"));
            return None;
        }
    };
    let at = listed.iter().position(|m| *m == provider.model).unwrap_or(0);
    let entries: Vec<crate::picker::Entry> = listed
        .into_iter()
        .map(|m| crate::picker::Entry {
            label: if m == provider.model { format!("{m} (in use)") } else { m.clone() },
            value: m,
        })
        .collect();
    tokio::task::spawn_blocking(move || crate::picker::pick("Use which model?", &entries, at))
        .await
        .ok()
        .flatten()
        .filter(|m| *m != provider.model)
}

/// `line` with the files it mentions (`@path`) attached, saying what was and was not; `images`:
/// `Ok` when the model takes images, else why not.
pub fn attach(line: &str, workspace: &std::path::Path, images: &Result<(), String>) -> (String, Vec<Image>) {
    let expanded = crate::mentions::expand(line, workspace, images);
    for a in &expanded.attached {
        ui::note(&format!("attached {a}"));
    }
    for r in &expanded.refused {
        ui::warn(&format!("not attached: {r}"));
    }
    (expanded.text, expanded.images)
}

/// Whether the model `provider` takes images (`[model] vision` for the configured model, else
/// a guess from its name), or why not.
pub fn vision(provider: Option<&Provider>) -> Result<(), String> {
    let Some(p) = provider else { return Err("no model is configured".into()) };
    if p.vision {
        Ok(())
    } else {
        Err(format!(
            "{} does not take images, as far as talaria knows (set [model] vision = true in config.toml if it does)",
            p.label()
        ))
    }
}

/// The last few user and assistant messages, to show where a resumed session stands.
fn show_tail(history: &[Message], n: usize) {
    let shown: Vec<&Message> =
        history.iter().filter(|m| matches!(m, Message::User { .. }) || !m.content().is_empty()).collect();
    for m in shown.iter().skip(shown.len().saturating_sub(n)) {
        match m {
            Message::User { content, .. } => {
                putln!(anstream::stdout(), "{} {}", "›".bold(), ui::first_line(content, 100))
            }
            Message::Assistant { content, .. } if !content.is_empty() => {
                putln!(anstream::stdout(), "{}", ui::first_line(content, 100).dimmed());
            }
            _ => {}
        }
    }
}

/// `/rollback [N] [force]`: how many checkpoints to undo (none: list them), and whether to
/// overwrite files changed since.
fn parse_rollback(arg: &str) -> anyhow::Result<(Option<u32>, bool)> {
    let mut steps = None;
    let mut force = false;
    for word in arg.split_whitespace() {
        match word {
            "force" | "--force" => force = true,
            n => match n.parse::<u32>() {
                Ok(n) if n > 0 && steps.is_none() => steps = Some(n),
                _ => anyhow::bail!(
                    "usage: /rollback [N] [force]: N is how many of the latest changes to undo (1 or more)"
                ),
            },
        }
    }
    Ok((steps, force))
}
