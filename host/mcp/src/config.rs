//! `[mcp_servers.NAME]` in config.toml: an MCP server whose tools the agent may use.
//!
//! ```toml
//! [mcp_servers.everything]            # a server run as a child process, spoken to on stdio
//! command = "npx"
//! args = ["-y", "@modelcontextprotocol/server-everything"]
//! env = { API_KEY = "${EVERYTHING_KEY}" }   # ${NAME}: from ~/.talaria/.env, else the environment
//! cwd = "/srv/everything"
//!
//! [mcp_servers.docs]                  # a streamable HTTP server
//! url = "https://mcp.example.com/mcp"
//! headers = { Authorization = "Bearer ${DOCS_TOKEN}" }
//! tools = { include = ["search"], exclude = [] }
//! startup_timeout_secs = 10           # to connect and list its tools (default 20)
//! tool_timeout_secs = 60              # a call (default 120)
//! ask = "writes"                      # writes (default): a tool not read-only asks first;
//!                                     # always: every tool asks; never: none does
//! enabled = true
//! sandbox = { read = ["~/docs"], write = ["$WORKSPACE"], net = ["api.example.com"] }
//! ```
//!
//! A stdio server runs in the OS sandbox (see [`crate::client`]): by default it sees the system,
//! its own directory and a data directory of its own, and reaches hosts through the egress
//! proxy's approvals; `sandbox` widens that.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Longest a server may take to start and list its tools, by default.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);
/// Longest a tool call may take, by default.
pub const TOOL_TIMEOUT: Duration = Duration::from_secs(120);

/// One `[mcp_servers.NAME]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerToml {
    /// The program of a stdio server.
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Its environment besides PATH, HOME and the locale; `${NAME}` in a value is a secret.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Where it runs (default: the conversation's workspace).
    pub cwd: Option<PathBuf>,
    /// The endpoint of a streamable HTTP server.
    pub url: Option<String>,
    /// Headers sent to it; `${NAME}` in a value is a secret.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Use it (default true).
    pub enabled: Option<bool>,
    /// Which of its tools to offer.
    #[serde(default, skip_serializing_if = "ToolFilter::is_empty")]
    pub tools: ToolFilter,
    pub startup_timeout_secs: Option<u64>,
    pub tool_timeout_secs: Option<u64>,
    /// Which calls ask the user first (default: those of tools not marked read-only).
    pub ask: Option<Ask>,
    /// What a stdio server may reach from its sandbox beside the system, its own directory and
    /// its data directory: `{ read = [...], write = [...], net = [...] }` (`$WORKSPACE` is the
    /// conversation's workspace; `net` names hosts it reaches without asking).
    pub sandbox: Option<ServerSandbox>,
    /// Its `env` and `headers` are taken as they are, with no `${NAME}` filled from talaria's
    /// secrets (servers an editor names over ACP).
    #[serde(skip)]
    pub verbatim: bool,
}

/// `[mcp_servers.NAME] sandbox`: what a stdio server may reach beside its defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSandbox {
    /// Places it may read (`~/`, `$WORKSPACE` expanded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read: Vec<String>,
    /// Places it may change.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub write: Vec<String>,
    /// Hosts (`HOST[:PORT]`, `*.suffix`) it reaches through the egress proxy without asking;
    /// any other host is asked about (`net:HOST`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub net: Vec<String>,
}

/// Tools offered: those in `include` (all when empty), minus those in `exclude`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolFilter {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub include: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
}

impl ToolFilter {
    pub fn is_empty(&self) -> bool {
        self.include.is_empty() && self.exclude.is_empty()
    }

    /// Whether tool `name` (the server's name for it) is offered.
    pub fn allows(&self, name: &str) -> bool {
        (self.include.is_empty() || self.include.iter().any(|n| n == name)) && !self.exclude.iter().any(|n| n == name)
    }
}

/// Which calls of a server's tools ask the user first. MCP servers run outside the sandbox
/// with the user's rights, so by default every tool that does not say it only reads asks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ask {
    /// Tools not marked read-only (the default).
    #[default]
    Writes,
    /// Every tool.
    Always,
    /// None: the user trusts this server entirely.
    Never,
}

/// What is wrong with a server's table, or a `${NAME}` in it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A `url` that is not http(s).
    #[error("[mcp_servers.{server}] url = \"{url}\" is not an http(s) URL")]
    NotHttp { server: String, url: String },
    /// Both `command` and `url`.
    #[error("[mcp_servers.{server}] has both `command` (a stdio server) and `url` (an HTTP server): keep one")]
    BothTransports { server: String },
    /// Neither `command` nor `url`.
    #[error(
        "[mcp_servers.{server}] needs `command` (a program speaking MCP on stdio, e.g. command = \"npx\", args = [\"-y\", \"@modelcontextprotocol/server-everything\"]) or `url` (a streamable HTTP endpoint)"
    )]
    NoTransport { server: String },
    /// A `${` with no `}`.
    #[error("`{value}` has a `${{` with no closing `}}`")]
    Unclosed { value: String },
    /// A `${NAME}` whose secret is not set.
    #[error("${{{name}}} is not set: add {name}=... to talaria's .env (or the environment)")]
    Unset { name: String },
}

