//! `talaria sessions list|show|search|export|delete|rename`: past conversations in `state.db`.
//!
//! Every command that takes one session accepts what [`Store::resolve_session`] does: an id, a
//! unique id prefix, a title, or `latest`. Store errors (no such session, several match, title
//! taken) already say what to do, so they are shown as they are, with exit code 1.
//!
//! ```text
//! $ talaria sessions list --limit 2
//! ID                      TITLE                MESSAGES  MODEL         UPDATED
//! 20261122_140312_a1b2c3  Trip to Lisbon       12        gpt-4.1-mini  2026-11-22 14:03
//! 20261121_091500_00ff00  where is my config?  4         llama3.2      2026-11-21 09:15
//! $ talaria sessions export latest --format markdown -o lisbon.md
//! ```

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Subcommand, ValueEnum};
use owo_colors::OwoColorize as _;
use serde::Serialize;
use talaria_protocol::{Message, Role, ToolCall, Usage};
use talaria_runtime::shown::{visible, visible_lines};
use talaria_store::search::{MATCH_END, MATCH_START};
use talaria_store::{SearchHit, SearchQuery, SessionInfo, Store, StoredMessage};

use crate::{Ctx, ui};

/// Lines of a tool result `sessions show` prints before cutting it.
const RESULT_LINES: usize = 4;
/// Characters of one printed line of a tool result, or of a tool call's arguments.
const LINE_CHARS: usize = 160;

#[derive(Subcommand)]
#[command(defer = true)]
pub enum SessionsCmd {
    /// List sessions, most recently updated first
    List {
        /// How many sessions to show
        #[arg(short = 'n', long, default_value_t = 20, value_name = "N")]
        limit: usize,
        /// Print as JSON (times are Unix milliseconds)
        #[arg(long)]
        json: bool,
    },
    /// Show a conversation: its details, then every message (tool results shortened)
    Show {
        /// The session: its id (or a unique prefix), its title, or `latest`
        #[arg(value_name = "ID|TITLE|latest")]
        session: String,
        /// Print the session and all its messages as JSON, nothing shortened
        #[arg(long)]
        json: bool,
    },
    /// Search the messages of every session
    #[command(after_help = SEARCH_HELP)]
    Search {
        /// What to look for (several words are joined into one query)
        #[arg(required = true, value_name = "QUERY")]
        query: Vec<String>,
        /// Most hits to show
        #[arg(short = 'n', long, default_value_t = 20, value_name = "N")]
        limit: usize,
        /// Only messages of this role
        #[arg(long, value_enum)]
        role: Option<RoleArg>,
        /// Print the hits as JSON (snippets keep the >>> <<< match markers)
        #[arg(long)]
        json: bool,
    },
    /// Write a conversation out as JSON Lines, JSON or Markdown
    Export {
        /// The session: its id (or a unique prefix), its title, or `latest` (sharegpt: leave it
        /// out with --all, --source or --since for many)
        #[arg(value_name = "ID|TITLE|latest", required_unless_present_any = ["all", "source", "since"])]
        session: Option<String>,
        /// jsonl: a session line, then one line per message; json: one document; markdown: for
        /// reading; sharegpt: one training trajectory per line (conversations with
        /// system/human/gpt/tool turns, tool calls in <tool_call> tags and results in
        /// <tool_response> tags, timestamp, model, completed)
        #[arg(short, long, value_enum, default_value_t = ExportFormat::Jsonl)]
        format: ExportFormat,
        /// Write to FILE instead of standard output
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// sharegpt: every session (subagents' included)
        #[arg(long, conflicts_with = "session")]
        all: bool,
        /// sharegpt: only sessions from this source (cli, acp, gateway, cron, subagent, api)
        #[arg(long, conflicts_with = "session")]
        source: Option<String>,
        /// sharegpt: only sessions started on or after this day (YYYY-MM-DD, local time)
        #[arg(long, conflicts_with = "session", value_name = "YYYY-MM-DD")]
        since: Option<String>,
        /// sharegpt: only sessions whose last message is a final answer
        #[arg(long)]
        completed: bool,
    },
    /// Delete sessions and their messages (asks first unless --yes)
    Delete {
        /// The sessions: ids (or unique prefixes), titles, or `latest`
        #[arg(required = true, value_name = "ID")]
        sessions: Vec<String>,
        /// Delete without asking (needed when standard input is not a terminal)
        #[arg(short, long)]
        yes: bool,
    },
    /// Give a session a new title (titles are unique; `chat --resume TITLE` finds it)
    Rename {
        /// The session: its id (or a unique prefix), its title, or `latest`
        #[arg(value_name = "ID|TITLE|latest")]
        session: String,
        /// The new title (at most 100 characters)
        title: String,
    },
}

