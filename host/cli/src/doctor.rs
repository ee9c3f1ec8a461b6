//! `talaria doctor`: one line per check of what talaria needs, each `ok`, `warn` or `fail`.
//!
//! Checks, in order: the config file, a writable home, the state database (read whole; its
//! schema and session count; `--repair` recovers a damaged one), the model chain as `chat` resolves it, its API key, whether the provider
//! answers (`GET {base_url}/models` within 5 s; skipped with `--offline`), each fallback
//! provider, the plugins (problems, shadowing, an untrusted project), their tools, and the grants
//! file (grants left for plugins that are gone). Exit code 1 when any check failed.
//!
//! ```text
//! $ talaria doctor --offline
//! ok: config: /home/me/.talaria/config.toml parses
//! ok: home: /home/me/.talaria is writable
//! ok: state: /home/me/.talaria/state.db (schema v4, 12 sessions)
//! ok: model: ollama/llama3.2 at http://localhost:11434/v1 (chat_completions)
//! ...
//! ```

use std::collections::BTreeSet;
use std::io::IsTerminal as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use owo_colors::OwoColorize as _;
use talaria_agent::model::{ApiMode, Preset, Provider};
use talaria_runtime::{Capability, GrantFile, Runtime, Secrets};
use talaria_store::{ListQuery, Store};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::chat::{self, ChatArgs};

mod identity;
use crate::{Ctx, tools, ui};

/// How long the provider has to answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Args, Debug, Default)]
pub struct DoctorArgs {
    /// Do not contact the provider (every other check still runs)
    #[arg(long)]
    pub offline: bool,
    /// Fix what can be fixed: a damaged state database is moved aside (state.db.damaged-TIME)
    /// and what can still be read is copied into a new one
    #[arg(long)]
    pub repair: bool,
}

/// How one check went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Ok,
    Warn,
    Fail,
}

/// Prints the checks as they run and counts them.
struct Report {
    tty: bool,
    counts: [usize; 3],
}

impl Report {
    fn new() -> Self {
        Self { tty: std::io::stdout().is_terminal(), counts: [0; 3] }
    }

    fn line(&mut self, status: Status, label: &str, message: &str) {
        let (index, mark) = match (status, self.tty) {
            (Status::Ok, true) => (0, "✓".green().bold().to_string()),
            (Status::Warn, true) => (1, "!".yellow().bold().to_string()),
            (Status::Fail, true) => (2, "✗".red().bold().to_string()),
            (Status::Ok, false) => (0, "ok:".to_string()),
            (Status::Warn, false) => (1, "warn:".to_string()),
            (Status::Fail, false) => (2, "fail:".to_string()),
        };
        self.counts[index] += 1;
        // Messages quote plugins' names, manifests and servers' answers: shown, not obeyed.
        let mut lines = message.lines().map(|l| talaria_runtime::visible(l, usize::MAX));
        anstream::println!("{mark} {}: {}", label.bold(), lines.next().unwrap_or_default());
        for rest in lines {
            anstream::println!("  {rest}");
        }
    }

    fn ok(&mut self, label: &str, message: &str) {
        self.line(Status::Ok, label, message);
    }

    fn warn(&mut self, label: &str, message: &str) {
        self.line(Status::Warn, label, message);
    }

    fn fail(&mut self, label: &str, message: &str) {
        self.line(Status::Fail, label, message);
    }
}

pub async fn run(ctx: &Ctx, args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let mut r = Report::new();
    check_config(ctx, &mut r);
    check_home(&ctx.home, &mut r);
    check_state(&ctx.home, &ctx.store_location(), args.repair, &mut r).await;
    let secrets = Secrets::load(&ctx.home.join(".env"));
    let primary = check_model(ctx, &mut r);
    check_key(ctx, primary.as_ref(), &secrets, &mut r);
    match (&primary, args.offline) {
        (Some(p), false) => check_reachable(p, &mut r).await,
        (Some(_), true) => r.ok("provider", "not contacted (--offline)"),
        (None, _) => {}
    }
    check_fallbacks(ctx, &secrets, &mut r);
    check_sandbox(ctx, &mut r).await;
    let runtime = check_plugins(ctx, &mut r).await;
    check_grants(ctx, runtime.as_ref(), &mut r);
    check_installed(ctx, &mut r);
    check_gateway(ctx, runtime.as_ref(), &secrets, args.offline, &mut r).await;
    check_cron(ctx, &mut r).await;
    check_mcp(ctx, &secrets, &mut r);
    check_telemetry(ctx, &secrets, &mut r);
    let [ok, warned, failed] = r.counts;
    let summary = format!(
        "{}: {ok} ok, {}, {failed} failed",
        ui::count(ok + warned + failed, "check", "checks"),
        ui::count(warned, "warning", "warnings")
    );
    if failed > 0 {
        anstream::println!("{}", summary.red().bold());
        Ok(ExitCode::FAILURE)
    } else {
        anstream::println!("{}", summary.bold());
        Ok(ExitCode::SUCCESS)
    }
}

