//! The web dashboard: pages rendered by the server (no build step, no script needed to read
//! them), behind a login.
//!
//! How a browser gets in, and what keeps others out:
//! - **Logging in**: the one-time link `talaria serve` prints at start (`/login?key=...`; it
//!   works once), or the server's token typed into the login page. Either sets a cookie naming
//!   a browser session of the server's (`HttpOnly`, `SameSite=Strict`, 12 hours), kept in
//!   memory: a restart logs every browser out. Failed logins count against the address as the
//!   API's wrong tokens do ([`talaria_core::listen::auth`]): ten in a minute lock it out, and
//!   that is logged.
//! - **Every page needs the cookie**; without it a page redirects to the login page, which says
//!   why. Every form that changes anything is a POST carrying the browser session's CSRF token,
//!   checked in constant time, besides the `Origin` check every request passes
//!   ([`crate::guard`]) and the cookie that another site's request never carries.
//! - **Nothing a page shows is trusted**: sessions hold what models, tools, files and chat
//!   platforms wrote, so every text is escaped ([`maud`] escapes all it is given), and the
//!   pages' Content-Security-Policy lets no script or style run but the server's own files.

pub(crate) mod chat;
mod cron;
mod gateway;
mod log;
mod plugins;
mod sessions;
mod usage;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Form;
use axum::extract::{ConnectInfo, Query, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use maud::{DOCTYPE, Markup, html};
use serde::Deserialize;
use subtle::ConstantTimeEq as _;
use talaria_core::listen::auth::{Bearer, Refusal};

use crate::Served;

/// The cookie that names a browser's session.
const COOKIE: &str = "talaria_serve";
/// The cookie that keeps the chosen theme.
const THEME_COOKIE: &str = "talaria_theme";
/// How long a browser stays logged in.
const LOGIN_LASTS: Duration = Duration::from_secs(12 * 3600);
/// How long the chosen theme is kept.
const THEME_LASTS: Duration = Duration::from_secs(365 * 24 * 3600);
/// Most browsers logged in at once; the oldest are logged out beyond it.
const MAX_BROWSERS: usize = 256;

/// The style sheet, served from the binary.
const STYLE: &str = include_str!("style.css");
/// The live chat's script, served from the binary.
const CHAT_JS: &str = include_str!("chat.js");

/// Who may use the dashboard: the login links not yet used, and the browsers logged in.
pub(crate) struct Logins {
    /// The one-time link's key, until it is used.
    key: Mutex<Option<String>>,
    browsers: Mutex<HashMap<String, Browser>>,
    /// The server's token and its failures (shared with the API's).
    bearer: Arc<Bearer>,
}

/// A logged-in browser.
#[derive(Clone)]
pub(crate) struct Browser {
    /// What its forms must carry.
    pub csrf: String,
    until: Instant,
}

impl Logins {
    /// Logins checked against `bearer`, with a new one-time link's key (see [`Logins::key`]).
    pub(crate) fn new(bearer: Arc<Bearer>) -> Result<Self, String> {
        Ok(Self { key: Mutex::new(Some(crate::new_token()?)), browsers: Mutex::default(), bearer })
    }

    /// The one-time link's key, while it is unused.
    pub(crate) fn key(&self) -> Option<String> {
        self.key.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    fn browsers(&self) -> std::sync::MutexGuard<'_, HashMap<String, Browser>> {
        self.browsers.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A new browser session: its cookie's value.
    fn admit(&self) -> Result<String, String> {
        let id = crate::new_token()?;
        let csrf = crate::new_token()?;
        let now = Instant::now();
        let mut browsers = self.browsers();
        browsers.retain(|_, b| b.until > now);
        if browsers.len() >= MAX_BROWSERS
            && let Some(oldest) = browsers.iter().min_by_key(|(_, b)| b.until).map(|(id, _)| id.clone())
        {
            browsers.remove(&oldest);
        }
        browsers.insert(id.clone(), Browser { csrf, until: now + LOGIN_LASTS });
        Ok(id)
    }

    /// The browser `headers`' cookie names, while it is logged in.
    fn browser(&self, headers: &HeaderMap) -> Option<(String, Browser)> {
        let id = cookie(headers, COOKIE)?;
        let browsers = self.browsers();
        // Compared in constant time, though a hash lookup would do: there are few.
        browsers
            .iter()
            .find(|(known, b)| bool::from(known.as_bytes().ct_eq(id.as_bytes())) && b.until > Instant::now())
            .map(|(id, b)| (id.clone(), b.clone()))
    }

    /// Use the one-time key `given`, if it is the key.
    fn take_key(&self, given: &str) -> bool {
        let mut key = self.key.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let matches = key.as_deref().is_some_and(|k| bool::from(k.as_bytes().ct_eq(given.as_bytes())));
        if matches {
            *key = None;
        }
        matches
    }
}

/// The value of the cookie `name` in `headers`.
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.to_string())
}

