//! The `talaria` command: parses arguments and hands each subcommand to its module.

// Help texts are doc comments that clap shows as they are: their `[:PORT]`-style optional parts
// are not links.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags, rustdoc::bare_urls)]

/// `writeln!` that never panics: what is printed to a terminal that went away (or a closed
/// pipe) is dropped, so a hangup cannot abort the work of closing a session cleanly.
macro_rules! putln {
    ($out:expr $(, $($arg:tt)*)?) => {{
        use std::io::Write as _;
        let _ = writeln!($out $(, $($arg)*)?);
    }};
}

/// `write!` that never panics (see [`putln!`]).
macro_rules! put {
    ($out:expr, $($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!($out, $($arg)*);
    }};
}

mod acp;
mod busy;
mod chat;
mod checkpoints;
mod context;
mod cron;
mod doctor;
mod during;
mod exit;
mod gateway;
mod lines;
mod live;
mod logging;
mod markdown;
mod market;
mod mcp;
mod memory;
mod mentions;
mod pairing;
mod picker;
mod piped;
mod plugins;
mod profile;
mod render;
mod repl;
mod screen;
mod serve;
mod sessions;
mod setup;
mod signals;
mod skill_install;
mod skills;
mod slash;
mod status;
mod store;
mod tools;
mod ui;
mod usage;
mod waiting;
mod wrap;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{ArgAction, Parser, Subcommand};
use talaria_core::{adapters as plugin_host, config};
use talaria_runtime::{Embedded, Runtime};

/// An LLM agent platform whose every extension is a sandboxed WebAssembly component.
#[derive(Parser)]
#[command(name = "talaria", version, propagate_version = true)]
struct Cli {
    /// Working directory: `$WORKSPACE` for tools, and where project plugins are found
    /// [default: the current directory]
    #[arg(short = 'C', long, global = true, value_name = "DIR")]
    workspace: Option<PathBuf>,

    /// Log to stderr (-v info, -vv debug) instead of ~/.talaria/logs/talaria.log (warnings);
    /// TALARIA_LOG takes a tracing filter and also logs to stderr
    #[arg(short, long, action = ArgAction::Count, global = true)]
    verbose: u8,

    /// Use this profile: a separate home with its own config, keys, memories, sessions and
    /// plugins [default: TALARIA_PROFILE, else the one `talaria profile use` chose]
    #[arg(short = 'p', long, global = true, value_name = "NAME")]
    profile: Option<String>,

    /// What to do; none opens the chat on a terminal (and prints this help elsewhere)
    #[command(subcommand)]
    command: Option<Command>,
}

/// The command of a bare `talaria`: the chat when a person is at a terminal, as `talaria
/// chat` would open it; elsewhere (a script, a pipe) the help, and the exit code of a missing
/// argument.
fn bare() -> Result<Command, ExitCode> {
    use std::io::IsTerminal as _;
    if std::io::stdin().is_terminal()
        && std::io::stdout().is_terminal()
        && let Ok(Cli { command: Some(chat), .. }) = Cli::try_parse_from(["talaria", "chat"])
    {
        return Ok(chat);
    }
    let _ = <Cli as clap::CommandFactory>::command().write_help(&mut std::io::stderr());
    Err(ExitCode::from(2))
}

