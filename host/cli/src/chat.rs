//! `talaria chat`: what the REPL ([`crate::repl`]) and `chat -q PROMPT` (here) share.
//!
//! Both open the host ([`talaria_core::Host`]), start a [`Conversation`] and render its events;
//! they differ in where the answer goes (streamed to stdout, or printed whole at the end) and
//! whether anyone can answer approvals.

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::Args;
use talaria_agent::model::Chain;
use talaria_core::{Conversation, Host, HostOptions, ModelChoice, Platform, Start, Submitter};
use talaria_protocol::{Event, Op, Outcome, Stamped, TurnEnd};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use crate::exit;
use crate::render::Renderer;
use crate::signals::{Stop, exit_now};
use crate::{Ctx, ui};

#[derive(Args, Debug, Default, Clone)]
pub struct ChatArgs {
    /// Send PROMPT, print the final answer on stdout (progress on stderr) and exit. `-q -`
    /// reads the prompt from stdin; text piped in beside a PROMPT is sent with it as context
    /// (`git diff | talaria chat -q "review this"`; at most 256 KiB).
    /// Exit codes: 0 answered, 1 failed, 3 budget exhausted, 4 answer cut off at the
    /// output-token limit, 129 hangup, 130 interrupted, 143 terminated
    #[arg(short = 'q', long = "query", value_name = "PROMPT")]
    pub query: Option<String>,
    #[command(flatten)]
    pub model: ModelFlags,
    /// Toolsets to enable, comma-separated (files, web, terminal, coding, memory, all, a plugin's name...)
    #[arg(short, long, value_delimiter = ',', value_name = "LIST")]
    pub toolsets: Option<Vec<String>>,
    /// Continue a session: its id (or a unique prefix), its title, or `latest`; with no value
    /// at a terminal, choose one from a list
    #[arg(
        short,
        long,
        value_name = "ID|TITLE|latest",
        conflicts_with = "cont",
        num_args = 0..=1,
        default_missing_value = ""
    )]
    pub resume: Option<String>,
    /// Continue the latest session started in this directory (`--resume latest`: the latest of all)
    #[arg(short = 'c', long = "continue")]
    pub cont: bool,
    /// Approve dangerous shell commands, and new hosts under wildcard network grants, without
    /// asking (forbidden commands and internal addresses stay refused)
    #[arg(long)]
    pub yolo: bool,
    /// Model calls per turn before stopping with a summary [default: 90]
    #[arg(long, value_name = "N")]
    pub max_turns: Option<u32>,
    /// Wait for whole replies instead of streaming them
    #[arg(long)]
    pub no_stream: bool,
    /// With --resume or --continue: carry on in a new session that starts as a copy of it (its
    /// child), leaving the original as it is — e.g. while another talaria is answering it
    #[arg(long)]
    pub fork: bool,
}

/// Everything a chat needs, built once.
pub struct Session {
    pub host: Host,
    pub conversation: Conversation,
    /// SIGTERM and SIGHUP, watched for the whole chat.
    pub stop: Stop,
}

/// The model flags of every command that talks to a model (`chat`, `acp`).
#[derive(Args, Debug, Default, Clone)]
pub struct ModelFlags {
    /// The model's name as the provider knows it
    #[arg(short, long)]
    pub model: Option<String>,
    /// openai | openrouter | anthropic | ollama | custom (any OpenAI-compatible base URL)
    #[arg(long)]
    pub provider: Option<String>,
    /// The provider's base URL, e.g. http://localhost:11434/v1
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// chat_completions | anthropic_messages | responses [default: from the provider]
    #[arg(long, value_name = "MODE")]
    pub api_mode: Option<String>,
}

impl ModelFlags {
    /// The model these flags choose, over config.
    pub fn choice(&self) -> ModelChoice {
        ModelChoice {
            provider: self.provider.clone(),
            model: self.model.clone(),
            base_url: self.base_url.clone(),
            api_mode: self.api_mode.clone(),
        }
    }
}

