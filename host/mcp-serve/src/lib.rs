//! `talaria mcp serve`: talaria's sandboxed plugin tools served to other agents over MCP, on
//! stdio or streamable HTTP ([`serve_stdio`], [`serve_http`]). A front door of its own, started
//! by `talaria mcp serve` (host/cli/src/mcp.rs), which opens the home with core's
//! [`Host`] and picks the tools ([`plugin_tools`], [`Served::new`]); talaria's MCP *client* is
//! `talaria-mcp`.
//!
//! 1. **The tools run exactly as in the agent**: each call is a [`Op::CallTool`] in a
//!    conversation of its own, so it passes every stage of the tool pipeline (the operator's
//!    hooks, approval, checkpoint, result cap) and runs in the plugin runtime with its grants,
//!    deadlines, memory and output limits; a refused capability comes back as a tool error
//!    (`isError`), never as a success.
//! 2. **Nothing that needs approval runs silently.** A dangerous command or a new host is asked
//!    of the client's user through MCP elicitation when the client offers it (a yes/no form):
//!    on 2025-11-25 and earlier as an `elicitation/create` request, on 2026-07-28 as an
//!    `input_required` result the client answers by calling again (module `rounds`); with no
//!    elicitation, or no yes, it is refused. Every call is its own approval scope: a
//!    "session" answer covers that call only.
//! 3. **Over HTTP, a bearer token is required for any bind beyond loopback**; with a token,
//!    every request must carry it (compared in constant time), and a refused one gets 401 with
//!    `WWW-Authenticate: Bearer`.
//! 4. Connections are taken through [`talaria_core::listen::serve`], as every HTTP door of talaria's:
//!    headers within 10 s, bodies at a minimum rate, connections capped in all and per address
//!    (503 with `Retry-After` when every one is working).
//! 5. It speaks the current MCP revision (2026-07-28, stateless) and the earlier ones with the
//!    `initialize` handshake (2024-11-05 to 2025-11-25), as rmcp does.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationSchema, Implementation, JsonObject, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ServerCapabilities, ServerConfig, Tool, ToolAnnotations as McpAnnotations,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt as _};
use talaria_core::{Host, Start};
use talaria_protocol::{ApprovalKind, ApprovalNeeded, CallOutcome, Decision, Event, Op, ToolError, ToolSpec};
use tokio::sync::{mpsc, oneshot};

mod rounds;

/// How long a client's user has to answer an approval, at most (the conversation's own wait,
/// [`ApprovalNeeded::timeout_secs`], may be shorter).
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(300);

/// How a call's client is asked.
enum Route {
    /// With `elicitation/create` (2025-11-25 and earlier).
    Request(Peer<RoleServer>),
    /// Through the `input_required` rounds of the call (2026-07-28).
    Rounds(mpsc::UnboundedSender<rounds::Question>),
    /// The client takes no elicitation: no one can be asked.
    Nobody,
}

impl Route {
    /// Ask the client's user for what `asked` wants; a failure to ask, or no answer in time,
    /// is a denial.
    async fn ask(&self, asked: &ApprovalNeeded) -> Decision {
        let Some(params) = question(asked) else { return Decision::Deny };
        let wait = ANSWER_TIMEOUT.min(Duration::from_secs(asked.timeout_secs));
        match self {
            Self::Request(peer) => match peer.create_elicitation_with_timeout(params, Some(wait)).await {
                Ok(answer) => approval(&answer),
                Err(e) => {
                    tracing::info!("the client could not be asked: {e}");
                    Decision::Deny
                }
            },
            Self::Rounds(questions) => {
                let (answer, answered) = oneshot::channel();
                if questions.send(rounds::Question { params, answer }).is_err() {
                    return Decision::Deny;
                }
                match tokio::time::timeout(wait, answered).await {
                    Ok(Ok(decided)) => decided,
                    Ok(Err(_)) => Decision::Deny,
                    Err(_) => {
                        tracing::info!("the client did not answer within {} s", wait.as_secs());
                        Decision::Deny
                    }
                }
            }
            Self::Nobody => Decision::Deny,
        }
    }
}

