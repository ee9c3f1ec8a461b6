//! The sessions pages: the list (newest first, by source, a page at a time), full-text search
//! over every message, and one session read whole, with its tool calls, their results and the
//! diffs of its edits.

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use http::StatusCode;
use maud::{Markup, html};
use serde::Deserialize;
use talaria_core::store::search::{MATCH_END, MATCH_START};
use talaria_core::store::{ListQuery, SOURCES, SearchQuery, SessionInfo};
use talaria_protocol::Message;

use super::{Visitor, page, when};
use crate::Served;

/// Sessions on one page of the list.
pub(crate) const PAGE: usize = 50;

#[derive(Deserialize, Default)]
pub(crate) struct ListParams {
    /// Search for this.
    #[serde(default)]
    q: Option<String>,
    #[serde(default)]
    source: Option<String>,
    /// The page, from 1.
    #[serde(default)]
    page: Option<usize>,
}

/// `GET /sessions`: the list, or what a search found.
pub(crate) async fn list(
    State(served): State<Arc<Served>>,
    Extension(visitor): Extension<Visitor>,
    Query(params): Query<ListParams>,
) -> Response {
    let q = params.q.as_deref().map(str::trim).filter(|q| !q.is_empty());
    let source = params.source.as_deref().filter(|s| SOURCES.contains(s));
    let body = match q {
        Some(q) => search(&served, q).await,
        None => listed(&served, source, params.page.unwrap_or(1).max(1)).await,
    };
    let form = html! {
        form.search method="get" action="/sessions" role="search" {
            input type="search" name="q" value=[q] placeholder="Search every message" aria-label="Search every message";
            select name="source" aria-label="Source" {
                option value="" { "every source" }
                @for s in SOURCES {
                    option value=(s) selected[source == Some(*s)] { (s) }
                }
            }
            button type="submit" { "Search" }
        }
    };
    page(&visitor, "sessions", "Sessions", html! { h1 { "Sessions" } (form) (body) })
}

async fn listed(served: &Served, source: Option<&str>, page_no: usize) -> Markup {
    let query = ListQuery {
        limit: PAGE + 1,
        offset: (page_no - 1) * PAGE,
        include_children: false,
        source,
        parent_id: None,
        cwd: None,
    };
    let mut sessions = match served.host.store().list_sessions_with(&query).await {
        Ok(sessions) => sessions,
        Err(e) => return html! { p.refused { "The sessions cannot be read: " (e) } },
    };
    let more = sessions.len() > PAGE;
    sessions.truncate(PAGE);
    let link = |n: usize| match source {
        Some(s) => format!("/sessions?source={s}&page={n}"),
        None => format!("/sessions?page={n}"),
    };
    html! {
        @if sessions.is_empty() {
            p { "No sessions yet." }
        } @else {
            table.sessions {
                thead { tr { th { "Session" } th { "Source" } th.num { "Messages" } th.num { "Tokens" } th { "Updated" } } }
                tbody {
                    @for s in &sessions { (row(s)) }
                }
            }
        }
        nav.pages {
            @if page_no > 1 { a rel="prev" href=(link(page_no - 1)) { "Newer" } }
            @if more { a rel="next" href=(link(page_no + 1)) { "Older" } }
        }
    }
}

fn row(s: &SessionInfo) -> Markup {
    let name = s.title.clone().or_else(|| s.preview.clone()).unwrap_or_else(|| s.id.clone());
    html! {
        tr {
            td { a href=(format!("/sessions/{}", s.id)) { (name) } br; small.id { (s.id) } }
            td { (s.source) }
            td.num { (s.message_count) }
            td.num { (s.usage.input_tokens + s.usage.output_tokens) }
            td { (when(s.updated_at)) }
        }
    }
}

async fn search(served: &Served, q: &str) -> Markup {
    let query = SearchQuery { limit: 50, ..SearchQuery::new(q) };
    let hits = match served.host.store().search(&query).await {
        Ok(hits) => hits,
        Err(e) => return html! { p.refused { "The search failed: " (e) } },
    };
    html! {
        p { (hits.len()) " messages match " q { (q) } "." }
        ol.hits {
            @for hit in &hits {
                li {
                    a href=(format!("/sessions/{}#m{}", hit.session_id, hit.message_id)) {
                        (hit.session_title.as_deref().unwrap_or(&hit.session_id))
                    }
                    " " small { (hit.role.as_str()) ", " (when(hit.created_at)) }
                    p.snippet { (snippet(&hit.snippet)) }
                }
            }
        }
    }
}

/// A search hit's snippet, its matches marked (every piece escaped).
fn snippet(text: &str) -> Markup {
    let mut pieces: Vec<(bool, &str)> = Vec::new();
    let mut rest = text;
    while let Some((before, after)) = rest.split_once(MATCH_START) {
        pieces.push((false, before));
        match after.split_once(MATCH_END) {
            Some((matched, after)) => {
                pieces.push((true, matched));
                rest = after;
            }
            None => {
                pieces.push((true, after));
                rest = "";
            }
        }
    }
    pieces.push((false, rest));
    html! {
        @for (marked, piece) in pieces {
            @if marked { mark { (piece) } } @else { (piece) }
        }
    }
}