/// The dashboard's routes; the ones under the login go through [`logged_in`].
pub(crate) fn router(served: Arc<Served>) -> axum::Router {
    let pages = axum::Router::new()
        .route("/", get(|| async { Redirect::to("/sessions") }))
        .route("/sessions", get(sessions::list))
        .route("/sessions/{id}", get(sessions::show))
        .route("/plugins", get(plugins::list))
        .route("/plugins/{name}/grant", post(plugins::grant))
        .route("/plugins/{name}/revoke", post(plugins::revoke))
        .route("/usage", get(usage::show))
        .route("/log", get(log::show))
        .route("/gateway", get(gateway::show))
        .route("/gateway/approve", post(gateway::approve))
        .route("/gateway/revoke", post(gateway::revoke))
        .route("/cron", get(cron::list))
        .route("/cron/preview", post(cron::preview))
        .route("/cron/add", post(cron::add))
        .route("/cron/{id}", get(cron::history))
        .route("/cron/{id}/{verb}", post(cron::pause))
        .route("/chat", get(chat::index))
        .route("/chat/new", post(chat::new))
        .route("/chat/{id}", get(chat::show))
        .route("/chat/{id}/events", get(chat::events))
        .route("/chat/{id}/send", post(chat::send))
        .route("/chat/{id}/stop", post(chat::stop))
        .route("/chat/{id}/approve", post(chat::approve))
        .route("/chat/{id}/answer", post(chat::answer))
        .route("/logout", post(logout))
        .route("/theme", post(theme))
        .route_layer(axum::middleware::from_fn_with_state(served.clone(), logged_in));
    axum::Router::new()
        .route("/login", get(login_page).post(login_form))
        .route("/static/style.css", get(style))
        .route(
            "/static/chat.js",
            get(|| async { ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], CHAT_JS) }),
        )
        .merge(pages)
        .with_state(served)
}

/// Let `request` through for a logged-in browser only; a page asked for without the cookie
/// redirects to the login page, anything else is refused.
async fn logged_in(State(served): State<Arc<Served>>, mut request: Request, next: Next) -> Response {
    let Some((id, browser)) = served.logins.browser(request.headers()) else {
        if request.method() == http::Method::GET {
            return Redirect::to("/login?from=page").into_response();
        }
        return refusal(StatusCode::FORBIDDEN, "You are not logged in: open the login link again.");
    };
    if request.method() == http::Method::POST {
        // The CSRF token is in the form; the handler's `Form` reads it after this check, so
        // the body is read here and put back.
        let (parts, body) = request.into_parts();
        let Ok(bytes) = axum::body::to_bytes(body, 1 << 20).await else {
            return refusal(StatusCode::PAYLOAD_TOO_LARGE, "The form is too large.");
        };
        let given: Vec<(String, String)> = serde_urlencoded::from_bytes(&bytes).unwrap_or_default();
        let csrf = given.iter().find(|(k, _)| k == "csrf").map(|(_, v)| v.as_str()).unwrap_or_default();
        if !bool::from(csrf.as_bytes().ct_eq(browser.csrf.as_bytes())) {
            return refusal(
                StatusCode::FORBIDDEN,
                "This form did not come from this dashboard's own page (its CSRF token is missing or wrong): reload the page and try again.",
            );
        }
        request = Request::from_parts(parts, axum::body::Body::from(bytes));
    }
    let theme = Theme::from_headers(request.headers());
    request.extensions_mut().insert(Visitor { id, csrf: browser.csrf, theme });
    next.run(request).await
}

