//! A plugin's stderr: kept in memory, per call, up to a cap; writes beyond it are dropped, never
//! refused, so a resident instance that writes a lot never fails for it.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// Shared handle to the buffer; clones write to the same one.
#[derive(Clone)]
pub(crate) struct StderrSink {
    cap: usize,
    buf: Arc<Mutex<Vec<u8>>>,
}

impl StderrSink {
    pub fn new(cap: usize) -> Self {
        Self { cap, buf: Arc::new(Mutex::new(Vec::new())) }
    }

    /// What was written since the last [`StderrSink::clear`], as text.
    pub fn contents(&self) -> String {
        String::from_utf8_lossy(&self.lock()).into_owned()
    }

    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.buf.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn keep(&self, bytes: &[u8]) {
        let mut buf = self.lock();
        let room = self.cap.saturating_sub(buf.len());
        buf.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }
}

impl IsTerminal for StderrSink {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for StderrSink {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for StderrSink {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.keep(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

impl Pollable for StderrSink {
    fn ready<'a, 'b>(&'a mut self) -> Pin<Box<dyn Future<Output = ()> + Send + 'b>>
    where
        'a: 'b,
        Self: 'b,
    {
        Box::pin(async {})
    }
}

impl tokio::io::AsyncWrite for StderrSink {
    fn poll_write(self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.keep(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_beyond_the_cap_are_dropped_and_clear_starts_over() {
        let mut sink = StderrSink::new(4);
        sink.write(Bytes::from_static(b"abc")).expect("write");
        sink.write(Bytes::from_static(b"def")).expect("write beyond the cap is accepted");
        assert_eq!(sink.contents(), "abcd");
        sink.clear();
        sink.write(Bytes::from_static(b"xy")).expect("write");
        assert_eq!(sink.contents(), "xy");
    }
}
