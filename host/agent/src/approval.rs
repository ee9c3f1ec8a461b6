//! Asking the human: approvals (a dangerous command, or a plugin connecting to a host its
//! wildcard network grant allows only in general) and the `clarify` tool's questions.
//!
//! Both work the same way: the loop emits an event with an id ([`Event::ApprovalNeeded`],
//! [`Event::ClarifyNeeded`]), the front door shows it and answers through [`Gate::approve`] /
//! [`Gate::clarify`] with that id. No answer within the timeout counts as "deny" (or, for a
//! question, "no answer"). When no one is there to ask ([`Gate::interactive`] is false), nothing is
//! emitted: approvals are denied unless yolo is on, and questions return at once.
//!
//! ```
//! # tokio_test_block_on(async {
//! use talaria_agent::approval::{Ask, Decision, Gate};
//! use talaria_protocol::ApprovalKind::{Command, Network};
//! let gate = Gate::new(false);
//! let rm = Ask::command("terminal", "rm -rf build", "recursive delete");
//! assert_eq!(gate.ask_approval(&rm, "rm-recursive").await, Decision::Deny);
//! let docs = Ask { kind: Network, ..Ask::command("web", "docs.rs", "allowed by its wildcard grant net:*") };
//! assert_eq!(gate.ask_approval(&docs, "net:docs.rs").await, Decision::Deny);
//! // A scheduled job the user allowed this host beforehand.
//! let job = Gate::new(false).with_allowed(vec!["net:docs.rs".into()]);
//! assert_eq!(job.ask_approval(&docs, "net:docs.rs").await, Decision::Once);
//! assert_eq!(job.ask_approval(&rm, "rm-recursive").await, Decision::Deny);
//! gate.set_yolo(true);
//! assert_eq!(gate.ask_approval(&rm, "rm-recursive").await, Decision::Once);
//! # });
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt").block_on(f)
//! # }
//! ```

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use talaria_protocol::{ApprovalKind, ApprovalNeeded, ClarifyNeeded, Event};
use tokio::sync::oneshot;

use crate::Emitter;

/// How long a human has to answer before the default applies (reference §3: 300 s).
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(300);

pub use talaria_protocol::Decision;

/// What is asked of a human.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    pub kind: ApprovalKind,
    /// Who asks: a plugin, or the hooks that flagged a call.
    pub plugin: &'a str,
    /// The command, the host, or the flagged call.
    pub command: &'a str,
    /// Why it is asked.
    pub reason: &'a str,
    /// The tool call it is about (empty when none).
    pub call_id: &'a str,
}

impl<'a> Ask<'a> {
    /// A command to approve, in no particular tool call.
    pub fn command(plugin: &'a str, command: &'a str, reason: &'a str) -> Self {
        Self { kind: ApprovalKind::Command, plugin, command, reason, call_id: "" }
    }
}

/// Saves an "always" answer: receives the approval's key (a dangerous pattern's key, or
/// `net:HOST`).
pub type AlwaysSaver = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// The one place the loop asks a human anything.
pub struct Gate {
    interactive: bool,
    yolo: AtomicBool,
    timeout: Duration,
    next_id: AtomicU64,
    approvals: Mutex<HashMap<u64, oneshot::Sender<Decision>>>,
    questions: Mutex<HashMap<u64, oneshot::Sender<String>>>,
    emitter: Mutex<Emitter>,
    save_always: Option<AlwaysSaver>,
    /// Notes the user sent to the running turn, for its next tool result.
    steers: Mutex<Vec<String>>,
    /// Approval keys answered "once" without asking: what the user allowed a scheduled job.
    allowed: Vec<String>,
    /// The last output of each running call's command, by call id (see [`Gate::output`]).
    outputs: Mutex<HashMap<String, String>>,
}

/// How much of a running command's output a [`Gate`] keeps: what an interrupted call's result
/// carries.
pub const OUTPUT_KEPT: usize = 8 * 1024;

impl Gate {
    /// `interactive`: whether a human can answer at all.
    pub fn new(interactive: bool) -> Self {
        Self {
            interactive,
            yolo: AtomicBool::new(false),
            timeout: ANSWER_TIMEOUT,
            next_id: AtomicU64::new(1),
            approvals: Mutex::new(HashMap::new()),
            questions: Mutex::new(HashMap::new()),
            emitter: Mutex::new(Emitter::muted()),
            save_always: None,
            steers: Mutex::new(Vec::new()),
            allowed: Vec::new(),
            outputs: Mutex::new(HashMap::new()),
        }
    }

    /// Answer approvals under these keys (a dangerous pattern's key such as `rm-recursive`, or
    /// `net:HOST`) "once" without asking: allowances a human gave beforehand (a scheduled
    /// job's). Every other approval is asked (or, with no one to ask, denied) as before.
    pub fn with_allowed(mut self, keys: Vec<String>) -> Self {
        self.allowed = keys;
        self
    }

