//! Approvals on MCP 2026-07-28, where a server sends no requests of its own: the revision's
//! multi round-trip flow (SEP-2322) in place of `elicitation/create`.
//!
//! A call that needs an approval runs in a task of its own ([`Running`]). When it asks, the
//! `tools/call` is answered `resultType: "input_required"`: the question as an embedded
//! `elicitation/create` under a key (`approval-1`), and a `requestState` that names the held
//! call (a random handle, not the state itself). The client asks its user and calls the tool
//! again with the same arguments, the answer under the same key in `inputResponses` and the
//! state echoed; [`Held::resume`] hands the answer to the waiting approval and the call goes on
//! from where it stopped, exactly as it does after an `elicitation/create` answer on
//! 2025-11-25: nothing runs twice, and a call asks as many times as it needs.
//!
//! Invariants: a held call is answered once (resuming takes it out); a question unanswered
//! for [`ANSWER_TIMEOUT`](super::ANSWER_TIMEOUT) is denied, and the call is dropped at the next
//! hold; a missing, malformed or not-accepted answer is a denial; at most [`MAX_HELD`] calls
//! wait at once, and a question beyond that is denied rather than held.

use std::collections::{BTreeMap, HashMap};
use std::io::Read as _;

use rmcp::model::{ElicitRequest, ElicitRequestParams, ElicitResult, InputRequest, InputRequiredResult, JsonObject};
use talaria_protocol::{Decision, ToolError};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{approval, lock};

/// How many calls may wait for their clients' answers at once.
pub const MAX_HELD: usize = 64;

/// A question a running call asks, and where its answer goes.
pub(super) struct Question {
    pub(super) params: ElicitRequestParams,
    pub(super) answer: oneshot::Sender<Decision>,
}

/// A call running in its own task, the questions it asks, and the ones asked and not yet
/// answered (by key). Dropping it ends the call.
pub(super) struct Running {
    tool: String,
    arguments: JsonObject,
    task: JoinHandle<Result<String, ToolError>>,
    questions: mpsc::UnboundedReceiver<Question>,
    asked: BTreeMap<String, oneshot::Sender<Decision>>,
    keys: u64,
}

impl Running {
    /// `task` runs `tool` with `arguments`; its approvals arrive on `questions`.
    pub(super) fn new(
        tool: String,
        arguments: JsonObject,
        task: JoinHandle<Result<String, ToolError>>,
        questions: mpsc::UnboundedReceiver<Question>,
    ) -> Self {
        Self { tool, arguments, task, questions, asked: BTreeMap::new(), keys: 0 }
    }

    /// Whether every question it waits on was given up (timed out, or the call ended).
    fn abandoned(&self) -> bool {
        self.asked.values().all(oneshot::Sender::is_closed)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Where a round left a call.
pub(super) enum Step {
    /// It finished.
    Done(Result<String, ToolError>),
    /// It waits for answers: the result that asks them.
    Asking(InputRequiredResult),
    /// The client cancelled the request; the call was ended.
    Cancelled,
}

/// Why a call could not be resumed.
#[derive(Debug, thiserror::Error)]
pub(super) enum Stale {
    #[error(
        "no call is waiting for this answer: it was answered already, waited longer than {} s, or the server restarted; call the tool again",
        super::ANSWER_TIMEOUT.as_secs()
    )]
    Unknown,
    #[error("the answer came with another tool or other arguments than the call that asked; the call was ended")]
    Mismatch,
}

/// The calls waiting for their clients' answers, by the handle their `requestState` carries.
#[derive(Default)]
pub struct Held {
    calls: std::sync::Mutex<HashMap<String, Running>>,
}

impl Held {
    /// Take the call `state` names, made with `tool` and `arguments`, and give its questions
    /// their answers from `responses` (a missing or unreadable one is a denial).
    ///
    /// # Errors
    /// No call waits under `state`, or it was made with another tool or other arguments.
    pub(super) fn resume(
        &self,
        state: &str,
        tool: &str,
        arguments: &JsonObject,
        responses: Option<&rmcp::model::InputResponses>,
    ) -> Result<Running, Stale> {
        let mut running = lock(&self.calls).remove(state).ok_or(Stale::Unknown)?;
        if running.tool != tool || running.arguments != *arguments {
            return Err(Stale::Mismatch);
        }
        for (key, answer) in std::mem::take(&mut running.asked) {
            let given = responses.and_then(|r| r.get(&key));
            let decided = match given.map(|v| serde_json::from_value::<ElicitResult>(v.clone())) {
                Some(Ok(result)) => approval(&result),
                Some(Err(e)) => {
                    tracing::info!("the answer to {key} is not an elicitation result: {e}");
                    Decision::Deny
                }
                None => {
                    tracing::info!("the client retried without answering {key}");
                    Decision::Deny
                }
            };
            // The approval may have timed out meanwhile; then the call was denied already.
            let _ = answer.send(decided);
        }
        Ok(running)
    }

