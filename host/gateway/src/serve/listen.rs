//! The gateway's HTTP listener for webhook routes: `/webhooks/ACCOUNT/ROUTE[/...]`. Every
//! request is checked before anything reads it ([`crate::webhook::verify`]: size, signature or
//! token, replayed delivery ids), then handed to the account's adapter; what it makes of the
//! request goes to the agent like any chat message. A route whose adapter leaves the answer to
//! the agent gets the reply in the HTTP response (`{"reply": TEXT}`).
//!
//! It binds loopback (`127.0.0.1:8644`) unless `[gateway] listen` says otherwise; anywhere else
//! needs `listen_public = true`. Connections are taken through [`talaria_core::listen::serve`]:
//! headers within 10 s, bodies at a minimum rate (a slower one is answered 408), connections
//! capped in all and per address (503 with `Retry-After` when every one is working), so a flood
//! of half-sent requests cannot take the files the accounts' polling needs. An address that
//! fails a route's authentication `[gateway.limits] auth_failures` times within a minute is
//! answered `429` for the rest of it (logged once), and a route takes at most
//! `webhook_per_minute` deliveries a minute (then `429` with `Retry-After`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt as _;
use serde_json::json;
use talaria_core::config::{GatewayToml, RouteAuth};
use talaria_core::listen::auth::Bearer;
use talaria_core::listen::limit::{Lockout, Window};
use talaria_core::runtime::Secrets;
use talaria_core::runtime::adapter::{PlatformEvent, WebhookRequest};

use super::Gateway;
use crate::webhook::{Memory, Refusal, Route, SLACK_TIMESTAMP_HEADER, Secret, verify};

/// Where the listener binds unless configured.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8644";
/// The largest body a route takes unless it says.
const DEFAULT_MAX_BODY_KB: usize = 1024;
/// How long a request waits for its adapter to connect (a large component is compiled on its
/// first start).
const CONNECT_WAIT: Duration = Duration::from_secs(30);
/// How long a request waits for the agent's reply.
const REPLY_TIMEOUT: Duration = Duration::from_secs(300);

/// Every route's rules, by (account, route).
pub(crate) type Routes = BTreeMap<(String, String), Route>;

/// The routes of `config`, with their secrets' values from the environment or `.env`.
///
/// # Errors
/// A route whose secret has no value.
pub(crate) fn routes(config: &GatewayToml, secrets: &Secrets, accounts: &[String]) -> Result<Routes, String> {
    let mut out = BTreeMap::new();
    for (account, platform) in config.platforms.iter().filter(|(name, _)| accounts.contains(name)) {
        for (name, route) in &platform.routes {
            let at = format!("[gateway.platforms.{account}.routes.{name}]");
            let value = secrets.value(&route.secret).ok_or_else(|| {
                format!("{at}: its secret {} has no value: set it in the environment or in .env", route.secret)
            })?;
            if route.timestamp_header.is_some() && route.auth != RouteAuth::SlackV0 {
                return Err(format!("{at}: timestamp_header is for auth = \"slack-v0\" only; remove it"));
            }
            let header = route.header.clone();
            let secret = match route.auth {
                RouteAuth::Hmac => Secret::Hmac { header, key: value.into_bytes() },
                RouteAuth::SlackV0 => Secret::SlackV0 {
                    header,
                    timestamp_header: route.timestamp_header.clone().unwrap_or_else(|| SLACK_TIMESTAMP_HEADER.into()),
                    key: value.into_bytes(),
                },
                RouteAuth::Stripe => Secret::Stripe { header, key: value.into_bytes() },
                RouteAuth::Token => Secret::Token { header, token: value },
            };
            let rules = Route {
                name: name.clone(),
                secret,
                max_body: route.max_body_kb.unwrap_or(DEFAULT_MAX_BODY_KB) * 1024,
                delivery_header: route.delivery_header.clone(),
            };
            out.insert((account.clone(), name.clone()), rules);
        }
    }
    Ok(out)
}

/// Where to listen, as configured.
///
/// # Errors
/// Not an address, or one off loopback without `listen_public = true`.
pub fn address(config: &GatewayToml) -> Result<SocketAddr, String> {
    let text = config.listen.as_deref().unwrap_or(DEFAULT_LISTEN);
    let addr: SocketAddr =
        text.parse().map_err(|e| format!("[gateway] listen: `{text}` is not an address like 127.0.0.1:8644 ({e})"))?;
    if !addr.ip().is_loopback() && !config.listen_public {
        return Err(format!(
            "[gateway] listen = \"{text}\" is reachable from other machines: set listen_public = true to mean it (every route is authenticated), or listen on 127.0.0.1 behind a proxy"
        ));
    }
    Ok(addr)
}

struct Served {
    gateway: Arc<Gateway>,
    routes: Routes,
    /// Addresses that keep failing routes' authentication (`[gateway.limits] auth_failures`).
    lockout: Lockout,
    /// Deliveries each route took in the last minute (`[gateway.limits] webhook_per_minute`).
    deliveries: Window<(String, String)>,
}