fn check_config(ctx: &Ctx, r: &mut Report) {
    let path = ctx.home.join("config.toml");
    if path.exists() {
        r.ok("config", &format!("{} parses", path.display()));
    } else {
        r.warn("config", &format!("{} does not exist (defaults in use): `talaria setup` writes one", path.display()));
    }
}

/// The gateway's rules, its accounts' adapters and secrets (each bundled adapter's token shown
/// to its platform unless `offline`), and who is paired (only when there are rules or
/// pairings to speak of).
async fn check_gateway(ctx: &Ctx, runtime: Option<&Runtime>, secrets: &Secrets, offline: bool, r: &mut Report) {
    for finding in talaria_gateway::check(&ctx.config.gateway) {
        match finding {
            talaria_gateway::Finding::Ok(m) => r.ok("gateway", &m),
            talaria_gateway::Finding::Warn(m) => r.warn("gateway", &m),
            talaria_gateway::Finding::Fail(m) => r.fail("gateway", &m),
        }
    }
    for (name, platform) in &ctx.config.gateway.platforms {
        if platform.enabled == Some(false) {
            continue;
        }
        let plugin_name = platform.plugin.as_deref().unwrap_or(name);
        let at = format!("[gateway.platforms.{name}]");
        match runtime.map(|rt| rt.plugin(plugin_name).cloned()) {
            Some(None) => r.fail(
                "gateway",
                &format!("{at}: no plugin named '{plugin_name}' (bundled adapters: telegram, matrix, discord, slack, webhook; set `plugin`)"),
            ),
            Some(Some(p)) if !p.is(talaria_runtime::Kind::Platform) => {
                r.fail("gateway", &format!("{at}: plugin '{plugin_name}' is not a platform adapter"))
            }
            Some(Some(p)) => {
                let mut unset = false;
                for (secret, _) in p.manifest.secret_headers.iter() {
                    let from = platform.secrets.get(secret).map_or(secret, String::as_str);
                    if secrets.value(from).is_none() {
                        unset = true;
                        r.fail("gateway", &format!("{at}: {from} is not set: add it to {}", ctx.home.join(".env").display()));
                    }
                }
                if !unset && !offline {
                    let token = |name: &str| {
                        secrets.value(platform.secrets.get(name).map_or(name, String::as_str))
                    };
                    identity::check(&at, plugin_name, platform.base_url.as_deref(), &token, r).await;
                }
            }
            None => {}
        }
        for (route, rules) in &platform.routes {
            if secrets.value(&rules.secret).is_none() {
                r.fail(
                    "gateway",
                    &format!(
                        "{at} route {route}: its secret {} is not set: add it to {}",
                        rules.secret,
                        ctx.home.join(".env").display()
                    ),
                );
            }
        }
    }
    let Ok(store) = ctx.store_for_reading().await else { return };
    let Ok(all) = store.pairings().await else { return };
    if all.is_empty() {
        return;
    }
    let now = jiff::Timestamp::now().as_millisecond();
    let paired = all.iter().filter(|p| p.state(now) == "approved").count();
    let waiting = all.iter().filter(|p| p.state(now) == "pending").count();
    r.ok(
        "gateway",
        &format!(
            "{} paired, {} waiting for approval (`talaria pairing list`)",
            crate::ui::count(paired, "user", "users"),
            crate::ui::count(waiting, "code", "codes")
        ),
    );
}