#[derive(Subcommand)]
// Each subcommand's arguments are defined when it is the one run (here and in every
// subcommand enum): building all of them took about a tenth of a one-shot chat's start.
#[command(defer = true)]
enum Command {
    /// Talk to the agent (a REPL), or run one prompt with -q
    Chat(chat::ChatArgs),
    /// Serve the Agent Client Protocol on stdio, for editors (Zed: an agent_servers entry)
    Acp(acp::AcpArgs),
    /// List, show, search, export, rename and delete past conversations
    #[command(subcommand)]
    Sessions(sessions::SessionsCmd),
    /// Serve chat platforms (Telegram, Matrix, Discord, Slack, webhooks) through adapter plugins
    #[command(subcommand)]
    Gateway(gateway::GatewayCmd),
    /// Serve an OpenAI-compatible API, A2A and a web dashboard over HTTP (`serve token` prints the bearer token)
    Serve(serve::ServeArgs),
    /// What turns spent by day, model and source, and how much of each [budget] limit is used
    Usage(usage::UsageArgs),
    /// Chat-platform users paired with the gateway: list, approve a code, revoke
    #[command(subcommand)]
    Pairing(pairing::PairingCmd),
    /// Scheduled jobs: add, list, edit, pause, resume, run, remove, history, tick
    #[command(subcommand)]
    Cron(cron::CronCmd),
    /// MCP servers whose tools the agent uses: list, add, remove, test
    #[command(subcommand)]
    Mcp(mcp::McpCmd),
    /// Choose a provider and model and write them to config.toml
    Setup(setup::SetupArgs),
    /// Check config, provider reachability, plugins and grants
    Doctor(doctor::DoctorArgs),
    /// See, install, update and remove plugins; grant and revoke capabilities
    #[command(subcommand)]
    Plugins(plugins::PluginsCmd),
    /// Write plugins: new, build, test, pack, keygen, sign, publish
    #[command(subcommand)]
    Plugin(talaria_author::PluginCmd),
    /// List tools and call them directly, with no model involved
    #[command(subcommand)]
    Tools(tools::ToolsCmd),
    /// The built-in memory files and the external memory provider
    #[command(subcommand)]
    Memory(memory::MemoryCmd),
    /// The context engine that compresses long conversations
    #[command(subcommand)]
    Context(context::ContextCmd),
    /// Skills (procedures the agent loads for recurring tasks): list, show, edit, remove, install, pack
    #[command(subcommand)]
    Skills(skills::SkillsCmd),
    /// Files kept before tools changed them: list, diff, restore
    #[command(subcommand)]
    Checkpoints(checkpoints::CheckpointsCmd),
    /// Where the state lives: migrate state.db into PostgreSQL
    #[command(subcommand)]
    Store(store::StoreCmd),
    /// Separate homes: list, create, copy, remove, use
    #[command(subcommand)]
    Profile(profile::ProfileCmd),
    /// Print a shell completion script: bash, zsh, fish, powershell or elvish
    ///
    /// bash: `source <(talaria completions bash)` (or save it under
    /// ~/.local/share/bash-completion/completions/talaria); zsh: save it as `_talaria` in a
    /// directory of your $fpath; fish: save it as ~/.config/fish/completions/talaria.fish.
    Completions {
        /// The shell to complete for
        shell: clap_complete::Shell,
    },
    /// Review what a project brings (.talaria/plugins) and trust it as it is now (or --revoke)
    ///
    /// Each project plugin is shown (digest, requests, grants, what it replaces) and pinned:
    /// anything that changes later stops loading until you run `talaria trust` again.
    Trust {
        /// The project directory [default: the workspace]
        dir: Option<PathBuf>,
        /// Stop trusting it
        #[arg(long)]
        revoke: bool,
        /// Let the project's plugin NAME replace your bundled or user plugin of that name
        #[arg(long, value_name = "NAME")]
        replace: Vec<String>,
    },
}