impl ChatArgs {
    /// The model these flags choose, over config.
    pub fn model_choice(&self) -> ModelChoice {
        self.model.choice()
    }
}

/// Resolve the model chain from flags and config (fallbacks left out are warned about).
///
/// # Errors
/// No model configured (with the steps to configure one), or a provider that cannot be used.
pub fn chain(ctx: &Ctx, args: &ChatArgs) -> anyhow::Result<Chain> {
    let mut warnings = Vec::new();
    let chain = talaria_core::models::chain(&ctx.home, &ctx.config, &args.model_choice(), &mut warnings)?;
    for w in &warnings {
        ui::warn(w);
    }
    Ok(chain)
}

/// What to say when the workspace holds talaria's home (talaria started in the home directory
/// with the default `~/.talaria`): no plugin is given a directory holding the home, so the file
/// tools find nothing there, while commands (whose sandbox hides the home) still work.
fn home_in_workspace(ctx: &Ctx) -> Option<String> {
    let home = ctx.home.canonicalize().unwrap_or_else(|_| ctx.home.clone());
    home.starts_with(&ctx.workspace).then(|| {
        format!(
            "{} holds talaria's home ({}), so plugins are not given it: the file tools cannot read or write \
             here (commands can). Start talaria in a project directory.",
            ctx.workspace.display(),
            home.display()
        )
    })
}

/// Open the host and start the conversation; warnings found on the way are shown.
///
/// # Errors
/// Configuration problems, with how to fix them.
pub async fn start(ctx: &Ctx, args: &ChatArgs, interactive: bool) -> anyhow::Result<Session> {
    let stop = Stop::install();
    // The model first: with none configured, nothing else is worth opening.
    chain_check(ctx, args)?;
    let host = Host::open(HostOptions { home: ctx.home.clone(), workspace: ctx.workspace.clone() }).await?;
    if let Some(warning) = home_in_workspace(ctx) {
        ui::warn(&warning);
    }
    let (plugins, _) = host.plugins(&ctx.workspace)?;
    if std::io::stderr().is_terminal() {
        let pending = plugins.to_compile();
        if !pending.is_empty() {
            ui::note(&format!("compiling {} on first use (cached afterwards)...", pending.join(", ")));
        }
    }
    // --continue: the latest session of this directory.
    let continued = match (&args.resume, args.cont) {
        (None, true) => Some(latest_here(&host, ctx).await?),
        _ => None,
    };
    // --resume with no value: chosen from a list.
    let chosen = match args.resume.as_deref() {
        Some("") if std::io::stdin().is_terminal() && std::io::stdout().is_terminal() => {
            match crate::sessions::pick(host.store(), &ctx.workspace).await? {
                Some(id) => Some(id),
                None => anyhow::bail!("no session chosen (`talaria sessions list` shows them all)"),
            }
        }
        Some("") => anyhow::bail!(
            "--resume needs a session (ID, TITLE or latest) when it cannot offer a list (not a terminal); \
             `talaria sessions list` shows them"
        ),
        _ => None,
    };
    let start = Start {
        workspace: Some(ctx.workspace.clone()),
        source: "cli".into(),
        platform: Platform::Cli,
        holder: if args.query.is_some() { "talaria chat -q".into() } else { "talaria chat".into() },
        interactive,
        yolo: args.yolo,
        model: args.model_choice(),
        toolsets: args.toolsets.clone(),
        max_turns: args.max_turns,
        stream: Some(!args.no_stream),
        resume: match (&args.resume, args.cont) {
            (Some(_), _) if chosen.is_some() => chosen,
            (Some(key), _) => Some(key.clone()),
            (None, true) => continued.as_ref().map(|s| s.id.clone()),
            (None, false) => None,
        },
        fork: args.fork,
        offered: talaria_core::Offered::default(),
        // The REPL's sessions get titles; a one-shot makes no extra model call.
        auto_title: args.query.is_none(),
        memory: true,
        plugins_from: None,
        allow: Vec::new(),
        origin: None,
        mcp_servers: std::collections::BTreeMap::new(),
        configured_mcp: true,
        unconfined_commands: false,
        rest_after: None,
        kept: None,
        // What the user typed is committed before the model is asked: a crash keeps it.
        message_kept: false,
        no_model: false,
        job: None,
    };
    let mut conversation = host.start(start).await?;
    // Warnings, then the session it is in.
    while let Some(stamped) = conversation.try_next_event() {
        match &stamped.event {
            Event::Notice { text, .. } => ui::warn(text),
            Event::SessionStarted(s) => {
                if let talaria_protocol::SessionReason::Forked { from } = &s.reason {
                    ui::note(&format!("continuing session {from} as a new session {}", s.session_id));
                } else if let Some(c) = &continued {
                    let title =
                        c.title.as_deref().map(|t| format!(" \"{}\"", ui::first_line(t, 60))).unwrap_or_default();
                    ui::note(&format!("continuing session {}{title}, the latest in {}", c.id, ctx.workspace.display()));
                }
                break;
            }
            _ => {}
        }
    }
    Ok(Session { host, conversation, stop })
}

