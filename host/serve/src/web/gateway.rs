//! The gateway page: its processes (as they last said), the configured accounts, the chats
//! known, pairing requests to approve (and pairings to revoke), and the delivery ledger
//! (counts, and the deliveries in trouble). Names chat users
//! gave themselves are shown as text, cut to a sensible length.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use axum::{Extension, Form};
use http::StatusCode;
use maud::html;
use serde::Deserialize;

use super::{Visitor, page, when};
use crate::Served;

/// Deliveries in trouble shown.
const TROUBLED: usize = 50;

/// `GET /gateway`.
pub(crate) async fn show(State(served): State<Arc<Served>>, Extension(visitor): Extension<Visitor>) -> Response {
    shown(&served, &visitor, None).await
}

async fn shown(served: &Served, visitor: &Visitor, said: Option<(bool, String)>) -> Response {
    let store = served.host.store();
    let now = jiff::Timestamp::now().as_millisecond();
    let pairings = store.pairings().await;
    let counts = store.delivery_counts().await;
    let troubled = store.deliveries_troubled(TROUBLED).await.unwrap_or_default();
    let accounts: Vec<&String> = served.host.config().gateway.platforms.keys().collect();
    let (processes, chats) = match &served.gateway {
        Some(view) => view.status().await,
        None => (Vec::new(), Vec::new()),
    };
    let body = html! {
        h1 { "Gateway" }
        @if let Some((ok, text)) = &said {
            p class=(if *ok { "done" } else { "refused" }) role="status" { (text) }
        }
        h2 { "Processes" }
        @if processes.is_empty() {
            p { "No gateway has run here (`talaria gateway run`)." }
        } @else {
            table.sessions.processes {
                thead { tr { th { "Process" } th { "State" } th { "Accounts" } th.num { "Busy" } th { "Last said" } } }
                tbody {
                    @for p in &processes {
                        tr {
                            td { "pid " (p.pid) " on " (shown_name(&p.machine)) }
                            td { (if p.live { "running" } else { "gone" }) }
                            td { @for (name, state) in &p.accounts { (shown_name(name)) ": " (shown_name(state)) br; } }
                            td.num { (p.busy) }
                            td { (when(p.at)) }
                        }
                    }
                }
            }
        }
        h2 { "Accounts" }
        @if accounts.is_empty() {
            p { "None configured ([gateway.platforms.NAME] in config.toml; see docs/gateway.md)." }
        } @else {
            ul { @for a in &accounts { li { (a) } } }
        }
        h2 { "Chats" }
        @if chats.is_empty() { p { "No chat has written yet." } }
        @else {
            details.figures {
                summary { (chats.len()) " chats known" }
                ul { @for chat in &chats { li { (shown_name(chat)) } } }
            }
        }
        h2 { "Pairing requests" }
        @match &pairings {
            Err(e) => p.refused { "The pairings cannot be read: " (e) },
            Ok(all) => {
                @let waiting: Vec<_> = all.iter().filter(|p| p.approved_at.is_none() && p.code.is_some() && p.expires_at > now).collect();
                @let paired: Vec<_> = all.iter().filter(|p| p.approved_at.is_some()).collect();
                @if waiting.is_empty() { p { "No one is waiting." } }
                @else {
                    table.sessions.pairings {
                        thead { tr { th { "Who" } th { "Platform" } th { "Code" } th { "Expires" } th { "" } } }
                        tbody {
                            @for p in &waiting {
                                tr {
                                    td { (shown_name(&p.user_name)) br; small.id { (p.user_id) } }
                                    td { (p.platform) }
                                    td { code { (p.code.as_deref().unwrap_or_default()) } }
                                    td { (when(p.expires_at)) }
                                    td {
                                        form.inline method="post" action="/gateway/approve" {
                                            input type="hidden" name="csrf" value=(visitor.csrf);
                                            input type="hidden" name="code" value=(p.code.as_deref().unwrap_or_default());
                                            button type="submit" data-code=(p.code.as_deref().unwrap_or_default()) { "Approve" }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                h2 { "Paired" }
                @if paired.is_empty() { p { "No one yet." } }
                @else {
                    table.sessions.paired {
                        thead { tr { th { "Who" } th { "Platform" } th { "Since" } th { "" } } }
                        tbody {
                            @for p in &paired {
                                tr {
                                    td { (shown_name(&p.user_name)) br; small.id { (p.user_id) } }
                                    td { (p.platform) }
                                    td { (when(p.approved_at.unwrap_or_default())) }
                                    td {
                                        form.inline method="post" action="/gateway/revoke" {
                                            input type="hidden" name="csrf" value=(visitor.csrf);
                                            input type="hidden" name="platform" value=(p.platform);
                                            input type="hidden" name="user_id" value=(p.user_id);
                                            button type="submit" { "Revoke" }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            },
        }
        h2 { "Deliveries" }
        @match &counts {
            Ok(c) => p #deliveries { (c.pending) " waiting, " (c.sent) " sent, " (c.failed) " given up." },
            Err(e) => p.refused { "The delivery ledger cannot be read: " (e) },
        }
        @if !troubled.is_empty() {
            table.sessions {
                thead { tr { th { "Chat" } th { "State" } th.num { "Attempts" } th { "Last error" } th { "When" } } }
                tbody {
                    @for t in &troubled {
                        tr {
                            td { (t.platform) ":" (t.chat_id) }
                            td { (t.state) }
                            td.num { (t.attempts) }
                            td { (t.last_error) }
                            td { (when(t.at)) }
                        }
                    }
                }
            }
        }
    };
    let mut response = page(visitor, "gateway", "Gateway", body);
    if said.as_ref().is_some_and(|(ok, _)| !ok) {
        *response.status_mut() = StatusCode::BAD_REQUEST;
    }
    response
}

/// A name a chat user gave themselves: its control characters shown as such, 80 characters
/// at most.
fn shown_name(name: &str) -> String {
    talaria_core::runtime::visible(name, 80)
}

#[derive(Deserialize)]
pub(crate) struct Approve {
    code: String,
}

/// `POST /gateway/approve`.
pub(crate) async fn approve(
    State(served): State<Arc<Served>>,
    Extension(visitor): Extension<Visitor>,
    Form(form): Form<Approve>,
) -> Response {
    let said = match served.host.store().pairing_approve(form.code.trim()).await {
        Ok(p) => {
            tracing::info!(platform = p.platform, user = p.user_id, "serve: a pairing approved from the dashboard");
            (
                true,
                format!(
                    "Paired {} ({} user {}): they are answered from now on.",
                    shown_name(&p.user_name),
                    p.platform,
                    p.user_id
                ),
            )
        }
        Err(e) => (false, e.to_string()),
    };
    shown(&served, &visitor, Some(said)).await
}

#[derive(Deserialize)]
pub(crate) struct Revoke {
    platform: String,
    user_id: String,
}

/// `POST /gateway/revoke`.
pub(crate) async fn revoke(
    State(served): State<Arc<Served>>,
    Extension(visitor): Extension<Visitor>,
    Form(form): Form<Revoke>,
) -> Response {
    let said = match served.host.store().pairing_revoke(&form.platform, &form.user_id).await {
        Ok(true) => (true, format!("Revoked {} user {}.", form.platform, form.user_id)),
        Ok(false) => (false, format!("{} user {} is not paired.", form.platform, form.user_id)),
        Err(e) => (false, e.to_string()),
    };
    shown(&served, &visitor, Some(said)).await
}