const SEARCH_HELP: &str = "Query syntax:
  lisbon trip          both words (stemmed: `running` finds `runs`)
  \"docker compose\"     the phrase
  docker OR podman     either
  docker NOT compose   the first without the second
  deploy*              a prefix
  Substrings of 3+ characters and CJK text are found too when no whole word matches.";

/// A message role to filter search hits by.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum RoleArg {
    User,
    Assistant,
    Tool,
}

impl RoleArg {
    fn role(self) -> Role {
        match self {
            Self::User => Role::User,
            Self::Assistant => Role::Assistant,
            Self::Tool => Role::Tool,
        }
    }
}

/// How `sessions export` writes a conversation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    Jsonl,
    Json,
    Markdown,
    /// Training trajectories (the reference agent's ShareGPT JSONL)
    Sharegpt,
}

pub async fn run(ctx: &Ctx, cmd: SessionsCmd) -> anyhow::Result<ExitCode> {
    // Reading works in a read-only home; only delete and rename need to write.
    let writes = matches!(cmd, SessionsCmd::Delete { .. } | SessionsCmd::Rename { .. });
    let store = if writes { ctx.store().await? } else { ctx.store_for_reading().await? };
    match cmd {
        SessionsCmd::List { limit, json } => list(&store, limit, json).await,
        SessionsCmd::Show { session, json } => show(&store, &session, json).await,
        SessionsCmd::Search { query, limit, role, json } => search(&store, &query.join(" "), limit, role, json).await,
        SessionsCmd::Export { session, format, output, all, source, since, completed } => {
            let many = Many { all, source, since, completed };
            match session {
                Some(key) if format != ExportFormat::Sharegpt || !completed => {
                    export(&store, &key, format, output.as_deref()).await
                }
                key => export_trajectories(&store, key.as_deref(), &many, format, output.as_deref()).await,
            }
        }
        SessionsCmd::Delete { sessions, yes } => delete(&store, &sessions, yes).await,
        SessionsCmd::Rename { session, title } => rename(&store, &session, &title).await,
    }
}

