//! External MCP servers as tools ([`Servers`], a [`ToolSource`]): each `[mcp_servers.NAME]` tool
//! becomes `mcp_<server>_<tool>` in the toolset `mcp-<server>`.
//!
//! 1. **A stdio server runs in the OS sandbox** (`talaria_sandbox`): the system, its own
//!    directory and a data directory of its own, hosts through the egress proxy's approvals,
//!    and what `[mcp_servers.NAME] sandbox` adds; where the sandbox cannot start, it does not
//!    start (`[sandbox] commands = "unconfined"` runs servers as the user). What its tools do
//!    within that is still the user's call: a call of a tool not marked read-only asks first
//!    (once, for the session, always, or no: `[approvals] allow = ["mcp:SERVER:TOOL"]` is
//!    "always"), unless the server's `ask` says otherwise. With nobody to ask it is refused,
//!    saying how to allow it.
//! 2. **A stdio server gets the environment commands get** (PATH, HOME, the locale, proxies,
//!    toolchain homes; never a variable whose name marks a credential) plus its own `env`:
//!    talaria's API keys never reach it unless named there.
//! 3. **Servers start lazily**, when a conversation first needs their tools, all at once; their
//!    tool lists are cached between runs (keyed by how the server is reached), so a later start
//!    lists tools without starting any server, and the server starts on its first call.
//! 4. **A server that fails is reported once** and the others carry on. One that stops (killed,
//!    crashed) fails the call in flight and is started again on the next call; one that does not
//!    answer in time (`tool_timeout_secs`) fails the call with a message naming the setting.
//! 5. Results are capped by the loop, as every tool's are: over the result cap (100,000
//!    characters, `max_result_chars` under `[agent]`), they go to a file
//!    (`results/SESSION/CALL.txt`) and the model gets a preview.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ContentBlock, GetPromptRequestParams,
    Implementation, ProtocolVersion, ReadResourceRequestParams, ResourceContents, Tool,
};
use rmcp::service::{Peer, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{ConfigureCommandExt as _, StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceError, ServiceExt as _};
use serde_json::Value;
use talaria_agent::tools::Attached;
use talaria_agent::{BoxFuture, Scope, ToolContext, ToolHandler, ToolSource};
use talaria_protocol::{ToolAnnotations, ToolError, ToolSpec};
use talaria_runtime::process::CommandSandbox;
use talaria_runtime::{Approval, ApprovalKind, ApprovalRequest, Approvals, Approver, Caller, Secrets};

use crate::config::{self, Ask, ServerToml, Transport};

/// Why `talaria mcp test` ([`Servers::check`]) or `/prompt` ([`Servers::prompt`]) could not
/// use a server.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No enabled server has that name ([`Servers::check`]).
    #[error("no enabled server `{name}`")]
    NotEnabled { name: String },
    /// No enabled server has that name ([`Servers::prompt`], naming those there are).
    #[error("no MCP server `{name}` (configured: {})", configured.join(", "))]
    UnknownServer { name: String, configured: Vec<String> },
    /// The server did not start, answer or list its tools (in time): why, in words.
    #[error("{0}")]
    Unavailable(String),
    /// The server refused the prompt, or did not answer in time.
    #[error("MCP server `{server}`, prompt `{name}`: {reason}")]
    Prompt { server: String, name: String, reason: String },
}

/// What talaria says it is to servers; it declares no client capabilities (no sampling, roots
/// or elicitation).
#[derive(Clone)]
struct Handler;

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(ClientCapabilities::default(), Implementation::new("talaria", env!("CARGO_PKG_VERSION")))
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }
}

type Session = RunningService<RoleClient, Handler>;

/// What a server offers, as listed (and cached between runs).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct Listing {
    tools: Vec<Tool>,
    /// It has resources: offered as `…_resources_list` and `…_resource_read` tools.
    resources: bool,
    /// It has prompts: offered as `…_prompts_list` and `…_prompt_get` tools, and `/prompt`.
    prompts: bool,
}

/// The tools talaria adds for a server's resources and prompts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Extra {
    ResourcesList,
    ResourceRead,
    PromptsList,
    PromptGet,
}

impl Extra {
    const ALL: [Extra; 4] = [Extra::ResourcesList, Extra::ResourceRead, Extra::PromptsList, Extra::PromptGet];