    /// Call `call_id`'s command printed `text` while it runs: shown ([`Event::ToolOutput`]) and
    /// its last [`OUTPUT_KEPT`] bytes kept, for a result if the call is cut short.
    pub fn output(&self, call_id: &str, text: &str) {
        talaria_protocol::keep_output(lock(&self.outputs).entry(call_id.to_string()).or_default(), text, OUTPUT_KEPT);
        lock(&self.emitter).emit(Event::ToolOutput { call_id: call_id.to_string(), text: text.to_string() });
    }

    /// The output kept for call `call_id` (empty when its command printed nothing), forgotten.
    pub fn take_output(&self, call_id: &str) -> String {
        lock(&self.outputs).remove(call_id).unwrap_or_default()
    }

    /// Keep `text` for the running turn's next tool result.
    pub fn steer(&self, text: String) {
        lock(&self.steers).push(text);
    }

    /// The notes sent since the last call, oldest first.
    pub fn take_steers(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.steers))
    }

    /// Where "always" answers are saved.
    pub fn with_saver(mut self, saver: AlwaysSaver) -> Self {
        self.save_always = Some(saver);
        self
    }

    /// Change how long answers are waited for (tests).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Send questions to `emitter` (the conversation's own stream) from the start.
    pub fn with_emitter(self, emitter: Emitter) -> Self {
        *lock(&self.emitter) = emitter;
        self
    }

    /// Send questions to this event stream.
    pub fn attach(&self, emitter: Emitter) {
        *lock(&self.emitter) = emitter;
    }

    pub fn interactive(&self) -> bool {
        self.interactive
    }

    pub fn yolo(&self) -> bool {
        self.yolo.load(Ordering::Relaxed)
    }

    /// Approve every dangerous command without asking (forbidden ones stay refused).
    pub fn set_yolo(&self, on: bool) {
        self.yolo.store(on, Ordering::Relaxed);
    }

    /// Ask whether `command` may run (or, for [`ApprovalKind::Network`], whether the plugin may
    /// connect to the host `command`). Yolo answers "once" at once; with no one to ask, or no
    /// answer within the timeout, the answer is "deny". An "always" answer is saved under `key`.
    pub async fn ask_approval(&self, ask: &Ask<'_>, key: &str) -> Decision {
        if self.yolo() || self.allowed.iter().any(|k| k == key) {
            return Decision::Once;
        }
        let decision = self.ask(ask, key).await;
        if decision == Decision::Always
            && let Some(save) = &self.save_always
            && let Err(e) = save(key)
        {
            lock(&self.emitter).warn(format!("could not save the approval of `{key}`: {e}"));
        }
        decision
    }

    /// Ask a human to approve a call a hook flagged. Unlike [`Gate::ask_approval`], yolo does not
    /// answer for the human (an operator's hook asked for one), and nothing is saved.
    pub async fn ask_human(&self, ask: &Ask<'_>) -> Decision {
        self.ask(ask, "").await
    }

    /// A remembered answer let the request under `key` through without asking: tell the front
    /// door, which shows it with the tool call (`call_id`).
    pub fn remembered(&self, call_id: &str, key: &str, decision: Decision) {
        lock(&self.emitter).emit(Event::ApprovalRemembered {
            call_id: call_id.to_string(),
            key: key.to_string(),
            decision,
        });
    }

    /// Put `ask` to the human; `key` is what a "session" or "always" answer would allow (empty
    /// when such an answer is not remembered).
    async fn ask(&self, ask: &Ask<'_>, key: &str) -> Decision {
        if !self.interactive {
            return Decision::Deny;
        }
        let span = tracing::info_span!(
            target: talaria_protocol::trace::TARGET,
            "approval",
            talaria.approval.kind = ?ask.kind,
            talaria.plugin = ask.plugin,
            talaria.approval.decision = tracing::field::Empty,
            talaria.approval.wait_ms = tracing::field::Empty,
        );
        let asked = std::time::Instant::now();
        let decision = tracing::Instrument::instrument(self.put(ask, key), span.clone()).await;
        span.record("talaria.approval.decision", decision.name());
        span.record("talaria.approval.wait_ms", i64::try_from(asked.elapsed().as_millis()).unwrap_or(i64::MAX));
        decision
    }

    /// [`Gate::ask`] once it is asked: the event out, and the answer (or none in time) back.
    async fn put(&self, ask: &Ask<'_>, key: &str) -> Decision {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.approvals).insert(id, tx);
        lock(&self.emitter).emit(Event::ApprovalNeeded(ApprovalNeeded {
            id,
            kind: ask.kind,
            plugin: ask.plugin.to_string(),
            command: ask.command.to_string(),
            reason: ask.reason.to_string(),
            timeout_secs: self.timeout.as_secs(),
            call_id: ask.call_id.to_string(),
            key: key.to_string(),
        }));
        let decision = match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(decision)) => decision,
            Ok(Err(_)) | Err(_) => Decision::Deny,
        };
        lock(&self.approvals).remove(&id);
        lock(&self.emitter).emit(Event::ApprovalResolved { id, decision });
        decision
    }

    /// Answer approval `id`. False when it is no longer waiting (answered, timed out).
    pub fn approve(&self, id: u64, decision: Decision) -> bool {
        lock(&self.approvals).remove(&id).is_some_and(|tx| tx.send(decision).is_ok())
    }

    /// Ask the user a question; `None` when no one can answer or no answer came in time.
    pub async fn ask_question(&self, question: &str, choices: &[String]) -> Option<String> {
        if !self.interactive {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.questions).insert(id, tx);
        lock(&self.emitter).emit(Event::ClarifyNeeded(ClarifyNeeded {
            id,
            question: question.to_string(),
            choices: choices.to_vec(),
        }));
        let answer = tokio::time::timeout(self.timeout, rx).await.ok().and_then(Result::ok);
        lock(&self.questions).remove(&id);
        answer
    }

    /// Answer question `id`.
    pub fn clarify(&self, id: u64, answer: String) -> bool {
        lock(&self.questions).remove(&id).is_some_and(|tx| tx.send(answer).is_ok())
    }

    /// Ids of approvals and questions still waiting (a front door that lost track can deny them).
    pub fn waiting(&self) -> (Vec<u64>, Vec<u64>) {
        (lock(&self.approvals).keys().copied().collect(), lock(&self.questions).keys().copied().collect())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gate someone answers, the keys it saved "always", and its events.
    fn interactive_gate() -> (std::sync::Arc<Gate>, std::sync::Arc<Mutex<Vec<String>>>, crate::channel::Receiver<Event>)
    {
        let saved = std::sync::Arc::new(Mutex::new(Vec::new()));
        let s = saved.clone();
        let gate = std::sync::Arc::new(Gate::new(true).with_saver(Box::new(move |key| {
            lock(&s).push(key.to_string());
            Ok(())
        })));
        let (emitter, events) = Emitter::channel();
        gate.attach(emitter);
        (gate, saved, events)
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
    }

    #[test]
    fn an_answer_reaches_the_asker_and_always_is_saved() {
        rt().block_on(async {
            let (gate, saved, mut events) = interactive_gate();
            let g = gate.clone();
            let asker = tokio::spawn(async move {
                g.ask_approval(&Ask::command("terminal", "rm -rf x", "r"), "rm-recursive").await
            });
            let Some(Event::ApprovalNeeded(req)) = events.recv().await else { panic!("no approval event") };
            assert_eq!((req.kind, req.command.as_str()), (ApprovalKind::Command, "rm -rf x"));
            assert!(gate.approve(req.id, Decision::Always));
            assert_eq!(asker.await.expect("join"), Decision::Always);
            assert_eq!(*lock(&saved), vec!["rm-recursive".to_string()]);
            assert!(!gate.approve(req.id, Decision::Once), "a second answer finds no one waiting");
        });
    }

    #[test]
    fn a_host_to_connect_to_is_asked_as_such_and_saved_by_its_key() {
        rt().block_on(async {
            let (gate, saved, mut events) = interactive_gate();
            let g = gate.clone();
            let reason = "allowed by its wildcard grant net:*";
            let asker = tokio::spawn(async move {
                let ask =
                    Ask { kind: ApprovalKind::Network, call_id: "call_7", ..Ask::command("web", "docs.rs", reason) };
                g.ask_approval(&ask, "net:docs.rs").await
            });
            let Some(Event::ApprovalNeeded(req)) = events.recv().await else { panic!("no approval event") };
            assert_eq!(
                (req.kind, req.plugin.as_str(), req.command.as_str(), req.reason.as_str()),
                (ApprovalKind::Network, "web", "docs.rs", reason)
            );
            assert_eq!(req.call_id, "call_7");
            assert!(gate.approve(req.id, Decision::Always));
            assert_eq!(asker.await.expect("join"), Decision::Always);
            let Some(Event::ApprovalResolved { id, decision }) = events.recv().await else { panic!("not resolved") };
            assert_eq!((id, decision), (req.id, Decision::Always));
            assert_eq!(*lock(&saved), vec!["net:docs.rs".to_string()]);
        });
    }

    #[test]
    fn yolo_never_answers_for_a_human_a_hook_asked_for() {
        rt().block_on(async {
            let gate = Gate::new(false);
            gate.set_yolo(true);
            assert_eq!(
                gate.ask_approval(&Ask::command("terminal", "rm -rf x", "r"), "rm-recursive").await,
                Decision::Once
            );
            assert_eq!(gate.ask_human(&Ask::command("guard", "write_file {}", "policy")).await, Decision::Deny);
        });
    }

    #[test]
    fn no_answer_in_time_denies() {
        rt().block_on(async {
            let gate = Gate::new(true).with_timeout(Duration::from_millis(30));
            let (emitter, _events) = Emitter::channel();
            gate.attach(emitter);
            assert_eq!(gate.ask_approval(&Ask::command("t", "rm -rf x", "r"), "k").await, Decision::Deny);
            assert_eq!(gate.ask_question("which?", &[]).await, None);
            assert_eq!(gate.waiting(), (vec![], vec![]));
        });
    }
}