/// The MCP servers (only when there are some): each reachable as configured, its program found,
/// its `${NAME}` secrets set. Nothing is started (`talaria mcp test NAME` does that).
/// `[telemetry]` and the `OTEL_*` variables: where traces go, or why they cannot.
fn check_telemetry(ctx: &Ctx, secrets: &Secrets, r: &mut Report) {
    let env = |name: &str| std::env::var(name).ok();
    match talaria_core::telemetry::Settings::resolve(&ctx.config.telemetry, env, |n| secrets.value(n)) {
        Ok(None) => r.ok("traces", "off ([telemetry] endpoint or OTEL_EXPORTER_OTLP_ENDPOINT turns them on)"),
        Ok(Some(settings)) => {
            let to = settings
                .endpoint
                .or_else(|| env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
                .or_else(|| {
                    env("OTEL_EXPORTER_OTLP_ENDPOINT").map(|e| format!("{}/v1/traces", e.trim_end_matches('/')))
                })
                .unwrap_or_default();
            let text = if settings.content { "with prompts and tool text" } else { "without prompts or tool text" };
            r.ok("traces", &format!("sent to {to} ({text})"));
        }
        Err(e) => r.fail("traces", &e),
    }
}

fn check_mcp(ctx: &Ctx, secrets: &Secrets, r: &mut Report) {
    for (name, server) in &ctx.config.mcp_servers {
        if !server.enabled() {
            continue;
        }
        let at = format!("[mcp_servers.{name}]");
        let transport = match server.transport(name) {
            Ok(t) => t,
            Err(e) => {
                r.fail("mcp", &e.to_string());
                continue;
            }
        };
        let values: Vec<&String> = server.env.values().chain(server.headers.values()).collect();
        let missing: Vec<talaria_mcp::config::ConfigError> =
            values.iter().filter_map(|v| talaria_mcp::config::expand(v, |n| secrets.value(n)).err()).collect();
        if let Some(e) = missing.first() {
            r.fail("mcp", &format!("{at}: {e}"));
            continue;
        }
        match transport {
            talaria_mcp::config::Transport::Stdio { command, .. } => {
                let found = command.contains('/') && Path::new(&command).exists()
                    || std::env::var_os("PATH")
                        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(&command).is_file()));
                if found {
                    r.ok("mcp", &format!("{name}: `{command}` found (`talaria mcp test {name}` starts it)"));
                } else {
                    r.fail("mcp", &format!("{at}: `{command}` is not found on PATH"));
                }
            }
            talaria_mcp::config::Transport::Http { url, .. } => {
                r.ok("mcp", &format!("{name}: {url} (`talaria mcp test {name}` connects)"));
            }
        }
    }
}

/// Scheduled jobs (only when there are some): where they deliver, where they run, whether
/// anything ticks them.
async fn check_cron(ctx: &Ctx, r: &mut Report) {
    let Ok(store) = ctx.store_for_reading().await else { return };
    let Ok(jobs) = store.cron_jobs().await else { return };
    let active: Vec<_> = jobs.iter().filter(|j| j.enabled && j.next_run_at.is_some()).collect();
    if jobs.is_empty() {
        return;
    }
    let platforms = &ctx.config.gateway.platforms;
    for job in &jobs {
        let at = format!("job {} ({})", job.id, job.name);
        let account = match job.deliver.parse::<talaria_cron::target::Target>() {
            Ok(
                talaria_cron::target::Target::Platform { account } | talaria_cron::target::Target::Chat { account, .. },
            ) => Some(account),
            Ok(_) => None,
            Err(e) => {
                r.fail("cron", &format!("{at}: {e}"));
                continue;
            }
        };
        if let Some(account) = account
            && !platforms.contains_key(&account)
        {
            r.fail("cron", &format!("{at} delivers to `{account}`, which is not configured: add [gateway.platforms.{account}] or `talaria cron edit {} --deliver local`", job.id));
        }
        if let Some(ws) = &job.workspace
            && !Path::new(ws).is_dir()
        {
            r.fail(
                "cron",
                &format!("{at} runs in {ws}, which does not exist: `talaria cron edit {} --workspace DIR`", job.id),
            );
        }
    }
    let now = jiff::Timestamp::now().as_millisecond();
    let gateway = talaria_gateway::serve::Status::read_all(&store).await.iter().any(|s| s.live(now));
    let summary = format!("{} ({} active)", ui::count(jobs.len(), "job", "jobs"), active.len());
    if active.is_empty() || gateway {
        r.ok("cron", &format!("{summary}{}", if gateway { "; the running gateway ticks them" } else { "" }));
    } else {
        r.warn(
            "cron",
            &format!("{summary}, and no gateway is running: jobs run only while `talaria gateway run` does, or when `talaria cron tick` is called (a cron entry or systemd timer, every minute)"),
        );
    }
}