    fn suffix(self) -> &'static str {
        match self {
            Extra::ResourcesList => "resources_list",
            Extra::ResourceRead => "resource_read",
            Extra::PromptsList => "prompts_list",
            Extra::PromptGet => "prompt_get",
        }
    }

    fn offered(self, listing: &Listing) -> bool {
        match self {
            Extra::ResourcesList | Extra::ResourceRead => listing.resources,
            Extra::PromptsList | Extra::PromptGet => listing.prompts,
        }
    }

    fn spec(self, server: &str) -> ToolSpec {
        let (description, parameters) = match self {
            Extra::ResourcesList => (
                format!("List the resources (documents, data) MCP server {server} offers, with their URIs."),
                serde_json::json!({"type": "object", "properties": {}, "additionalProperties": false}),
            ),
            Extra::ResourceRead => (
                format!("Read a resource of MCP server {server} by its URI (from its resources list)."),
                serde_json::json!({"type": "object", "properties": {"uri": {"type": "string"}}, "required": ["uri"], "additionalProperties": false}),
            ),
            Extra::PromptsList => (
                format!("List the prompt templates MCP server {server} offers, with their arguments."),
                serde_json::json!({"type": "object", "properties": {}, "additionalProperties": false}),
            ),
            Extra::PromptGet => (
                format!("Get a prompt template of MCP server {server}, filled with its arguments."),
                serde_json::json!({"type": "object", "properties": {"name": {"type": "string"}, "arguments": {"type": "object", "additionalProperties": {"type": "string"}}}, "required": ["name"], "additionalProperties": false}),
            ),
        };
        ToolSpec {
            name: config::tool_name(server, self.suffix()),
            description,
            parameters,
            plugin: config::toolset(server),
            annotations: ToolAnnotations { open_world: true, ..ToolAnnotations::fetches() },
        }
    }
}

/// What a model-facing name stands for.
enum Found {
    Tool(Box<Tool>),
    Extra(Extra),
}

/// One configured server.
struct Server {
    name: String,
    config: ServerToml,
    /// What it offers, as last listed (live or from the cache); `None` until known.
    tools: Mutex<Option<Listing>>,
    /// The running session, if started.
    session: tokio::sync::Mutex<Option<Arc<Session>>>,
    /// A stdio server's sandbox and process, while its session runs.
    jail: Mutex<Option<crate::confined::Jailed>>,
    /// It failed to start and was reported.
    reported: Mutex<bool>,
}

/// The MCP servers of a home, shared by every conversation.
pub struct Servers {
    home: PathBuf,
    /// Where stdio servers run when their config names no `cwd`.
    workspace: PathBuf,
    secrets: Secrets,
    servers: BTreeMap<String, Arc<Server>>,
    approvals: Arc<Approvals>,
    /// How stdio servers are confined (`[sandbox]`).
    sandbox: CommandSandbox,
    warnings: Mutex<Vec<String>>,
}

impl Servers {
    /// The answers the servers' tool calls are let through by.
    pub fn approvals(&self) -> &Arc<Approvals> {
        &self.approvals
    }

    /// The enabled servers of `configs`. Nothing starts until tools are asked for.
    pub fn new(
        home: &Path,
        workspace: &Path,
        configs: &BTreeMap<String, ServerToml>,
        approver: Arc<dyn Approver>,
        always: &[String],
        sandbox: CommandSandbox,
    ) -> Self {
        let servers = configs
            .iter()
            .filter(|(_, c)| c.enabled())
            .map(|(name, config)| {
                let server = Server {
                    name: name.clone(),
                    config: config.clone(),
                    tools: Mutex::new(None),
                    session: tokio::sync::Mutex::new(None),
                    jail: Mutex::new(None),
                    reported: Mutex::new(false),
                };
                (name.clone(), Arc::new(server))
            })
            .collect();
        Self {
            home: home.to_path_buf(),
            workspace: workspace.to_path_buf(),
            secrets: Secrets::load(&home.join(".env")),
            servers,
            approvals: Arc::new(Approvals::new(approver, always)),
            sandbox,
            warnings: Mutex::new(Vec::new()),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Problems found since the last call (a server that would not start), each said once.
    pub fn take_warnings(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.warnings))
    }

