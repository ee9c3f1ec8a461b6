//! The `talaria:plugin/websocket@0.3.0` import: a plugin's WebSockets, each a resource in its
//! instance's table, opened and used through the checks of [`crate::net::websocket`].

use std::time::Duration;

use wasmtime::component::Resource;

use crate::host::HostState;
use crate::host::api::since_v0_3_0::talaria::plugin0_3_0::websocket::{self as wit, Frame, WsError};
use crate::net::websocket::{Frame as NetFrame, Socket, WsFailure};

/// Most WebSockets one instance may hold open.
const MAX_OPEN: usize = 8;
/// The longest one `receive` waits: a call must leave time to answer within its deadline.
const MAX_WAIT: Duration = Duration::from_secs(30);

/// A plugin's open WebSocket.
pub struct Connection(Socket);

fn error(failure: WsFailure) -> WsError {
    match failure {
        WsFailure::Denied(reason) => WsError::Denied(reason),
        WsFailure::Failed(reason) => WsError::Failed(reason),
        WsFailure::Closed => WsError::Closed,
    }
}

impl HostState {
    fn socket(&mut self, connection: &Resource<Connection>) -> Result<&mut Socket, WsError> {
        self.table.get_mut(connection).map(|c| &mut c.0).map_err(|_| WsError::Closed)
    }
}

impl wit::Host for HostState {}

impl wit::HostConnection for HostState {
    async fn open(&mut self, url: String, headers: Vec<(String, String)>) -> Result<Resource<Connection>, WsError> {
        if self.sockets >= MAX_OPEN {
            return Err(WsError::Denied(format!(
                "plugin '{}' already has {MAX_OPEN} WebSockets open; close one first",
                self.env.name
            )));
        }
        let socket = self.hooks.open_websocket(&url, headers).await.map_err(error)?;
        let connection = self.table.push(Connection(socket)).map_err(|e| WsError::Failed(e.to_string()))?;
        self.sockets += 1;
        Ok(connection)
    }

    async fn send_text(&mut self, connection: Resource<Connection>, text: String) -> Result<(), WsError> {
        let Connection(socket) = self.table.get_mut(&connection).map_err(|_| WsError::Closed)?;
        socket.send_text(&self.hooks, text).await.map_err(error)
    }

    async fn receive(&mut self, connection: Resource<Connection>, timeout_ms: u32) -> Result<Option<Frame>, WsError> {
        let wait = Duration::from_millis(timeout_ms.into()).min(MAX_WAIT);
        let frame = self.socket(&connection)?.receive(wait).await.map_err(error)?;
        Ok(frame.map(|f| match f {
            NetFrame::Text(text) => Frame::Text(text),
            NetFrame::Binary(bytes) => Frame::Binary(bytes),
            NetFrame::Close(code, reason) => Frame::Close((code, reason)),
        }))
    }

    async fn close(&mut self, connection: Resource<Connection>, code: u16, reason: String) {
        if let Ok(socket) = self.socket(&connection) {
            socket.close(code, reason).await;
        }
    }

    async fn drop(&mut self, connection: Resource<Connection>) -> wasmtime::Result<()> {
        self.table.delete(connection)?;
        self.sockets = self.sockets.saturating_sub(1);
        Ok(())
    }
}