fn main() -> ExitCode {
    // Inside a command sandbox, this executable is its helper (talaria_sandbox::helper).
    if std::env::args_os().nth(1).is_some_and(|a| a == talaria_sandbox::bwrap::HELPER_ARG) {
        talaria_sandbox::helper::main();
    }
    let mut cli = Cli::parse();
    if cli.command.is_none() {
        match bare() {
            Ok(command) => cli.command = Some(command),
            Err(code) => return code,
        }
    }
    if let Some(name) = &cli.profile {
        // Before anything works out where home is (the log file is there).
        config::set_profile(name);
    }
    // The gateway is a service: its log goes to stderr, at info unless asked otherwise; it
    // serves many chats at once, on every core.
    let service = matches!(
        cli.command,
        Some(
            Command::Gateway(gateway::GatewayCmd::Run { .. }) | Command::Mcp(mcp::McpCmd::Serve { http: Some(_), .. })
        )
    ) || matches!(&cli.command, Some(Command::Serve(args)) if args.serves());
    if service {
        talaria_gateway::serve::limit_heaps();
    }
    let traces = logging::init(if service { cli.verbose.max(1) } else { cli.verbose }, service);
    let runtime = if service {
        // A thread per core: the store is async (PostgreSQL's round trips wait without a thread),
        // and SQLite's statements are short.
        tokio::runtime::Builder::new_multi_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    };
    let tokio = match runtime {
        Ok(rt) => rt,
        Err(e) => {
            ui::error(&format!("cannot start the async runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let code = match tokio.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            ui::error(&format!("{e:#}"));
            ExitCode::FAILURE
        }
    };
    // The work is done. A blocking task still running is one that was abandoned: a plugin's
    // call stuck in a system call (opening a FIFO nobody writes) and stopped at its deadline.
    // Dropping the runtime would wait for it forever; the process ends instead.
    tokio.shutdown_timeout(EXIT_GRACE);
    if let Some(traces) = traces {
        traces.finish();
    }
    code
}

/// How long the process waits at exit for blocking tasks that are still running.
const EXIT_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    // `main` chose the chat (or left) when none was given.
    let Some(command) = cli.command else { return Ok(ExitCode::from(2)) };
    if matches!(
        command,
        Command::Chat(_)
            | Command::Acp(_)
            | Command::Gateway(gateway::GatewayCmd::Run { .. })
            | Command::Mcp(mcp::McpCmd::Serve { .. })
    ) || matches!(&command, Command::Serve(args) if args.serves())
    {
        // They run plugins: the WebAssembly engine is made while config and the store open.
        talaria_runtime::start_engine();
    }
    if let Command::Completions { shell } = command {
        // Needs no home, config or workspace: it works before `talaria setup` and anywhere.
        return Ok(completions(shell));
    }
    if let Command::Profile(cmd) = command {
        // Works on the base home, whichever profile is in use (or missing).
        return profile::run(cmd);
    }
    let ctx = Ctx::new(cli.workspace)?;
    match command {
        Command::Completions { shell } => Ok(completions(shell)),
        Command::Profile(cmd) => profile::run(cmd),
        Command::Checkpoints(cmd) => checkpoints::run(&ctx, cmd).await,
        Command::Store(cmd) => store::run(&ctx, cmd).await,
        Command::Skills(cmd) => skills::run(&ctx, cmd).await,
        Command::Chat(args) => chat_command(&ctx, args).await,
        Command::Acp(args) => acp::run(&ctx, args).await,
        Command::Sessions(cmd) => sessions::run(&ctx, cmd).await,
        Command::Pairing(cmd) => pairing::run(&ctx, cmd).await,
        Command::Usage(args) => usage::run(&ctx, args).await,
        Command::Gateway(cmd) => gateway::run(&ctx, cmd).await,
        Command::Serve(args) => serve::run(&ctx, args).await,
        Command::Cron(cmd) => cron::run(&ctx, cmd).await,
        Command::Mcp(cmd) => mcp::run(&ctx, cmd).await,
        Command::Setup(args) => setup::run(&ctx, args).await,
        Command::Doctor(args) => doctor::run(&ctx, args).await,
        Command::Plugins(cmd) => plugins::run(&ctx, cmd).await,
        Command::Plugin(cmd) => {
            let place = talaria_author::Place { home: &ctx.home, workspace: &ctx.workspace, config: &ctx.config };
            talaria_author::run(&place, cmd).await
        }
        Command::Tools(cmd) => tools::run(&ctx, cmd).await,
        Command::Memory(cmd) => memory::run(&ctx, cmd).await,
        Command::Context(cmd) => context::run(&ctx, cmd).await,
        Command::Trust { dir, revoke, replace } => plugins::trust(&ctx, dir, revoke, &replace),
    }
}

/// Write the completion script for `shell`, generated from the command definitions above.
fn completions(shell: clap_complete::Shell) -> ExitCode {
    let mut command = <Cli as clap::CommandFactory>::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command, "talaria", &mut out);
    match std::io::Write::write_all(&mut std::io::stdout(), &out) {
        // `talaria completions bash | head` closes the pipe early: nothing went wrong.
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            ui::error(&format!("cannot write the completion script: {e}"));
            ExitCode::FAILURE
        }
    }
}

/// What every command needs: where home and the workspace are, and the parsed config.
pub struct Ctx {
    pub home: PathBuf,
    pub workspace: PathBuf,
    pub config: config::ConfigToml,
}