    /// Make every server's tool list known: from the cache, else by starting the servers (all
    /// at once, each within its startup timeout).
    pub async fn prepare(&self) {
        let unknown: Vec<&Arc<Server>> = self.servers.values().filter(|s| lock(&s.tools).is_none()).collect();
        let listings = unknown.iter().map(|server| async move {
            if let Some(cached) = self.cached(server) {
                *lock(&server.tools) = Some(cached);
                return;
            }
            match self.list_live(server).await {
                Ok(listing) => {
                    self.save_cache(server, &listing);
                    *lock(&server.tools) = Some(listing);
                }
                Err(e) => self.report(server, &e),
            }
        });
        futures_util::future::join_all(listings).await;
    }

    /// Start `name` (again) and list its tools now, whatever the cache holds: `talaria mcp test`.
    ///
    /// # Errors
    /// No such server ([`ClientError::NotEnabled`]), or it does not start or list its tools
    /// ([`ClientError::Unavailable`]).
    pub async fn check(&self, name: &str) -> Result<Checked, ClientError> {
        let server = self.servers.get(name).ok_or_else(|| ClientError::NotEnabled { name: name.to_string() })?;
        let started = std::time::Instant::now();
        *server.session.lock().await = None;
        let listing = self.list_live(server).await.map_err(ClientError::Unavailable)?;
        let session = server.session.lock().await.clone();
        let info = session.as_ref().and_then(|s| s.peer_info());
        self.save_cache(server, &listing);
        let tools = specs_of(&server.name, &listing);
        *lock(&server.tools) = Some(listing);
        Ok(Checked {
            server: info.as_ref().and_then(|i| i.server_info.as_ref()).map(|i| format!("{} {}", i.name, i.version)),
            protocol: info.as_ref().map(|i| i.protocol_version.to_string()).unwrap_or_default(),
            tools,
            took: started.elapsed(),
        })
    }

    /// Stop every running server.
    pub async fn shutdown(&self) {
        for server in self.servers.values() {
            if let Some(session) = server.session.lock().await.take()
                && let Ok(session) = Arc::try_unwrap(session)
            {
                let _ = session.cancel().await;
            }
        }
    }

    fn report(&self, server: &Server, error: &str) {
        let mut reported = lock(&server.reported);
        if !*reported {
            *reported = true;
            lock(&self.warnings).push(format!(
                "MCP server `{}` is left out: {error} (`talaria mcp test {}` tries it again)",
                server.name, server.name
            ));
        }
        tracing::warn!(server = %server.name, "MCP server failed: {error}");
    }

    fn cache_path(&self, server: &Server) -> PathBuf {
        self.home.join("cache").join("mcp").join(format!("{}-{}.json", server.name, server.config.digest()))
    }

    fn cached(&self, server: &Server) -> Option<Listing> {
        let text = std::fs::read_to_string(self.cache_path(server)).ok()?;
        serde_json::from_str(&text).ok()
    }