/// The yes/no form that asks for `asked`.
fn question(asked: &ApprovalNeeded) -> Option<ElicitRequestParams> {
    let what = match asked.kind {
        ApprovalKind::Network => format!("Let plugin '{}' connect to {}", asked.plugin, asked.command),
        ApprovalKind::Command | ApprovalKind::Schedule | ApprovalKind::McpTool => {
            format!("Let plugin '{}' run `{}`", asked.plugin, asked.command)
        }
        ApprovalKind::Skill => format!("Let the agent {}", asked.command),
    };
    let schema =
        ElicitationSchema::builder().required_bool("allow").description("Check to allow it this once").build().ok()?;
    Some(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: format!("{what}? ({})", asked.reason),
        requested_schema: schema,
    })
}

/// What the user's answer to [`question`] allows: this once on an accepted `allow: true`,
/// nothing otherwise.
fn approval(answer: &ElicitResult) -> Decision {
    let allowed = answer.content.as_ref().and_then(|c| c.get("allow")).and_then(serde_json::Value::as_bool);
    if answer.action == ElicitationAction::Accept && allowed == Some(true) { Decision::Once } else { Decision::Deny }
}

/// The plugins' tools as a conversation in `host`'s workspace offers them (the agent's own
/// tools and the MCP servers' are not served), and the warnings its start gave (a plugin that
/// did not load).
///
/// # Errors
/// The plugins cannot be found (grants.toml unreadable), or the store cannot be read.
pub async fn plugin_tools(host: &Host) -> Result<(Vec<Arc<ToolSpec>>, Vec<String>), talaria_core::Error> {
    let (plugins, _) = host.plugins(host.workspace())?;
    let runtime = plugins.runtime();
    let names: std::collections::BTreeSet<&str> = runtime.plugins().iter().map(|p| p.name()).collect();
    let mut conversation = host.start(call_start(false)).await?;
    let warnings = conversation.start_warnings().await;
    let mut specs = conversation.info().tools;
    conversation.shutdown().await;
    specs.retain(|s| names.contains(s.plugin.as_str()));
    Ok((specs, warnings))
}

/// How a served call's conversation starts: in the host's workspace, with no model, none of
/// the owner's memory, the home's MCP servers left alone; asking its client only when the
/// client can be asked.
fn call_start(interactive: bool) -> Start {
    Start {
        source: "mcp".into(),
        interactive,
        memory: false,
        configured_mcp: false,
        no_model: true,
        ..Start::default()
    }
}

/// Run `name` with `arguments` as the agent would, in a conversation of its own: every stage
/// of the tool pipeline (hooks, approval, checkpoint, result cap) applies, and its approvals
/// are asked of the client by `route`. That conversation is the call's approval scope: a
/// "session" answer covers this call only. Dropping the future ends the call.
async fn call(host: Arc<Host>, name: String, arguments: JsonObject, route: Route) -> Called {
    let interactive = !matches!(route, Route::Nobody);
    let mut conversation = match host.start(call_start(interactive)).await {
        Ok(c) => c,
        Err(e) => return Err(ToolError::Unavailable(e.to_string())),
    };
    let op = Op::CallTool { name, arguments: serde_json::Value::Object(arguments).to_string() };
    let id = conversation.submit(op.clone());
    let mut ended = Err(ToolError::Failed("the call stopped before it finished".into()));
    while let Some(stamped) = conversation.next_event().await {
        match &stamped.event {
            Event::ApprovalNeeded(asked) => {
                let decision = route.ask(asked).await;
                conversation.submit(Op::Approve { id: asked.id, decision });
            }
            Event::ToolFinished(done) if stamped.op == id => {
                ended = match done.outcome() {
                    CallOutcome::Failed(text) => Err(ToolError::Failed(text)),
                    CallOutcome::Done | CallOutcome::Command { .. } => Ok(done.result.clone()),
                };
            }
            Event::Error { text } if stamped.op == id => ended = Err(ToolError::Failed(text.clone())),
            _ => {}
        }
        if stamped.op == id && op.finished_by(&stamped.event) {
            break;
        }
    }
    conversation.shutdown().await;
    ended
}

/// How a served call ended: its result, or its error in the conversation's words.
type Called = Result<String, ToolError>;

/// The MCP server: the plugin tools `specs`, each call run in a conversation of `host`'s.
#[derive(Clone)]
pub struct Served {
    host: Arc<Host>,
    specs: Arc<Vec<Arc<ToolSpec>>>,
    held: Arc<rounds::Held>,
}