async fn list(store: &Store, limit: usize, json: bool) -> anyhow::Result<ExitCode> {
    let sessions = store.list_sessions(limit, 0).await?;
    if json {
        let items: Vec<SessionJson<'_>> = sessions.iter().map(session_json).collect();
        println!("{}", serde_json::to_string_pretty(&items)?);
        return Ok(ExitCode::SUCCESS);
    }
    if sessions.is_empty() {
        ui::note("no sessions yet: `talaria chat` starts one");
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = sessions
        .iter()
        .map(|s| {
            vec![
                s.id.clone(),
                ui::first_line(&display_title(s), 48),
                s.message_count.to_string(),
                ui::first_line(&s.model, 32),
                local_time(s.updated_at),
            ]
        })
        .collect();
    ui::table(&["ID", "TITLE", "MESSAGES", "MODEL", "UPDATED"], &rows);
    Ok(ExitCode::SUCCESS)
}

async fn show(store: &Store, key: &str, json: bool) -> anyhow::Result<ExitCode> {
    let info = store.resolve_session(key).await?;
    let messages = store.messages(&info.id).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&conversation_json(&info, &messages))?);
        return Ok(ExitCode::SUCCESS);
    }
    print_header(&info);
    for m in &messages {
        anstream::println!();
        print_message(m);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_header(s: &SessionInfo) {
    match &s.title {
        Some(title) => anstream::println!("{} {}", s.id.bold(), format!("\"{}\"", visible(title, usize::MAX)).bold()),
        None => anstream::println!("{}", s.id.bold()),
    }
    let field = |name: &str, value: String| {
        anstream::println!("{}  {}", format!("{name:<9}").dimmed(), visible(&value, usize::MAX));
    };
    field("model:", model_label(s));
    let mut started = local_time(s.started_at);
    if let Some(ended) = s.ended_at {
        started.push_str(&format!(", ended {}", local_time(ended)));
        if let Some(reason) = &s.end_reason {
            started.push_str(&format!(" ({reason})"));
        }
    }
    field("started:", started);
    field("source:", if s.cwd.is_empty() { s.source.clone() } else { format!("{} in {}", s.source, s.cwd) });
    if let Some(parent) = &s.parent_id {
        field("parent:", parent.clone());
    }
    field(
        "messages:",
        format!(
            "{} ({}, {})",
            s.message_count,
            plural(s.tool_call_count, "tool call"),
            plural(s.api_call_count, "model call")
        ),
    );
    field("tokens:", tokens_text(s));
}

fn tokens_text(s: &SessionInfo) -> String {
    let u = &s.usage;
    let approx = u.approx();
    let mut text = format!("{approx}{} in, {approx}{} out", u.input_tokens, u.output_tokens);
    if u.cache_read_tokens > 0 {
        text.push_str(&format!(", {} read from cache", u.cache_read_tokens));
    }
    if u.reasoning_tokens > 0 {
        text.push_str(&format!(", {} reasoning", u.reasoning_tokens));
    }
    if u.estimated {
        text.push_str(" (~ estimated: the provider did not report usage for every call)");
    }
    text
}

fn print_message(m: &StoredMessage) {
    let time = local_time(m.created_at);
    match &m.message {
        Message::System { content } => {
            anstream::println!("{} {}", "system".magenta().bold(), time.dimmed());
            for line in shortened(content, RESULT_LINES) {
                anstream::println!("{}", line.dimmed());
            }
        }
        Message::User { content, .. } => {
            anstream::println!("{} {}", "user".green().bold(), time.dimmed());
            anstream::println!("{}", visible_lines(content));
        }
        Message::Assistant { content, tool_calls, .. } => {
            anstream::println!("{} {}", "assistant".cyan().bold(), time.dimmed());
            if !content.is_empty() {
                anstream::println!("{}", visible_lines(content));
            }
            for call in tool_calls {
                let args = ui::first_line(&compact_json(&call.arguments), LINE_CHARS);
                anstream::println!("{} {}({args})", "→".yellow(), visible(&call.name, LINE_CHARS).yellow());
            }
        }
        Message::Tool { name, content, .. } => {
            anstream::println!("{} {}", format!("tool {}", visible(name, LINE_CHARS)).yellow().bold(), time.dimmed());
            for line in shortened(content, RESULT_LINES) {
                anstream::println!("  {}", line.dimmed());
            }
        }
    }
}

/// At most `max` lines of `text`, each cut to [`LINE_CHARS`], and a line saying how many were left out.
fn shortened(text: &str, max: usize) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<String> = lines.iter().take(max).map(|l| ui::first_line(l, LINE_CHARS)).collect();
    if lines.len() > max {
        out.push(format!("… ({} more lines)", lines.len() - max));
    }
    out
}

/// Tool-call arguments on one line, in their own order: whitespace outside JSON strings dropped
/// (the model's text may not even be valid JSON).
fn compact_json(arguments: &str) -> String {
    let mut out = String::with_capacity(arguments.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in arguments.chars() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                '\n' | '\r' | '\t' => {
                    out.push(' ');
                    continue;
                }
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
        } else if c.is_whitespace() {
            continue;
        }
        out.push(c);
    }
    out
}