fn check_home(home: &Path, r: &mut Report) {
    let probe = home.join(format!(".doctor-{}.tmp", std::process::id()));
    let written = std::fs::create_dir_all(home).and_then(|()| std::fs::write(&probe, b"ok"));
    let _ = std::fs::remove_file(&probe);
    match written {
        Ok(()) => r.ok("home", &format!("{} is writable", home.display())),
        Err(e) => r.fail("home", &format!("cannot write in {}: {e}", home.display())),
    }
}

async fn check_state(home: &Path, location: &talaria_store::Location, repair: bool, r: &mut Report) {
    if let talaria_store::Location::Postgres(_) = location {
        // Connecting migrates the schema, which needs the pg_trgm extension: a store that opens
        // has both.
        let all = ListQuery { limit: usize::MAX, include_children: true, ..ListQuery::default() };
        let listed = match location.open().await {
            Ok(store) => store.list_sessions_with(&all).await,
            Err(e) => Err(e),
        };
        return match listed {
            Ok(sessions) => r.ok(
                "state",
                &format!(
                    "{location}: connected, schema current, pg_trgm present, {}",
                    ui::count(sessions.len(), "session", "sessions")
                ),
            ),
            Err(e) => r.fail("state", &e.to_string()),
        };
    }
    let path = home.join("state.db");
    match talaria_store::recover::check(&path) {
        Ok(None) => {}
        Ok(Some(damage)) if repair => return repair_state(&path, &damage, r),
        Ok(Some(damage)) => {
            return r.fail(
                "state",
                &format!(
                    "{} is damaged ({damage}); `talaria doctor --repair` moves it aside and recovers what can still be read",
                    path.display()
                ),
            );
        }
        Err(e) => return r.fail("state", &e.to_string()),
    }
    let store = match Store::open_for_reading(&path) {
        Ok(s) => s,
        Err(e) => return r.fail("state", &e.to_string()),
    };
    let all = ListQuery { limit: usize::MAX, include_children: true, ..ListQuery::default() };
    match store.list_sessions_with(&all).await {
        Ok(sessions) => r.ok(
            "state",
            &format!(
                "{} (schema v{}, {})",
                path.display(),
                talaria_store::schema::VERSION,
                ui::count(sessions.len(), "session", "sessions")
            ),
        ),
        Err(e) => r.fail("state", &e.to_string()),
    }
}

fn repair_state(path: &Path, damage: &str, r: &mut Report) {
    match talaria_store::recover::repair(path) {
        Ok(done) => {
            let mut text = format!(
                "{} was damaged ({damage}); it is now {}, and a new one holds what could be read: {} sessions, {} messages, {} plugin entries",
                path.display(),
                done.moved_to.display(),
                done.sessions,
                done.messages,
                done.plugin_entries
            );
            if done.stand_ins > 0 {
                text.push_str(&format!(
                    "; {} sessions whose details were lost are titled \"recovered ID\"",
                    done.stand_ins
                ));
            }
            if done.unreadable > 0 {
                text.push_str(&format!("; {} rows could not be read", done.unreadable));
            }
            if !done.lost_tables.is_empty() {
                text.push_str(&format!("; nothing could be read of: {}", done.lost_tables.join(", ")));
            }
            r.warn("state", &text);
        }
        Err(e) => r.fail("state", &format!("{} is damaged ({damage}) and could not be repaired: {e}", path.display())),
    }
}

/// The model chain as `chat` builds it; its primary provider when it resolves.
fn check_model(ctx: &Ctx, r: &mut Report) -> Option<Provider> {
    match chat::chain(ctx, &ChatArgs::default()) {
        Ok(chain) => {
            let primary = chain.providers.first().cloned();
            match &primary {
                Some(p) => r.ok("model", &format!("{} at {} ({})", p.label(), p.base_url, p.api_mode)),
                None => r.fail("model", "the model chain is empty"),
            }
            primary
        }
        Err(e) => {
            r.fail("model", &format!("{e:#}"));
            None
        }
    }
}

/// Where the key variable `var` is set, if anywhere.
fn key_source(ctx: &Ctx, var: &str, secrets: &Secrets) -> Option<String> {
    if std::env::var(var).is_ok_and(|v| !v.trim().is_empty()) {
        Some("in the environment".to_string())
    } else if secrets.value(var).is_some_and(|v| !v.trim().is_empty()) {
        Some(format!("in {}", ctx.home.join(".env").display()))
    } else {
        None
    }
}

