//! Servers that misbehave: each fault gets its own precise message, naming the URL, within the
//! configured limits, and is retried only when a retry can help.

use super::*;

fn quick(p: &mut Provider) {
    p.timeouts.connect = Duration::from_millis(500);
    p.timeouts.first_byte = Duration::from_millis(300);
    p.timeouts.idle = Duration::from_millis(300);
}

fn chain_of(p: Provider, retries: u32) -> Chain {
    Chain { providers: vec![p], retries, base_delay: Duration::from_millis(1), max_delay: Duration::from_millis(5) }
}

async fn run(chain: &Chain) -> (Result<ModelReply, ModelError>, Vec<String>) {
    let notices = Arc::new(Mutex::new(Vec::new()));
    let sink = notices.clone();
    let messages = [Message::user("hi")];
    let request = ModelRequest { system: "", messages: &messages, tools: &[], stream: true };
    let mut state = ChainState::new();
    let on_notice = move |n: String| sink.lock().expect("lock").push(n);
    let result = chain.complete(&Client::new(), &mut state, &request, &|_| {}, &on_notice).await;
    let notices = notices.lock().expect("lock").clone();
    (result, notices)
}

#[tokio::test]
async fn a_server_that_never_answers_hits_the_first_byte_timeout_and_says_so() {
    let server = Server::start(vec![Canned::text(200, "").delivered(Delivery::Never)]).await;
    let mut p = provider(ApiMode::ChatCompletions, &server.url, "m");
    quick(&mut p);
    let started = Instant::now();
    let (err, _) = call(&p, &[Message::user("hi")], true).await;
    let took = started.elapsed();
    let err = err.expect_err("no answer");
    assert!(matches!(err, ModelError::Timeout { phase: TimeoutPhase::FirstByte, .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!("no reply from {}/chat/completions within 0.3 s (first_byte_timeout_secs)", server.url)
    );
    assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(3), "{took:?}");
    assert!(err.is_transient(), "a server that is slow now may answer later");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !server.client_closed.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "the connection stayed open after the timeout");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_server_that_accepts_and_never_answers_gets_the_request_once_and_the_setting_is_named() {
    // llama-cpp-python goes on generating after the client leaves: a retry would queue a copy.
    let never = || Canned::text(200, "").delivered(Delivery::Never);
    let server = Server::start(vec![never(), never()]).await;
    let mut p = provider(ApiMode::ChatCompletions, &server.url, "m");
    quick(&mut p);
    let started = Instant::now();
    let (err, notices) = run(&chain_of(p, 3)).await;
    assert!(matches!(err, Err(ModelError::Timeout { phase: TimeoutPhase::FirstByte, .. })), "{err:?}");
    assert_eq!(server.requests().len(), 1, "not sent again");
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    assert_eq!(
        notices,
        ["custom/m did not answer within 0.3 s (first_byte_timeout_secs) after accepting the request; not retried, \
          since a server may keep generating after the client leaves (set `retry_timeouts = true` under [model] to \
          retry); no fallback provider remains"]
    );
}

#[tokio::test]
async fn with_retry_timeouts_a_hanging_server_costs_a_bounded_time_and_the_give_up_is_said() {
    let never = || Canned::text(200, "").delivered(Delivery::Never);
    let server = Server::start(vec![never(), never()]).await;
    let mut p = provider(ApiMode::ChatCompletions, &server.url, "m");
    quick(&mut p);
    p.retry_timeouts = true;
    let started = Instant::now();
    let (err, notices) = run(&chain_of(p, 1)).await;
    let took = started.elapsed();
    assert!(matches!(err, Err(ModelError::Timeout { phase: TimeoutPhase::FirstByte, .. })), "{err:?}");
    assert_eq!(server.requests().len(), 2, "one attempt and one retry");
    assert!(took < Duration::from_secs(4), "two attempts of 0.3 s each, not minutes: {took:?}");
    assert_eq!(notices.len(), 2, "{notices:#?}");
    assert!(
        notices[0].starts_with("no reply within 0.3 s (first_byte_timeout_secs) from custom/m, retrying in"),
        "{}",
        notices[0]
    );
    assert!(
        notices[1].starts_with("giving up after 2 attempts over ")
            && notices[1].ends_with("(no reply within 0.3 s (first_byte_timeout_secs))"),
        "{}",
        notices[1]
    );
}

#[tokio::test]
async fn a_stream_that_goes_silent_is_not_asked_again_but_the_fallback_is() {
    let silent = Canned::sse(&[chunk(json!({"content": "Hel"}))]).delivered(Delivery::Hang);
    let server = Server::start(vec![silent]).await;
    let backup = Server::start(vec![ok_chat("from the backup")]).await;
    let mut p = provider(ApiMode::ChatCompletions, &server.url, "m");
    quick(&mut p);
    let b = provider(ApiMode::ChatCompletions, &backup.url, "backup");
    let chain = Chain::new(p).with_fallbacks([b]);
    let (reply, notices) = run(&Chain { base_delay: Duration::from_millis(1), ..chain }).await;
    assert_eq!(assistant(&reply.expect("the backup answers")).0, "from the backup");
    assert_eq!((server.requests().len(), backup.requests().len()), (1, 1));
    assert_eq!(notices.len(), 1, "{notices:#?}");
    assert!(
        notices[0].starts_with(
            "custom/m went silent for 0.3 s (idle_timeout_secs) in the middle of its reply; 3 \
             characters of the reply were not kept; not retried"
        ) && notices[0]
            .ends_with("(set `retry_timeouts = true` under [model] to retry) — trying fallback custom/backup"),
        "{}",
        notices[0]
    );
}

#[tokio::test]
async fn a_silent_error_body_still_reports_its_status_in_time() {
    // A 503 whose body never ends: the status is what matters, and the wait is bounded.
    let server = Server::start(vec![Canned::text(503, "<html>busy").delivered(Delivery::Hang)]).await;
    let mut p = provider(ApiMode::ChatCompletions, &server.url, "m");
    quick(&mut p);
    let started = Instant::now();
    let (err, _) = call(&p, &[Message::user("hi")], true).await;
    assert!(matches!(err, Err(ModelError::Http { status: 503, .. })), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

const PAGE: &str =
    "<!DOCTYPE html>\n<html><head><title>Welcome to nginx!</title></head><body><h1>Welcome</h1></body></html>";

#[tokio::test]
async fn an_html_page_is_quoted_and_not_called_a_network_error() {
    let mut untyped = Canned::text(200, PAGE);
    untyped.headers.clear();
    let server = Server::start(vec![Canned::text(200, PAGE), untyped, Canned::text(200, PAGE)]).await;
    let p = provider(ApiMode::ChatCompletions, &server.url, "m");
    let url = format!("{}/chat/completions", server.url);
    for (what, stream) in [("text/html to a streamed request", true), ("no content type", true), ("whole", false)] {
        let (err, _) = call(&p, &[Message::user("hi")], stream).await;
        let err = err.expect_err(what);
        assert!(matches!(err, ModelError::Malformed { .. }), "{what}: {err:?}");
        let text = err.to_string();
        assert!(
            text.starts_with(&format!(
                "{url} sent a reply talaria cannot read: an HTML page titled \"Welcome to nginx!\""
            )),
            "{what}: {text}"
        );
        assert!(text.contains("`<!DOCTYPE html> <html><head>"), "{what}: the first bytes are quoted: {text}");
        assert!(text.contains("is base_url right?"), "{what}: {text}");
        assert!(!err.is_transient(), "the same page comes back on a retry");
    }
}

#[tokio::test]
async fn a_stream_cut_mid_way_is_retried_and_its_partial_reported() {
    let cut = || {
        Canned::sse(&[chunk(json!({"content": "Once upon"})), chunk(json!({"content": " a time"}))])
            .delivered(Delivery::ChunkedCut)
    };
    let server = Server::start(vec![cut(), cut()]).await;
    let p = provider(ApiMode::ChatCompletions, &server.url, "m");
    let (err, notices) = run(&chain_of(p, 1)).await;
    let err = err.expect_err("cut twice");
    assert!(matches!(err, ModelError::Cut { silent: false, .. }), "{err:?}");
    assert_eq!(err.partial(), "Once upon a time");
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "the reply from {}/chat/completions was cut off: the connection broke mid-reply",
            server.url
        )),
        "{text}"
    );
    assert_eq!(server.requests().len(), 2, "a cut stream is worth one more try here");
    assert!(
        notices[0].starts_with("reply cut off after 16 characters (not kept) from custom/m, retrying"),
        "{notices:?}"
    );
}

