//! The runtime's approver for every conversation of a host: a request is asked of the
//! conversation whose session the plugin acts for ([`ApprovalRequest::session_id`]), through
//! that conversation's own gate. A child agent's session (`delegate_task`) is found through its
//! parent. A request for a session no conversation holds is refused: nobody there can answer.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};

use talaria_agent::approval::{Ask, Decision, Gate};
use talaria_runtime::{Approval, ApprovalRequest, Approver};
use talaria_store::Store;

/// How many parents up a child session is looked for.
const MAX_DEPTH: usize = 4;

pub(crate) struct Router {
    store: Arc<Store>,
    gates: Mutex<HashMap<String, Weak<Gate>>>,
}

impl Router {
    pub fn new(store: Arc<Store>) -> Self {
        Self { store, gates: Mutex::new(HashMap::new()) }
    }

    /// Requests for `session_id` go to `gate` from now on.
    pub fn route(&self, session_id: &str, gate: &Arc<Gate>) {
        let mut gates = crate::lock(&self.gates);
        gates.retain(|_, g| g.strong_count() > 0);
        gates.insert(session_id.to_string(), Arc::downgrade(gate));
    }

    /// The gate of `session_id`, or of its nearest parent that has one.
    async fn gate(&self, session_id: &str) -> Option<Arc<Gate>> {
        let mut id = session_id.to_string();
        for _ in 0..=MAX_DEPTH {
            if let Some(gate) = crate::lock(&self.gates).get(&id).and_then(Weak::upgrade) {
                return Some(gate);
            }
            let store = self.store.clone();
            let parent =
                tokio::task::spawn_blocking(move || store.session(&id).ok().flatten().and_then(|s| s.parent_id))
                    .await
                    .ok()
                    .flatten()?;
            id = parent;
        }
        None
    }

    fn known(&self, session_id: &str) -> Option<Arc<Gate>> {
        crate::lock(&self.gates).get(session_id).and_then(Weak::upgrade)
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
}
