//! The runtime's approver for every conversation of a host: a request is asked of the
//! conversation whose session the plugin acts for ([`ApprovalRequest::session_id`]), through
//! that conversation's own gate. A child agent's session (`delegate_task`) is found through its
//! parent. A request for a session no conversation holds is refused: nobody there can answer.
//!
//! It also finds the terminal a session's front end offers ([`Terminals`]): commands of a
//! session whose conversation was started with [`crate::Start::offered`] run there; and how a
//! session's commands are confined (a gateway chat's or a scheduled job's stay in the sandbox
//! unless its platform or job was set otherwise: [`crate::Start::unconfined_commands`]).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use talaria_agent::approval::{Ask, Decision, Gate};
use talaria_runtime::process::Confinement;
use talaria_runtime::{Approval, ApprovalRequest, Approver, Caller, Terminal, Terminals};
use talaria_store::Store;

/// How many parents up a child session is looked for.
const MAX_DEPTH: usize = 4;

pub(crate) struct Router {
    /// Where parents of child sessions are looked up; set once the host's store is open (the
    /// router is made first, so plugins can be found while the store opens).
    store: OnceLock<Arc<Store>>,
    routes: Mutex<HashMap<String, Route>>,
}

/// Where one session's requests go (the conversation owns both; a route dies with it).
#[derive(Clone)]
pub(crate) struct Route {
    pub gate: Weak<Gate>,
    pub terminal: Option<Weak<dyn Terminal>>,
    /// How the session's commands run; `None`: as `[sandbox] commands` says.
    pub confinement: Option<Confinement>,
}

impl Route {
    pub fn new(gate: &Arc<Gate>, terminal: Option<&Arc<dyn Terminal>>, confinement: Option<Confinement>) -> Self {
        Self { gate: Arc::downgrade(gate), terminal: terminal.map(Arc::downgrade), confinement }
    }
}

impl Router {
    pub fn new() -> Self {
        Self { store: OnceLock::new(), routes: Mutex::new(HashMap::new()) }
    }

    /// Look parents up in `store` from now on.
    pub fn set_store(&self, store: Arc<Store>) {
        let _ = self.store.set(store);
    }

    /// Requests for `session_id` go to `route` from now on.
    pub fn route(&self, session_id: &str, route: &Route) {
        let mut routes = crate::lock(&self.routes);
        routes.retain(|_, r| r.gate.strong_count() > 0);
        routes.insert(session_id.to_string(), route.clone());
    }

    /// The gate of `session_id`, or of its nearest parent that has one.
    async fn gate(&self, session_id: &str) -> Option<Arc<Gate>> {
        self.find(session_id, |r| r.gate.upgrade()).await
    }

    /// What `pick` finds in the route of `session_id`, or of its nearest parent that has one.
    async fn find<T>(&self, session_id: &str, pick: impl Fn(&Route) -> Option<T>) -> Option<T> {
        let mut id = session_id.to_string();
        for _ in 0..=MAX_DEPTH {
            if let Some(found) = crate::lock(&self.routes).get(&id).and_then(&pick) {
                return Some(found);
            }
            let store = self.store.get()?;
            id = store.session(&id).await.ok().flatten().and_then(|s| s.parent_id)?;
        }
        None
    }

    fn known(&self, session_id: &str) -> Option<Arc<Gate>> {
        crate::lock(&self.routes).get(session_id).and_then(|r| r.gate.upgrade())
    }
}

impl Terminals for Router {
    fn terminal<'a>(
        &'a self,
        session_id: &'a str,
    ) -> Pin<Box<dyn Future<Output = Option<Arc<dyn Terminal>>> + Send + 'a>> {
        Box::pin(async move {
            // Only a session routed here (or a child of one) can have a terminal: the common case,
            // no front end offering one, needs no store lookup.
            if crate::lock(&self.routes).values().all(|r| r.terminal.is_none()) {
                return None;
            }
            self.find(session_id, |r| r.terminal.as_ref().and_then(Weak::upgrade)).await
        })
    }

    fn confinement<'a>(
        &'a self,
        session_id: &'a str,
    ) -> Pin<Box<dyn Future<Output = Option<Confinement>> + Send + 'a>> {
        Box::pin(async move {
            if crate::lock(&self.routes).values().all(|r| r.confinement.is_none()) {
                return None;
            }
            // A child session (delegate_task) runs as its parent's does.
            self.find(session_id, |r| r.confinement.filter(|_| r.gate.strong_count() > 0)).await
        })
    }

    fn output(&self, caller: &Caller, text: &str) {
        if let Some(gate) = self.known(&caller.session_id) {
            gate.output(&caller.call_id, text);
        }
    }
}

impl Approver for Router {
    fn approve<'a>(&'a self, request: &'a ApprovalRequest) -> Pin<Box<dyn Future<Output = Approval> + Send + 'a>> {
        Box::pin(async move {
            let Some(gate) = self.gate(&request.session_id).await else {
                tracing::info!(session = %request.session_id, "approval asked for a session no conversation holds: refused");
                return Approval::Deny;
            };
            let ask = Ask {
                kind: request.kind,
                plugin: &request.plugin,
                command: &request.command,
                reason: &request.reason,
                call_id: &request.call_id,
            };
            match gate.ask_approval(&ask, &request.key).await {
                Decision::Once => Approval::Once,
                Decision::Session => Approval::Session,
                Decision::Always => Approval::Always,
                Decision::Deny => Approval::Deny,
            }
        })
    }

    fn interactive(&self, session_id: &str) -> bool {
        self.known(session_id).is_some_and(|g| g.interactive())
    }

    fn remembered(&self, request: &ApprovalRequest, answer: Approval) {
        let decision = if answer == Approval::Session { Decision::Session } else { Decision::Always };
        if let Some(gate) = self.known(&request.session_id) {
            gate.remembered(&request.call_id, &request.key, decision);
        }
    }
}
