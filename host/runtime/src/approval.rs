//! Asking before a plugin does what its grants allow only in general: run a dangerous command
//! (`process`), or connect to a host that only a wildcard network grant (`net:*`) allows.
//!
//! The embedder's [`Approver`] answers (the CLI asks on the terminal; unattended runs use
//! [`Unattended`]). [`Approvals`] stands in front of it for the whole runtime:
//! 1. a key approved "always" (`[approvals] allow` in config, given at start) or for the session
//!    is never asked about again: dangerous commands and hosts share this memory;
//! 2. requests that arrive while the same key is being asked about wait for that answer and share
//!    it (two concurrent fetches of one new host ask once), whatever it is;
//! 3. a "session" answer is remembered for that session only (a request carries the session it
//!    acts for, [`ApprovalRequest::session_id`]): another conversation, or a new session, asks
//!    again; an "always" answer holds for every session until the runtime is dropped (it is saved
//!    by the approver, which knows where the config is);
//! 4. questions are shared only within a session: two conversations asking about the same key
//!    are asked separately, each of its own human.
//!
//! Keys: a dangerous pattern's id (`rm-recursive`), or `net:HOST` for a host (`net:HOST:PORT`
//! when the port is not the scheme's default).
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! use std::sync::Arc;
//! use talaria_runtime::{Approval, ApprovalKind, ApprovalRequest, Approvals, Unattended};
//! let approvals = Approvals::new(Arc::new(Unattended { yolo: false }), &["net:docs.rs".to_string()]);
//! let request = |host: &str| ApprovalRequest {
//!     kind: ApprovalKind::Network,
//!     plugin: "web".into(),
//!     command: host.into(),
//!     key: format!("net:{host}"),
//!     reason: "allowed by its wildcard grant net:*".into(),
//!     session_id: "s1".into(),
//!     call_id: "call_1".into(),
//! };
//! assert_eq!(approvals.ask(&request("docs.rs")).await, Approval::Always);
//! assert_eq!(approvals.ask(&request("evil.example")).await, Approval::Deny);
//! # });
//! ```

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

pub use talaria_protocol::ApprovalKind;

/// Something a plugin wants that waits for a human.
#[derive(Debug, Clone)]
pub struct ApprovalRequest {
    /// A command, or a connection to a host.
    pub kind: ApprovalKind,
    pub plugin: String,
    /// The command; for [`ApprovalKind::Network`], the host (`docs.rs`, or `docs.rs:8443` when
    /// the port is not the scheme's default).
    pub command: String,
    /// What a "session" or "always" answer approves: a dangerous pattern's id, or `net:HOST`.
    pub key: String,
    /// Why it is asked, in words: why the command is dangerous, or which wildcard grant allows
    /// the host ("allowed by its wildcard grant net:*").
    pub reason: String,
    /// The session the plugin acts for: where the question goes, and what a "session" answer
    /// covers. Empty when the plugin runs for no session (`talaria tools call`).
    pub session_id: String,
    /// The tool call being run; empty for hooks, memory providers and context engines.
    pub call_id: String,
}

/// Who a plugin acts for while it runs: the session, and the tool call (empty for the kinds
/// that are not tools).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    pub session_id: String,
    pub call_id: String,
}

/// A human's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Approval {
    /// This request only (and the requests that waited for the same answer).
    Once,
    /// This key for the rest of the session.
    Session,
    /// This key from now on (the approver saves it).
    Always,
    Deny,
}

/// Who decides. The CLI asks on the terminal; unattended runs use [`Unattended`].
pub trait Approver: Send + Sync {
    fn approve<'a>(&'a self, request: &'a ApprovalRequest) -> Pin<Box<dyn Future<Output = Approval> + Send + 'a>>;

    /// Whether anyone can answer requests of `session_id`; when not, refusals say how to allow
    /// the request instead.
    fn interactive(&self, session_id: &str) -> bool {
        let _ = session_id;
        false
    }

    /// `request` was let through without asking, by `answer` (session or always) remembered
    /// under its key: the approver may tell the human so.
    fn remembered(&self, request: &ApprovalRequest, answer: Approval) {
        let _ = (request, answer);
    }
}

/// No one to ask: everything is refused unless `yolo`.
#[derive(Debug, Clone, Copy)]
pub struct Unattended {
    pub yolo: bool,
}

impl Approver for Unattended {
    fn approve<'a>(&'a self, _request: &'a ApprovalRequest) -> Pin<Box<dyn Future<Output = Approval> + Send + 'a>> {
        let answer = if self.yolo { Approval::Once } else { Approval::Deny };
        Box::pin(async move { answer })
    }
}

/// The runtime's approvals: the approver, the keys approved "always" and for this session, and
/// the questions being asked right now.
pub struct Approvals {
    approver: Arc<dyn Approver>,
    state: Mutex<State>,
}