    fn save_cache(&self, server: &Server, tools: &Listing) {
        let path = self.cache_path(server);
        let written = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&path, serde_json::to_vec(tools).unwrap_or_default()));
        if let Err(e) = written {
            tracing::warn!(server = %server.name, "cannot cache the tool list in {}: {e}", path.display());
        }
    }

    /// Start `server` if needed and list what it offers.
    async fn list_live(&self, server: &Server) -> Result<Listing, String> {
        let session = self.session(server).await?;
        let caps = session.peer_info().map(|i| i.capabilities.clone());
        let listed = tokio::time::timeout(server.config.startup_timeout(), session.peer().list_all_tools()).await;
        let tools = match listed {
            Ok(Ok(tools)) => tools,
            Ok(Err(e)) => return Err(format!("cannot list its tools: {e}")),
            Err(_) => {
                return Err(format!(
                    "it did not list its tools within {} s (startup_timeout_secs)",
                    server.config.startup_timeout().as_secs()
                ));
            }
        };
        let tools = tools.into_iter().filter(|t| server.config.tools.allows(&t.name)).collect();
        Ok(Listing {
            tools,
            resources: caps.as_ref().is_some_and(|c| c.resources.is_some()),
            prompts: caps.as_ref().is_some_and(|c| c.prompts.is_some()),
        })
    }

    /// The running session of `server`, started now when there is none (or it stopped).
    async fn session(&self, server: &Server) -> Result<Arc<Session>, String> {
        let mut slot = server.session.lock().await;
        if let Some(session) = slot.as_ref()
            && !session.is_transport_closed()
        {
            return Ok(session.clone());
        }
        *slot = None;
        let started = self.start(server).await?;
        let session = Arc::new(started);
        *slot = Some(session.clone());
        Ok(session)
    }

    async fn start(&self, server: &Server) -> Result<Session, String> {
        let timeout = server.config.startup_timeout();
        let expand = |v: &str| {
            if server.config.verbatim { Ok(v.to_string()) } else { config::expand(v, |name| self.secrets.value(name)) }
        };
        let serving = match server.config.transport(&server.name).map_err(|e| e.to_string())? {
            Transport::Stdio { command, args, env, cwd } => {
                let mut vars = Vec::new();
                for (key, value) in &env {
                    vars.push((key.clone(), expand(value).map_err(|e| format!("env {key}: {e}"))?));
                }
                // What commands get from talaria's environment (PATH, HOME, the locale, proxies),
                // never a variable whose name marks a credential.
                let inherited = talaria_runtime::ChildEnv::from_host(&[], &talaria_runtime::leak::SecretScan::new([]));
                if crate::confined::confined(&self.sandbox) {
                    let plan = crate::confined::plan(
                        &self.sandbox,
                        &self.home,
                        &server.name,
                        &server.config,
                        &crate::confined::Program { command: &command, args: &args, cwd: cwd.as_deref() },
                        &self.workspace,
                    )?;
                    let argv = std::iter::once(command.clone()).chain(args.iter().cloned()).collect();
                    let env = inherited.vars().iter().cloned().chain(vars).collect();
                    let mut jailed =
                        crate::confined::start(&self.sandbox, plan, &server.name, self.approvals.clone(), argv, env)
                            .await?;
                    if let Some(stderr) = jailed.stderr() {
                        tokio::spawn(drain(server.name.clone(), stderr));
                    }
                    let transport = jailed.pipes().ok_or("its pipes were not made")?;
                    *lock(&server.jail) = Some(jailed);
                    tokio::time::timeout(timeout, Handler.serve(transport)).await
                } else {
                    let dir = cwd.unwrap_or_else(|| self.workspace.clone());
                    let cmd = tokio::process::Command::new(&command).configure(|c| {
                        c.args(&args).env_clear().current_dir(&dir);
                        c.envs(inherited.vars().iter().map(|(k, v)| (k.as_str(), v.as_str())));
                        c.envs(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())));
                    });
                    let (transport, stderr) = TokioChildProcess::builder(cmd)
                        .stderr(std::process::Stdio::piped())
                        .spawn()
                        .map_err(|e| format!("cannot start `{command}`: {e}"))?;
                    if let Some(stderr) = stderr {
                        tokio::spawn(drain(server.name.clone(), stderr));
                    }
                    tokio::time::timeout(timeout, Handler.serve(transport)).await
                }
            }
            Transport::Http { url, headers } => {
                let mut custom = std::collections::HashMap::new();
                for (key, value) in &headers {
                    let value = expand(value).map_err(|e| format!("header {key}: {e}"))?;
                    let name = http::HeaderName::try_from(key.as_str()).map_err(|e| format!("header `{key}`: {e}"))?;
                    let value = http::HeaderValue::try_from(value).map_err(|e| format!("header `{key}`: {e}"))?;
                    custom.insert(name, value);
                }
                let client = talaria_agent::model::http_client(timeout).map_err(|e| e.to_string())?;
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom);
                let transport = StreamableHttpClientTransport::with_client(client, config);
                tokio::time::timeout(timeout, Handler.serve(transport)).await
            }
        };
        let session = match serving {
            Ok(Ok(session)) => session,
            Ok(Err(e)) => return Err(format!("it did not start: {e}")),
            Err(_) => {
                return Err(format!(
                    "it did not answer within {} s (startup_timeout_secs under [mcp_servers.{}])",
                    timeout.as_secs(),
                    server.name
                ));
            }
        };
        if let Some(info) = session.peer_info()
            && !ProtocolVersion::KNOWN_VERSIONS.contains(&info.protocol_version)
        {
            return Err(format!("it speaks MCP revision {}, which talaria does not know", info.protocol_version));
        }
        Ok(session)
    }

    /// The server and tool a model-facing name stands for.
    fn find(&self, name: &str) -> Option<(Arc<Server>, Found)> {
        self.servers.values().find_map(|server| {
            let listing = lock(&server.tools);
            let listing = listing.as_ref()?;
            if let Some(tool) = listing.tools.iter().find(|t| config::tool_name(&server.name, &t.name) == name) {
                return Some((server.clone(), Found::Tool(Box::new(tool.clone()))));
            }
            let extra = Extra::ALL
                .into_iter()
                .find(|e| e.offered(listing) && config::tool_name(&server.name, e.suffix()) == name)?;
            Some((server.clone(), Found::Extra(extra)))
        })
    }

    async fn call_tool(&self, ctx: &ToolContext) -> Result<String, ToolError> {
        let Some((server, found)) = self.find(&ctx.tool) else {
            return Err(ToolError::UnknownTool(ctx.tool.clone()));
        };
        let Value::Object(args) = ctx.arguments.clone() else {
            return Err(ToolError::InvalidArgs("the arguments must be a JSON object".into()));
        };
        let tool = match found {
            Found::Tool(tool) => *tool,
            Found::Extra(extra) => {
                let text = self.extra(&server, extra, &args).await?;
                return Ok(text);
            }
        };
        self.approve(&server, &tool, &args, ctx).await?;
        if let Some(jail) = lock(&server.jail).as_ref() {
            jail.gate.acting_for(&Caller { session_id: ctx.session_id.clone(), call_id: ctx.call_id.clone() });
        }
        let session = self
            .session(&server)
            .await
            .map_err(|e| ToolError::Failed(format!("MCP server `{}` is not available: {e}", server.name)))?;
        let peer: Peer<RoleClient> = session.peer().clone();
        drop(session);
        let params = CallToolRequestParams::new(tool.name.to_string()).with_arguments(args);
        let timeout = server.config.tool_timeout();
        let result = match tokio::time::timeout(timeout, peer.call_tool(params)).await {
            Ok(Ok(result)) => result,
            Ok(Err(ServiceError::TransportClosed)) => {
                // It stopped: the next call starts it again.
                *server.session.lock().await = None;
                return Err(ToolError::Failed(format!(
                    "MCP server `{}` stopped during the call (it is started again on the next call)",
                    server.name
                )));
            }
            Ok(Err(ServiceError::McpError(e))) => {
                return Err(ToolError::Failed(format!("MCP server `{}`: {} ({})", server.name, e.message, e.code.0)));
            }
            Ok(Err(e)) => return Err(ToolError::Failed(format!("MCP server `{}`: {e}", server.name))),
            Err(_) => {
                return Err(ToolError::Failed(format!(
                    "MCP server `{}` did not answer `{}` within {} s (tool_timeout_secs under [mcp_servers.{}])",
                    server.name,
                    tool.name,
                    timeout.as_secs(),
                    server.name
                )));
            }
        };
        let text = result_text(&result, &ctx.images);
        if result.is_error == Some(true) {
            return Err(ToolError::Failed(text));
        }
        Ok(text)
    }

    /// A resources or prompts call of `server`.
    async fn extra(
        &self,
        server: &Server,
        extra: Extra,
        args: &serde_json::Map<String, Value>,
    ) -> Result<String, ToolError> {
        let text = |key: &str| args.get(key).and_then(Value::as_str).map(str::to_string);
        let session = self
            .session(server)
            .await
            .map_err(|e| ToolError::Failed(format!("MCP server `{}` is not available: {e}", server.name)))?;
        let peer = session.peer().clone();
        drop(session);
        let failed = |e: ServiceError| ToolError::Failed(format!("MCP server `{}`: {e}", server.name));
        let timeout = server.config.tool_timeout();
        let late = || {
            ToolError::Failed(format!(
                "MCP server `{}` did not answer within {} s (tool_timeout_secs)",
                server.name,
                timeout.as_secs()
            ))
        };
        match extra {
            Extra::ResourcesList => {
                let resources = tokio::time::timeout(timeout, peer.list_all_resources())
                    .await
                    .map_err(|_| late())?
                    .map_err(failed)?;
                let templates = tokio::time::timeout(timeout, peer.list_all_resource_templates())
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .unwrap_or_default();
                Ok(serde_json::json!({ "resources": resources, "templates": templates }).to_string())
            }
            Extra::ResourceRead => {
                let uri = text("uri").ok_or_else(|| ToolError::InvalidArgs("`uri` is required".into()))?;
                let read = tokio::time::timeout(timeout, peer.read_resource(ReadResourceRequestParams::new(uri)))
                    .await
                    .map_err(|_| late())?
                    .map_err(failed)?;
                Ok(read.contents.iter().map(resource_text).collect::<Vec<_>>().join("\n"))
            }
            Extra::PromptsList => {
                let prompts = tokio::time::timeout(timeout, peer.list_all_prompts())
                    .await
                    .map_err(|_| late())?
                    .map_err(failed)?;
                Ok(serde_json::json!({ "prompts": prompts }).to_string())
            }
            Extra::PromptGet => {
                let name = text("name").ok_or_else(|| ToolError::InvalidArgs("`name` is required".into()))?;
                let arguments = args.get("arguments").and_then(Value::as_object).cloned().unwrap_or_default();
                self.fill_prompt(&peer, &name, arguments, timeout).await.map_err(ToolError::Failed)
            }
        }
    }

    async fn fill_prompt(
        &self,
        peer: &Peer<RoleClient>,
        name: &str,
        arguments: serde_json::Map<String, Value>,
        timeout: Duration,
    ) -> Result<String, String> {
        let mut params = GetPromptRequestParams::new(name);
        if !arguments.is_empty() {
            params = params.with_arguments(arguments);
        }
        let got = tokio::time::timeout(timeout, peer.get_prompt(params))
            .await
            .map_err(|_| format!("no answer within {} s", timeout.as_secs()))?
            .map_err(|e| e.to_string())?;
        Ok(got.messages.iter().map(|m| content_text(&m.content)).collect::<Vec<_>>().join("\n\n"))
    }

    /// Prompt `name` of `server` filled with `arguments`, as text: what `/prompt` sends.
    ///
    /// # Errors
    /// No such server ([`ClientError::UnknownServer`]), it does not start
    /// ([`ClientError::Unavailable`]), or it refuses ([`ClientError::Prompt`]).
    pub async fn prompt(
        &self,
        server: &str,
        name: &str,
        arguments: serde_json::Map<String, Value>,
    ) -> Result<String, ClientError> {
        let found = self.servers.get(server).ok_or_else(|| ClientError::UnknownServer {
            name: server.to_string(),
            configured: self.servers.keys().cloned().collect(),
        })?;
        let session = self.session(found).await.map_err(ClientError::Unavailable)?;
        let peer = session.peer().clone();
        drop(session);
        self.fill_prompt(&peer, name, arguments, found.config.tool_timeout())
            .await
            .map_err(|reason| ClientError::Prompt { server: server.to_string(), name: name.to_string(), reason })
    }

    /// Ask the user before a call the server's policy says needs it.
    async fn approve(
        &self,
        server: &Server,
        tool: &Tool,
        args: &serde_json::Map<String, Value>,
        ctx: &ToolContext,
    ) -> Result<(), ToolError> {
        let read_only = tool.annotations.as_ref().and_then(|a| a.read_only_hint).unwrap_or(false);
        let ask = match server.config.ask.unwrap_or_default() {
            Ask::Never => false,
            Ask::Always => true,
            Ask::Writes => !read_only,
        };
        if !ask {
            return Ok(());
        }
        let shown: String = Value::Object(args.clone()).to_string().chars().take(300).collect();
        let key = format!("mcp:{}:{}", server.name, tool.name);
        let request = ApprovalRequest {
            kind: ApprovalKind::McpTool,
            plugin: config::toolset(&server.name),
            command: format!("{} {shown}", tool.name),
            key: key.clone(),
            reason: if read_only {
                format!("MCP server {} runs outside the sandbox with your rights", server.name)
            } else {
                format!(
                    "MCP server {} runs outside the sandbox with your rights, and this tool is not marked read-only",
                    server.name
                )
            },
            session_id: ctx.session_id.clone(),
            call_id: ctx.call_id.clone(),
        };
        match self.approvals.ask(&request).await {
            Approval::Once | Approval::Session | Approval::Always => Ok(()),
            Approval::Deny if self.approvals.interactive(&ctx.session_id) => {
                Err(ToolError::Denied(format!("the user did not allow `{}` of MCP server {}", tool.name, server.name)))
            }
            Approval::Deny => Err(ToolError::Denied(format!(
                "`{}` of MCP server {} needs approval and no one is here to give it; allow it with [approvals] allow = [\"{key}\"], or ask = \"never\" under [mcp_servers.{}] to trust the whole server",
                tool.name, server.name, server.name
            ))),
        }
    }
}

