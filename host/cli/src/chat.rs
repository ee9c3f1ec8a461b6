//! `talaria chat`: the REPL, and `chat -q PROMPT` for scripts.
//!
//! Both build the same [`Agent`] and render its events; they differ in where the answer goes
//! (streamed to stdout, or printed whole at the end) and whether anyone can answer approvals.

use std::io::IsTerminal as _;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use talaria_agent::approval::Gate;
use talaria_agent::model::{ApiMode, Chain, Client, Provider, ProviderSpec};
use talaria_agent::toolsets::{Selection, Toolset, Toolsets};
use talaria_agent::{Agent, AgentConfig, Emitter, Shared, Start};
use talaria_protocol::{Event, Outcome, TurnEnd};
use talaria_store::Store;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use crate::plugin_host::{AuxLlm, GateApprover, PluginHooks, PluginTools, extensions};
use crate::render::Renderer;
use crate::signals::{Stop, exit_now};
use crate::{Ctx, config, repl, ui};

/// Exit codes of `chat -q` (documented in docs/config.md and the README).
pub mod exit {
    /// The model answered.
    pub const OK: u8 = 0;
    /// Every provider failed, or the session could not be saved.
    pub const FAILED: u8 = 1;
    /// The iteration budget ran out (the answer is a summary of the work so far).
    pub const BUDGET: u8 = 3;
    /// The answer was cut off at the output-token limit (what arrived is printed, and kept in
    /// the session marked as cut).
    pub const TRUNCATED: u8 = 4;
    /// Interrupted (Ctrl-C), as shells expect.
    pub const INTERRUPTED: u8 = 130;
    /// Stopped by SIGHUP (the terminal closed): 128 + 1.
    pub const HANGUP: u8 = 129;
    /// Stopped by SIGTERM: 128 + 15.
    pub const TERMINATED: u8 = 143;
}

#[derive(Args, Debug, Default, Clone)]
pub struct ChatArgs {
    /// Send PROMPT, print the final answer on stdout (progress on stderr) and exit.
    /// Exit codes: 0 answered, 1 failed, 3 budget exhausted, 4 answer cut off at the
    /// output-token limit, 129 hangup, 130 interrupted, 143 terminated
    #[arg(short = 'q', long = "query", value_name = "PROMPT")]
    pub query: Option<String>,
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
    /// Toolsets to enable, comma-separated (files, web, terminal, coding, memory, all, a plugin's name...)
    #[arg(short, long, value_delimiter = ',', value_name = "LIST")]
    pub toolsets: Option<Vec<String>>,
    /// Continue a session: its id (or a unique prefix), its title, or `latest`
    #[arg(short, long, value_name = "ID|TITLE|latest", conflicts_with = "cont")]
    pub resume: Option<String>,
    /// Continue the most recent session
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
    pub agent: Agent,
    pub events: UnboundedReceiver<Event>,
    pub gate: Arc<Gate>,
    pub shared: Arc<Shared>,
    /// SIGTERM and SIGHUP, watched for the whole chat.
    pub stop: Stop,
}

pub async fn run(ctx: &Ctx, args: ChatArgs) -> anyhow::Result<ExitCode> {
    let interactive = args.query.is_none() && std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    let session = start(ctx, &args, interactive).await?;
    match args.query.clone() {
        Some(prompt) => one_shot(session, &prompt).await,
        None => repl::run(ctx, session, &args).await,
    }
}

