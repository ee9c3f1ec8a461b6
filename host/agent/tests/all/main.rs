//! The loop in-process, against the scripted mock model (tests/mock-llm): what a turn does
//! with answers cut at the output-token limit, broken streams, streams without usage, and how
//! the context engine is asked when the fixed prompt takes most of a small window.

use std::sync::{Arc, Mutex};

use talaria_agent::ToolSources;
use talaria_agent::approval::Gate;
use talaria_agent::channel::Receiver;
use talaria_agent::extensions::ContextEngine;
use talaria_agent::model::{Chain, Provider, ProviderSpec};
use talaria_agent::toolsets::Selection;
use talaria_agent::{Agent, AgentConfig, BoxFuture, Emitter, Shared, Start};
use talaria_mock_llm::{MockLlm, Mode, Reply, Script, Step};
use talaria_protocol::{CompressRequest, Compressed, ContextStatus, Event, Outcome, PluginError, PluginSession};
use talaria_store::Store;
use tokio_util::sync::CancellationToken;

mod kept;
mod wire;
mod wire_fuzz;

/// A home, a store and an agent talking to `mock` (chat completions, no tools unless the
/// built-in ones are selected).
struct Rig {
    _home: tempfile::TempDir,
    agent: Agent,
    events: Receiver<Event>,
    shared: Arc<Shared>,
}

fn chain(mock: &MockLlm) -> Chain {
    let spec = ProviderSpec {
        provider: Some("custom".into()),
        model: "mock-model".into(),
        base_url: Some(mock.base_url()),
        ..ProviderSpec::default()
    };
    let mut chain = Chain::new(Provider::resolve(spec, |_| None).expect("provider"));
    chain.retries = 1;
    chain.base_delay = std::time::Duration::from_millis(1);
    chain
}

async fn setup(
    mock: &MockLlm,
    configure: impl FnOnce(&mut AgentConfig),
    engine: Option<Arc<dyn ContextEngine>>,
) -> Rig {
    let home = tempfile::tempdir().expect("home");
    let mut config = AgentConfig::new(home.path().to_path_buf(), home.path().to_path_buf());
    config.selection = Selection { enabled: Some(vec!["todo".into()]), disabled: Vec::new() };
    configure(&mut config);
    let store = Arc::new(Store::open(&home.path().join("state.db")).expect("store"));
    let shared = Arc::new(
        Shared::new(config, chain(mock), store, ToolSources::default(), Arc::new(Gate::new(false)))
            .with_context_engine(engine),
    );
    let (emitter, events) = Emitter::channel();
    let agent = Agent::start(shared.clone(), emitter, Start::default()).await.expect("agent");
    Rig { _home: home, agent, events, shared }
}

impl Rig {
    fn drain(&mut self) -> Vec<Event> {
        let mut out = Vec::new();
        while let Some(event) = self.events.try_recv() {
            out.push(event);
        }
        out
    }

    fn warnings(events: &[Event]) -> Vec<String> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::Notice { text, .. } => Some(text.clone()),
                _ => None,
            })
            .collect()
    }
}

/// A context engine that records what it is shown and never compresses.
#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<ContextStatus>>,
}

impl ContextEngine for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }

    fn should_compress<'a>(
        &'a self,
        status: ContextStatus,
        _: &'a PluginSession,
    ) -> BoxFuture<'a, Result<bool, PluginError>> {
        self.seen.lock().expect("lock").push(status);
        Box::pin(async { Ok(false) })
    }

    fn compress<'a>(
        &'a self,
        _: CompressRequest,
        _: &'a PluginSession,
    ) -> BoxFuture<'a, Result<Compressed, PluginError>> {
        Box::pin(async { Err(PluginError::Failed("not in this test".to_string())) })
    }

    fn report<'a>(
        &'a self,
        _: ContextStatus,
        _: &'a PluginSession,
    ) -> BoxFuture<'a, Result<Vec<(String, String)>, PluginError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

async fn stored(store: &Store, session: &str) -> Vec<talaria_protocol::Message> {
    store.messages(session).await.expect("messages").into_iter().map(|m| m.message).collect()
}
