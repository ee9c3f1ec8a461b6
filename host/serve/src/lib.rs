//! `talaria serve`: one HTTP front door on talaria's conversations. It serves an
//! OpenAI-compatible API (`/v1/models`, `/v1/chat/completions` and `/v1/responses`, streamed
//! and not), so any OpenAI client or chat UI can use the agent, its tools and its sessions as
//! if it were a model, A2A 1.0 ([`a2a`]), so other agents can find it by its card and send
//! it tasks, and a web dashboard (sessions: list, search, read), logged into with a one-time
//! link or the token.
//!
//! What it enforces, before any route runs:
//! 1. **A token on every API request** (the dashboard's pages need a login instead: see
//!    `web`): `Authorization: Bearer TOKEN`, compared in constant
//!    time, with an address that keeps guessing locked out ([`talaria_core::listen::auth`]). A
//!    refusal is an OpenAI-shaped error (`401`, or `429` while locked out).
//! 2. **Only its own names** ([`Names`]): a request whose `Host` is not a name this server
//!    answers to is refused `421` (a DNS-rebinding page sends its own host name), and one whose
//!    `Origin` is another site's is refused `403`: no route answers a cross-site request.
//! 3. **Loopback unless told otherwise**: a bind beyond loopback needs `--allow-remote` (the
//!    listener speaks plain HTTP; put TLS in front of it).
//! 4. **Nothing cached**: every answer says `Cache-Control: no-store`, with `nosniff`, no
//!    referrer and no framing.
//! 5. Connections are taken through [`talaria_core::listen::serve`], as at every HTTP door of
//!    talaria's (headers within 10 s, bodies at a minimum rate, connections capped).
//!
//! Each API conversation is a talaria session ([`openai`] says how one is named and what
//! happens to approvals); it runs in the workspace `talaria serve` was started in, its
//! commands in the OS sandbox.

pub mod a2a;
mod guard;
pub mod openai;
pub mod responses;
mod turn;
mod web;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use axum::routing::{get, post};
use http::{StatusCode, header};
use talaria_core::Host;
use talaria_core::listen::auth::{Bearer, Refusal};
use tokio_util::sync::CancellationToken;

pub use guard::Names;

/// How approvals asked during an API turn are answered (nobody is there to ask).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Approvals {
    /// Refused, and the client is told in the answer what was refused (the default).
    #[default]
    Deny,
    /// Allowed once each, as `--yolo` would (the operator's choice for a trusted client).
    Allow,
}

/// What `talaria serve` was asked for.
pub struct Options {
    /// Where to listen.
    pub listen: SocketAddr,
    /// The API's bearer token.
    pub token: String,
    /// Host names (with or without a port) the server answers to beyond its own address and
    /// loopback's: the name a reverse proxy forwards.
    pub hosts: Vec<String>,
    /// Let a bind beyond loopback go ahead.
    pub allow_remote: bool,
    /// How approvals are answered in the turns of requests with `token`.
    pub approvals: Approvals,
    /// More API tokens, each with its own approvals (they do not log into the dashboard).
    pub more_tokens: Vec<Token>,
    /// Runs a cron job now, for the dashboard (none: its "Run now" says how to).
    pub jobs: Option<Arc<dyn JobRunner>>,
    /// What the gateway's processes say, for the dashboard.
    pub gateway: Option<Arc<dyn GatewayView>>,
}

/// A gateway process, as it last said.
#[derive(Debug, Clone)]
pub struct GatewayProcess {
    pub pid: u32,
    /// The machine it runs on.
    pub machine: String,
    /// Whether it runs now (it wrote lately, and its process is there).
    pub live: bool,
    /// Milliseconds since the epoch when it last said.
    pub at: i64,
    /// Each account, and its state in words.
    pub accounts: Vec<(String, String)>,
    /// Turns running now.
    pub busy: usize,
}

/// What the gateway's processes say about themselves and their chats, for the dashboard. The
/// binary gives it: the gateway is another front door, which `talaria serve` does not depend on.
pub trait GatewayView: Send + Sync {
    /// Every process's last word, newest first, and the chats known (`ACCOUNT:CHAT`).
    fn status(&self) -> Later<'_, (Vec<GatewayProcess>, Vec<String>)>;
}

/// One more API token.
pub struct Token {
    pub token: String,
    pub approvals: Approvals,
}

/// Who a request comes from, as its token says: how its turns' approvals are answered; and the
/// trace it continues (its W3C `traceparent` header, when well formed).
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    pub approvals: Approvals,
    pub trace: Option<String>,
}

/// Runs a scheduled job at once, for the dashboard's "Run now". The binary gives it: running
/// jobs is the scheduler's work, which `talaria serve` does not depend on.
pub trait JobRunner: Send + Sync {
    /// Run the job `id` now; what it did, in a line for people.
    ///
    /// # Errors
    /// No such job, or it could not run: why.
    fn run_now<'a>(&'a self, id: &'a str) -> Later<'a, Result<String, String>>;
}

/// What [`JobRunner`] and [`GatewayView`] give back: a future of `T`.
pub type Later<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "{0} is reachable from other machines and `talaria serve` speaks plain HTTP: bind 127.0.0.1, or pass --allow-remote with TLS in front of it (a reverse proxy)"
    )]
    Remote(SocketAddr),
    #[error("cannot listen on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    #[error("{0}")]
    Random(String),
}

