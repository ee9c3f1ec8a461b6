//! Bodies under a minimum rate ([`Paced`]), and the answer's body that keeps its connection
//! counted as working until written ([`Finish`]).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::table::Working;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A request body came slower than the listener allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the body came too slowly: {received} bytes in {secs} s, where {rate} bytes a second are needed after the first {grace} s",
    secs = elapsed.as_secs(),
    grace = grace.as_secs()
)]
pub struct TooSlow {
    pub received: u64,
    pub elapsed: Duration,
    pub rate: u64,
    pub grace: Duration,
}

/// Whether `error`, or any error beneath it, is [`TooSlow`].
pub fn too_slow(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut at = Some(error);
    while let Some(e) = at {
        if e.is::<TooSlow>() {
            return true;
        }
        at = e.source();
    }
    false
}

/// A request body that fails with [`TooSlow`] once, `grace` after it was first read, fewer
/// than `rate` bytes a second have come on average.
pub struct Paced<B> {
    inner: B,
    grace: Duration,
    rate: u64,
    received: u64,
    /// When reading began, and the deadline for the next bytes.
    clock: Option<(Instant, Pin<Box<Sleep>>)>,
}

impl<B> Paced<B> {
    pub fn new(inner: B, grace: Duration, rate: u64) -> Self {
        Self { inner, grace, rate: rate.max(1), received: 0, clock: None }
    }

    /// When the bytes received so far stop being enough.
    fn deadline(&self, start: Instant) -> Instant {
        start + self.grace + Duration::from_millis(self.received.saturating_mul(1000) / self.rate)
    }
}

impl<B> Body for Paced<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.clock.is_none() {
            let start = Instant::now();
            this.clock = Some((start, Box::pin(tokio::time::sleep_until(this.deadline(start)))));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.received += data.len() as u64;
                    if let Some((start, _)) = this.clock {
                        let deadline = this.deadline(start);
                        if let Some((_, sleep)) = this.clock.as_mut() {
                            sleep.as_mut().reset(deadline);
                        }
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                let Some((start, sleep)) = this.clock.as_mut() else { return Poll::Pending };
                if sleep.as_mut().poll(cx).is_ready() {
                    let slow = TooSlow {
                        received: this.received,
                        elapsed: start.elapsed(),
                        rate: this.rate,
                        grace: this.grace,
                    };
                    return Poll::Ready(Some(Err(Box::new(slow))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// An answer's body, holding its connection's [`Working`] mark until it is written.
pub(crate) struct Finish<B> {
    inner: B,
    _working: Working,
}

impl<B> Finish<B> {
    pub(crate) fn new(inner: B, working: Working) -> Self {
        Self { inner, _working: working }
    }
}

impl<B: Body + Unpin> Body for Finish<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