/// What `talaria mcp test` learned of a server.
#[derive(Debug, Clone)]
pub struct Checked {
    /// Its name and version, as it says.
    pub server: Option<String>,
    pub protocol: String,
    pub tools: Vec<ToolSpec>,
    pub took: Duration,
}

impl ToolSource for Servers {
    fn specs(&self) -> BoxFuture<'_, Vec<Arc<ToolSpec>>> {
        Box::pin(async move {
            self.prepare().await;
            self.servers
                .values()
                .flat_map(|server| {
                    let listing = lock(&server.tools).clone().unwrap_or_default();
                    specs_of(&server.name, &listing).into_iter().map(Arc::new)
                })
                .collect()
        })
    }
}

impl ToolHandler for Servers {
    fn call<'a>(&'a self, ctx: &'a ToolContext, _: Scope<'a>) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(self.call_tool(ctx))
    }
}

/// Every spec a server's listing gives: its tools, then the resources and prompts tools (unless
/// a tool of its own has that name).
fn specs_of(server: &str, listing: &Listing) -> Vec<ToolSpec> {
    let mut specs: Vec<ToolSpec> = listing.tools.iter().map(|t| spec(server, t)).collect();
    for extra in Extra::ALL.into_iter().filter(|e| e.offered(listing)) {
        let extra = extra.spec(server);
        if !specs.iter().any(|s| s.name == extra.name) {
            specs.push(extra);
        }
    }
    specs
}