/// The token of `/metrics` (`[gateway] metrics_token`), when metrics are served.
///
/// # Errors
/// It names a variable with no value.
pub(crate) fn metrics_token(config: &GatewayToml, secrets: &Secrets) -> Result<Option<String>, String> {
    let Some(name) = &config.metrics_token else { return Ok(None) };
    match secrets.value(name) {
        Some(token) if !token.trim().is_empty() => Ok(Some(token)),
        _ => Err(format!(
            "[gateway] metrics_token = \"{name}\": {name} has no value: set it in the environment or in .env (or remove metrics_token)"
        )),
    }
}

/// Serve `routes` (and `/metrics` with `metrics_token`) on `listener` until the gateway stops.
pub(crate) async fn serve(
    gateway: Arc<Gateway>,
    routes: Routes,
    metrics_token: Option<String>,
    listener: tokio::net::TcpListener,
) {
    let stop = gateway.stop.clone();
    let limits = gateway.config.limits;
    let lockout = Lockout::new("gateway webhooks", limits.auth_failures(), Duration::from_secs(60));
    let deliveries = Window::new(limits.webhook_per_minute(), Duration::from_secs(60));
    let state = Arc::new(Served { gateway, routes, lockout, deliveries });
    let mut app = axum::Router::new();
    if let Some(token) = metrics_token {
        let bearer = Bearer::with_lockout(token, "gateway metrics", limits.auth_failures(), Duration::from_secs(60));
        app = app.route(
            "/metrics",
            axum::routing::get(metrics)
                .route_layer(axum::middleware::from_fn(move |request, next| bearer.clone().require(request, next))),
        );
    }
    let app = app
        .route("/webhooks/{account}/{route}", axum::routing::any(handle))
        .route("/webhooks/{account}/{route}/{*rest}", axum::routing::any(handle_nested))
        .fallback(|| async { refuse(StatusCode::NOT_FOUND, "no such route") })
        .with_state(state);
    talaria_core::listen::serve(listener, app, talaria_core::listen::Limits::for_process(), stop).await;
}

/// `GET /metrics`: what the gateway's conversations did, and its queue and ledger now.
async fn metrics(State(served): State<Arc<Served>>) -> Response {
    let text = served.gateway.host.metrics().scrape(&served.gateway.store).await;
    ([(axum::http::header::CONTENT_TYPE, talaria_core::metrics::CONTENT_TYPE)], text).into_response()
}

fn refuse(status: StatusCode, error: &str) -> Response {
    (status, axum::Json(json!({ "error": error }))).into_response()
}

/// `429 Too Many Requests`, to try again after `secs`.
fn too_many(secs: u64, error: &str) -> Response {
    let mut answer = refuse(StatusCode::TOO_MANY_REQUESTS, error);
    if let Ok(value) = axum::http::HeaderValue::from_str(&secs.to_string()) {
        answer.headers_mut().insert(axum::http::header::RETRY_AFTER, value);
    }
    answer
}

async fn handle_nested(
    State(served): State<Arc<Served>>,
    Path((account, route, rest)): Path<(String, String, String)>,
    request: Request<Body>,
) -> Response {
    answer(&served, &account, &route, &format!("/{rest}"), request).await
}

async fn handle(
    State(served): State<Arc<Served>>,
    Path((account, route)): Path<(String, String)>,
    request: Request<Body>,
) -> Response {
    answer(&served, &account, &route, "/", request).await
}