async fn search(
    store: &Store,
    text: &str,
    limit: usize,
    role: Option<RoleArg>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let query = SearchQuery { limit, role: role.map(RoleArg::role), ..SearchQuery::new(text) };
    let hits = store.search(&query).await?;
    if json {
        let items: Vec<HitJson<'_>> = hits.iter().map(hit_json).collect();
        println!("{}", serde_json::to_string_pretty(&items)?);
        return Ok(ExitCode::SUCCESS);
    }
    if hits.is_empty() {
        ui::note(&format!("no messages match \"{text}\""));
        return Ok(ExitCode::SUCCESS);
    }
    let styled = anstream::AutoStream::choice(&std::io::stdout()) != anstream::ColorChoice::Never;
    for (i, hit) in hits.iter().enumerate() {
        if i > 0 {
            anstream::println!();
        }
        let title =
            hit.session_title.as_deref().map(|t| format!(" \"{}\"", visible(t, usize::MAX))).unwrap_or_default();
        anstream::println!(
            "{}{}  {}  {}",
            hit.session_id.bold(),
            title.bold(),
            local_time(hit.created_at).dimmed(),
            hit.role.as_str().cyan()
        );
        anstream::println!("  {}", highlight(&one_line(&hit.snippet), styled));
    }
    Ok(ExitCode::SUCCESS)
}

fn one_line(text: &str) -> String {
    visible(&text.split_whitespace().collect::<Vec<_>>().join(" "), usize::MAX)
}

/// The snippet with its matches in bold colour, or with the plain markers when not styled.
fn highlight(snippet: &str, styled: bool) -> String {
    if !styled {
        return snippet.to_string();
    }
    let mut out = String::with_capacity(snippet.len());
    let mut rest = snippet;
    while let Some(start) = rest.find(MATCH_START) {
        out.push_str(&rest[..start]);
        let after = &rest[start + MATCH_START.len()..];
        let (matched, next) = match after.find(MATCH_END) {
            Some(end) => (&after[..end], &after[end + MATCH_END.len()..]),
            None => (after, ""),
        };
        out.push_str(&matched.yellow().bold().to_string());
        rest = next;
    }
    out.push_str(rest);
    out
}

/// Which sessions a many-session export takes.
struct Many {
    all: bool,
    source: Option<String>,
    since: Option<String>,
    completed: bool,
}