/// The spec the model sees for `tool` of `server`.
pub fn spec(server: &str, tool: &Tool) -> ToolSpec {
    let description = tool.description.as_deref().or(tool.title.as_deref()).unwrap_or("").trim().to_string();
    let a = tool.annotations.as_ref();
    let annotations = ToolAnnotations {
        read_only: a.and_then(|a| a.read_only_hint).unwrap_or(false),
        destructive: a.and_then(|a| a.destructive_hint).unwrap_or(true),
        idempotent: a.and_then(|a| a.idempotent_hint).unwrap_or(false),
        open_world: a.and_then(|a| a.open_world_hint).unwrap_or(true),
        paths: Vec::new(),
    };
    ToolSpec {
        name: config::tool_name(server, &tool.name),
        description: format!("{description} (MCP server {server}: `{}`)", tool.name),
        parameters: Value::Object((*tool.input_schema).clone()),
        plugin: config::toolset(server),
        annotations,
    }
}

/// A tool result as text for the model; its images are attached to the call (checked: their
/// bytes say what they are, and a model that takes none is told of them instead).
fn result_text(result: &CallToolResult, images: &Attached) -> String {
    let mut parts: Vec<String> = result
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Image(i) => match talaria_agent::images::from_base64(&i.data) {
                Ok(image) => {
                    let text = format!("[image, {}]", image.media_type);
                    images.push(image);
                    text
                }
                Err(why) => format!(
                    "[an image the server called {}, not passed on: {why}]",
                    talaria_agent::tools::one_line(&i.mime_type, 40)
                ),
            },
            other => content_text(other),
        })
        .collect();
    if parts.iter().all(String::is_empty)
        && let Some(structured) = &result.structured_content
    {
        parts = vec![structured.to_string()];
    }
    parts.join("\n")
}

