//! The HTTP side: accept loop, request recording, turning a [`Step`] into a response.
//!
//! Every request is recorded before anything else happens. Model routes then take the next step
//! (one lock, so concurrent requests get consecutive steps). Streamed bodies go out one event per
//! write, the first event split in two, so the client sees deltas in separate reads and at least
//! one event broken across reads.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::script::{Auto, HttpError, Reply, Script, Step, Usage};
use crate::wire::{Answer, Call, Wire};
use crate::{Mode, Recorded, strict};

/// State shared by the server thread and the [`MockLlm`](crate::MockLlm) handle.
#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<State>,
    mode: Mode,
    pub(crate) disconnects: AtomicUsize,
    /// Tool calls made so far, for ids.
    calls: AtomicU64,
}

#[derive(Debug)]
struct State {
    steps: VecDeque<Step>,
    /// The last step taken, kept only when the script repeats it.
    last: Option<Step>,
    repeat: bool,
    auto: Option<Auto>,
    requests: Vec<Recorded>,
}

impl Shared {
    pub(crate) fn new(script: Script, mode: Mode) -> Self {
        let state = State {
            steps: script.steps.into(),
            last: None,
            repeat: script.repeat,
            auto: script.auto,
            requests: Vec::new(),
        };
        Self { state: Mutex::new(state), mode, disconnects: AtomicUsize::new(0), calls: AtomicU64::new(0) }
    }

    /// The state, even if a panicking thread poisoned the lock (it holds plain data).
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn requests(&self) -> Vec<Recorded> {
        self.lock().requests.clone()
    }

    pub(crate) fn forget_requests(&self) {
        let mut state = self.lock();
        state.requests = Vec::new();
    }

    pub(crate) fn remaining(&self) -> usize {
        self.lock().steps.len()
    }
}

impl Shared {
    /// Record `request`, then take the step for it, or answer at once when it is not a model
    /// request (unknown route, not POST, not a JSON object).
    fn take_step(
        &self,
        request: Recorded,
        ask: Option<Ask>,
        method: &Method,
    ) -> Result<(Option<Step>, Ask), Box<Response<MockBody>>> {
        let mut state = self.lock();
        let Some(mut ask) = ask else {
            state.requests.push(request);
            return Err(Box::new(plain_error(StatusCode::NOT_FOUND, "no such route on the mock LLM")));
        };
        if method != Method::POST || !request.body.is_object() {
            state.requests.push(request);
            let error = if method != Method::POST {
                HttpError::new(405).message("use POST")
            } else {
                HttpError::new(400).message("the request body is not a JSON object")
            };
            return Err(Box::new(error_response(ask.wire, &error)));
        }
        if self.mode == Mode::Strict
            && ask.wire == Wire::ChatCompletions
            && let Some(refusal) = strict::refusal(&request.body)
        {
            // Refused before the model runs: no step is used.
            state.requests.push(request);
            return Err(Box::new(json_response(StatusCode::INTERNAL_SERVER_ERROR, &refusal)));
        }
        let step = state.record_and_step(request, ask.wire);
        ask.id = state.requests.len();
        Ok((step, ask))
    }
}

impl State {
    /// Record a model request and take its step, or `None` when the script is exhausted.
    fn record_and_step(&mut self, request: Recorded, wire: Wire) -> Option<Step> {
        self.requests.push(request);
        let Self { steps, last, repeat, auto, requests } = self;
        if let Some(step) = steps.pop_front() {
            if *repeat {
                *last = Some(step.clone());
            }
            return Some(step);
        }
        if *repeat && let Some(last) = last {
            return Some(last.clone());
        }
        let body = &requests.last()?.body;
        auto.as_ref().map(|auto| Step::Reply(crate::auto::answer(wire, body, auto)))
    }
}