/// The trajectories of one session (`key`) or of the sessions `many` selects, one JSON line
/// each, oldest first.
async fn export_trajectories(
    store: &Store,
    key: Option<&str>,
    many: &Many,
    format: ExportFormat,
    output: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    if format != ExportFormat::Sharegpt {
        anyhow::bail!("exporting several sessions at once needs --format sharegpt (one trajectory per line)");
    }
    let since = match &many.since {
        Some(day) => {
            let date: jiff::civil::Date =
                day.parse().with_context(|| format!("--since {day}: give a day as YYYY-MM-DD"))?;
            let start = date
                .to_zoned(jiff::tz::TimeZone::system())
                .with_context(|| format!("--since {day}: not a day in this time zone"))?;
            Some(start.timestamp().as_millisecond())
        }
        None => None,
    };
    let sessions = match key {
        Some(key) => vec![store.resolve_session(key).await?],
        None => {
            let query = talaria_store::ListQuery {
                limit: usize::MAX >> 1,
                offset: 0,
                include_children: many.all,
                source: many.source.as_deref(),
                parent_id: None,
                cwd: None,
            };
            let mut found = store.list_sessions_with(&query).await?;
            found.retain(|s| since.is_none_or(|t| s.started_at >= t));
            found.sort_by_key(|s| s.started_at);
            found
        }
    };
    let mut text = String::new();
    let mut written = 0;
    for info in &sessions {
        let messages = store.messages(&info.id).await?;
        if messages.is_empty() {
            continue;
        }
        let line = talaria_store::trajectory::session(info, &store.system_prompt(&info.id).await?, &messages);
        if many.completed && line["completed"] != true {
            continue;
        }
        text.push_str(&serde_json::to_string(&line)?);
        text.push('\n');
        written += 1;
    }
    match output {
        Some(path) => {
            std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
            ui::note(&format!("exported {} to {}", ui::count(written, "trajectory", "trajectories"), path.display()));
        }
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes()).and_then(|()| out.flush()).context("cannot write to standard output")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn export(store: &Store, key: &str, format: ExportFormat, output: Option<&Path>) -> anyhow::Result<ExitCode> {
    let info = store.resolve_session(key).await?;
    let messages = store.messages(&info.id).await?;
    let text = match format {
        ExportFormat::Sharegpt => format!(
            "{}\n",
            serde_json::to_string(&talaria_store::trajectory::session(
                &info,
                &store.system_prompt(&info.id).await?,
                &messages
            ))?
        ),
        ExportFormat::Jsonl => {
            let header = HeaderJson { kind: "session", session: session_json(&info) };
            let mut text = format!("{}\n", serde_json::to_string(&header)?);
            for m in &messages {
                text.push_str(&serde_json::to_string(&message_json(m))?);
                text.push('\n');
            }
            text
        }
        ExportFormat::Json => format!("{}\n", serde_json::to_string_pretty(&conversation_json(&info, &messages))?),
        ExportFormat::Markdown => markdown(&info, &messages),
    };
    match output {
        Some(path) => {
            std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
            ui::note(&format!(
                "exported {} of {} to {}",
                ui::count(messages.len(), "message", "messages"),
                info.id,
                path.display()
            ));
        }
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes()).and_then(|()| out.flush()).context("cannot write to standard output")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The conversation as Markdown: a heading and details, then one section per message.
fn markdown(s: &SessionInfo, messages: &[StoredMessage]) -> String {
    let mut md = String::new();
    let heading = s.title.clone().unwrap_or_else(|| format!("Session {}", s.id));
    md.push_str(&format!("# {heading}\n\n"));
    md.push_str(&format!("- Session: `{}`\n", s.id));
    md.push_str(&format!("- Model: {}\n", model_label(s)));
    md.push_str(&format!("- Started: {}\n", local_time(s.started_at)));
    md.push_str(&format!(
        "- Messages: {} ({}), tokens: {}\n",
        s.message_count,
        plural(s.tool_call_count, "tool call"),
        tokens_text(s)
    ));
    for m in messages {
        let time = local_time(m.created_at);
        match &m.message {
            Message::System { content } => {
                md.push_str(&format!("\n## System · {time}\n\n{}", fenced(content, "")));
            }
            Message::User { content, .. } => md.push_str(&format!("\n## User · {time}\n\n{}\n", content.trim_end())),
            Message::Assistant { content, tool_calls, .. } => {
                md.push_str(&format!("\n## Assistant · {time}\n\n"));
                if !content.is_empty() {
                    md.push_str(&format!("{}\n", content.trim_end()));
                }
                for call in tool_calls {
                    md.push_str(&format!("\nTool call `{}`:\n\n{}", call.name, fenced(&call.arguments, "json")));
                }
            }
            Message::Tool { name, content, .. } => {
                md.push_str(&format!("\n### Result of `{name}` · {time}\n\n{}", fenced(content, "")));
            }
        }
    }
    md
}

/// `text` in a code fence longer than any run of backticks inside it.
fn fenced(text: &str, lang: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    format!("{fence}{lang}\n{}\n{fence}\n", text.trim_end_matches('\n'))
}

async fn delete(store: &Store, keys: &[String], yes: bool) -> anyhow::Result<ExitCode> {
    let mut targets: Vec<SessionInfo> = Vec::new();
    for key in keys {
        let info = store.resolve_session(key).await?;
        if !targets.iter().any(|t| t.id == info.id) {
            targets.push(info);
        }
    }
    let what = ui::count(targets.len(), "session", "sessions");
    if !yes {
        if !std::io::stdin().is_terminal() {
            anyhow::bail!("not deleting {what} without confirmation: standard input is not a terminal; pass --yes");
        }
        for s in &targets {
            anstream::eprintln!(
                "  {}  {}  ({})",
                s.id,
                ui::first_line(&display_title(s), 60),
                ui::count(s.message_count, "message", "messages")
            );
        }
        let theirs = if targets.len() == 1 { "its" } else { "their" };
        anstream::eprint!("Delete {what} and {theirs} messages? [y/N] ");
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer).context("cannot read the answer")?;
        if !matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
            ui::note("nothing deleted");
            return Ok(ExitCode::FAILURE);
        }
    }
    for s in &targets {
        store.delete_session(&s.id).await?;
        println!("deleted {}", s.id);
    }
    Ok(ExitCode::SUCCESS)
}

