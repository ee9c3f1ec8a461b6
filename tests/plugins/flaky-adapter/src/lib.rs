//! A platform adapter that panics in its first `crashes` polls (setting `crashes`, default 2,
//! counted in kv so a new instance knows), then hands in one message from user 9 in chat
//! `room`, and POSTs what it is asked to send to `{base_url}/sent`.

use serde_json::json;
use talaria_sdk::adapter::{Account, Adapter, Chat, ChatType, Error, Event, Message, Outbound, TextFormat};
use talaria_sdk::{config, http, kv};

struct Flaky;

fn kv_error(e: kv::Error) -> Error {
    Error::permanent(e.to_string())
}

impl Adapter for Flaky {
    fn connect() -> Result<Account, Error> {
        Ok(Account {
            bot_id: "flaky-bot".into(),
            bot_name: "flaky".into(),
            format: TextFormat::Plain,
            max_length: 4000,
            can_edit: false,
            edit_interval_ms: 1000,
            buttons: false,
            polls: true,
        })
    }

    fn poll(timeout_ms: u32) -> Result<Vec<Event>, Error> {
        let crashes = config::get::<i64>("crashes").unwrap_or(2);
        if kv::increment("crashes", 0).map_err(kv_error)? < crashes {
            kv::increment("crashes", 1).map_err(kv_error)?;
            panic!("the flaky adapter crashes on purpose");
        }
        if kv::create("delivered", b"1").map_err(kv_error)? {
            return Ok(vec![Event::Message(Message {
                id: "f1".into(),
                chat_id: "room".into(),
                chat_type: ChatType::Dm,
                chat_name: String::new(),
                thread_id: None,
                sender_id: "9".into(),
                sender_name: "Nine".into(),
                text: "hello from flaky".into(),
                mentions_bot: false,
                reply_to: None,
                attachments: Vec::new(),
            })]);
        }
        std::thread::sleep(std::time::Duration::from_millis(u64::from(timeout_ms.min(200))));
        Ok(Vec::new())
    }

    fn send(message: Outbound) -> Result<String, Error> {
        let base = config::get_str("base_url").unwrap_or_default();
        let body = json!({ "chat": message.chat_id, "text": message.plain });
        let response = http::Request::post(format!("{base}/sent"))
            .json(&body)
            .map_err(|e| Error::permanent(e.to_string()))?
            .send()?;
        if !response.is_success() {
            return Err(Error::from_status(response.status, format!("HTTP {}", response.status), None));
        }
        Ok("s1".into())
    }

    fn chat_info(chat_id: String) -> Result<Chat, Error> {
        Ok(Chat { id: chat_id, name: String::new(), chat_type: ChatType::Dm })
    }
}

talaria_sdk::export_adapter!(Flaky);