async fn answer(served: &Served, account_name: &str, route_name: &str, rest: &str, request: Request<Body>) -> Response {
    // From the connection, never from a header the client writes.
    let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
    if let Some(wait) = served.lockout.locked_out(peer) {
        let secs = wait.as_secs().max(1);
        let text = format!("too many failed authentications from this address: try again in {secs} s");
        return too_many(secs, &text);
    }
    let key = (account_name.to_string(), route_name.to_string());
    let (Some(route), Some(account)) = (served.routes.get(&key), served.gateway.accounts.get(account_name)) else {
        return refuse(StatusCode::NOT_FOUND, "no such route");
    };
    // Its adapter takes requests once it has connected (after a restart, a moment).
    let start = tokio::time::Instant::now();
    while account.info().is_none() || !account.adapter.is_connected() {
        if start.elapsed() > CONNECT_WAIT {
            return refuse(StatusCode::SERVICE_UNAVAILABLE, "the route's adapter is not connected; try again shortly");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (parts, body) = request.into_parts();
    let body = match http_body_util::Limited::new(body, route.max_body).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if talaria_core::listen::too_slow(&*e) => {
            tracing::warn!(account = %account_name, route = %route_name, "webhook refused: {e}");
            return refuse(StatusCode::REQUEST_TIMEOUT, &e.to_string());
        }
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("the body is larger than the route's {} bytes", route.max_body),
            );
        }
        Err(e) => {
            tracing::debug!(account = %account_name, route = %route_name, "a webhook's body could not be read: {e}");
            return refuse(StatusCode::BAD_REQUEST, "the body could not be read");
        }
    };
    let headers: Vec<(String, String)> = parts
        .headers
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_ascii_lowercase(), v.to_str().ok()?.to_string())))
        .collect();
    let store = &served.gateway.store;
    let seen_route = format!("webhook:{account_name}:{route_name}");
    let now = jiff::Timestamp::now().as_second();
    let mut verdict = verify(route, &headers, &body, now);
    for (memory, key) in verdict.as_ref().map(Vec::as_slice).unwrap_or_default() {
        // Each memory in its own space of the store's, so a delivery id cannot pass for a digest.
        let space = match memory {
            Memory::Delivery => seen_route.clone(),
            Memory::Body => format!("{seen_route}#body"),
            Memory::Signature => format!("{seen_route}#signature"),
        };
        let seen = store.webhook_seen(&space, key).await.unwrap_or_else(|e| {
            tracing::warn!(account = %account_name, route = %route_name, "cannot remember a webhook for refusing replays: {e}");
            false
        });
        if seen {
            verdict = Err(Refusal::seen(*memory, key));
            break;
        }
    }
    if let Err(refusal) = verdict {
        tracing::warn!(account = %account_name, route = %route_name, "webhook refused: {refusal}");
        let status = StatusCode::from_u16(refusal.status()).unwrap_or(StatusCode::BAD_REQUEST);
        if status == StatusCode::UNAUTHORIZED {
            served.lockout.failed(peer);
        }
        return refuse(status, &refusal.to_string());
    }
    served.lockout.passed(peer);
    if let Err(wait) = served.deliveries.take(key) {
        let most = served.gateway.config.limits.webhook_per_minute();
        tracing::warn!(account = %account_name, route = %route_name, "webhook refused: over the route's {most} deliveries a minute");
        return too_many(wait.as_secs().max(1), &format!("this route takes at most {most} deliveries a minute"));
    }
    // A signed request may carry its caller's trace; only the ids of a well-formed one are taken.
    let trace = talaria_protocol::trace::traceparent(parts.headers.get("traceparent").and_then(|v| v.to_str().ok()));
    let request = WebhookRequest {
        method: parts.method.to_string(),
        path: format!("/{route_name}{}", if rest == "/" { "" } else { rest }),
        query: parts.uri.query().unwrap_or_default().to_string(),
        headers,
        body: body.to_vec(),
    };
    let outcome = match account.adapter.handle_webhook(request).await {
        Ok(outcome) => outcome,
        Err(e) => {
            tracing::warn!(account = %account_name, route = %route_name, "the adapter failed on a webhook: {e}");
            return refuse(StatusCode::BAD_GATEWAY, "the adapter could not take the request");
        }
    };
    let gateway = &served.gateway;
    if let Some(response) = outcome.response {
        for event in outcome.events {
            gateway.dispatch(account, event, trace.as_deref()).await;
        }
        let mut answer = Response::builder().status(response.status);
        for (name, value) in &response.headers {
            answer = answer.header(name, value);
        }
        return answer
            .body(Body::from(response.body))
            .unwrap_or_else(|_| refuse(StatusCode::BAD_GATEWAY, "bad response"));
    }
    // The answer is the agent's reply to the first message (by whichever process answers it).
    let mut events = outcome.events.into_iter();
    let Some(PlatformEvent::Message(first)) = events.next() else {
        return refuse(StatusCode::BAD_GATEWAY, "the adapter made nothing of the request");
    };
    // Listening before the message is kept: another process may answer it before this one
    // would otherwise have begun to listen, and its notice is the only one sent.
    let notices = gateway.store.notices().await;
    let Ok(taken) = gateway.on_message(account, first, true, trace.as_deref()).await else {
        return refuse(StatusCode::SERVICE_UNAVAILABLE, "the gateway cannot keep the message now; send it again later");
    };
    for event in events {
        gateway.dispatch(account, event, trace.as_deref()).await;
    }
    let Some(entry) = taken else {
        return refuse(StatusCode::FORBIDDEN, "this route's messages are not answered: allow its sender in [gateway]");
    };
    match super::inbox::reply_to(gateway, entry, REPLY_TIMEOUT, notices).await {
        Some(reply) => axum::Json(json!({ "reply": reply })).into_response(),
        None => refuse(StatusCode::GATEWAY_TIMEOUT, "no reply in time; it will not be sent here"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listener_stays_on_loopback_unless_told() {
        let mut config = GatewayToml::default();
        assert_eq!(address(&config).expect("default").to_string(), DEFAULT_LISTEN);
        config.listen = Some("0.0.0.0:8644".into());
        let e = address(&config).expect_err("public");
        assert!(e.contains("set listen_public = true"), "{e}");
        config.listen_public = true;
        assert!(address(&config).is_ok());
        config.listen = Some("nowhere".into());
        assert!(address(&config).expect_err("bad").contains("is not an address"));
    }
}
