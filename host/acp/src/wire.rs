//! JSON-RPC 2.0 over newline-delimited JSON: reading messages, writing answers, notifications
//! and our own requests to the client (and matching the client's answers to them).
//!
//! ACP does not use JSON-RPC batches: an array is answered with one "invalid request" error,
//! as the official SDKs do. A line that is not JSON is a parse error (`id: null`); the server
//! carries on with the next line either way.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use agent_client_protocol_schema::v1::{Error, ErrorCode, RequestId};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

/// One message read from the client.
#[derive(Debug)]
pub enum Incoming {
    Request {
        id: RequestId,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    /// The client's answer to one of our requests.
    Response {
        id: RequestId,
        result: Result<Value, Error>,
    },
    /// Not a message: answer this error (to `id`, or `null`).
    Invalid {
        id: RequestId,
        error: Error,
    },
}

/// Read one line as a message.
pub fn parse(line: &str) -> Incoming {
    let value: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => {
            return Incoming::Invalid { id: RequestId::Null, error: Error::parse_error().data(json!(e.to_string())) };
        }
    };
    let Value::Object(mut m) = value else {
        let why = if value.is_array() {
            "batches are not part of ACP: send one JSON-RPC message per line"
        } else {
            "a JSON-RPC message is a JSON object"
        };
        return Incoming::Invalid { id: RequestId::Null, error: Error::invalid_request().data(json!(why)) };
    };
    let id = match m.remove("id") {
        None => None,
        Some(raw) => match serde_json::from_value::<RequestId>(raw) {
            Ok(id) => Some(id),
            Err(_) => {
                return Incoming::Invalid {
                    id: RequestId::Null,
                    error: Error::invalid_request().data(json!("`id` must be a string, an integer or null")),
                };
            }
        },
    };
    if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Incoming::Invalid {
            id: id.unwrap_or(RequestId::Null),
            error: Error::invalid_request().data(json!("`jsonrpc` must be \"2.0\"")),
        };
    }
    let params = m.remove("params").unwrap_or(Value::Null);
    match (m.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) => Incoming::Request { id, method, params },
        (Some(Value::String(method)), None) => Incoming::Notification { method, params },
        (Some(_), id) => Incoming::Invalid {
            id: id.unwrap_or(RequestId::Null),
            error: Error::invalid_request().data(json!("`method` must be a string")),
        },
        (None, Some(id)) => {
            if let Some(error) = m.remove("error") {
                let error = serde_json::from_value(error)
                    .unwrap_or_else(|_| Error::internal_error().data(json!("the client sent a malformed error")));
                Incoming::Response { id, result: Err(error) }
            } else if let Some(result) = m.remove("result") {
                Incoming::Response { id, result: Ok(result) }
            } else {
                Incoming::Invalid {
                    id,
                    error: Error::invalid_request().data(json!("a message needs `method`, `result` or `error`")),
                }
            }
        }
        (None, None) => Incoming::Invalid {
            id: RequestId::Null,
            error: Error::invalid_request().data(json!("a message needs `method`, `result` or `error`")),
        },
    }
}

/// Where the client's answer to one of our requests goes.
type Answer = oneshot::Sender<Result<Value, Error>>;

/// What the client is sent: lines go through one writer task, so messages never interleave.
#[derive(Clone)]
pub struct Out {
    lines: mpsc::UnboundedSender<String>,
    next_id: Arc<AtomicI64>,
    pending: Arc<Mutex<HashMap<RequestId, Answer>>>,
}