fn check_key(ctx: &Ctx, primary: Option<&Provider>, secrets: &Secrets, r: &mut Report) {
    // Which variable, and whether the provider needs one: from the resolved provider, else from config.
    let m = ctx.config.model.clone().unwrap_or_default();
    let preset = m.provider.as_deref().and_then(Preset::find);
    let (var, needed, name) = match primary {
        Some(p) => {
            let preset = Preset::find(&p.name);
            (p.key_env.clone(), preset.is_some_and(|x| x.key_required), p.name.clone())
        }
        None => (
            m.key_env.clone().or(preset.and_then(|p| p.key_env).map(str::to_string)),
            preset.is_some_and(|p| p.key_required) || m.key_env.is_some(),
            m.provider.clone().unwrap_or_default(),
        ),
    };
    let Some(var) = var else {
        if primary.is_some() {
            r.ok("key", &format!("none needed ({name} is used without authentication)"));
        }
        return;
    };
    match key_source(ctx, &var, secrets) {
        Some(place) => r.ok("key", &format!("{var} is set {place}")),
        None if needed => r.warn(
            "key",
            &format!("{var} is not set: export it, or add `{var}=...` to {}", ctx.home.join(".env").display()),
        ),
        None => r.ok("key", &format!("{var} is not set ({name} is used without authentication)")),
    }
}

fn check_fallbacks(ctx: &Ctx, secrets: &Secrets, r: &mut Report) {
    for (i, f) in ctx.config.fallback_providers.iter().enumerate() {
        let label = format!("fallback {}", i + 1);
        let api_mode = match f.api_mode.as_deref() {
            None => None,
            Some(s) => match ApiMode::parse(s) {
                Some(mode) => Some(mode),
                None => {
                    r.warn(
                        &label,
                        &format!("unknown api_mode `{s}`: use chat_completions, anthropic_messages or responses"),
                    );
                    continue;
                }
            },
        };
        match f.spec(api_mode).and_then(|spec| Provider::resolve(spec, |name| secrets.value(name))) {
            Ok(p) => r.ok(&label, &format!("{} at {}", p.label(), p.base_url)),
            Err(e) => r.warn(&label, &format!("left out of the chain: {e}")),
        }
    }
}

/// What the provider's `/models` answered.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// The HTTP status of a plain-http answer.
    Status(u16),
    /// An https endpoint accepted the TCP connection (TLS and the key are not checked).
    Connected,
}

async fn check_reachable(p: &Provider, r: &mut Report) {
    let url = format!("{}/models", p.base_url.trim_end_matches('/'));
    let mut headers: Vec<(&str, String)> = Vec::new();
    if let Some(key) = &p.api_key {
        match p.api_mode {
            ApiMode::AnthropicMessages => {
                headers.push(("x-api-key", key.clone()));
                headers.push(("anthropic-version", "2023-06-01".to_string()));
            }
            ApiMode::ChatCompletions | ApiMode::Responses => headers.push(("authorization", format!("Bearer {key}"))),
        }
    }
    for (name, value) in &p.extra_headers {
        headers.push((name.as_str(), value.clone()));
    }
    match probe(&url, &headers).await {
        Ok(Answer::Status(status @ (401 | 403))) => r.fail(
            "provider",
            &format!("{url} answered HTTP {status}: key rejected; check {}", p.key_env.as_deref().unwrap_or("the key")),
        ),
        Ok(Answer::Status(status)) => r.ok("provider", &format!("{url} answered HTTP {status}")),
        Ok(Answer::Connected) => r.ok(
            "provider",
            &format!("{} accepts connections (https: the key is checked by the first chat)", p.base_url),
        ),
        Err(e) => r.fail("provider", &format!("cannot reach {url}: {e}")),
    }
}

