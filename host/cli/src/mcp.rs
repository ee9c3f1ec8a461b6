//! `talaria mcp`: the MCP servers whose tools the agent uses (`[mcp_servers.NAME]` in
//! config.toml): list them, add and remove one, and test one (start it, list its tools).

use std::process::ExitCode;
use std::sync::Arc;

use anstream::println;
use clap::Subcommand;
use talaria_mcp::client::Servers;
use talaria_mcp::config::{Ask, ServerToml, toolset};

use crate::{Ctx, ui};

#[derive(Subcommand, Debug)]
#[command(defer = true)]
pub enum McpCmd {
    /// The configured servers, how each is reached, and its tools as last listed
    List {
        /// As JSON
        #[arg(long)]
        json: bool,
    },
    /// Add a server to config.toml: a program speaking MCP on stdio, or --url
    ///
    /// `talaria mcp add everything -- npx -y @modelcontextprotocol/server-everything`;
    /// `talaria mcp add docs --url https://mcp.example.com/mcp --header "Authorization=Bearer ${DOCS_TOKEN}"`.
    /// `${NAME}` in --env and --header values is read from talaria's .env (or the environment)
    /// when the server starts, so the secret stays out of config.toml.
    Add {
        /// Its name: tools become mcp_NAME_TOOL, in the toolset mcp-NAME
        name: String,
        /// A streamable HTTP endpoint instead of a command
        #[arg(long, conflicts_with = "command")]
        url: Option<String>,
        /// An HTTP header, NAME=VALUE (repeatable)
        #[arg(long, value_name = "NAME=VALUE", requires = "url")]
        header: Vec<String>,
        /// An environment variable for the command, NAME=VALUE (repeatable)
        #[arg(long, value_name = "NAME=VALUE")]
        env: Vec<String>,
        /// The command and its arguments (after --)
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Remove a server from config.toml
    Remove { name: String },
    /// Start a server, list its tools, and say how long it took (exit 1 when it fails)
    Test { name: String },
    /// Serve talaria's plugin tools to other agents over MCP (stdio, or --http)
    ///
    /// The tools run as in the agent: sandboxed, with their grants, deadlines and limits, in the
    /// current directory (-C). A call that needs approval is asked through the client's
    /// elicitation, and refused when the client cannot ask. Logs go to talaria's log file (-v:
    /// stderr); stdout carries only the protocol.
    Serve {
        /// Streamable HTTP at http://ADDR/mcp instead of stdio (e.g. 127.0.0.1:8650); any
        /// address beyond loopback needs a bearer token
        #[arg(long, value_name = "ADDR")]
        http: Option<std::net::SocketAddr>,
        /// The environment variable holding the bearer token HTTP clients must send
        #[arg(long, value_name = "NAME", default_value = "TALARIA_MCP_TOKEN")]
        token_env: String,
        /// Serve only this plugin's tools (repeatable) [default: every enabled tool plugin]
        #[arg(long = "plugin", value_name = "NAME")]
        plugins: Vec<String>,
        /// With --http: a web origin whose pages may call the server besides loopback ones
        /// (repeatable), e.g. https://inspector.example; any other Origin gets 403
        #[arg(long = "allow-origin", value_name = "ORIGIN")]
        origins: Vec<String>,
    },
}

pub async fn run(ctx: &Ctx, cmd: McpCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        McpCmd::List { json } => list(ctx, json),
        McpCmd::Add { name, url, header, env, command } => add(ctx, &name, url, &header, &env, &command),
        McpCmd::Remove { name } => {
            if !ctx.config.mcp_servers.contains_key(&name) {
                ui::error(&format!("no MCP server `{name}` is configured: `talaria mcp list` shows them"));
                return Ok(ExitCode::FAILURE);
            }
            talaria_core::config::edit(&ctx.home, |doc| {
                if let Some(servers) = doc.get_mut("mcp_servers").and_then(|t| t.as_table_like_mut()) {
                    servers.remove(&name);
                }
                Ok(())
            })?;
            println!("removed MCP server {name}");
            Ok(ExitCode::SUCCESS)
        }
        McpCmd::Test { name } => test(ctx, &name).await,
        McpCmd::Serve { http, token_env, plugins, origins } => serve(ctx, http, &token_env, &plugins, origins).await,
    }
}