impl Served {
    /// Serve `specs` (from [`plugin_tools`], or some of them), calling them in `host`'s
    /// workspace.
    pub fn new(host: Arc<Host>, specs: Vec<Arc<ToolSpec>>) -> Self {
        Self { host, specs: Arc::new(specs), held: Arc::default() }
    }

    /// The tools as MCP lists them.
    pub fn listed(&self) -> Vec<Tool> {
        self.specs.iter().map(|s| tool(s)).collect()
    }
}

/// A spec as an MCP tool, with its annotations.
fn tool(spec: &ToolSpec) -> Tool {
    let schema: JsonObject = spec.parameters.as_object().cloned().unwrap_or_default();
    let a = &spec.annotations;
    let annotations = McpAnnotations::new()
        .read_only(a.read_only)
        .destructive(a.destructive)
        .idempotent(a.idempotent)
        .open_world(a.open_world);
    Tool::new(spec.name.clone(), spec.description.clone(), schema).with_annotations(annotations)
}

impl ServerHandler for Served {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("talaria", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "talaria's sandboxed plugin tools. Each runs with only the files, hosts and secrets its user granted; \
                 a call that needs approval (a dangerous command, a new host) is asked through elicitation, and refused \
                 when it cannot be asked.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.listed()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.specs.iter().find(|s| s.name == name).map(|s| tool(s))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        if !self.specs.iter().any(|s| s.name == name) {
            return Err(ErrorData::invalid_params(format!("unknown tool `{name}`: tools/list shows the tools"), None));
        }
        let arguments = request.arguments.unwrap_or_default();
        let elicits = context.client_capabilities().and_then(|c| c.elicitation.clone()).is_some();
        let in_rounds = context.protocol_version().is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        if let Some(state) = request.request_state {
            // A call that asked, answered (2026-07-28).
            return match self.held.resume(&state, &name, &arguments, request.input_responses.as_ref()) {
                Ok(running) => self.step(running, &context).await,
                Err(stale) => Ok(CallToolResult::error(vec![ContentBlock::text(stale.to_string())]).into()),
            };
        }
        let host = self.host.clone();
        if in_rounds && elicits {
            let (questions, asked) = mpsc::unbounded_channel();
            let task = tokio::spawn(call(host, name.clone(), arguments.clone(), Route::Rounds(questions)));
            return self.step(rounds::Running::new(name, arguments, task, asked), &context).await;
        }
        let route = if elicits { Route::Request(context.peer.clone()) } else { Route::Nobody };
        tokio::select! {
            r = call(host, name, arguments, route) => finished(r),
            () = context.ct.cancelled() => Err(cancelled()),
        }
    }
}

impl Served {
    /// Run a held call on until it finishes or asks again.
    async fn step(
        &self,
        running: rounds::Running,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        match self.held.step(running, &context.ct).await {
            rounds::Step::Done(r) => finished(r),
            rounds::Step::Asking(input) => Ok(input.into()),
            rounds::Step::Cancelled => Err(cancelled()),
        }
    }
}

/// A finished call as MCP answers it: a refusal or failure is a tool error, not a success.
fn finished(result: Called) -> Result<CallToolResponse, ErrorData> {
    match result {
        Ok(text) => Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into()),
        Err(ToolError::UnknownTool(e)) => Err(ErrorData::invalid_params(format!("unknown tool: {e}"), None)),
        Err(e) => Ok(CallToolResult::error(vec![ContentBlock::text(e.to_string())]).into()),
    }
}

fn cancelled() -> ErrorData {
    ErrorData::internal_error("the call was cancelled by the client", None)
}

/// Serve on stdin/stdout until the client closes them.
///
/// # Errors
/// The client's handshake failed.
pub async fn serve_stdio(served: Served) -> Result<(), String> {
    let running = served.serve(rmcp::transport::stdio()).await.map_err(|e| format!("MCP handshake failed: {e}"))?;
    running.waiting().await.map_err(|e| e.to_string())?;
    Ok(())
}