impl Ctx {
    fn new(workspace: Option<PathBuf>) -> anyhow::Result<Self> {
        let home = config::home()?;
        let config = config::ConfigToml::load(&home)?;
        let workspace = match workspace {
            Some(dir) => dir,
            None => std::env::current_dir().context("cannot read the current directory")?,
        };
        let workspace =
            workspace.canonicalize().with_context(|| format!("workspace {} does not exist", workspace.display()))?;
        Ok(Self { home, workspace, config })
    }

    /// Where the state lives (`state.db`, or `[store] url`).
    pub fn store_location(&self) -> talaria_store::Location {
        self.config.store_location(&self.home)
    }

    /// The store, to read and write.
    pub async fn store(&self) -> Result<talaria_store::Store, talaria_store::Error> {
        talaria_core::open_store(&self.home, &self.config).await
    }

    /// The store, for a command that only reads.
    pub async fn store_for_reading(&self) -> Result<talaria_store::Store, talaria_store::Error> {
        talaria_core::open_store_for_reading(&self.home, &self.config).await
    }

    /// The plugins, as core discovers them for a command with no one to ask (compiles
    /// nothing): dangerous commands and new hosts are refused unless `yolo`.
    pub fn runtime(&self, yolo: bool) -> anyhow::Result<Runtime> {
        Ok(talaria_core::unattended_runtime(&self.home, &self.workspace, &self.config, yolo)?)
    }

    /// The plugins compiled into the binary.
    pub fn bundled(&self) -> Vec<Embedded> {
        talaria_core::bundled()
    }
}

/// `talaria chat`: the REPL on a terminal, else one prompt (`-q`).
async fn chat_command(ctx: &Ctx, args: chat::ChatArgs) -> anyhow::Result<ExitCode> {
    use std::io::IsTerminal as _;
    let interactive = args.query.is_none() && std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    // What stdin holds is read (and refused if unusable) before anything starts.
    let prompt = args.query.as_deref().map(piped::prompt).transpose()?;
    if interactive {
        // Before the session reads its skills: what the agent wrote earlier, shown once.
        skills::show_new_at_start(ctx);
    }
    let session = chat::start(ctx, &args, interactive).await?;
    match (prompt, args.query.as_deref()) {
        (Some(mut prompt), Some(query)) => {
            // Files the query mentions (`@path`) are attached after it; piped text is never scanned.
            let mut images = Vec::new();
            if query != "-" {
                let vision = repl::vision(session.conversation.info().provider.as_ref());
                let (text, found) = repl::attach(query, &ctx.workspace, &vision);
                prompt.push_str(&text[query.len()..]);
                images = found;
            }
            chat::one_shot(session, &prompt, images).await
        }
        _ => repl::run(ctx, session, &args).await,
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::Cli;

    /// Every subcommand, deferred ones included, is built and checked by clap's debug
    /// assertions (unique names, valid conflicts): a clash shows here, not when a user runs it.
    #[test]
    fn every_subcommand_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn a_deferred_subcommand_still_parses_its_own_and_the_global_arguments() {
        use clap::Parser as _;
        let edit = |args: &[&str]| match Cli::try_parse_from(args).expect("parse").command {
            Some(super::Command::Cron(super::cron::CronCmd::Edit { job, schedule, workspace, .. })) => {
                (job, schedule, workspace)
            }
            _ => panic!("not cron edit"),
        };
        let (job, schedule, workspace) = edit(&["talaria", "cron", "edit", "j1", "--schedule", "every 2h"]);
        assert_eq!((job.as_str(), schedule.as_deref(), workspace), ("j1", Some("every 2h"), None));
        let (_, _, workspace) = edit(&["talaria", "cron", "edit", "j1", "--workspace", "/w"]);
        assert_eq!(workspace.as_deref(), Some(std::path::Path::new("/w")));
        let cli = Cli::try_parse_from(["talaria", "-C", "/tmp", "chat", "-q", "hi"]).expect("parse");
        assert_eq!(cli.workspace.as_deref(), Some(std::path::Path::new("/tmp")));
        assert!(matches!(cli.command, Some(super::Command::Chat(_))));
        let err = Cli::try_parse_from(["talaria", "chat", "--no-such-flag"]).err().expect("refused");
        assert_eq!(err.kind(), clap::error::ErrorKind::UnknownArgument);
    }
}