/// Accept connections until `shutdown` fires (or its sender is dropped).
pub(crate) async fn serve(listener: TcpListener, shared: Arc<Shared>, mut shutdown: oneshot::Receiver<()>) {
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((stream, _)) = accepted else {
            // Out of file descriptors or similar: do not spin.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        // Without it small event writes wait for the client's delayed ACK.
        let _ = stream.set_nodelay(true);
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let service = service_fn(move |request| handle(Arc::clone(&shared), request));
            // A client going away mid-response is an error here and expected (Stall, Cut).
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

/// What a model request asked for, beyond its messages.
struct Ask {
    wire: Wire,
    id: usize,
    model: String,
    stream: bool,
    include_usage: bool,
    body_len: usize,
    /// Strict mode: the request offers tools the model never sees (no `tool_choice`).
    tools_hidden: bool,
}

async fn handle(shared: Arc<Shared>, request: Request<Incoming>) -> Result<Response<MockBody>, Infallible> {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_owned();
    if parts.method == Method::GET && matches!(path.as_str(), "/v1/models" | "/models") {
        return Ok(json_response(
            StatusCode::OK,
            &json!({"object": "list", "data": [{"id": "mock", "object": "model", "owned_by": "talaria"}]}),
        ));
    }
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => return Ok(plain_error(StatusCode::BAD_REQUEST, &format!("cannot read the request body: {e}"))),
    };
    let body = serde_json::from_slice::<Value>(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    let headers = parts
        .headers
        .iter()
        .map(|(name, value)| (name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
        .collect();
    let wire = Wire::from_path(&path);
    let ask = wire.map(|wire| Ask {
        wire,
        id: 0,
        model: body.get("model").and_then(Value::as_str).unwrap_or("mock").to_owned(),
        stream: body.get("stream").and_then(Value::as_bool).unwrap_or(false),
        include_usage: body.pointer("/stream_options/include_usage").and_then(Value::as_bool).unwrap_or(false),
        body_len: bytes.len(),
        tools_hidden: wire == Wire::ChatCompletions && strict::tools_hidden(&body),
    });
    let request = Recorded { path, headers, body };
    let (step, ask) = match shared.take_step(request, ask, &parts.method) {
        Ok(taken) => taken,
        Err(response) => return Ok(*response),
    };
    let Some(mut step) = step else {
        return Ok(error_response(ask.wire, &HttpError::new(500).message("mock script exhausted")));
    };
    while let Step::Delay { ms, then } = step {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        step = *then;
    }
    if shared.mode == Mode::Strict
        && ask.tools_hidden
        && let Step::Reply(reply) = &step
        && !reply.tool_calls.is_empty()
    {
        step = Step::Reply(Reply::text(strict::HIDDEN_TOOLS));
    }
    Ok(match step {
        Step::Reply(reply) => reply_response(&shared, &ask, &reply),
        Step::Hang => {
            let _guard = StallGuard(Arc::clone(&shared));
            match std::future::pending::<Infallible>().await {}
        }
        Step::EmptyStream { pings } => {
            let frames = (0..pings).map(|_| Bytes::from_static(b": ping\n\n")).collect();
            let mut response = with_type(Response::new(MockBody::new(frames, Tail::End)), "text/event-stream");
            response.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            response
        }
        Step::Error(error) => error_response(ask.wire, &error),
        Step::Stall { text } if ask.stream => {
            let guard = StallGuard(Arc::clone(&shared));
            partial_stream(&shared, &ask, text, Tail::Stall(guard))
        }
        Step::Stall { .. } => {
            let _guard = StallGuard(Arc::clone(&shared));
            match std::future::pending::<Infallible>().await {}
        }
        Step::Cut { text } if ask.stream => partial_stream(&shared, &ask, text, Tail::Cut),
        Step::Cut { text } => {
            let reply = Reply::text(text);
            let answer = answer(&shared, &ask, &reply);
            let full = ask.wire.json(&answer).to_string();
            let (half, _) = halves(&full);
            let body = MockBody::new(VecDeque::from([Bytes::copy_from_slice(half.as_bytes())]), Tail::Cut);
            with_type(Response::new(body), "application/json")
        }
        Step::Delay { .. } => plain_error(StatusCode::INTERNAL_SERVER_ERROR, "delay left unresolved"),
    })
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn answer<'a>(shared: &Shared, ask: &'a Ask, reply: &'a Reply) -> Answer<'a> {
    let calls: Vec<Call> = reply
        .tool_calls
        .iter()
        .enumerate()
        .map(|(i, call)| Call {
            n: shared.calls.fetch_add(1, Ordering::Relaxed) + 1,
            // llama.cpp's server numbers the calls of each answer from 0.
            id: call.id.clone().or_else(|| {
                (shared.mode == Mode::Strict && ask.wire == Wire::ChatCompletions).then(|| format!("call_{i}"))
            }),
            name: call.name.clone(),
            arguments: call.arguments_text(),
        })
        .collect();
    let usage = reply.usage.unwrap_or_else(|| {
        let generated = reply.text.len()
            + reply.reasoning.as_ref().map_or(0, String::len)
            + calls.iter().map(|c| c.name.len() + c.arguments.len()).sum::<usize>();
        Usage { input: (ask.body_len as u64 / 4).max(1), output: (generated as u64 / 4).max(1) }
    });
    Answer {
        id: ask.id,
        created: now(),
        model: &ask.model,
        text: &reply.text,
        reasoning: reply.reasoning.as_deref(),
        calls,
        usage,
        truncated: reply.truncated,
    }
}

fn reply_response(shared: &Shared, ask: &Ask, reply: &Reply) -> Response<MockBody> {
    let answer = answer(shared, ask, reply);
    if ask.stream {
        let sse = ask.wire.sse(&answer, ask.include_usage, shared.mode);
        sse_response(sse.events, Tail::End, reply.pace_ms.map(Duration::from_millis))
    } else {
        json_response(StatusCode::OK, &ask.wire.json(&answer))
    }
}

/// The events of a reply with only `text`, up to its last text delta.
fn partial_stream(shared: &Shared, ask: &Ask, text: String, tail: Tail) -> Response<MockBody> {
    let reply = Reply::text(text);
    let answer = answer(shared, ask, &reply);
    let mut sse = ask.wire.sse(&answer, ask.include_usage, shared.mode);
    sse.events.truncate(sse.partial);
    sse_response(sse.events, tail, None)
}

fn sse_response(events: Vec<String>, tail: Tail, pace: Option<Duration>) -> Response<MockBody> {
    let mut frames = VecDeque::with_capacity(events.len() + 1);
    let mut events = events.into_iter();
    if let Some(first) = events.next() {
        let (head, tail) = halves(&first);
        frames.push_back(Bytes::copy_from_slice(head.as_bytes()));
        frames.push_back(Bytes::copy_from_slice(tail.as_bytes()));
    }
    frames.extend(events.map(Bytes::from));
    let mut body = MockBody::new(frames, tail);
    body.pace = pace;
    let mut response = with_type(Response::new(body), "text/event-stream");
    response.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// `text` split near its middle, on a character boundary.
fn halves(text: &str) -> (&str, &str) {
    let mut mid = text.len() / 2;
    while !text.is_char_boundary(mid) {
        mid -= 1;
    }
    text.split_at(mid)
}

fn with_type(mut response: Response<MockBody>, content_type: &'static str) -> Response<MockBody> {
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn json_response(status: StatusCode, body: &Value) -> Response<MockBody> {
    let mut response = with_type(Response::new(MockBody::full(body.to_string())), "application/json");
    *response.status_mut() = status;
    response
}

fn plain_error(status: StatusCode, message: &str) -> Response<MockBody> {
    let mut response = with_type(Response::new(MockBody::full(message.to_owned())), "text/plain; charset=utf-8");
    *response.status_mut() = status;
    response
}

fn error_response(wire: Wire, error: &HttpError) -> Response<MockBody> {
    let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = match &error.body {
        Some(raw) => {
            let kind = if serde_json::from_str::<Value>(raw).is_ok() { "application/json" } else { "text/html" };
            let mut response = Response::new(MockBody::full(raw.clone()));
            let kind = error
                .content_type
                .as_deref()
                .and_then(|t| HeaderValue::from_str(t).ok())
                .unwrap_or(HeaderValue::from_static(kind));
            response.headers_mut().insert(CONTENT_TYPE, kind);
            *response.status_mut() = status;
            response
        }
        None => {
            let message = error.message.clone().unwrap_or_else(|| format!("mock error {}", error.status));
            json_response(status, &wire.error_body(error.status, &message))
        }
    };
    if let Some(secs) = error.retry_after {
        response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

/// Counts a disconnect when the stalled response (or the future waiting in its place) is dropped,
/// which hyper does when the client closes the connection.
#[derive(Debug)]
struct StallGuard(Arc<Shared>);

impl Drop for StallGuard {
    fn drop(&mut self) {
        self.0.disconnects.fetch_add(1, Ordering::SeqCst);
    }
}

/// How a body ends once its frames are sent.
#[derive(Debug)]
enum Tail {
    End,
    /// Never: wait until hyper drops the body.
    Stall(#[allow(dead_code, reason = "held for its Drop")] StallGuard),
    /// An error, on which hyper closes the connection without finishing the message.
    Cut,
}

/// A response body: frames handed out one per write, then the [`Tail`].
#[derive(Debug)]
pub(crate) struct MockBody {
    frames: VecDeque<Bytes>,
    tail: Tail,
    /// A frame was just sent; give hyper a chance to write it before the next one.
    paused: bool,
    /// Time between frames (a model generating at a given speed), and the wait under way.
    pace: Option<Duration>,
    wait: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl MockBody {
    fn new(frames: VecDeque<Bytes>, tail: Tail) -> Self {
        Self { frames, tail, paused: false, pace: None, wait: None }
    }

    fn full(body: String) -> Self {
        Self::new(VecDeque::from([Bytes::from(body)]), Tail::End)
    }
}

impl Body for MockBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = self.get_mut();
        let ended = this.frames.is_empty() && matches!(this.tail, Tail::End);
        if this.paused
            && !ended
            && let Some(pace) = this.pace
        {
            let wait = this.wait.get_or_insert_with(|| Box::pin(tokio::time::sleep(pace)));
            if wait.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.wait = None;
            this.paused = false;
        }
        if this.paused && !ended {
            // Returning Pending makes hyper flush what it has (before a cut, too); wake at once
            // to continue.
            this.paused = false;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        if let Some(frame) = this.frames.pop_front() {
            this.paused = true;
            return Poll::Ready(Some(Ok(Frame::data(frame))));
        }
        match this.tail {
            Tail::End => Poll::Ready(None),
            Tail::Stall(_) => Poll::Pending,
            Tail::Cut => {
                Poll::Ready(Some(Err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "mock: cut"))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.frames.is_empty() && matches!(self.tail, Tail::End)
    }

    fn size_hint(&self) -> SizeHint {
        match (&self.tail, self.frames.len()) {
            (Tail::End, 0 | 1) => SizeHint::with_exact(self.frames.iter().map(|f| f.len() as u64).sum()),
            _ => SizeHint::default(),
        }
    }
}
