//! The plugins page: what is loaded, of which kind, and what each may touch, with each
//! capability granted or revoked from the page (in the CLI's words, through the same code as
//! `talaria plugins grant|revoke`); the skills and MCP servers conversations get.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::Response;
use axum::{Extension, Form};
use http::StatusCode;
use maud::{Markup, html};
use serde::Deserialize;
use talaria_core::grants::caps_text;
use talaria_core::market::install::consent::describe;
use talaria_core::runtime::{Capability, Runtime};

use super::{Visitor, page};
use crate::Served;

/// `GET /plugins`.
pub(crate) async fn list(State(served): State<Arc<Served>>, Extension(visitor): Extension<Visitor>) -> Response {
    shown(&served, &visitor, None)
}

/// The page, with `said` (what a change did, or why it could not) on top.
fn shown(served: &Served, visitor: &Visitor, said: Option<(bool, String)>) -> Response {
    let host = &served.host;
    let runtime = talaria_core::unattended_runtime(host.home(), host.workspace(), host.config(), false);
    let skills = talaria_core::agent::skills::discover(
        host.home(),
        host.workspace(),
        &talaria_core::project_skills(host.home(), host.workspace()),
    );
    let body = html! {
        h1 { "Plugins" }
        @if let Some((ok, text)) = &said {
            p class=(if *ok { "done" } else { "refused" }) role="status" { (text) }
        }
        @match &runtime {
            Ok(runtime) => (plugins(runtime, visitor)),
            Err(e) => p.refused { "The plugins cannot be read: " (e) },
        }
        h2 { "Skills" }
        @if skills.skills.is_empty() {
            p { "No skills." }
        } @else {
            ul.skills {
                @for skill in &skills.skills {
                    li { strong { (skill.name) } " " small { "(" (skill.source.name()) ")" } br; (skill.description) }
                }
            }
        }
        h2 { "MCP servers" }
        @if host.config().mcp_servers.is_empty() {
            p { "None configured (`talaria mcp add`)." }
        } @else {
            ul {
                @for (name, server) in &host.config().mcp_servers {
                    li {
                        strong { (name) } " "
                        code { (server.url.clone().or_else(|| server.command.clone()).unwrap_or_default()) }
                    }
                }
            }
        }
    };
    let mut response = page(visitor, "plugins", "Plugins", body);
    if said.as_ref().is_some_and(|(ok, _)| !ok) {
        *response.status_mut() = StatusCode::BAD_REQUEST;
    }
    response
}

fn plugins(runtime: &Runtime, visitor: &Visitor) -> Markup {
    html! {
        @for problem in runtime.problems() { p.refused { (problem.to_string()) } }
        @for p in runtime.plugins() {
            @let granted = &p.grants.caps;
            @let asked: Vec<&Capability> = p.manifest.requests.iter().filter(|c| !granted.contains(c)).collect();
            article.plugin id=(format!("plugin-{}", p.name())) {
                h2 { (p.name()) " " small { (p.manifest.version.to_string()) ", " (p.manifest.kinds.join(", ")) ", " (p.scope.label()) } }
                @if !p.enabled { p.hint { "Off: enable it with [plugins." (p.name()) "] enabled = true." } }
                @if !p.manifest.description.is_empty() { p { (p.manifest.description) } }
                @if granted.is_empty() && asked.is_empty() { p.hint { "It asks for nothing." } }
                ul.caps {
                    @for cap in granted {
                        li.granted {
                            code { (cap.to_string()) } " may " (describe(cap)) " "
                            (change_form(visitor, p.name(), cap, false))
                        }
                    }
                    @for cap in &asked {
                        li.asked {
                            code { (cap.to_string()) } " asks to " (describe(cap)) " — not granted "
                            (change_form(visitor, p.name(), cap, true))
                        }
                    }
                }
            }
        }
    }
}

fn change_form(visitor: &Visitor, name: &str, cap: &Capability, grant: bool) -> Markup {
    let action = format!("/plugins/{name}/{}", if grant { "grant" } else { "revoke" });
    html! {
        form.inline method="post" action=(action) {
            input type="hidden" name="csrf" value=(visitor.csrf);
            input type="hidden" name="capability" value=(cap.to_string());
            button type="submit" data-capability=(cap.to_string()) { (if grant { "Grant" } else { "Revoke" }) }
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct Change {
    capability: String,
}

/// `POST /plugins/{name}/grant`.
pub(crate) async fn grant(
    State(served): State<Arc<Served>>,
    Extension(visitor): Extension<Visitor>,
    Path(name): Path<String>,
    Form(form): Form<Change>,
) -> Response {
    change(&served, &visitor, &name, &form.capability, true)
}

/// `POST /plugins/{name}/revoke`.
pub(crate) async fn revoke(
    State(served): State<Arc<Served>>,
    Extension(visitor): Extension<Visitor>,
    Path(name): Path<String>,
    Form(form): Form<Change>,
) -> Response {
    change(&served, &visitor, &name, &form.capability, false)
}

fn change(served: &Served, visitor: &Visitor, name: &str, capability: &str, grant: bool) -> Response {
    let host = &served.host;
    let done =
        talaria_core::unattended_runtime(host.home(), host.workspace(), host.config(), false).and_then(|runtime| {
            talaria_core::grants::change(host.home(), &runtime, name, &[capability.to_string()], grant)
        });
    let said = match done {
        Ok(changed) => {
            let verb = if grant { "Granted" } else { "Revoked" };
            tracing::info!(plugin = name, capability, grant, "serve: a plugin's grant changed from the dashboard");
            (
                true,
                format!(
                    "{verb} {} {} '{name}' ({}); it now has: {}.",
                    caps_text(&changed.changed),
                    if grant { "to" } else { "from" },
                    changed.scope,
                    caps_text(&changed.now)
                ),
            )
        }
        Err(e) => (false, e.to_string()),
    };
    shown(served, visitor, Some(said))
}