async fn rename(store: &Store, key: &str, title: &str) -> anyhow::Result<ExitCode> {
    let info = store.resolve_session(key).await?;
    store.set_title(&info.id, title).await?;
    println!("renamed {} to \"{}\"", info.id, title.trim());
    Ok(ExitCode::SUCCESS)
}

fn plural(n: i64, what: &str) -> String {
    if n == 1 { format!("1 {what}") } else { format!("{n} {what}s") }
}

/// The title, else the first user message marked as no title (it cannot be used as a key),
/// else a placeholder.
pub fn display_title(s: &SessionInfo) -> String {
    match (&s.title, &s.preview) {
        (Some(t), _) => t.clone(),
        (None, Some(p)) => format!("(untitled) {p}"),
        (None, None) => "(no messages)".to_string(),
    }
}

/// `provider/model`, or whichever of them is known.
fn model_label(s: &SessionInfo) -> String {
    match (s.provider.is_empty(), s.model.is_empty()) {
        (false, false) => format!("{}/{}", s.provider, s.model),
        (true, false) => s.model.clone(),
        (false, true) => s.provider.clone(),
        (true, true) => "-".to_string(),
    }
}

/// Unix milliseconds as local `2026-11-22 14:03`.
fn local_time(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(t) => t.to_zoned(talaria_store::local_time::zone()).strftime("%Y-%m-%d %H:%M").to_string(),
        Err(_) => "-".to_string(),
    }
}

/// A session as `list --json`, `show --json` and `export` write it (times are Unix milliseconds).
#[derive(Serialize)]
struct SessionJson<'a> {
    id: &'a str,
    title: Option<&'a str>,
    source: &'a str,
    provider: &'a str,
    model: &'a str,
    parent_id: Option<&'a str>,
    cwd: &'a str,
    started_at: i64,
    updated_at: i64,
    ended_at: Option<i64>,
    end_reason: Option<&'a str>,
    message_count: i64,
    tool_call_count: i64,
    api_call_count: i64,
    usage: Usage,
    preview: Option<&'a str>,
}

fn session_json(s: &SessionInfo) -> SessionJson<'_> {
    SessionJson {
        id: &s.id,
        title: s.title.as_deref(),
        source: &s.source,
        provider: &s.provider,
        model: &s.model,
        parent_id: s.parent_id.as_deref(),
        cwd: &s.cwd,
        started_at: s.started_at,
        updated_at: s.updated_at,
        ended_at: s.ended_at,
        end_reason: s.end_reason.as_deref(),
        message_count: s.message_count,
        tool_call_count: s.tool_call_count,
        api_call_count: s.api_call_count,
        usage: s.usage,
        preview: s.preview.as_deref(),
    }
}

/// The first line of a JSON Lines export.
#[derive(Serialize)]
struct HeaderJson<'a> {
    /// Always `session`: message lines have a `role` instead.
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    session: SessionJson<'a>,
}

/// One message as exported.
#[derive(Serialize)]
struct MessageJson<'a> {
    role: &'static str,
    content: &'a str,
    tool_calls: Option<&'a [ToolCall]>,
    tool_call_id: Option<&'a str>,
    name: Option<&'a str>,
    created_at: i64,
}