fn resource_text(contents: &ResourceContents) -> String {
    match contents {
        ResourceContents::TextResourceContents { uri, text, .. } => format!("[resource {uri}]\n{text}"),
        ResourceContents::BlobResourceContents { uri, mime_type, blob, .. } => {
            format!("[resource {uri}, {}, {} bytes of base64]", mime_type.as_deref().unwrap_or("binary"), blob.len())
        }
        _ => "[a resource of a kind talaria does not read]".into(),
    }
}

fn content_text(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(t) => t.text.clone(),
        ContentBlock::Image(i) => format!("[image, {}, {} bytes of base64]", i.mime_type, i.data.len()),
        ContentBlock::Audio(a) => {
            format!(
                "[audio, {}, {} bytes of base64, not passed on: talaria gives models images only]",
                a.mime_type,
                a.data.len()
            )
        }
        ContentBlock::ResourceLink(r) => format!("[resource {} ({})]", r.uri, r.name),
        ContentBlock::Resource(e) => resource_text(&e.resource),
        _ => "[content of a kind talaria does not read]".into(),
    }
}

/// Keep a stdio server's stderr out of the terminal: its lines go to the log.
async fn drain(server: String, stderr: impl tokio::io::AsyncRead + Unpin) {
    use tokio::io::AsyncBufReadExt as _;
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::debug!(server = %server, "{line}");
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