/// A key let through without asking ([`Approvals::allowed`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Allowed {
    pub key: String,
    /// [`Approval::Session`] or [`Approval::Always`].
    pub scope: Approval,
    /// Allowed by the config (`[approvals] allow`) rather than by an answer since the start.
    pub configured: bool,
}

#[derive(Default)]
struct State {
    /// Keys approved "always" in the config (`net:` keys lower-cased).
    configured: HashSet<String>,
    /// Keys approved "always" since the runtime started.
    always: HashSet<String>,
    /// (session, key) approved for that session.
    session: HashSet<(String, String)>,
    /// Questions waiting for an answer, by (session, key); later askers wait on the same cell.
    asking: HashMap<(String, String), Arc<tokio::sync::OnceCell<Approval>>>,
}

impl Approvals {
    /// `always`: the keys the config approves for good (`[approvals] allow`).
    pub fn new(approver: Arc<dyn Approver>, always: &[String]) -> Self {
        let always = always
            .iter()
            .map(|k| {
                if k.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("net:")) {
                    k.to_ascii_lowercase()
                } else {
                    k.clone()
                }
            })
            .collect();
        Self { approver, state: Mutex::new(State { configured: always, ..State::default() }) }
    }

    /// What requests of `session_id` get without asking: the keys answered "session" there,
    /// and those allowed always (by the config, or answered so since the start).
    pub fn allowed(&self, session_id: &str) -> Vec<Allowed> {
        let state = lock(&self.state);
        let always = |key: &String, configured| Allowed { key: key.clone(), scope: Approval::Always, configured };
        let mut out: Vec<Allowed> = state.configured.iter().map(|k| always(k, true)).collect();
        out.extend(state.always.iter().filter(|k| !state.configured.contains(*k)).map(|k| always(k, false)));
        out.extend(state.session.iter().filter(|(s, _)| s == session_id).map(|(_, key)| Allowed {
            key: key.clone(),
            scope: Approval::Session,
            configured: false,
        }));
        out.sort();
        out
    }

    /// Ask about `key` again: in `session_id`, and (an "always" answer, or the config's) in
    /// every session of this runtime. Whether it was allowed at all.
    pub fn forget(&self, session_id: &str, key: &str) -> bool {
        let mut state = lock(&self.state);
        let session = state.session.remove(&(session_id.to_string(), key.to_string()));
        let always = state.always.remove(key);
        let configured = state.configured.remove(key);
        session || always || configured
    }

    /// Whether anyone can answer requests of `session_id`.
    pub fn interactive(&self, session_id: &str) -> bool {
        self.approver.interactive(session_id)
    }

    /// Ask about `request` unless its key is approved already: then the answer is
    /// [`Approval::Always`] (in the config, or answered so) or [`Approval::Session`] (answered so
    /// in the same session), without asking. A request whose key is being asked about in the same
    /// session waits for that answer instead of asking again.
    pub async fn ask(&self, request: &ApprovalRequest) -> Approval {
        let remembered = |answer: Approval| {
            self.approver.remembered(request, answer);
            answer
        };
        let id = (request.session_id.clone(), request.key.clone());
        let question = {
            let mut state = lock(&self.state);
            if state.configured.contains(&request.key) || state.always.contains(&request.key) {
                drop(state);
                return remembered(Approval::Always);
            }
            if state.session.contains(&id) {
                drop(state);
                return remembered(Approval::Session);
            }
            state.asking.entry(id.clone()).or_default().clone()
        };
        // If the asker is dropped (its call ran out of time), a waiter asks in its place.
        let answer = *question.get_or_init(|| self.approver.approve(request)).await;
        let mut state = lock(&self.state);
        match answer {
            Approval::Always => {
                state.always.insert(request.key.clone());
            }
            Approval::Session => {
                state.session.insert(id.clone());
            }
            Approval::Once | Approval::Deny => {}
        }
        if state.asking.get(&id).is_some_and(|q| Arc::ptr_eq(q, &question)) {
            state.asking.remove(&id);
        }
        answer
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Answers `answer` after a pause, counting the questions.
    struct Slow {
        answer: Approval,
        asked: AtomicUsize,
    }

    impl Approver for Slow {
        fn approve<'a>(&'a self, _: &'a ApprovalRequest) -> Pin<Box<dyn Future<Output = Approval> + Send + 'a>> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                self.answer
            })
        }
    }

    fn request(key: &str) -> ApprovalRequest {
        ApprovalRequest {
            kind: ApprovalKind::Network,
            plugin: "web".into(),
            command: key.trim_start_matches("net:").into(),
            key: key.into(),
            reason: "allowed by its wildcard grant net:*".into(),
            session_id: "s1".into(),
            call_id: "call_1".into(),
        }
    }

    fn in_session(key: &str, session: &str) -> ApprovalRequest {
        ApprovalRequest { session_id: session.into(), ..request(key) }
    }

    fn approvals(answer: Approval, always: &[&str]) -> (Arc<Slow>, Approvals) {
        let slow = Arc::new(Slow { answer, asked: AtomicUsize::new(0) });
        let always: Vec<String> = always.iter().map(|s| s.to_string()).collect();
        (slow.clone(), Approvals::new(slow, &always))
    }

    #[tokio::test]
    async fn concurrent_requests_for_one_key_ask_once_and_share_the_answer() {
        for answer in [Approval::Once, Approval::Deny] {
            let (slow, approvals) = approvals(answer, &[]);
            let (docs, crates) = (request("net:docs.rs"), request("net:crates.io"));
            let (a, b, c) = tokio::join!(approvals.ask(&docs), approvals.ask(&docs), approvals.ask(&crates));
            assert_eq!((a, b, c), (answer, answer, answer));
            assert_eq!(slow.asked.load(Ordering::SeqCst), 2, "one question per key");
            // "Once" and "deny" are not remembered: the next request asks again.
            approvals.ask(&request("net:docs.rs")).await;
            assert_eq!(slow.asked.load(Ordering::SeqCst), 3);
        }
    }

    #[tokio::test]
    async fn session_answers_are_remembered_and_config_keys_never_ask() {
        let (slow, approvals) = approvals(Approval::Session, &["NET:Docs.RS", "rm-recursive"]);
        assert_eq!(approvals.ask(&request("net:docs.rs")).await, Approval::Always);
        assert_eq!(approvals.ask(&request("rm-recursive")).await, Approval::Always);
        assert_eq!(slow.asked.load(Ordering::SeqCst), 0);
        assert_eq!(approvals.ask(&request("net:crates.io")).await, Approval::Session);
        assert_eq!(approvals.ask(&request("net:crates.io")).await, Approval::Session);
        assert_eq!(slow.asked.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_session_answer_covers_its_own_session_and_always_covers_all() {
        let (slow, session) = approvals(Approval::Session, &[]);
        assert_eq!(session.ask(&in_session("rm-recursive", "a")).await, Approval::Session);
        assert_eq!(session.ask(&in_session("rm-recursive", "a")).await, Approval::Session);
        assert_eq!(slow.asked.load(Ordering::SeqCst), 1);
        // Another session (another conversation, or /new) is asked again.
        assert_eq!(session.ask(&in_session("rm-recursive", "b")).await, Approval::Session);
        assert_eq!(slow.asked.load(Ordering::SeqCst), 2);

        let (slow, always) = approvals(Approval::Always, &[]);
        assert_eq!(always.ask(&in_session("net:docs.rs", "a")).await, Approval::Always);
        assert_eq!(always.ask(&in_session("net:docs.rs", "b")).await, Approval::Always);
        assert_eq!(slow.asked.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn what_is_allowed_is_listed_and_a_forgotten_key_is_asked_again() {
        let (slow, approvals) = approvals(Approval::Session, &["rm-recursive"]);
        approvals.ask(&in_session("net:docs.rs", "a")).await;
        approvals.ask(&in_session("net:crates.io", "b")).await;
        let allowed = |s| approvals.allowed(s).into_iter().map(|a| (a.key, a.scope, a.configured)).collect::<Vec<_>>();
        assert_eq!(
            allowed("a"),
            [("net:docs.rs".into(), Approval::Session, false), ("rm-recursive".into(), Approval::Always, true)],
            "another session's answers are not listed"
        );
        assert!(approvals.forget("a", "net:docs.rs") && approvals.forget("a", "rm-recursive"));
        assert!(!approvals.forget("a", "net:docs.rs"), "forgotten already");
        assert!(approvals.allowed("a").is_empty());
        assert_eq!(slow.asked.load(Ordering::SeqCst), 2);
        approvals.ask(&in_session("rm-recursive", "a")).await;
        assert_eq!(slow.asked.load(Ordering::SeqCst), 3, "asked again");
    }

    #[tokio::test]
    async fn two_sessions_asking_about_one_key_are_asked_separately() {
        let (slow, approvals) = approvals(Approval::Once, &[]);
        let (a, b) = (in_session("net:docs.rs", "a"), in_session("net:docs.rs", "b"));
        let (x, y) = tokio::join!(approvals.ask(&a), approvals.ask(&b));
        assert_eq!((x, y), (Approval::Once, Approval::Once));
        assert_eq!(slow.asked.load(Ordering::SeqCst), 2, "each session's human is asked");
    }

    #[tokio::test]
    async fn a_dropped_asker_leaves_the_question_to_the_next() {
        let (slow, approvals) = approvals(Approval::Session, &[]);
        let docs = request("net:docs.rs");
        let first = approvals.ask(&docs);
        // The first asker gives up before the answer (its call ran out of time).
        assert!(tokio::time::timeout(Duration::from_millis(5), first).await.is_err());
        assert_eq!(approvals.ask(&request("net:docs.rs")).await, Approval::Session);
        assert_eq!(slow.asked.load(Ordering::SeqCst), 2);
    }
}
