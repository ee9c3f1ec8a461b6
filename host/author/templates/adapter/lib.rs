//! A talaria platform adapter (API 0.3.0).
//!
//! The host keeps one instance per configured account and drives it: `connect` once, `poll` in
//! a loop when the account polls, `handle_webhook` for requests to the account's routes, `send`
//! and `edit` for replies. This one serves a webhook route: each POSTed JSON message goes to the
//! agent, and the reply goes back in the HTTP response. `wit/plugin.wit` is the contract;
//! `wit_bindgen::generate!` turns the `adapter` export into the `Guest` trait below.

// `generate_all`: the host interfaces come from another package (the 0.2.0 one in wit/deps).
wit_bindgen::generate!({ path: "wit", world: "platform-plugin", generate_all });

use exports::talaria::plugin0_3_0::adapter::{
    Account, AdapterError, Chat, ChatType, Event, Guest, Message, Outbound, Request, Response, TextFormat, WebhookResult,
};
use serde::Deserialize;
use talaria::plugin0_2_0::log::{Level, log};

/// What a POST to the route carries.
#[derive(Deserialize)]
struct Posted {
    chat: String,
    user: String,
    #[serde(default)]
    name: String,
    text: String,
    /// The sender's id for this message, if it has one (a message seen twice is answered once).
    #[serde(default)]
    id: Option<String>,
}

fn json_response(status: u16, body: serde_json::Value) -> Response {
    Response {
        status,
        headers: vec![("content-type".into(), "application/json".into())],
        body: body.to_string().into_bytes(),
    }
}

struct Adapter;

impl Guest for Adapter {
    fn connect() -> Result<Account, AdapterError> {
        // A real platform: log in here (its token in a header as "Bearer {{secret:PLATFORM_TOKEN}}")
        // and say who the bot is.
        Ok(Account {
            bot_id: "{{name}}".into(),
            bot_name: "{{name}}".into(),
            format: TextFormat::Plain,
            max_length: 4000,
            can_edit: false,
            edit_interval_ms: 1000,
            buttons: false,
            polls: false,
        })
    }

    fn poll(_timeout_ms: u32) -> Result<Vec<Event>, AdapterError> {
        // A polling platform: wait up to `timeout_ms` for its new messages and return them.
        Ok(Vec::new())
    }

    fn handle_webhook(request: Request) -> Result<WebhookResult, AdapterError> {
        let posted: Posted = match serde_json::from_slice(&request.body) {
            Ok(p) => p,
            Err(e) => {
                let answer = json_response(400, serde_json::json!({ "error": format!("expected {{\"chat\", \"user\", \"text\"}}: {e}") }));
                return Ok(WebhookResult { response: Some(answer), events: Vec::new() });
            }
        };
        log(Level::Info, &format!("a message from {} in {}", posted.user, posted.chat));
        let id = posted.id.unwrap_or_else(|| format!("{}-{}", posted.chat, request.body.len()));
        let message = Message {
            id,
            chat_id: posted.chat,
            chat_type: ChatType::Dm,
            chat_name: String::new(),
            thread_id: None,
            sender_id: posted.user,
            sender_name: posted.name,
            text: posted.text,
            mentions_bot: true,
            reply_to: None,
            attachments: Vec::new(),
        };
        // No response: the host answers the request with the agent's reply.
        Ok(WebhookResult { response: None, events: vec![Event::Message(message)] })
    }

    fn send(_message: Outbound) -> Result<String, AdapterError> {
        // A real platform: post the message to its API and return the new message's id.
        Err(AdapterError::Permanent("this adapter answers in the HTTP response only".into()))
    }

    fn edit(_message_id: String, _message: Outbound) -> Result<(), AdapterError> {
        Err(AdapterError::Permanent("this adapter cannot edit messages".into()))
    }

    fn typing(_chat_id: String, _thread_id: Option<String>) -> Result<(), AdapterError> {
        Ok(())
    }

    fn chat_info(chat_id: String) -> Result<Chat, AdapterError> {
        Ok(Chat { name: chat_id.clone(), id: chat_id, chat_type: ChatType::Dm })
    }
}

export!(Adapter);