/// The logged-in browser a page is for.
#[derive(Clone)]
pub(crate) struct Visitor {
    id: String,
    /// What its forms carry.
    pub csrf: String,
    pub theme: Theme,
}

/// How pages look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Theme {
    /// Light or dark, as the browser prefers.
    #[default]
    Auto,
    /// No colour at all (as `NO_COLOR` is in the terminal).
    Plain,
    Dark,
}

impl Theme {
    fn from_headers(headers: &HeaderMap) -> Self {
        Self::parse(cookie(headers, THEME_COOKIE).as_deref().unwrap_or_default())
    }

    /// The theme `name` names; any other is `auto`.
    fn parse(name: &str) -> Self {
        match name {
            "plain" => Theme::Plain,
            "dark" => Theme::Dark,
            _ => Theme::Auto,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Theme::Auto => "auto",
            Theme::Plain => "plain",
            Theme::Dark => "dark",
        }
    }
}

/// A whole page: `title`, the navigation (with `current` marked) and `body`.
pub(crate) fn page(visitor: &Visitor, current: &str, title: &str, body: Markup) -> Response {
    let nav = [
        ("sessions", "/sessions", "Sessions"),
        ("chat", "/chat", "Chat"),
        ("plugins", "/plugins", "Plugins"),
        ("cron", "/cron", "Cron"),
        ("gateway", "/gateway", "Gateway"),
        ("usage", "/usage", "Usage"),
        ("log", "/log", "Log"),
    ];
    let markup = html! {
        (DOCTYPE)
        html lang="en" data-theme=(visitor.theme.name()) {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · talaria" }
                link rel="stylesheet" href="/static/style.css";
            }
            body {
                header {
                    a.brand href="/" { "talaria" }
                    nav {
                        @for (key, href, label) in nav {
                            a href=(href) aria-current=[(key == current).then_some("page")] { (label) }
                        }
                    }
                    form.inline method="post" action="/theme" {
                        input type="hidden" name="csrf" value=(visitor.csrf);
                        label { "Theme "
                            select name="theme" {
                                @for theme in [Theme::Auto, Theme::Plain, Theme::Dark] {
                                    option value=(theme.name()) selected[theme == visitor.theme] { (theme.name()) }
                                }
                            }
                        }
                        button type="submit" { "Set" }
                    }
                    form.inline method="post" action="/logout" {
                        input type="hidden" name="csrf" value=(visitor.csrf);
                        button type="submit" { "Log out" }
                    }
                }
                main { (body) }
            }
        }
    };
    html_response(StatusCode::OK, markup)
}

fn html_response(status: StatusCode, markup: Markup) -> Response {
    let mut response = (status, markup.into_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; img-src 'self' data:; script-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    response
}

/// A page outside the login (no navigation): `title`, and `body` in a narrow column.
fn bare(status: StatusCode, title: &str, body: Markup) -> Response {
    let markup = html! {
        (DOCTYPE)
        html lang="en" data-theme="auto" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · talaria" }
                link rel="stylesheet" href="/static/style.css";
            }
            body { main.narrow { (body) } }
        }
    };
    html_response(status, markup)
}

/// A page that says why something was refused, with the way in.
fn refusal(status: StatusCode, why: &str) -> Response {
    bare(status, "Refused", html! { h1 { "Refused" } p.refused { (why) } p { a href="/login" { "Log in" } } })
}

async fn style() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response()
}

#[derive(Deserialize)]
struct LoginQuery {
    key: Option<String>,
    from: Option<String>,
}