/// What every handler shares.
pub(crate) struct Served {
    pub host: Arc<Host>,
    /// One API conversation's requests at a time, by its name.
    pub sessions: turn::Named,
    /// A2A's tasks.
    pub a2a: a2a::Tasks,
    /// The dashboard's logins.
    pub logins: web::Logins,
    /// The dashboard's live chats.
    pub chats: web::chat::Chats,
    /// Runs cron jobs now.
    pub jobs: Option<Arc<dyn JobRunner>>,
    /// What the gateway says.
    pub gateway: Option<Arc<dyn GatewayView>>,
}

/// What a server that is up tells whoever started it.
pub struct Ready {
    /// Where it listens.
    pub bound: SocketAddr,
    /// The dashboard's one-time login link.
    pub login: String,
}

/// Serve `host` as `options` say until `stop` is cancelled; `ready` is told the bound address
/// and the dashboard's login link once the listener is up.
///
/// # Errors
/// A bind beyond loopback without `allow_remote`, or a bind that fails.
pub async fn serve(
    host: Arc<Host>,
    options: Options,
    ready: impl FnOnce(Ready),
    stop: CancellationToken,
) -> Result<(), Error> {
    if !options.listen.ip().is_loopback() && !options.allow_remote {
        return Err(Error::Remote(options.listen));
    }
    let listener = tokio::net::TcpListener::bind(options.listen).await.map_err(|e| Error::Bind(options.listen, e))?;
    let bound = listener.local_addr().map_err(|e| Error::Bind(options.listen, e))?;
    let names = Arc::new(Names::new(bound, &options.hosts));
    let mut tokens = vec![options.token];
    let mut approvals = vec![options.approvals];
    for more in options.more_tokens {
        tokens.push(more.token);
        approvals.push(more.approvals);
    }
    let bearer = Bearer::any_of(tokens, "serve");
    let logins = web::Logins::new(bearer.clone()).map_err(Error::Random)?;
    let login = format!("http://{bound}/login?key={}", logins.key().unwrap_or_default());
    let served = Arc::new(Served {
        host,
        sessions: turn::Named::default(),
        a2a: a2a::Tasks::default(),
        logins,
        chats: web::chat::Chats::default(),
        jobs: options.jobs,
        gateway: options.gateway,
    });
    let router = router(served, bearer, Arc::new(approvals)).layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| guard::check(names.clone(), request, next),
    ));
    ready(Ready { bound, login });
    talaria_core::listen::serve(listener, router, talaria_core::listen::Limits::for_process(), stop).await;
    Ok(())
}

/// The routes: the APIs' behind `bearer`, the dashboard's behind its login.
pub(crate) fn router(served: Arc<Served>, bearer: Arc<Bearer>, approvals: Arc<Vec<Approvals>>) -> axum::Router {
    let api = axum::Router::new()
        .route("/v1/models", get(openai::models))
        .route("/v1/chat/completions", post(openai::chat))
        .route("/v1/responses", post(responses::respond))
        .route("/.well-known/agent-card.json", get(a2a::card))
        .route(a2a::PATH, post(a2a::rpc))
        .route("/metrics", get(metrics))
        .route_layer(axum::middleware::from_fn(move |request: Request, next: Next| {
            authenticated(bearer.clone(), approvals.clone(), request, next)
        }))
        .with_state(served.clone());
    api.merge(web::router(served)).fallback(|uri: http::Uri| async move {
        if uri.path().starts_with("/v1/") {
            openai::error(StatusCode::NOT_FOUND, "invalid_request_error", "no such route").into_response()
        } else {
            (StatusCode::NOT_FOUND, "no such page").into_response()
        }
    })
}

/// `GET /metrics`: what the host did, for Prometheus (behind the API's token).
async fn metrics(axum::extract::State(served): axum::extract::State<Arc<Served>>) -> Response {
    let text = served.host.metrics().scrape(served.host.store()).await;
    ([(header::CONTENT_TYPE, talaria_core::metrics::CONTENT_TYPE)], text).into_response()
}

/// Let `request` through with a bearer token only (marked with its [`Caller`]), refusing in
/// OpenAI's shape.
async fn authenticated(
    bearer: Arc<Bearer>,
    approvals: Arc<Vec<Approvals>>,
    mut request: Request,
    next: Next,
) -> Response {
    let peer = request.extensions().get::<ConnectInfo<std::net::SocketAddr>>().map(|c| c.0.ip());
    let given = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    match bearer.which(peer, given) {
        Ok(i) => {
            let approvals = approvals.get(i).copied().unwrap_or_default();
            let trace = talaria_protocol::trace::traceparent(
                request.headers().get("traceparent").and_then(|v| v.to_str().ok()),
            );
            request.extensions_mut().insert(Caller { approvals, trace });
            next.run(request).await
        }
        Err(Refusal::Unauthorized) => {
            let mut refused = openai::error(
                StatusCode::UNAUTHORIZED,
                "invalid_request_error",
                "a bearer token is required: `Authorization: Bearer TOKEN`, with TALARIA_SERVE_TOKEN or the token `talaria serve token` prints",
            )
            .into_response();
            refused.headers_mut().insert(header::WWW_AUTHENTICATE, http::HeaderValue::from_static("Bearer"));
            refused
        }
        Err(Refusal::LockedOut(wait)) => {
            let secs = wait.as_secs().max(1);
            let mut refused = openai::error(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                &format!("too many failed authentications from this address: try again in {secs} s"),
            )
            .into_response();
            refused.headers_mut().insert(header::RETRY_AFTER, http::HeaderValue::from(secs));
            refused.headers_mut().insert("x-should-retry", http::HeaderValue::from_static("false"));
            refused
        }
    }
}

/// A new random token: 32 bytes from the operating system, in hex.
///
/// # Errors
/// The operating system's random source failed: what it said.
pub fn new_token() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("the operating system's random source failed: {e}"))?;
    Ok(hex::encode(bytes))
}
