//! talaria-store's integration tests: sessions and messages, search, two writers at once,
//! migrations from older files. The cases [`on_both_engines!`] names run on SQLite and on a real
//! PostgreSQL.

mod concurrency;
mod copy;
mod cron;
mod gateway;
mod indexing;
mod migrations;
mod search;
mod sessions;
mod turns;

use talaria_protocol::{Message, ToolCall};
use talaria_store::{NewSession, Store};

/// A store in a fresh temporary directory (kept alive by the returned guard).
fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().join("state.db")).expect("open");
    (dir, store)
}

/// A store on a fresh database of this test process's PostgreSQL.
async fn pg_store() -> Store {
    let url = talaria_test_support::postgres::Postgres::shared().database();
    Store::connect(&url).await.expect("connect to PostgreSQL")
}

/// Run each named case (an `async fn(&Store)`) on SQLite and on PostgreSQL: `sqlite::NAME` and
/// `postgres::NAME`.
#[macro_export]
macro_rules! on_both_engines {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $( #[tokio::test] async fn $name() { let (_dir, s) = $crate::store(); super::$name(&s).await; } )*
        }
        mod postgres {
            $( #[tokio::test] async fn $name() { let s = $crate::pg_store().await; super::$name(&s).await; } )*
        }
    };
}

fn new_session(id: &str) -> NewSession {
    NewSession {
        id: id.to_owned(),
        source: "cli".to_owned(),
        model: "test-model".to_owned(),
        provider: "test".to_owned(),
        system_prompt: format!("You are the assistant of session {id}."),
        parent_id: None,
        cwd: "/tmp/project".to_owned(),
    }
}

async fn create(store: &Store, id: &str) {
    store.create_session(&new_session(id)).await.expect("create session");
}

fn tool_call(id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall::new(id, name, arguments)
}

/// An assistant message that calls tools.
fn calls(content: &str, tool_calls: Vec<ToolCall>) -> Message {
    Message::Assistant { content: content.to_owned(), tool_calls, reasoning: None, extra: None }
}

/// Append one turn: the user's message and the assistant's answer.
async fn turn(store: &Store, session: &str, user: &str, answer: &str) -> Vec<i64> {
    store.append_messages(session, &[Message::user(user), Message::assistant(answer)]).await.expect("append")
}