/// Resolve the model chain from flags and config.
///
/// # Errors
/// No model configured (with the steps to configure one), or a provider that cannot be used.
pub fn chain(ctx: &Ctx, args: &ChatArgs) -> anyhow::Result<Chain> {
    let m = ctx.config.model.clone().unwrap_or_default();
    let provider = args.provider.clone().or(m.provider.clone());
    let model = args.model.clone().or(m.name.clone());
    let base_url = args.base_url.clone().or(if args.provider.is_some() { None } else { m.base_url.clone() });
    if provider.is_none() && model.is_none() && base_url.is_none() {
        anyhow::bail!(
            "no model is configured.\n  Run `talaria setup` to choose one, or pass one for this run, e.g.\n    talaria chat --provider ollama --model llama3.2\n    talaria chat --provider custom --base-url http://localhost:8080/v1 --model local\n  or add to {}:\n    [model]\n    provider = \"openai\"   # openai | openrouter | anthropic | ollama | custom\n    name = \"gpt-4.1-mini\"",
            ctx.home.join("config.toml").display()
        );
    }
    let Some(model) = model else {
        anyhow::bail!(
            "no model name: pass --model NAME, or set `name` under [model] in {}",
            ctx.home.join("config.toml").display()
        );
    };
    let api_mode = match args.api_mode.as_deref().or(m.api_mode.as_deref()) {
        None => None,
        Some(s) => Some(ApiMode::parse(s).with_context(|| {
            format!("unknown api mode `{s}`: use chat_completions, anthropic_messages or responses")
        })?),
    };
    let env = env_lookup(&ctx.home);
    let spec = ProviderSpec {
        provider,
        model,
        base_url,
        api_mode,
        key_env: if args.provider.is_some() { None } else { m.key_env.clone() },
        max_tokens: m.max_tokens,
        ..ProviderSpec::default()
    };
    let primary = Provider::resolve(m.wire(spec)?, &env)?;
    let mut fallbacks = Vec::new();
    for (i, f) in ctx.config.fallback_providers.iter().enumerate() {
        let api_mode = f.api_mode.as_deref().and_then(ApiMode::parse);
        match f.spec(api_mode).and_then(|spec| Provider::resolve(spec, &env)) {
            Ok(p) => fallbacks.push(p),
            Err(e) => ui::warn(&format!("fallback provider {} is left out: {e}", i + 1)),
        }
    }
    let mut chain = Chain::new(primary).with_fallbacks(fallbacks);
    if let Some(r) = ctx.config.agent.retries {
        chain.retries = r;
    }
    if let Some(ms) = ctx.config.agent.retry_delay_ms {
        chain.base_delay = Duration::from_millis(ms);
    }
    Ok(chain)
}

/// Environment first, then `$TALARIA_HOME/.env`.
fn env_lookup(home: &Path) -> impl Fn(&str) -> Option<String> {
    let dotenv = talaria_runtime::Secrets::load(&home.join(".env"));
    move |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty()).or_else(|| dotenv.value(name))
}

fn agent_config(ctx: &Ctx, args: &ChatArgs) -> AgentConfig {
    let a = &ctx.config.agent;
    let mut cfg = AgentConfig::new(ctx.home.clone(), ctx.workspace.clone());
    cfg.max_turns = args.max_turns.or(a.max_turns).unwrap_or(cfg.max_turns).max(1);
    cfg.stream = !args.no_stream && a.stream.unwrap_or(true);
    cfg.system_message = a.system_message.clone();
    if let Some(n) = a.max_result_chars {
        cfg.result_cap = n.max(1_000);
    }
    if let Some(n) = a.max_children {
        cfg.max_children = n.clamp(1, 10);
    }
    cfg.selection = Selection {
        enabled: args.toolsets.clone().or(a.toolsets.clone()),
        disabled: if args.toolsets.is_some() { Vec::new() } else { a.disabled_toolsets.clone() },
    };
    let mut sets = Toolsets::builtin();
    for (name, t) in &ctx.config.custom_toolsets {
        sets.insert(
            name.clone(),
            Toolset { description: t.description.clone(), tools: t.tools.clone(), includes: t.includes.clone() },
        );
    }
    cfg.toolsets = sets;
    if let Some(n) = ctx.config.model.as_ref().and_then(|m| m.context_length) {
        cfg.context_length = n.max(1_000);
    }
    if let Some(secs) = a.session_wait_secs {
        cfg.lease_wait = Duration::from_secs(secs);
    }
    cfg.holder = if args.query.is_some() { "talaria chat -q".into() } else { "talaria chat".into() };
    cfg
}

/// The model for side tasks: `[auxiliary]`, else the main chain.
fn auxiliary(ctx: &Ctx, main: &Chain) -> Chain {
    let Some(aux) = &ctx.config.auxiliary else { return main.clone() };
    let api_mode = aux.api_mode.as_deref().and_then(ApiMode::parse);
    match aux.spec(api_mode).and_then(|spec| Provider::resolve(spec, env_lookup(&ctx.home))) {
        Ok(p) => Chain::new(p),
        Err(e) => {
            ui::warn(&format!("[auxiliary] model is left out, using the main model: {e}"));
            main.clone()
        }
    }
}

