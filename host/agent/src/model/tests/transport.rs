//! Cancellation, idle timeouts, unreachable servers, and the cost of building a client.

use super::*;
use tokio::net::TcpListener;

#[tokio::test]
async fn dropping_a_call_mid_stream_closes_the_connection() {
    let server = Server::start(vec![Canned::sse(&[chunk(json!({"content": "Hel"}))]).delivered(Delivery::Hang)]).await;
    let p = provider(ApiMode::ChatCompletions, &server.url, "gpt-test");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let messages = [Message::user("hi")];
    let request = ModelRequest { system: "", messages: &messages, tools: &[], stream: true };
    let client = Client::new();
    let on_delta = move |d: Delta| {
        let _ = tx.send(d);
    };
    let call = client.complete(&p, &request, &on_delta);
    tokio::select! {
        result = call => panic!("the call ended by itself: {result:?}"),
        first = rx.recv() => assert_eq!(first, Some(text("Hel"))),
    }
    // The call future is dropped here; the server must see the connection close.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !server.client_closed.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "the connection stayed open after the call was dropped");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_silent_stream_hits_the_idle_timeout() {
    let server = Server::start(vec![Canned::sse(&[chunk(json!({"content": "Hel"}))]).delivered(Delivery::Hang)]).await;
    let mut p = provider(ApiMode::ChatCompletions, &server.url, "gpt-test");
    p.timeouts.idle = Duration::from_millis(200);
    let started = Instant::now();
    let (err, deltas) = call(&p, &[Message::user("hi")], true).await;
    assert!(
        matches!(err, Err(ModelError::Timeout { phase: TimeoutPhase::Idle, ref partial, .. }) if partial == "Hel"),
        "{err:?}"
    );
    let message = err.as_ref().expect_err("timeout").to_string();
    assert_eq!(
        message,
        format!(
            "the reply from {}/chat/completions stopped: nothing arrived for 0.2 s (idle_timeout_secs)",
            server.url
        )
    );
    assert!(err.as_ref().is_err_and(ModelError::is_transient));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(deltas, vec![text("Hel")]);
}

#[tokio::test]
async fn an_unreachable_server_is_a_connect_error() {
    // Bind then drop a listener: nothing listens on that port any more.
    let port = TcpListener::bind("127.0.0.1:0").await.expect("bind").local_addr().expect("addr").port();
    let p = provider(ApiMode::ChatCompletions, &format!("http://127.0.0.1:{port}/v1"), "m");
    let (err, _) = call(&p, &[Message::user("hi")], true).await;
    assert!(matches!(err, Err(ModelError::Connect { .. })), "{err:?}");
    let message = err.expect_err("refused").to_string();
    assert!(
        message.starts_with(&format!("cannot connect to http://127.0.0.1:{port}/v1/chat/completions: ")),
        "{message}"
    );
    assert!(message.contains("is the server running"), "{message}");
}

#[tokio::test]
async fn client_start_up_and_first_loopback_request_are_cheap() {
    let server = Server::start(vec![ok_chat("hi")]).await;
    let p = provider(ApiMode::ChatCompletions, &server.url, "m");
    let messages = [Message::user("hi")];
    let request = ModelRequest { system: "", messages: &messages, tools: &[], stream: true };
    let started = Instant::now();
    let client = Client::new();
    let built = started.elapsed();
    let reply = client.complete(&p, &request, &|_| {}).await;
    let total = started.elapsed();
    assert_eq!(assistant(&reply.expect("reply")).0, "hi");
    eprintln!("client construction {built:?}; construction + first loopback streamed call {total:?}");
    // Generous bounds: a shared 2-core machine; the point is that no certificate store is read.
    assert!(built < Duration::from_millis(200), "{built:?}");
}