/// How a server is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    Stdio { command: String, args: Vec<String>, env: BTreeMap<String, String>, cwd: Option<PathBuf> },
    Http { url: String, headers: BTreeMap<String, String> },
}

impl ServerToml {
    pub fn enabled(&self) -> bool {
        self.enabled.unwrap_or(true)
    }

    /// How to reach it.
    ///
    /// # Errors
    /// Neither `command` nor `url` ([`ConfigError::NoTransport`]), or both
    /// ([`ConfigError::BothTransports`]); a URL that is not http(s) ([`ConfigError::NotHttp`]).
    pub fn transport(&self, name: &str) -> Result<Transport, ConfigError> {
        match (&self.command, &self.url) {
            (Some(command), None) => Ok(Transport::Stdio {
                command: command.clone(),
                args: self.args.clone(),
                env: self.env.clone(),
                cwd: self.cwd.clone(),
            }),
            (None, Some(url)) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(ConfigError::NotHttp { server: name.to_string(), url: url.clone() });
                }
                Ok(Transport::Http { url: url.clone(), headers: self.headers.clone() })
            }
            (Some(_), Some(_)) => Err(ConfigError::BothTransports { server: name.to_string() }),
            (None, None) => Err(ConfigError::NoTransport { server: name.to_string() }),
        }
    }

    pub fn startup_timeout(&self) -> Duration {
        self.startup_timeout_secs.map_or(STARTUP_TIMEOUT, |s| Duration::from_secs(s.max(1)))
    }

    pub fn tool_timeout(&self) -> Duration {
        self.tool_timeout_secs.map_or(TOOL_TIMEOUT, |s| Duration::from_secs(s.max(1)))
    }

    /// A digest of what decides the tools it offers: how it is reached (secrets by name, not
    /// value). Its cached tool list is kept under this.
    pub fn digest(&self) -> String {
        use sha2::{Digest as _, Sha256};
        let json = serde_json::to_string(&(&self.command, &self.args, &self.env, &self.cwd, &self.url, &self.headers))
            .unwrap_or_default();
        hex::encode(&Sha256::digest(json.as_bytes())[..12])
    }
}

/// Fill `${NAME}` in `value` from `lookup`.
///
/// # Errors
/// A `${NAME}` that `lookup` does not know ([`ConfigError::Unset`]), or one left unclosed
/// ([`ConfigError::Unclosed`]).
pub fn expand(value: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or_else(|| ConfigError::Unclosed { value: value.to_string() })?;
        let name = &after[..end];
        let found = lookup(name).ok_or_else(|| ConfigError::Unset { name: name.to_string() })?;
        out.push_str(&found);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The name the model sees for tool `tool` of server `server`: `mcp_<server>_<tool>`, in the
/// characters every provider takes (`[A-Za-z0-9_-]`, at most 64); a longer one is cut and keeps
/// a short hash of the whole so two long names stay apart.
pub fn tool_name(server: &str, tool: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
    };
    let full = format!("mcp_{}_{}", clean(server), clean(tool));
    if full.len() <= 64 {
        return full;
    }
    use sha2::{Digest as _, Sha256};
    let hash = hex::encode(&Sha256::digest(full.as_bytes())[..4]);
    format!("{}_{hash}", &full[..55])
}

/// The toolset of server `server`'s tools.
pub fn toolset(server: &str) -> String {
    format!("mcp-{server}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefixed_and_safe() {
        assert_eq!(tool_name("everything", "echo"), "mcp_everything_echo");
        assert_eq!(tool_name("my server", "get.thing"), "mcp_my_server_get_thing");
        let long = tool_name("server", &"x".repeat(100));
        assert_eq!(long.len(), 64);
        assert_ne!(long, tool_name("server", &format!("{}y", "x".repeat(99))));
    }

    #[test]
    fn secrets_fill_values_and_a_missing_one_is_named() {
        let lookup = |n: &str| (n == "TOKEN").then(|| "s3cret".to_string());
        assert_eq!(expand("Bearer ${TOKEN}", lookup).expect("expanded"), "Bearer s3cret");
        assert_eq!(expand("plain", lookup).expect("as is"), "plain");
        let e = expand("${NOPE}", lookup).expect_err("missing").to_string();
        assert!(e.contains("NOPE=... to talaria's .env"), "{e}");
    }

    #[test]
    fn a_server_is_reached_one_way() {
        let both = ServerToml { command: Some("x".into()), url: Some("http://x".into()), ..ServerToml::default() };
        assert!(both.transport("s").expect_err("both").to_string().contains("keep one"));
        assert!(ServerToml::default().transport("s").expect_err("neither").to_string().contains("needs `command`"));
        let ftp = ServerToml { url: Some("ftp://x".into()), ..ServerToml::default() };
        assert!(ftp.transport("s").is_err());
        let filter = ToolFilter { include: vec![], exclude: vec!["rm".into()] };
        assert!(filter.allows("ls") && !filter.allows("rm"));
    }
}
