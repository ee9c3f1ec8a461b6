//! The webhook adapter: a JSON delivery to one of the account's routes becomes a prompt for the
//! agent, written from the route's template; the reply goes back in the HTTP response, or is
//! POSTed to the route's `reply_url`.
//!
//! The host has checked the request's signature or token, its size and its delivery id before
//! this sees it. What the body says is a stranger's text: it goes to the agent as the user's
//! message and widens nothing.

use std::hash::{BuildHasher as _, Hasher as _};

use serde_json::{Value, json};
use talaria_sdk::adapter::{
    Account, Adapter, Chat, ChatType, Error, Event, Message, Outbound, Request, Response, TextFormat, WebhookResult,
};
use talaria_sdk::{config, http};

/// The prompt of a route that sets none.
const DEFAULT_PROMPT: &str = "A webhook delivery arrived on route {route}:\n\n{body}";
/// The longest `{body}` put in a prompt, in characters.
const MAX_BODY_CHARS: usize = 16 * 1024;
/// Headers senders name their deliveries with, in the order they are looked for.
const DELIVERY_HEADERS: &[&str] = &["x-github-delivery", "x-gitlab-event-uuid", "x-delivery-id", "x-request-id"];

struct Webhook;

/// The settings of `route`, from `[gateway.platforms.NAME.routes.ROUTE]`.
fn route_settings(route: &str) -> Option<Value> {
    config::get::<Value>("routes")?.get(route).cloned()
}

fn header<'a>(request: &'a Request, name: &str) -> Option<&'a str> {
    request.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

/// The value at `path` (`a.b.0.c`) in `value`, as text.
fn lookup(value: &Value, path: &str) -> Option<String> {
    let mut at = value;
    for part in path.split('.') {
        at = match at {
            Value::Object(map) => map.get(part)?,
            Value::Array(items) => items.get(part.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(match at {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    })
}

/// `template` with `{route}`, `{body}` and every `{dot.path}` filled in from `body`; a path the
/// body does not have becomes empty.
fn fill(template: &str, route: &str, body: &Value) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            out.push_str(&rest[open..]);
            return out;
        };
        let name = &after[..close];
        let valid = !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '.' || c == '-');
        if !valid {
            out.push('{');
            rest = after;
            continue;
        }
        match name {
            "route" => out.push_str(route),
            "body" => {
                let pretty = serde_json::to_string_pretty(body).unwrap_or_default();
                out.extend(pretty.chars().take(MAX_BODY_CHARS));
            }
            path => out.push_str(&lookup(body, path).unwrap_or_default()),
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    out
}

/// A fresh id for a delivery that names none.
fn fresh_id() -> String {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u8(0);
    format!("n{:016x}", hasher.finish())
}

impl Adapter for Webhook {
    fn connect() -> Result<Account, Error> {
        Ok(Account {
            bot_id: "webhook".into(),
            bot_name: "webhook".into(),
            format: TextFormat::Plain,
            max_length: 1_000_000,
            can_edit: false,
            edit_interval_ms: 1000,
            buttons: false,
            polls: false,
        })
    }

    fn handle_webhook(request: Request) -> Result<WebhookResult, Error> {
        let route = request.path.trim_start_matches('/').split('/').next().unwrap_or_default().to_string();
        let settings = route_settings(&route).unwrap_or_else(|| json!({}));
        if let (Some(name), Some(events)) = (settings["event_header"].as_str(), settings["events"].as_array()) {
            let event = header(&request, name).unwrap_or_default();
            if !events.iter().any(|e| e.as_str() == Some(event)) {
                let answer =
                    Response::json(202, &json!({ "ignored": format!("event `{event}` is not answered here") }));
                return Ok(WebhookResult { response: Some(answer), events: Vec::new() });
            }
        }
        let body: Value = serde_json::from_slice(&request.body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&request.body).into_owned()));
        let template = settings["prompt"].as_str().unwrap_or(DEFAULT_PROMPT);
        let text = fill(template, &route, &body);
        let id = DELIVERY_HEADERS.iter().find_map(|h| header(&request, h)).map_or_else(fresh_id, str::to_string);
        let chat_id =
            if settings["session"].as_str() == Some("route") { route.clone() } else { format!("{route}/{id}") };
        let message = Message {
            id: id.clone(),
            chat_id,
            chat_type: ChatType::Dm,
            chat_name: route.clone(),
            thread_id: None,
            sender_id: format!("route:{route}"),
            sender_name: route.clone(),
            text,
            mentions_bot: true,
            reply_to: None,
            attachments: Vec::new(),
        };
        let response =
            settings["reply_url"].as_str().map(|_| Response::json(202, &json!({ "accepted": true, "id": id })));
        Ok(WebhookResult { response, events: vec![Event::Message(message)] })
    }

    fn send(message: Outbound) -> Result<String, Error> {
        let route = message.chat_id.split('/').next().unwrap_or_default();
        let settings = route_settings(route).unwrap_or_else(|| json!({}));
        let Some(url) = settings["reply_url"].as_str() else {
            return Err(Error::permanent(format!(
                "route {route} has no reply_url: its replies go in the HTTP response"
            )));
        };
        let body = json!({ "text": message.plain, "route": route, "chat": message.chat_id });
        let request = http::Request::post(url).json(&body).map_err(|e| Error::permanent(e.to_string()))?;
        let response = request.send()?;
        if !response.is_success() {
            return Err(Error::from_status(response.status, format!("{url} answered {}", response.status), None));
        }
        Ok(fresh_id())
    }

    fn chat_info(chat_id: String) -> Result<Chat, Error> {
        let name = chat_id.split('/').next().unwrap_or_default().to_string();
        Ok(Chat { id: chat_id, name, chat_type: ChatType::Dm })
    }
}

talaria_sdk::export_adapter!(Webhook);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_take_fields_of_the_body() {
        let body = json!({ "action": "opened", "pull_request": { "title": "Fix it", "labels": [{ "name": "bug" }] } });
        assert_eq!(
            fill("{action}: {pull_request.title} [{pull_request.labels.0.name}] {missing.x} on {route}", "gh", &body),
            "opened: Fix it [bug]  on gh"
        );
        assert_eq!(fill("json {\"a\": 1} stays", "r", &body), "json {\"a\": 1} stays");
        assert!(fill("{body}", "r", &body).contains("\"action\": \"opened\""));
    }
}