/// `GET url` with `headers`, within [`PROBE_TIMEOUT`]. Plain http gets the status line; https
/// only a TCP connection (no TLS stack is reachable from this crate yet).
async fn probe(url: &str, headers: &[(&str, String)]) -> Result<Answer, String> {
    let target = Target::parse(url).ok_or_else(|| "not an http:// or https:// URL".to_string())?;
    let attempt = async {
        let mut stream =
            tokio::net::TcpStream::connect((target.host.as_str(), target.port)).await.map_err(|e| e.to_string())?;
        if target.tls {
            return Ok(Answer::Connected);
        }
        let mut request = format!(
            "GET {} HTTP/1.1\r\nhost: {}\r\nuser-agent: talaria-doctor/{}\r\naccept: application/json\r\nconnection: close\r\n",
            target.path,
            target.authority,
            env!("CARGO_PKG_VERSION")
        );
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        stream.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(2).any(|w| w == b"\r\n") && head.len() < 8192 {
            let n = stream.read(&mut buf).await.map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        let line = String::from_utf8_lossy(&head);
        let status = line
            .lines()
            .next()
            .filter(|l| l.starts_with("HTTP/"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|s| s.parse::<u16>().ok());
        status.map(Answer::Status).ok_or_else(|| "the answer is not HTTP".to_string())
    };
    match tokio::time::timeout(PROBE_TIMEOUT, attempt).await {
        Ok(result) => result,
        Err(_) => Err(format!("no answer within {} s", PROBE_TIMEOUT.as_secs())),
    }
}

/// The parts of an http(s) URL a request needs.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    tls: bool,
    /// `host[:port]` as written, for the Host header.
    authority: String,
    /// Without IPv6 brackets.
    host: String,
    port: u16,
    /// Starts with `/`.
    path: String,
}

impl Target {
    fn parse(url: &str) -> Option<Self> {
        let lower = url.to_ascii_lowercase();
        let (tls, rest) = if lower.starts_with("https://") {
            (true, &url["https://".len()..])
        } else if lower.starts_with("http://") {
            (false, &url["http://".len()..])
        } else {
            return None;
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) if rest[i..].starts_with('/') => (&rest[..i], rest[i..].to_string()),
            Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
            None => (rest, "/".to_string()),
        };
        let authority = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
        let default_port = if tls { 443 } else { 80 };
        let (host, port) = match authority.strip_prefix('[') {
            Some(v6) => {
                let (host, after) = v6.split_once(']')?;
                let port = match after.strip_prefix(':') {
                    Some(p) => p.parse().ok()?,
                    None => default_port,
                };
                (host, port)
            }
            None => match authority.rsplit_once(':') {
                Some((host, p)) => (host, p.parse().ok()?),
                None => (authority, default_port),
            },
        };
        if host.is_empty() {
            return None;
        }
        Some(Self { tls, authority: authority.to_string(), host: host.to_string(), port, path })
    }
}

/// Whether commands run confined here: a sandbox is started and runs a command. Running them
/// unconfined is flagged, for the whole home or for a gateway platform or scheduled job.
async fn check_sandbox(ctx: &Ctx, r: &mut Report) {
    use talaria_core::config::CommandsMode;
    use talaria_runtime::process::Confinement;
    let sandbox = ctx.config.command_sandbox(&ctx.home);
    match (sandbox.confinement, &sandbox.launcher) {
        (Confinement::Unconfined, _) => r.warn(
            "sandbox",
            "commands run UNCONFINED ([sandbox] commands = \"unconfined\"): as you, with all your files, processes and network; gateway chats and scheduled jobs stay confined unless their own settings say otherwise",
        ),
        (Confinement::Confined, Err(e)) => r.fail("sandbox", &e.to_string()),
        (Confinement::Confined, Ok(launcher)) => match talaria_sandbox::probe(launcher).await {
            Ok(p) => {
                r.ok(
                    "sandbox",
                    &format!(
                        "commands are confined: {} ({}) started a sandbox and ran a command in it in {} ms",
                        p.version,
                        launcher.bwrap.display(),
                        p.took.as_millis()
                    ),
                );
                let toolchains: Vec<String> =
                    sandbox.read.iter().filter(|p| p.exists()).map(|p| ui::tilde(p)).collect();
                r.ok(
                    "sandbox",
                    &format!(
                        "they see the workspace (its .git/config, .git/hooks and .talaria read-only), the system read-only, {}{}; never talaria's home, ~/.ssh, ~/.aws, ~/.config; hosts only through the egress proxy, each allowed by a grant or approved (net:HOST)",
                        if toolchains.is_empty() { "no toolchain places".to_string() } else { format!("and read {}", toolchains.join(", ")) },
                        if sandbox.write.is_empty() {
                            String::new()
                        } else {
                            format!("; they may change {}", sandbox.write.iter().map(|p| ui::tilde(p)).collect::<Vec<_>>().join(", "))
                        }
                    ),
                );
                match p.process_limit {
                    talaria_sandbox::ProcessLimit::Cgroup | talaria_sandbox::ProcessLimit::Rlimit => r.ok(
                        "sandbox",
                        &format!(
                            "at most {} processes per sandbox, files of at most {} MiB, a private /tmp of {} MiB",
                            sandbox.limits.max_processes, sandbox.limits.max_file_mb, sandbox.limits.tmp_mb
                        ),
                    ),
                    talaria_sandbox::ProcessLimit::Unbounded => r.warn(
                        "sandbox",
                        "the number of processes a command starts is not bounded: talaria runs as root, which RLIMIT_NPROC does not hold, and no pids control group can be made here",
                    ),
                }
            }
            Err(e) => r.fail("sandbox", &e.to_string()),
        },
    }
    for (name, platform) in &ctx.config.gateway.platforms {
        if platform.commands == Some(CommandsMode::Unconfined) {
            r.warn(
                "sandbox",
                &format!("commands of [gateway.platforms.{name}] chats run UNCONFINED: what strangers write steers commands that run as you"),
            );
        }
    }
    for job in &ctx.config.cron.unconfined_jobs {
        r.warn("sandbox", &format!("scheduled job {job} runs its commands UNCONFINED ([cron] unconfined_jobs)"));
    }
}