/// The login page, or the one-time link.
async fn login_page(
    State(served): State<Arc<Served>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Query(query): Query<LoginQuery>,
) -> Response {
    if let Some(key) = query.key {
        if let Some(locked) = locked_out(&served.logins.bearer, peer) {
            return locked;
        }
        if served.logins.take_key(&key) {
            return admitted(&served);
        }
        let _ = served.logins.bearer.check(Some(peer.ip()), None);
        tracing::warn!(client = %peer.ip(), "serve: a login link that is not (or no longer) valid was used");
        return login(
            StatusCode::FORBIDDEN,
            Some(
                "This login link has been used already, or is not this server's: a link works once. Log in with the token instead (`talaria serve token` prints it), or restart `talaria serve` for a new link.",
            ),
        );
    }
    let why = (query.from.as_deref() == Some("page"))
        .then_some("You are not logged in: open the login link `talaria serve` printed, or give its token.");
    login(StatusCode::OK, why)
}

/// The refusal for `peer` while it is locked out for failing to log in.
fn locked_out(bearer: &Bearer, peer: SocketAddr) -> Option<Response> {
    bearer.locked_out(Some(peer.ip())).map(too_many)
}

/// The refusal for an address locked out for another `wait`.
fn too_many(wait: Duration) -> Response {
    refusal(
        StatusCode::TOO_MANY_REQUESTS,
        &format!("Too many failed logins from this address: try again in {} s.", wait.as_secs().max(1)),
    )
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

/// The login page's form: the server's token.
async fn login_form(
    State(served): State<Arc<Served>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Form(form): Form<LoginForm>,
) -> Response {
    match served.logins.bearer.which(Some(peer.ip()), Some(&format!("Bearer {}", form.token.trim()))) {
        Ok(0) => admitted(&served),
        // Another API token ([[serve.tokens]]): it is a client's, not the operator's.
        Ok(_) => login(
            StatusCode::FORBIDDEN,
            Some(
                "That is an API token of [[serve.tokens]]: the dashboard takes the server's own (`talaria serve token`).",
            ),
        ),
        Err(Refusal::Unauthorized) => {
            tracing::warn!(client = %peer.ip(), "serve: a dashboard login with a wrong token");
            login(StatusCode::UNAUTHORIZED, Some("That is not this server's token (`talaria serve token` prints it)."))
        }
        Err(Refusal::LockedOut(wait)) => too_many(wait),
    }
}

/// Log a new browser in: its cookie, and the dashboard.
fn admitted(served: &Served) -> Response {
    let id = match served.logins.admit() {
        Ok(id) => id,
        Err(e) => return refusal(StatusCode::INTERNAL_SERVER_ERROR, &e),
    };
    setting_cookie("/sessions", COOKIE, &id, LOGIN_LASTS)
}

/// A redirect to `to` that sets the cookie `name` to `value` for `lasts` (nothing: removes it).
fn setting_cookie(to: &str, name: &str, value: &str, lasts: Duration) -> Response {
    let mut response = Redirect::to(to).into_response();
    let cookie = format!("{name}={value}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}", lasts.as_secs());
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

fn login(status: StatusCode, why: Option<&str>) -> Response {
    let body = html! {
        h1 { "talaria" }
        @if let Some(why) = why { p.refused { (why) } }
        form method="post" action="/login" {
            label for="token" { "Token" }
            input #token type="password" name="token" autocomplete="current-password" required;
            button type="submit" { "Log in" }
        }
        p.hint { "The token is what `talaria serve token` prints; the login link printed when the server started logs you in once without it." }
    };
    bare(status, "Log in", body)
}

/// Log this browser out.
async fn logout(State(served): State<Arc<Served>>, axum::Extension(visitor): axum::Extension<Visitor>) -> Response {
    served.logins.browsers().remove(&visitor.id);
    setting_cookie("/login", COOKIE, "", Duration::ZERO)
}

#[derive(Deserialize)]
struct ThemeForm {
    theme: String,
}

/// Keep the chosen theme in a cookie, and go back to the dashboard.
async fn theme(Form(form): Form<ThemeForm>) -> Response {
    let theme = Theme::parse(&form.theme);
    setting_cookie("/sessions", THEME_COOKIE, theme.name(), THEME_LASTS)
}

/// A time in milliseconds since the epoch, as the server's clock shows it.
pub(crate) fn when(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.to_zoned(jiff::tz::TimeZone::system()).strftime("%Y-%m-%d %H:%M").to_string())
        .unwrap_or_default()
}
