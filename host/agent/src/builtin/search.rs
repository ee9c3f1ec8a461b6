//! `session_search`: the model's way into past conversations (reference §2), three uses:
//! - search: `query` finds matching messages in other sessions, each with a snippet and the
//!   messages around it;
//! - scroll: `around_message_id` (with `window`) reads the conversation around a hit;
//! - browse: no query lists recent sessions (or, with `session_id`, the start of that session).

use serde_json::{Value, json};
use talaria_protocol::{Role, ToolAnnotations, ToolError, ToolSpec};
use talaria_store::{SearchQuery, Store, StoredMessage};

use crate::tools::one_line;

const DEFAULT_LIMIT: usize = 5;
const MAX_LIMIT: usize = 20;
const DEFAULT_WINDOW: usize = 2;
const MAX_WINDOW: usize = 10;
/// Characters kept of each context message.
const CONTEXT_CHARS: usize = 300;

pub fn spec() -> ToolSpec {
    ToolSpec {
        name: "session_search".into(),
        description: "Search and read the user's past conversations with you. With `query`: full-text search \
                      (words are ANDed; \"exact phrase\", OR, NOT, prefix* work) returning snippets with \
                      surrounding messages. With `around_message_id`: read the conversation around a hit. \
                      With neither: list recent sessions (or the start of `session_id`). Use it when the user \
                      refers to earlier work, or before redoing something that may have been done before."
            .into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
                "role_filter": {"type": "string", "enum": ["user", "assistant", "tool"]},
                "session_id": {"type": "string", "description": "Only this session."},
                "around_message_id": {"type": "integer", "description": "A message id from an earlier result."},
                "window": {"type": "integer", "minimum": 0, "maximum": MAX_WINDOW,
                           "description": "Messages before and after (default 2)."}
            },
            "additionalProperties": false
        }),
        plugin: super::PROVIDER.into(),
        annotations: ToolAnnotations { open_world: false, ..ToolAnnotations::fetches() },
    }
}

fn brief(m: &StoredMessage, chars: usize) -> Value {
    let mut v = json!({
        "id": m.id,
        "role": m.message.role().as_str(),
        "content": one_line(m.message.content(), chars),
    });
    let calls: Vec<String> =
        m.message.tool_calls().iter().map(|c| format!("{}({})", c.name, one_line(&c.arguments, 80))).collect();
    if !calls.is_empty() {
        v["tool_calls"] = json!(calls);
    }
    v
}

fn usize_arg(args: &Value, key: &str, default: usize, max: usize) -> usize {
    args.get(key).and_then(Value::as_u64).map_or(default, |n| usize::try_from(n).unwrap_or(max).min(max))
}

/// Run `session_search` for the session `current` (which search leaves out).
///
/// # Errors
/// Bad arguments or a store failure, as a tool error.
pub async fn call(store: &Store, current: &str, args: &Value) -> Result<Value, ToolError> {
    let fail = |e: talaria_store::Error| ToolError::Failed(e.to_string());
    let limit = usize_arg(args, "limit", DEFAULT_LIMIT, MAX_LIMIT).max(1);
    let window = usize_arg(args, "window", DEFAULT_WINDOW, MAX_WINDOW);
    let session = args.get("session_id").and_then(Value::as_str).filter(|s| !s.is_empty());
    if let Some(id) = args.get("around_message_id").and_then(Value::as_i64) {
        let around = store.messages_around(id, window).await.map_err(fail)?;
        if around.is_empty() {
            return Err(ToolError::InvalidArgs(format!("no message with id {id}; use an id from a search result")));
        }
        let session_id = around[0].session_id.clone();
        return Ok(json!({
            "session_id": session_id,
            "messages": around.iter().map(|m| brief(m, 2_000)).collect::<Vec<_>>(),
        }));
    }
    let query = args.get("query").and_then(Value::as_str).map(str::trim).filter(|q| !q.is_empty());
    let Some(query) = query else {
        if let Some(id) = session {
            let info = store.resolve_session(id).await.map_err(|e| ToolError::InvalidArgs(e.to_string()))?;
            let messages = store.messages(&info.id).await.map_err(fail)?;
            return Ok(json!({
                "session_id": info.id,
                "title": info.title,
                "started_at": info.started_at,
                "message_count": messages.len(),
                "messages": messages.iter().take(limit * 4).map(|m| brief(m, CONTEXT_CHARS)).collect::<Vec<_>>(),
            }));
        }
        let sessions = store.list_sessions(limit + 1, 0).await.map_err(fail)?;
        let list: Vec<Value> = sessions
            .iter()
            .filter(|s| s.id != current)
            .take(limit)
            .map(|s| {
                json!({
                    "session_id": s.id,
                    "title": s.title,
                    "started_at": s.started_at,
                    "messages": s.message_count,
                    "preview": s.preview,
                })
            })
            .collect();
        return Ok(json!({ "sessions": list }));
    };
    let role =
        match args.get("role_filter").and_then(Value::as_str) {
            None => None,
            Some(r) => Some(Role::parse(r).filter(|r| *r != Role::System).ok_or_else(|| {
                ToolError::InvalidArgs(format!("role_filter must be user, assistant or tool, not {r}"))
            })?),
        };
    let hits = store
        .search(&SearchQuery {
            text: query,
            limit,
            role,
            session_id: session,
            exclude_session: if session.is_some() { None } else { Some(current) },
        })
        .await
        .map_err(fail)?;
    let mut results = Vec::with_capacity(hits.len());
    for hit in &hits {
        let context = store.messages_around(hit.message_id, window).await.map_err(fail)?;
        results.push(json!({
            "session_id": hit.session_id,
            "session_title": hit.session_title,
            "message_id": hit.message_id,
            "role": hit.role.as_str(),
            "snippet": hit.snippet,
            "context": context.iter().map(|m| brief(m, CONTEXT_CHARS)).collect::<Vec<_>>(),
        }));
    }
    let mut out = json!({ "query": query, "count": results.len(), "results": results });
    if hits.is_empty() {
        out["hint"] =
            json!("nothing matched; try fewer or different words, a prefix like deploy*, or OR between alternatives");
    }
    Ok(out)
}