/// Discover plugins and list their tools; the runtime is handed on to the grants check.
async fn check_plugins(ctx: &Ctx, r: &mut Report) -> Option<Runtime> {
    let runtime = match ctx.runtime(false) {
        Ok(rt) => rt,
        Err(e) => {
            r.fail("plugins", &format!("{e:#}"));
            return None;
        }
    };
    let names: Vec<String> = runtime
        .plugins()
        .iter()
        .map(|p| match p.scope {
            talaria_runtime::Scope::Bundled => p.name().to_string(),
            talaria_runtime::Scope::User | talaria_runtime::Scope::Project(_) => {
                format!("{} ({})", p.name(), p.scope.label())
            }
        })
        .collect();
    r.ok("plugins", &format!("{} loaded: {}", names.len(), names.join(", ")));
    for p in runtime.problems() {
        r.warn("plugins", &p.to_string());
    }
    for s in runtime.shadowed() {
        r.warn(
            "plugins",
            &format!("{} ({}) shadows {} ({})", s.name, s.by.label(), s.hidden_location, s.hidden.label()),
        );
    }
    if let Some(dir) = runtime.untrusted_project() {
        r.warn(
            "plugins",
            &format!("{} is ignored: this project is not trusted (`talaria trust` loads its plugins)", dir.display()),
        );
    }
    tools::announce_compiles(&runtime);
    let (specs, problems) = runtime.tools().await;
    let plugins: BTreeSet<&str> = specs.iter().map(|t| t.plugin.as_str()).collect();
    if specs.is_empty() {
        r.warn("tools", "no tools available");
    } else {
        r.ok("tools", &format!("{} available from {}", specs.len(), ui::count(plugins.len(), "plugin", "plugins")));
    }
    for p in &problems {
        r.warn("tools", &p.to_string());
    }
    check_extensions(ctx, &runtime, r);
    Some(runtime)
}

/// The configured memory provider and context engine exist and are of their kind; which hooks run.
fn check_extensions(ctx: &Ctx, runtime: &Runtime, r: &mut Report) {
    for (label, kind, name, key) in [
        ("memory", "memory", ctx.config.memory.provider(), "provider = \"...\" under [memory]"),
        ("context", "context-engine", ctx.config.context.engine(), "engine = \"...\" under [context]"),
    ] {
        if name == "none" || name.is_empty() {
            r.ok(label, "off (\"none\")");
            continue;
        }
        match crate::plugin_host::single(runtime, kind, name) {
            Ok(p) => r.ok(label, &format!("{} ({}, version {})", p.name(), p.scope.label(), p.manifest.version)),
            Err(e) => r.fail(label, &format!("{e}; set {key} in config.toml, or \"none\"")),
        }
    }
    let hooks: Vec<String> = runtime
        .plugins_of_kind("hook")
        .iter()
        .map(|p| {
            let events: Vec<&str> = p.hook_events().iter().map(|e| e.name()).collect();
            format!("{} ({})", p.name(), events.join(", "))
        })
        .collect();
    r.ok("hooks", &if hooks.is_empty() { "none enabled".to_string() } else { hooks.join("; ") });
    match &ctx.config.auxiliary {
        None => r.ok("auxiliary", "none set: summaries and plugins' llm calls use the main model"),
        Some(aux) => r.ok("auxiliary", &format!("{} {}", aux.provider.as_deref().unwrap_or("custom"), aux.model)),
    }
}