impl Out {
    /// An `Out` and the task that writes its lines to `writer` (ends when every `Out` is gone).
    pub fn new<W: AsyncWrite + Unpin + Send + 'static>(mut writer: W) -> (Self, tokio::task::JoinHandle<()>) {
        let (lines, mut rx) = mpsc::unbounded_channel::<String>();
        let task = tokio::spawn(async move {
            while let Some(mut line) = rx.recv().await {
                line.push('\n');
                // Write whatever else is queued in the same flush.
                while let Ok(more) = rx.try_recv() {
                    line.push_str(&more);
                    line.push('\n');
                }
                if writer.write_all(line.as_bytes()).await.is_err() || writer.flush().await.is_err() {
                    tracing::debug!("the client's end of stdout is closed");
                    break;
                }
            }
        });
        (Self { lines, next_id: Arc::new(AtomicI64::new(0)), pending: Arc::default() }, task)
    }

    fn send(&self, message: &Value) {
        match serde_json::to_string(message) {
            Ok(line) => {
                let _ = self.lines.send(line);
            }
            Err(e) => tracing::error!("cannot serialize a message for the client: {e}"),
        }
    }

    /// Answer request `id`.
    pub fn respond<T: Serialize>(&self, id: RequestId, result: Result<T, Error>) {
        let message = match result.and_then(|r| serde_json::to_value(r).map_err(Error::into_internal_error)) {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
        };
        self.send(&message);
    }

    pub fn notify<T: Serialize>(&self, method: &str, params: &T) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Ask the client; the answer arrives on the returned channel (dropped: the connection
    /// ended first).
    pub fn request<T: Serialize>(&self, method: &str, params: &T) -> oneshot::Receiver<Result<Value, Error>> {
        let id = RequestId::Number(self.next_id.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        crate::lock(&self.pending).insert(id.clone(), tx);
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        rx
    }

    /// Hand the client's answer to whoever asked.
    pub fn answered(&self, id: &RequestId, result: Result<Value, Error>) {
        match crate::lock(&self.pending).remove(id) {
            Some(tx) => {
                let _ = tx.send(result);
            }
            None => tracing::debug!("an answer to request {id}, which was not asked or already answered"),
        }
    }
}

/// An error with `code` and a message saying what was wrong and how to fix it.
pub fn error(code: ErrorCode, message: impl Into<String>) -> Error {
    Error::new(code.into(), message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(i: &Incoming) -> i32 {
        match i {
            Incoming::Invalid { error, .. } => error.code.into(),
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn what_is_not_a_message_gets_the_json_rpc_error_for_it() {
        assert_eq!(code(&parse("{not json")), -32700);
        assert_eq!(code(&parse("[]")), -32600);
        assert_eq!(code(&parse(r#"[{"jsonrpc":"2.0","id":1,"method":"initialize"}]"#)), -32600);
        assert_eq!(code(&parse(r#"{"id":1,"method":"initialize"}"#)), -32600, "no jsonrpc");
        assert_eq!(code(&parse(r#"{"jsonrpc":"2.0","id":1,"method":7}"#)), -32600);
        assert_eq!(code(&parse(r#"{"jsonrpc":"2.0","id":{"a":1},"method":"x"}"#)), -32600);
        assert_eq!(code(&parse(r#"{"jsonrpc":"2.0","id":1}"#)), -32600);
        assert!(
            matches!(parse(r#"{"jsonrpc":"2.0","id":"a","method":"m","params":{}}"#), Incoming::Request { id: RequestId::Str(ref s), .. } if s == "a")
        );
        assert!(matches!(parse(r#"{"jsonrpc":"2.0","method":"m"}"#), Incoming::Notification { .. }));
        assert!(matches!(parse(r#"{"jsonrpc":"2.0","id":3,"result":{}}"#), Incoming::Response { result: Ok(_), .. }));
        assert!(matches!(
            parse(r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32603,"message":"x"}}"#),
            Incoming::Response { result: Err(_), .. }
        ));
    }

    /// Fuzzed: any line is a request, a notification, a response or the JSON-RPC error for it,
    /// never a panic.
    #[test]
    fn fuzz_json_rpc_lines() {
        talaria_fuzz::text("json-rpc", |line| {
            let _ = parse(line);
        });
    }
}
