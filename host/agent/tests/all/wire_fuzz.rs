//! Fuzzed: whatever a server streams back as server-sent events (the corpus's real streams of
//! the three wire formats, mutated, and random bytes), a turn ends, in time, in each format:
//! answered, cut or failed, never a panic or a hang.

use std::time::Duration;

use talaria_agent::model::ApiMode;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::*;

/// A server answering every request with `payload` as an event stream, then closing.
async fn serve(payload: Arc<Mutex<Vec<u8>>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let payload = payload.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
            tokio::spawn(async move {
                // The request: its head, then as many body bytes as it says.
                let mut got = Vec::new();
                let mut buf = [0u8; 8192];
                loop {
                    let Ok(n) = socket.read(&mut buf).await else { return };
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&got);
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text[..end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string())
                            })
                            .and_then(|v| v.parse::<usize>().ok())
                            .unwrap_or(0);
                        if got.len() >= end + 4 + length {
                            break;
                        }
                    }
                }
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(&payload).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    format!("http://{addr}/v1")
}

async fn agent(base_url: &str, mode: ApiMode) -> (tempfile::TempDir, Agent) {
    let home = tempfile::tempdir().expect("home");
    let mut config = AgentConfig::new(home.path().to_path_buf(), home.path().to_path_buf());
    // A stream that asks for a tool gets the same stream again: a few rounds, not the default.
    config.max_turns = 3;
    let spec = ProviderSpec {
        provider: Some("custom".into()),
        model: "m".into(),
        base_url: Some(base_url.to_string()),
        api_mode: Some(mode),
        idle_timeout: Some(Duration::from_secs(2)),
        first_byte_timeout: Some(Duration::from_secs(2)),
        ..ProviderSpec::default()
    };
    let mut chain = Chain::new(Provider::resolve(spec, |_| None).expect("provider"));
    chain.retries = 0;
    let store = Arc::new(Store::open(&home.path().join("state.db")).expect("store"));
    let shared = Arc::new(Shared::new(config, chain, store, ToolSources::default(), Arc::new(Gate::new(false))));
    let (emitter, _events) = Emitter::channel();
    let agent = Agent::start(shared, emitter, Start::default()).await.expect("agent");
    (home, agent)
}

#[test]
fn fuzz_streamed_answers_in_every_wire_format() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let payload = Arc::new(Mutex::new(Vec::new()));
    let url = runtime.block_on(serve(payload.clone()));
    let agents: Vec<_> = [ApiMode::ChatCompletions, ApiMode::AnthropicMessages, ApiMode::Responses]
        .into_iter()
        .map(|mode| Mutex::new(runtime.block_on(agent(&url, mode))))
        .collect();
    talaria_fuzz::bytes_costly("sse", |bytes| {
        payload.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone_from(&bytes.to_vec());
        for agent in &agents {
            // A case that failed leaves its agent as it was: the next case uses it all the same.
            let mut agent = agent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let cancel = CancellationToken::new();
            let turn = agent.1.run_turn("hi", &cancel);
            let ended = runtime.block_on(async { tokio::time::timeout(Duration::from_secs(60), turn).await });
            assert!(ended.is_ok(), "the turn did not end on {:?}", String::from_utf8_lossy(bytes));
        }
    });
}