/// Serve streamable HTTP at `http://ADDR/mcp` until `shutdown` resolves. A bind beyond
/// loopback needs `token`; with one, every request must carry `Authorization: Bearer TOKEN`.
/// A request that carries an `Origin` (a browser's) is refused with 403 unless the origin is
/// a loopback one (`http://localhost:PORT`, `127.0.0.1`, `[::1]`) or among `origins`: a web
/// page the user visits cannot drive the tools (DNS rebinding, the transport spec's rule).
///
/// # Errors
/// A public bind with no token, or the address cannot be bound.
pub async fn serve_http(
    served: Served,
    addr: SocketAddr,
    token: Option<String>,
    origins: Vec<String>,
    ready: impl FnOnce(SocketAddr),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
    if !addr.ip().is_loopback() && token.is_none() {
        return Err(format!(
            "{addr} is reachable from other machines: give a bearer token (set TALARIA_MCP_TOKEN, or --token-env NAME) or bind 127.0.0.1"
        ));
    }
    let stop = tokio_util::sync::CancellationToken::new();
    let mut config = StreamableHttpServerConfig::default().with_cancellation_token(stop.child_token());
    if !addr.ip().is_loopback() {
        config = config.with_allowed_hosts([addr.ip().to_string(), addr.to_string()]);
    }
    let service =
        StreamableHttpService::new(move || Ok(served.clone()), Arc::new(LocalSessionManager::default()), config);
    let token = token.map(|t| talaria_core::listen::auth::Bearer::new(t, "mcp serve"));
    let origins: Arc<Vec<String>> = Arc::new(origins.iter().map(|o| o.trim_end_matches('/').to_lowercase()).collect());
    let router = axum::Router::new().nest_service("/mcp", service).layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            let (token, origins) = (token.clone(), origins.clone());
            async move {
                use axum::response::IntoResponse as _;
                let origin = request.headers().get(http::header::ORIGIN).map(|v| v.to_str().unwrap_or("?").to_string());
                match origin {
                    Some(o) if !origin_allowed(&o, &origins) => (
                        http::StatusCode::FORBIDDEN,
                        format!(
                            "Origin `{}` is not allowed: only loopback origins are, unless `talaria mcp serve --allow-origin ORIGIN` names it",
                            o.chars().take(200).collect::<String>()
                        ),
                    )
                        .into_response(),
                    _ => {
                        // The SDKs take 200 or 204 as a closed session, and log 202 as a failure.
                        let delete = request.method() == http::Method::DELETE;
                        let mut response = match token {
                            Some(bearer) => bearer.require(request, next).await,
                            None => next.run(request).await,
                        };
                        if delete && response.status() == http::StatusCode::ACCEPTED {
                            *response.status_mut() = http::StatusCode::OK;
                        }
                        response
                    }
                }
            }
        },
    ));
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    ready(listener.local_addr().map_err(|e| e.to_string())?);
    let stopping = stop.clone();
    tokio::spawn(async move {
        shutdown.await;
        stopping.cancel();
    });
    talaria_core::listen::serve(listener, router, talaria_core::listen::Limits::for_process(), stop).await;
    Ok(())
}

/// Whether a request from a page at `origin` may use the server: a loopback origin
/// (`http(s)://localhost`, `127.0.0.1`, `[::1]`, any port) or one of `allowed` (lowercase, no
/// trailing slash). `null` (a sandboxed frame, a file) is never allowed.
fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    let origin = origin.trim().trim_end_matches('/').to_lowercase();
    if allowed.contains(&origin) {
        return true;
    }
    let Some(rest) = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")) else {
        return false;
    };
    let host = match rest.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => rest.split(':').next().unwrap_or_default(),
    };
    if rest.contains(['/', '@', '?', '#']) {
        return false;
    }
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::origin_allowed;

    #[test]
    fn only_loopback_origins_and_the_ones_named_are_allowed() {
        let named = ["https://inspector.example".to_string()];
        for ok in [
            "http://localhost:6274",
            "http://127.0.0.1",
            "https://[::1]:8080",
            "https://inspector.example/",
            "HTTP://LOCALHOST",
        ] {
            assert!(origin_allowed(ok, &named), "{ok}");
        }
        for bad in [
            "http://evil.example",
            "null",
            "http://localhost.evil.example",
            "http://127.0.0.1.nip.io",
            "http://user@localhost",
            "file://",
            "",
        ] {
            assert!(!origin_allowed(bad, &named), "{bad}");
        }
    }
}