fn check_grants(ctx: &Ctx, runtime: Option<&Runtime>, r: &mut Report) {
    let path = ctx.home.join("grants.toml");
    let file = match GrantFile::load(&path) {
        Ok(f) => f,
        Err(e) => return r.fail("grants", &e.to_string()),
    };
    let mut issues = 0;
    let known = runtime.map(Known::new);
    for (scope, plugins) in &file.grants {
        for (name, grants) in plugins {
            for cap in &grants.granted {
                if let Err(e) = cap.parse::<Capability>() {
                    issues += 1;
                    r.warn("grants", &format!("{name} ({scope}): {e}; it is ignored"));
                }
            }
            let exists = match (&known, scope.strip_prefix("project:")) {
                (Some(k), _) if k.has(scope, name) => true,
                // Another project's plugins are not discovered here: look at its directory.
                (_, Some(project)) => talaria_runtime::project_plugin_dir(Path::new(project)).join(name).is_dir(),
                (Some(_), None) => false,
                (None, None) => true,
            };
            if !exists {
                issues += 1;
                r.warn(
                    "grants",
                    &format!(
                        "{name} ({scope}) has grants but no such plugin exists; remove its entry from {}",
                        path.display()
                    ),
                );
            }
        }
    }
    for project in &file.trusted_projects {
        if !project.is_dir() {
            issues += 1;
            r.warn("grants", &format!("trusted project {} no longer exists", project.display()));
        }
    }
    if issues == 0 {
        let plugins: usize = file.grants.values().map(|p| p.len()).sum();
        if path.exists() {
            r.ok(
                "grants",
                &format!("{plugins} plugins with recorded grants, {} trusted projects", file.trusted_projects.len()),
            );
        } else {
            r.ok("grants", "none recorded (bundled plugins have what their manifests request)");
        }
    }
}

/// Installed plugins still match their lockfiles, and their signers are still trusted.
fn check_installed(ctx: &Ctx, r: &mut Report) {
    use talaria_market::install::verify;
    let mut count = 0;
    let mut bad = 0;
    for target in &ctx.installed_scopes() {
        match verify(&ctx.home, target) {
            Err(e) => {
                bad += 1;
                r.fail("installed", &e.to_string());
            }
            Ok(results) => {
                for v in results {
                    count += 1;
                    if !v.problems.is_empty() {
                        bad += 1;
                        r.fail("installed", &format!("{} {}: {}", v.name, v.version, v.problems.join("; ")));
                    }
                }
            }
        }
    }
    if bad == 0 {
        r.ok("installed", &format!("{count} installed plugins match their lockfiles"));
    }
}

/// The plugins the runtime found: (scope key, name) of active and shadowed ones, and the names of
/// broken ones (their scope is not recorded).
struct Known {
    found: BTreeSet<(String, String)>,
    broken: BTreeSet<String>,
}

impl Known {
    fn new(rt: &Runtime) -> Self {
        let mut found: BTreeSet<(String, String)> =
            rt.plugins().iter().map(|p| (p.scope.key(), p.name().to_string())).collect();
        found.extend(rt.shadowed().iter().map(|s| (s.hidden.key(), s.name.clone())));
        let broken = rt.problems().iter().filter_map(|p| p.plugin.clone()).collect();
        Self { found, broken }
    }

    fn has(&self, scope: &str, name: &str) -> bool {
        self.found.contains(&(scope.to_string(), name.to_string())) || self.broken.contains(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_what_a_request_needs() {
        let t = Target::parse("http://127.0.0.1:8080/v1/models").expect("url");
        assert_eq!((t.tls, t.host.as_str(), t.port, t.path.as_str()), (false, "127.0.0.1", 8080, "/v1/models"));
        let t = Target::parse("HTTPS://api.openai.com/v1/models").expect("url");
        assert_eq!(
            (t.tls, t.host.as_str(), t.port, t.authority.as_str()),
            (true, "api.openai.com", 443, "api.openai.com")
        );
        let t = Target::parse("http://[::1]:11434/v1").expect("url");
        assert_eq!((t.host.as_str(), t.port), ("::1", 11434));
        assert_eq!(Target::parse("http://host").expect("url").path, "/");
        assert!(Target::parse("ftp://x").is_none() && Target::parse("http://:80/").is_none());
    }

    #[tokio::test]
    async fn a_closed_port_is_unreachable_and_a_server_gives_its_status() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            let _ = s.write_all(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n").await;
        });
        let answer = probe(&format!("http://{addr}/v1/models"), &[]).await;
        assert_eq!(answer, Ok(Answer::Status(401)));
        server.await.expect("server");
        let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr");
        let err = probe(&format!("http://{closed}/v1/models"), &[]).await.expect_err("closed");
        assert!(err.to_lowercase().contains("refused"), "{err}");
    }
}