/// Build the agent: model chain, store, plugins, gate.
///
/// # Errors
/// Configuration problems, with how to fix them.
pub async fn start(ctx: &Ctx, args: &ChatArgs, interactive: bool) -> anyhow::Result<Session> {
    let stop = Stop::install();
    let chain = chain(ctx, args)?;
    // The store first: a damaged one is reported once, before any plugin tries its own data.
    let store = Arc::new(Store::open(&ctx.home.join("state.db"))?);
    let home = ctx.home.clone();
    let gate = Arc::new(Gate::new(interactive).with_saver(Box::new(move |key| config::allow_always(&home, key))));
    gate.set_yolo(args.yolo);
    let llm = Arc::new(AuxLlm { chain: auxiliary(ctx, &chain), client: Client::new() });
    let runtime = Arc::new(ctx.runtime_full(Arc::new(GateApprover(gate.clone())), Some(llm))?);
    for p in runtime.problems() {
        ui::warn(&p.to_string());
    }
    let mut warnings = Vec::new();
    let (memory, engine) =
        extensions(&runtime, ctx.config.memory.provider(), ctx.config.context.engine(), &mut warnings);
    for w in &warnings {
        ui::warn(w);
    }
    crate::tools::announce_compiles(&runtime);
    let mut resume = match (&args.resume, args.cont) {
        (Some(key), _) => Some(store.resolve_session(key)?),
        (None, true) => Some(store.resolve_session("latest")?),
        (None, false) => None,
    };
    if args.fork {
        let Some(from) = resume.take() else {
            anyhow::bail!("--fork needs a session to start from: add --continue, or --resume ID|TITLE|latest");
        };
        let fork = store.fork_session(&from.id, &Store::new_session_id())?;
        ui::note(&format!("continuing session {} as a new session {}", from.id, fork.id));
        resume = Some(fork);
    }
    let hooks = Arc::new(PluginHooks::new(runtime.clone()));
    let shared = Arc::new(
        Shared::new(agent_config(ctx, args), chain, store, Arc::new(PluginTools { runtime }), gate.clone())
            .with_hooks(hooks)
            .with_memory_provider(memory)
            .with_context_engine(engine),
    );
    let (emitter, events) = Emitter::channel();
    gate.attach(emitter.clone());
    let agent = Agent::start(shared.clone(), emitter, Start { resume, ..Start::default() }).await?;
    for w in agent.warnings() {
        ui::warn(w);
    }
    Ok(Session { agent, events, gate, shared, stop })
}

/// Something that happened while a turn ran: an event of the loop, or a line the user typed.
pub enum Step<'a> {
    Event(&'a Event),
    Line(String),
}

/// Run one turn while rendering its events; Ctrl-C, SIGTERM and SIGHUP interrupt it (a second
/// Ctrl-C exits at once, killing running commands). Lines typed meanwhile (when `input` is
/// given) go to `handler` with the events.
#[allow(clippy::too_many_arguments)]
pub async fn drive(
    agent: &mut Agent,
    stop: &Stop,
    events: &mut UnboundedReceiver<Event>,
    renderer: &mut Renderer,
    prompt: &str,
    cancel: &CancellationToken,
    mut input: Option<&mut UnboundedReceiver<String>>,
    handler: &mut dyn FnMut(Step<'_>, &mut Renderer),
) -> TurnEnd {
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
    stop.watch(cancel);
    let turn = agent.run_turn(prompt, cancel);
    tokio::pin!(turn);
    let end = loop {
        let line = async {
            match input.as_deref_mut() {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            end = &mut turn => break end,
            Some(event) = events.recv() => {
                renderer.handle(&event);
                handler(Step::Event(&event), renderer);
            }
            Some(line) = line => handler(Step::Line(line), renderer),
        }
    };
    while let Ok(event) = events.try_recv() {
        renderer.handle(&event);
        handler(Step::Event(&event), renderer);
    }
    ctrl_c.abort();
    stop.unwatch();
    end
}

async fn one_shot(mut session: Session, prompt: &str) -> anyhow::Result<ExitCode> {
    let mut renderer = Renderer::new(false);
    let cancel = CancellationToken::new();
    let stop = session.stop.clone();
    let end =
        drive(&mut session.agent, &stop, &mut session.events, &mut renderer, prompt, &cancel, None, &mut |_, _| {})
            .await;
    if !end.text.is_empty() {
        putln!(std::io::stdout(), "{}", end.text.trim_end());
    }
    let reason = if stop.signal().is_some() { "signal" } else { end.outcome.name() };
    if let Err(e) = session.agent.close(reason).await {
        ui::warn(&e.to_string());
    }
    let code = match end.outcome {
        _ if stop.signal().is_some() => stop.exit_code().unwrap_or(exit::TERMINATED),
        Outcome::Completed => exit::OK,
        Outcome::BudgetExhausted => exit::BUDGET,
        Outcome::Truncated => exit::TRUNCATED,
        Outcome::Interrupted => exit::INTERRUPTED,
        Outcome::Failed(_) => exit::FAILED,
    };
    if std::io::stderr().is_terminal() {
        ui::note(&format!("session {} (resume with `talaria chat --resume {0}`)", session.agent.session_id()));
    }
    Ok(ExitCode::from(code))
}