/// The session last used in this directory (`--continue`).
///
/// # Errors
/// None was started here: with how to continue one started elsewhere.
async fn latest_here(host: &Host, ctx: &Ctx) -> anyhow::Result<talaria_store::SessionInfo> {
    let here = ctx.workspace.display().to_string();
    let q = talaria_store::ListQuery { limit: 1, cwd: Some(&here), ..talaria_store::ListQuery::default() };
    match host.store().list_sessions_with(&q).await?.into_iter().next() {
        Some(s) => Ok(s),
        None => anyhow::bail!(
            "no session was started in {here} to continue; `talaria sessions list` shows the others, and \
             `talaria chat --resume latest` continues the latest of all"
        ),
    }
}

/// The model flags and config name a usable model (fallbacks left out are warned about when
/// the conversation starts).
fn chain_check(ctx: &Ctx, args: &ChatArgs) -> anyhow::Result<()> {
    talaria_core::models::chain(&ctx.home, &ctx.config, &args.model_choice(), &mut Vec::new())?;
    Ok(())
}

/// Something that happened while a turn ran: an event of the conversation, or a line the user
/// typed.
pub enum Step<'a> {
    Event(&'a Stamped),
    Line(String),
}

/// Run one turn (`op`: a user message or a retry) while rendering its events; Ctrl-C, SIGTERM and
/// SIGHUP interrupt it (a second Ctrl-C exits at once, killing running commands). Lines typed
/// meanwhile (when `input` is given) go to `handler` with the events. `None`: the conversation
/// stopped (or the op was refused: the error event went to `handler`).
pub async fn drive(
    session: &mut Session,
    renderer: &mut Renderer,
    op: Op,
    mut input: Option<&mut UnboundedReceiver<String>>,
    handler: &mut dyn FnMut(Step<'_>, &mut Renderer, &Submitter),
) -> Option<TurnEnd> {
    let submitter = session.conversation.submitter();
    let cancel = CancellationToken::new();
    let ctrl_c = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                cancel.cancel();
                if tokio::signal::ctrl_c().await.is_ok() {
                    exit_now(exit::INTERRUPTED);
                }
            }
        })
    };
    session.stop.watch(&cancel);
    let interrupter = {
        let (cancel, submitter) = (cancel.clone(), submitter.clone());
        tokio::spawn(async move {
            cancel.cancelled().await;
            submitter.submit(Op::Interrupt);
        })
    };
    let id = submitter.submit(op.clone());
    // A resize redraws the answer still arriving and the footer at the terminal's new size.
    let mut resized = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change()).ok();
    let end = loop {
        let resize = async {
            match resized.as_mut() {
                Some(signal) => signal.recv().await,
                None => std::future::pending().await,
            }
        };
        let line = async {
            match input.as_deref_mut() {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        };
        let due = renderer.due_in();
        let tick = async {
            match due {
                Some(after) => tokio::time::sleep(after).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = tick => renderer.tick(),
            Some(()) = resize => renderer.resized(),
            stamped = session.conversation.next_event() => {
                let Some(stamped) = stamped else { break None };
                renderer.handle(&stamped.event);
                handler(Step::Event(&stamped), renderer, &submitter);
                if stamped.op == id && op.finished_by(&stamped.event) {
                    match stamped.event {
                        Event::TurnEnd(end) => break Some(end),
                        _ => break None,
                    }
                }
            }
            Some(line) = line => handler(Step::Line(line), renderer, &submitter),
        }
    };
    ctrl_c.abort();
    interrupter.abort();
    session.stop.unwatch();
    end
}

/// Close the conversation as `reason`, showing what it reports on the way.
pub async fn close(session: &mut Session, reason: &str) {
    session
        .conversation
        .shutdown_with(reason, |stamped| match &stamped.event {
            Event::Notice { text, .. } | Event::Error { text } => ui::warn(text),
            _ => {}
        })
        .await;
}

pub async fn one_shot(
    mut session: Session,
    prompt: &str,
    images: Vec<talaria_protocol::Image>,
) -> anyhow::Result<ExitCode> {
    let mut renderer = Renderer::new(false);
    let stop = session.stop.clone();
    let op = Op::UserTurn { text: prompt.to_string(), images, sender: None, trace: None };
    let mut refused = None;
    let end = drive(&mut session, &mut renderer, op, None, &mut |step, _, _| {
        if let Step::Event(Stamped { event: Event::Error { text }, .. }) = step {
            refused = Some(text.clone());
        }
    })
    .await;
    let Some(end) = end else {
        close(&mut session, "failed").await;
        anyhow::bail!("{}", refused.unwrap_or_else(|| "the conversation stopped before answering".into()));
    };
    if !end.text.is_empty() {
        // A script gets the answer as the model wrote it; a person at a terminal sees its
        // control characters escaped, never obeyed.
        let answer = end.text.trim_end();
        if std::io::stdout().is_terminal() {
            putln!(std::io::stdout(), "{}", talaria_runtime::shown::visible_lines(answer));
        } else {
            putln!(std::io::stdout(), "{answer}");
        }
    }
    let reason = if stop.signal().is_some() { "signal" } else { end.outcome.name() };
    close(&mut session, reason).await;
    let code = match end.outcome {
        _ if stop.signal().is_some() => stop.exit_code().unwrap_or(exit::TERMINATED),
        Outcome::Completed => exit::OK,
        Outcome::BudgetExhausted => exit::BUDGET,
        Outcome::Truncated => exit::TRUNCATED,
        Outcome::Interrupted => exit::INTERRUPTED,
        Outcome::Failed(_) => exit::FAILED,
        Outcome::Refused(_) => exit::REFUSED,
    };
    if std::io::stderr().is_terminal() {
        let id = session.conversation.info().session_id;
        ui::note(&format!("session {id} (resume with `talaria chat --resume {id}`)"));
    }
    leave(session);
    Ok(ExitCode::from(code))
}

/// Leave a closed conversation without taking the host apart: its session is ended and every
/// turn committed, and the store's WAL is checkpointed when it has grown large
/// ([`talaria_store::Store::checkpoint_if_large`]). Unmapping the plugin runtime piece by
/// piece (the engine's pools, compiled code, instances) would only delay the exit; the kernel
/// frees it all at once.
fn leave(session: Session) {
    session.host.store().checkpoint_if_large();
    std::mem::forget(session);
}
