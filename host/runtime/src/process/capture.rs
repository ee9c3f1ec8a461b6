//! A command's output as it arrives: the first and last halves of a cap kept, the middle
//! counted.

use std::sync::{Arc, Mutex};

use tokio::io::AsyncReadExt as _;

use super::lock;

/// A stream's output, keeping the first and last `cap / 2` bytes.
#[derive(Clone)]
pub(crate) struct Capture(Arc<Mutex<CaptureBuf>>);

struct CaptureBuf {
    half: usize,
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    total: usize,
}

impl Capture {
    pub(crate) fn new(cap: usize) -> Self {
        let buf = CaptureBuf { half: cap / 2, head: Vec::new(), tail: std::collections::VecDeque::new(), total: 0 };
        Self(Arc::new(Mutex::new(buf)))
    }

    /// Read `reader` to its end.
    pub(crate) async fn fill<R: tokio::io::AsyncRead + Unpin>(self, reader: Option<R>) {
        let Some(mut reader) = reader else { return };
        let mut chunk = vec![0u8; 16 * 1024];
        while let Ok(n) = reader.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            let mut b = lock(&self.0);
            b.total += n;
            let mut rest = &chunk[..n];
            if b.head.len() < b.half {
                let take = rest.len().min(b.half - b.head.len());
                b.head.extend_from_slice(&rest[..take]);
                rest = &rest[take..];
            }
            b.tail.extend(rest.iter().copied());
            let excess = b.tail.len().saturating_sub(b.half);
            b.tail.drain(..excess);
        }
    }

    /// The text so far, and whether anything was cut.
    pub(crate) fn text(&self) -> (String, bool) {
        let mut b = lock(&self.0);
        let kept = b.head.len() + b.tail.len();
        let cut = b.total > kept;
        let mut text = String::from_utf8_lossy(&b.head).into_owned();
        if cut {
            text.push_str(&format!("\n[... {} bytes omitted ...]\n", b.total - kept));
        }
        text.push_str(&String::from_utf8_lossy(b.tail.make_contiguous()));
        (text, cut)
    }
}