#[tokio::test]
async fn a_400_with_an_empty_stream_is_reported_once_and_not_retried() {
    let empty_400 = Canned {
        status: 400,
        headers: vec![("content-type".into(), "text/event-stream".into())],
        body: Vec::new(),
        delivery: Delivery::Whole,
    };
    let server = Server::start(vec![empty_400.clone(), empty_400.clone(), empty_400]).await;
    let p = provider(ApiMode::ChatCompletions, &server.url, "m");
    let (err, notices) = run(&chain_of(p, 3)).await;
    let err = err.expect_err("400");
    assert_eq!(err.to_string(), format!("{}/chat/completions answered HTTP 400: Bad Request", server.url));
    assert_eq!(server.requests().len(), 1, "a 400 comes back the same: no retry");
    assert!(notices.is_empty(), "{notices:?}");
}

#[tokio::test]
async fn an_empty_200_stream_is_retried_once_only() {
    let pings = || Canned::sse_body(": ping\n\n: ping\n\n".into());
    let server = Server::start(vec![pings(), pings(), pings(), pings()]).await;
    let p = provider(ApiMode::ChatCompletions, &server.url, "m");
    let (err, notices) = run(&chain_of(p, 3)).await;
    let err = err.expect_err("empty");
    assert!(matches!(err, ModelError::Cut { silent: true, .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("the server closed the stream without sending any event (only keep-alive comments)"),
        "{text}"
    );
    assert!(text.contains("stream = false"), "says what to try: {text}");
    assert_eq!(server.requests().len(), 2, "one retry, not three");
    assert!(notices[0].starts_with("stream closed before any reply from custom/m, retrying"), "{notices:?}");
}

#[tokio::test]
async fn tls_to_a_plain_http_port_is_a_tls_failure_and_moves_on() {
    // A plain HTTP server answers a TLS ClientHello with an HTTP error, as real ones do.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let https = format!("https://{}/v1", listener.local_addr().expect("addr"));
    let _server = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut hello = [0u8; 512];
            let _ = socket.read(&mut hello).await;
            let _ = socket.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n").await;
        }
    });
    let p = provider(ApiMode::ChatCompletions, &https, "m");
    let (err, _) = run(&chain_of(p, 3)).await;
    let err = err.expect_err("tls");
    assert!(matches!(err, ModelError::Tls { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.starts_with(&format!("TLS handshake with {https}/chat/completions failed: ")), "{text}");
    assert!(text.contains("an http:// base_url may be meant"), "{text}");
    assert!(err.is_fatal_for_provider());
}

#[tokio::test]
async fn a_connection_that_cannot_be_made_in_time_names_connect_timeout_secs() {
    // A listener whose accept queue is full: the kernel drops further connection attempts.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
    let addr = socket.local_addr().expect("addr");
    let _listener = socket.listen(0).expect("listen");
    let mut fillers = Vec::new();
    for _ in 0..8 {
        if let Ok(Ok(s)) = tokio::time::timeout(Duration::from_millis(100), tokio::net::TcpStream::connect(addr)).await
        {
            fillers.push(s);
        }
    }
    let mut p = provider(ApiMode::ChatCompletions, &format!("http://{addr}/v1"), "m");
    p.timeouts.connect = Duration::from_millis(300);
    p.timeouts.first_byte = Duration::from_secs(5);
    let started = Instant::now();
    let (err, _) = call(&p, &[Message::user("hi")], true).await;
    let err = err.expect_err("no connection");
    assert!(matches!(err, ModelError::Timeout { phase: TimeoutPhase::Connect, .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "cannot connect to http://{addr}/v1/chat/completions: no connection within 0.3 s (connect_timeout_secs)"
        )
    );
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn a_401_says_to_check_the_key_and_where_it_lives() {
    let server =
        Server::start(vec![Canned::json(401, json!({"error": {"message": "Incorrect API key provided"}}))]).await;
    let p = provider(ApiMode::ChatCompletions, &server.url, "m");
    let (err, _) = call(&p, &[Message::user("hi")], true).await;
    let err = err.expect_err("401");
    assert!(matches!(&err, ModelError::Http { message, .. } if message == "Incorrect API key provided"), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("answered HTTP 401: Incorrect API key provided (the API key was refused"), "{text}");
    assert!(text.contains(".talaria/.env") && text.contains("key_env"), "{text}");
}

#[tokio::test]
async fn a_404_names_the_url_and_the_api_mode_that_chose_it() {
    let server = Server::start(vec![Canned::json(404, json!({"detail": "Not Found"}))]).await;
    let p = provider(ApiMode::Responses, &server.url, "m");
    let (err, _) = call(&p, &[Message::user("hi")], true).await;
    assert_eq!(
        err.expect_err("404").to_string(),
        format!(
            "{}/responses answered HTTP 404: Not Found (talaria posted to this URL because api_mode is \
             `responses`: check base_url and api_mode)",
            server.url
        )
    );
}