/// `GET /sessions/{id}`: one session, whole.
pub(crate) async fn show(
    State(served): State<Arc<Served>>,
    Extension(visitor): Extension<Visitor>,
    Path(id): Path<String>,
) -> Response {
    let store = served.host.store();
    let info = match store.session(&id).await {
        Ok(Some(info)) => info,
        Ok(None) => {
            let body = html! { h1 { "No such session" } p { "There is no session " code { (id) } "." } };
            let mut response = page(&visitor, "sessions", "No such session", body);
            *response.status_mut() = StatusCode::NOT_FOUND;
            return response;
        }
        Err(e) => {
            return page(&visitor, "sessions", "Session", html! { p.refused { "The session cannot be read: " (e) } });
        }
    };
    let messages = match store.messages(&id).await {
        Ok(messages) => messages,
        Err(e) => {
            return page(&visitor, "sessions", "Session", html! { p.refused { "The session cannot be read: " (e) } });
        }
    };
    let title = info.title.clone().unwrap_or_else(|| info.id.clone());
    let body = html! {
        h1 { (title) }
        form method="post" action="/chat/new" {
            input type="hidden" name="csrf" value=(visitor.csrf);
            input type="hidden" name="resume" value=(info.id);
            button type="submit" { "Continue in a chat" }
        }
        dl.facts {
            dt { "Id" } dd { code { (info.id) } }
            dt { "Source" } dd { (info.source) }
            dt { "Model" } dd { (info.model) " (" (info.provider) ")" }
            dt { "Started" } dd { (when(info.started_at)) }
            dt { "Tokens" } dd { (info.usage.input_tokens) " in, " (info.usage.output_tokens) " out" }
            dt { "Tool calls" } dd { (info.tool_call_count) }
        }
        @for stored in &messages {
            (message(stored.id, &stored.message))
        }
    };
    page(&visitor, "sessions", &title, body)
}

pub(crate) fn message(id: i64, message: &Message) -> Markup {
    let anchor = format!("m{id}");
    match message {
        Message::System { .. } => html! {},
        Message::User { content, images } => html! {
            article.user id=(anchor) {
                h2 { "User" }
                div.text { (content) }
                @if !images.is_empty() { p.hint { (images.len()) " image(s)" } }
            }
        },
        Message::Assistant { content, tool_calls, .. } => html! {
            article.assistant id=(anchor) {
                h2 { "Assistant" }
                @if !content.is_empty() { div.text { (content) } }
                @for call in tool_calls {
                    details.call open {
                        summary { "Tool call: " code { (call.name) } }
                        pre { (pretty(&call.arguments)) }
                    }
                }
            }
        },
        Message::Tool { name, content, .. } => html! {
            details.result id=(anchor) {
                summary { "Result of " code { (name) } }
                (result(content))
            }
        },
    }
}

/// Arguments as indented JSON, or as they came when they are not JSON.
fn pretty(arguments: &str) -> String {
    serde_json::from_str::<serde_json::Value>(arguments)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| arguments.to_string())
}

/// A tool's result: a unified diff with its lines marked, or the text.
fn result(content: &str) -> Markup {
    let is_diff = content.lines().any(|l| l.starts_with("@@ "));
    if !is_diff {
        return html! { pre { (content) } };
    }
    html! {
        pre.diff {
            @for line in content.lines() {
                @let class = if line.starts_with("+++") || line.starts_with("---") {
                    "file"
                } else if line.starts_with('+') {
                    "add"
                } else if line.starts_with('-') {
                    "del"
                } else if line.starts_with("@@") {
                    "hunk"
                } else {
                    "same"
                };
                span class=(class) { (line) } "\n"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snippet_s_matches_are_marked_and_everything_is_escaped() {
        let shown = snippet("a <b> >>>zebra<<< & >>>x").into_string();
        assert_eq!(shown, "a &lt;b&gt; <mark>zebra</mark> &amp; <mark>x</mark>");
    }

    #[test]
    fn a_diff_s_lines_are_marked_and_a_tool_s_markup_is_shown_not_run() {
        let shown = result("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+<script>new</script>").into_string();
        assert!(shown.contains(r#"<span class="del">-old</span>"#), "{shown}");
        assert!(shown.contains(r#"<span class="add">+&lt;script&gt;new&lt;/script&gt;</span>"#), "{shown}");
        let shown = message(7, &Message::user("<img src=x onerror=alert(1)>")).into_string();
        assert!(shown.contains("&lt;img src=x onerror=alert(1)&gt;"), "{shown}");
        assert!(!shown.contains("<img"), "{shown}");
    }
}