fn message_json(m: &StoredMessage) -> MessageJson<'_> {
    let (tool_calls, tool_call_id, name) = match &m.message {
        Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => (Some(tool_calls.as_slice()), None, None),
        Message::Tool { tool_call_id, name, .. } => (None, Some(tool_call_id.as_str()), Some(name.as_str())),
        Message::System { .. } | Message::User { .. } | Message::Assistant { .. } => (None, None, None),
    };
    MessageJson {
        role: m.message.role().as_str(),
        content: m.message.content(),
        tool_calls,
        tool_call_id,
        name,
        created_at: m.created_at,
    }
}

/// A conversation whole: `show --json` and `export --format json`.
#[derive(Serialize)]
struct ConversationJson<'a> {
    session: SessionJson<'a>,
    messages: Vec<MessageJson<'a>>,
}

fn conversation_json<'a>(s: &'a SessionInfo, messages: &'a [StoredMessage]) -> ConversationJson<'a> {
    ConversationJson { session: session_json(s), messages: messages.iter().map(message_json).collect() }
}

#[derive(Serialize)]
struct HitJson<'a> {
    session_id: &'a str,
    session_title: Option<&'a str>,
    message_id: i64,
    role: &'static str,
    /// Matches between `>>>` and `<<<`.
    snippet: &'a str,
    created_at: i64,
}

fn hit_json(h: &SearchHit) -> HitJson<'_> {
    HitJson {
        session_id: &h.session_id,
        session_title: h.session_title.as_deref(),
        message_id: h.message_id,
        role: h.role.as_str(),
        snippet: &h.snippet,
        created_at: h.created_at,
    }
}

/// Let the user choose one of the latest sessions at the terminal (`--resume` or `/resume`
/// with no value): those of `workspace` first, each with when it was last used, its title and
/// size. `None` when they leave the list, or there is no session.
///
/// # Errors
/// The store cannot be read.
pub async fn pick(store: &Store, workspace: &std::path::Path) -> anyhow::Result<Option<String>> {
    let here = workspace.display().to_string();
    let mut list = store.list_sessions(50, 0).await?;
    // This directory's sessions first, each group newest first.
    list.sort_by_key(|s| (s.cwd != here, std::cmp::Reverse(s.updated_at)));
    let entries: Vec<crate::picker::Entry> = list
        .iter()
        .map(|s| {
            let place =
                if s.cwd == here { String::new() } else { format!(" · in {}", crate::ui::tilde(Path::new(&s.cwd))) };
            crate::picker::Entry {
                label: format!(
                    "{} · {} · {}{place}",
                    local_time(s.updated_at),
                    crate::ui::first_line(&display_title(s), 60),
                    plural(s.message_count, "message")
                ),
                value: s.id.clone(),
            }
        })
        .collect();
    if entries.is_empty() {
        return Ok(None);
    }
    Ok(tokio::task::spawn_blocking(move || crate::picker::pick("Resume which session?", &entries, 0)).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_are_highlighted_only_when_styled() {
        let s = "a >>>lisbon<<< trip to >>>Lisbon<<<";
        assert_eq!(highlight(s, false), s);
        let styled = highlight(s, true);
        assert!(!styled.contains(MATCH_START) && !styled.contains(MATCH_END), "{styled}");
        assert!(styled.contains("lisbon") && styled.contains('\u{1b}'), "{styled}");
    }

    #[test]
    fn fences_outgrow_backticks_inside() {
        assert_eq!(fenced("x", ""), "```\nx\n```\n");
        assert!(fenced("a ```` b", "").starts_with("`````\n"));
    }

    #[test]
    fn arguments_stay_in_order_on_one_line() {
        assert_eq!(compact_json("{\"path\": \"a b.txt\",\n \"n\": 1}"), r#"{"path":"a b.txt","n":1}"#);
        assert_eq!(compact_json(r#"{"s": "say \"hi there\""}"#), r#"{"s":"say \"hi there\""}"#);
    }

    #[test]
    fn long_results_are_cut() {
        let text = (1..=10).map(|i| format!("line {i}")).collect::<Vec<_>>().join("\n");
        let out = shortened(&text, 4);
        assert_eq!(out.len(), 5);
        assert_eq!(out[4], "… (6 more lines)");
    }
}
