//! A command's output as it arrives: the first and last halves of a cap kept, the middle
//! counted; and handed on while the command runs ([`Tap`]), for its front end to show.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncReadExt as _;

use super::{Terminals, lock};
use crate::approval::Caller;

/// How often output held by a [`Tap`] is handed on.
const TAP_EVERY: Duration = Duration::from_millis(100);
/// The most a [`Tap`] holds between two handings-on; older bytes give way (a front end shows
/// the last lines).
const TAP_HELD: usize = 16 * 1024;

/// Output of one tool call's command on its way to the session's front end
/// ([`Terminals::output`]), handed on every [`TAP_EVERY`] rather than per read.
pub(crate) struct Tap {
    to: Arc<dyn Terminals>,
    caller: Caller,
    held: Mutex<Vec<u8>>,
}

impl Tap {
    pub(crate) fn new(to: Arc<dyn Terminals>, caller: Caller) -> Self {
        Self { to, caller, held: Mutex::new(Vec::new()) }
    }

    fn push(&self, bytes: &[u8]) {
        let mut held = lock(&self.held);
        held.extend_from_slice(bytes);
        let excess = held.len().saturating_sub(TAP_HELD);
        held.drain(..excess);
    }

    /// Hand on what is held, up to a character cut in two (kept for the next time).
    fn flush(&self) {
        let text = {
            let mut held = lock(&self.held);
            let whole = match std::str::from_utf8(&held) {
                Ok(_) => held.len(),
                Err(e) if e.error_len().is_none() => e.valid_up_to(),
                Err(_) => held.len(),
            };
            if whole == 0 {
                return;
            }
            let bytes: Vec<u8> = held.drain(..whole).collect();
            String::from_utf8_lossy(&bytes).into_owned()
        };
        self.to.output(&self.caller, &text);
    }
}

/// Run `work` (reading a command's output), handing on what `tap` holds every [`TAP_EVERY`]
/// and once more at the end.
pub(crate) async fn ticking<F: Future>(work: F, tap: Option<&Tap>) -> F::Output {
    let Some(tap) = tap else { return work.await };
    tokio::pin!(work);
    let mut every = tokio::time::interval(TAP_EVERY);
    loop {
        tokio::select! {
            out = &mut work => {
                tap.flush();
                return out;
            }
            _ = every.tick() => tap.flush(),
        }
    }
}

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

    /// Read `reader` to its end, giving what arrives to `tap` as well.
    pub(crate) async fn fill<R: tokio::io::AsyncRead + Unpin>(self, reader: Option<R>, tap: Option<&Tap>) {
        let Some(mut reader) = reader else { return };
        let mut chunk = vec![0u8; 16 * 1024];
        while let Ok(n) = reader.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            if let Some(tap) = tap {
                tap.push(&chunk[..n]);
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