async fn serve(
    ctx: &Ctx,
    http: Option<std::net::SocketAddr>,
    token_env: &str,
    only: &[String],
    origins: Vec<String>,
) -> anyhow::Result<ExitCode> {
    let host = talaria_core::Host::open(talaria_core::HostOptions {
        home: ctx.home.clone(),
        workspace: talaria_core::canonical_workspace(&ctx.workspace)?,
    })
    .await?;
    let (mut specs, warnings) = talaria_mcp_serve::plugin_tools(&host).await?;
    for w in &warnings {
        ui::warn(w);
    }
    if !only.is_empty() {
        let known: std::collections::BTreeSet<&str> = specs.iter().map(|s| s.plugin.as_str()).collect();
        if let Some(missing) = only.iter().find(|p| !known.contains(p.as_str())) {
            ui::error(&format!(
                "no enabled tool plugin `{missing}`; the tool plugins are: {}",
                known.into_iter().collect::<Vec<_>>().join(", ")
            ));
            return Ok(ExitCode::from(2));
        }
        specs.retain(|s| only.contains(&s.plugin));
    }
    let served = talaria_mcp_serve::Served::new(Arc::new(host), specs);
    let outcome = match http {
        None => talaria_mcp_serve::serve_stdio(served).await,
        Some(addr) => {
            let token = std::env::var(token_env).ok().filter(|t| !t.is_empty());
            let ready = |bound: std::net::SocketAddr| {
                ui::note(&format!(
                    "serving MCP at http://{bound}/mcp{}",
                    if token.is_some() { " (bearer token required)" } else { "" }
                ));
            };
            let shutdown = async {
                let _ = tokio::signal::ctrl_c().await;
            };
            talaria_mcp_serve::serve_http(served, addr, token.clone(), origins, ready, shutdown).await
        }
    };
    match outcome {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            ui::error(&e);
            Ok(ExitCode::FAILURE)
        }
    }
}

fn servers(ctx: &Ctx) -> Servers {
    let approver = Arc::new(talaria_runtime::Unattended { yolo: false });
    talaria_core::mcp_servers(&ctx.home, &ctx.workspace, &ctx.config, &ctx.config.mcp_servers, approver)
}

fn reached(config: &ServerToml) -> String {
    match (&config.command, &config.url) {
        (Some(command), _) => std::iter::once(command.as_str())
            .chain(config.args.iter().map(String::as_str))
            .map(ui::shell_quote)
            .collect::<Vec<_>>()
            .join(" "),
        (None, Some(url)) => url.clone(),
        (None, None) => "(neither command nor url)".into(),
    }
}