    /// Run `running` until it finishes, asks, or `cancelled` fires.
    pub(super) async fn step(&self, mut running: Running, cancelled: &CancellationToken) -> Step {
        loop {
            tokio::select! {
                done = &mut running.task => {
                    return Step::Done(done.unwrap_or_else(|e| Err(ToolError::Crashed(format!("the call's task failed: {e}")))));
                }
                Some(first) = running.questions.recv() => {
                    let mut questions = vec![first];
                    while let Ok(more) = running.questions.try_recv() {
                        questions.push(more);
                    }
                    let mut requests = BTreeMap::new();
                    for Question { params, answer } in questions {
                        running.keys += 1;
                        let key = format!("approval-{}", running.keys);
                        requests.insert(key.clone(), InputRequest::Elicitation(ElicitRequest::new(params)));
                        running.asked.insert(key, answer);
                    }
                    match self.hold(running) {
                        Ok(handle) => return Step::Asking(InputRequiredResult::new(Some(requests), Some(handle))),
                        Err(back) => {
                            tracing::warn!("{MAX_HELD} calls already wait for answers: this one's questions are denied");
                            running = *back;
                            for (_, answer) in std::mem::take(&mut running.asked) {
                                let _ = answer.send(Decision::Deny);
                            }
                        }
                    }
                }
                () = cancelled.cancelled() => return Step::Cancelled,
            }
        }
    }

    /// Keep `running` under a fresh handle, dropping the calls whose questions were given up.
    ///
    /// # Errors
    /// [`MAX_HELD`] calls already wait, or no handle could be made: `running` comes back.
    fn hold(&self, running: Running) -> Result<String, Box<Running>> {
        let mut calls = lock(&self.calls);
        calls.retain(|_, held| !held.abandoned());
        if calls.len() >= MAX_HELD {
            return Err(Box::new(running));
        }
        let Some(handle) = handle() else { return Err(Box::new(running)) };
        calls.insert(handle.clone(), running);
        Ok(handle)
    }
}

/// 128 random bits in hex: a handle no other client can guess.
fn handle() -> Option<String> {
    let mut bytes = [0u8; 16];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    match read {
        Ok(()) => Some(hex::encode(bytes)),
        Err(e) => {
            tracing::warn!("no random handle for a held call (/dev/urandom: {e})");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{ElicitationSchema, InputResponses};

    /// A call that asks once and runs only on a yes, held and resumed as a client would.
    fn asking() -> (Running, JsonObject) {
        let (questions, asked) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let schema = ElicitationSchema::builder().required_bool("allow").build().expect("schema");
            let params = ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: "Run it?".into(),
                requested_schema: schema,
            };
            let (answer, answered) = oneshot::channel();
            questions.send(Question { params, answer }).map_err(|_| ToolError::Failed("no one".into()))?;
            match answered.await {
                Ok(Decision::Once) => Ok("ran".to_string()),
                _ => Err(ToolError::Denied("denied".into())),
            }
        });
        let arguments: JsonObject =
            serde_json::from_value(serde_json::json!({"command": "rm -rf build"})).expect("args");
        (Running::new("terminal".into(), arguments.clone(), task, asked), arguments)
    }

    async fn ask(held: &Held, running: Running) -> (String, String) {
        match held.step(running, &CancellationToken::new()).await {
            Step::Asking(input) => {
                let keys: Vec<String> = input.input_requests.expect("requests").into_keys().collect();
                assert_eq!(keys, ["approval-1"]);
                (keys[0].clone(), input.request_state.expect("state"))
            }
            Step::Done(r) => panic!("finished without asking: {r:?}"),
            Step::Cancelled => panic!("cancelled"),
        }
    }

    #[tokio::test]
    async fn an_answer_resumes_the_waiting_call_once() {
        let held = Held::default();
        let (running, arguments) = asking();
        let (key, state) = ask(&held, running).await;
        assert_eq!(state.len(), 32);
        let yes: InputResponses = [(key, serde_json::json!({"action": "accept", "content": {"allow": true}}))].into();
        let resumed = held.resume(&state, "terminal", &arguments, Some(&yes)).expect("waiting");
        match held.step(resumed, &CancellationToken::new()).await {
            Step::Done(r) => assert_eq!(r.expect("ran"), "ran"),
            _ => panic!("did not finish"),
        }
        assert!(matches!(held.resume(&state, "terminal", &arguments, Some(&yes)), Err(Stale::Unknown)));
    }

    #[tokio::test]
    async fn a_missing_answer_denies_and_other_arguments_end_the_call() {
        let held = Held::default();
        let (running, arguments) = asking();
        let (_, state) = ask(&held, running).await;
        let resumed = held.resume(&state, "terminal", &arguments, None).expect("waiting");
        match held.step(resumed, &CancellationToken::new()).await {
            Step::Done(r) => assert_eq!(r, Err(ToolError::Denied("denied".into()))),
            _ => panic!("did not finish"),
        }

        let (running, _) = asking();
        let (_, state) = ask(&held, running).await;
        let other: JsonObject = serde_json::from_value(serde_json::json!({"command": "rm -rf /"})).expect("args");
        assert!(matches!(held.resume(&state, "terminal", &other, None), Err(Stale::Mismatch)));
        assert!(matches!(held.resume(&state, "terminal", &other, None), Err(Stale::Unknown)));
    }
}