fn list(ctx: &Ctx, json: bool) -> anyhow::Result<ExitCode> {
    let servers = &ctx.config.mcp_servers;
    if json {
        let value: serde_json::Value = servers
            .iter()
            .map(|(name, c)| {
                (
                    name.clone(),
                    serde_json::json!({ "reached": reached(c), "enabled": c.enabled(), "toolset": toolset(name) }),
                )
            })
            .collect::<serde_json::Map<_, _>>()
            .into();
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(ExitCode::SUCCESS);
    }
    if servers.is_empty() {
        println!(
            "no MCP servers: `talaria mcp add everything -- npx -y @modelcontextprotocol/server-everything` adds one"
        );
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = servers
        .iter()
        .map(|(name, c)| {
            vec![
                name.clone(),
                if c.enabled() { "yes".into() } else { "no".into() },
                toolset(name),
                format!("{:?}", c.ask.unwrap_or_default()).to_lowercase(),
                ui::first_line(&reached(c), 70),
            ]
        })
        .collect();
    ui::table(&["NAME", "ENABLED", "TOOLSET", "ASKS", "RUNS"], &rows);
    Ok(ExitCode::SUCCESS)
}

fn pairs(items: &[String], what: &str) -> anyhow::Result<toml_edit::InlineTable> {
    let mut table = toml_edit::InlineTable::new();
    for item in items {
        let Some((key, value)) = item.split_once('=') else {
            anyhow::bail!("--{what} {item}: write NAME=VALUE");
        };
        table.insert(key.trim(), value.into());
    }
    Ok(table)
}

fn add(
    ctx: &Ctx,
    name: &str,
    url: Option<String>,
    headers: &[String],
    env: &[String],
    command: &[String],
) -> anyhow::Result<ExitCode> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        ui::error(&format!(
            "`{name}` cannot name a server: use letters, digits, `-` and `_` (e.g. everything, github)"
        ));
        return Ok(ExitCode::from(2));
    }
    if ctx.config.mcp_servers.contains_key(name) {
        ui::error(&format!("an MCP server `{name}` is configured already: `talaria mcp remove {name}` first"));
        return Ok(ExitCode::from(2));
    }
    let headers = pairs(headers, "header")?;
    let env = pairs(env, "env")?;
    let mut table = toml_edit::Table::new();
    match (url, command.split_first()) {
        (Some(url), None) => {
            table.insert("url", toml_edit::value(url));
            if !headers.is_empty() {
                table.insert("headers", toml_edit::value(headers));
            }
        }
        (None, Some((program, args))) => {
            table.insert("command", toml_edit::value(program.as_str()));
            let mut list = toml_edit::Array::new();
            for a in args {
                list.push(a.as_str());
            }
            table.insert("args", toml_edit::value(list));
        }
        _ => {
            ui::error(
                "give the server's command after `--` (e.g. `-- npx -y @modelcontextprotocol/server-everything`), or --url",
            );
            return Ok(ExitCode::from(2));
        }
    }
    if !env.is_empty() {
        table.insert("env", toml_edit::value(env));
    }
    talaria_core::config::edit(&ctx.home, |doc| {
        let servers = doc.entry("mcp_servers").or_insert_with(|| {
            let mut t = toml_edit::Table::new();
            t.set_implicit(true);
            toml_edit::Item::Table(t)
        });
        let servers = servers
            .as_table_like_mut()
            .ok_or_else(|| talaria_core::config::ConfigError::Refused("mcp_servers is not a table".into()))?;
        servers.insert(name, toml_edit::Item::Table(table));
        Ok(())
    })?;
    println!(
        "added MCP server {name}: its tools are mcp_{name}_TOOL (toolset {}); `talaria mcp test {name}` starts it and lists them",
        toolset(name)
    );
    Ok(ExitCode::SUCCESS)
}

async fn test(ctx: &Ctx, name: &str) -> anyhow::Result<ExitCode> {
    let Some(config) = ctx.config.mcp_servers.get(name) else {
        ui::error(&format!("no MCP server `{name}` is configured: `talaria mcp list` shows them"));
        return Ok(ExitCode::FAILURE);
    };
    if !config.enabled() {
        ui::error(&format!("MCP server `{name}` is disabled (enabled = false under [mcp_servers.{name}])"));
        return Ok(ExitCode::FAILURE);
    }
    let servers = servers(ctx);
    let checked = servers.check(name).await;
    servers.shutdown().await;
    match checked {
        Ok(checked) => {
            println!(
                "{name}: {} (MCP {}), {} in {} ms",
                checked.server.as_deref().unwrap_or("a server with no name"),
                checked.protocol,
                ui::count(checked.tools.len(), "tool", "tools"),
                checked.took.as_millis()
            );
            let ask = config.ask.unwrap_or_default();
            for tool in &checked.tools {
                let asks = match ask {
                    Ask::Never => false,
                    Ask::Always => true,
                    Ask::Writes => !tool.annotations.read_only,
                };
                let kind = match (tool.annotations.read_only, asks) {
                    (true, false) => "read-only",
                    (true, true) => "read-only, asks first",
                    (false, true) => "may change things: asks first",
                    (false, false) => "may change things",
                };
                println!("  {}  ({kind})", tool.name);
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            ui::error(&format!("MCP server `{name}`: {e}"));
            Ok(ExitCode::FAILURE)
        }
    }
}
