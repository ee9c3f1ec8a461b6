//! The ledger's sender: every final message to a chat is written to the store first
//! ([`queue`]) and sent from there, in order, by one loop per account ([`send_loop`]). A send the
//! platform refuses for now is tried again later with a growing delay; one the adapter calls
//! permanent is given up at once; both stay in the store for `gateway status`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::StreamExt as _;
use serde::{Deserialize, Serialize};
use talaria_core::runtime::adapter::{AccountInfo, AdapterError, Button, Outbound, TextFormat};
use talaria_core::store::Store;
use talaria_core::store::delivery::{Delivery, Failed, NewDelivery};

use super::{Account, Gateway};
use crate::format::{self, Format};

/// How often the ledger is looked at when nothing wakes the loop (retries come due).
const TICK: Duration = Duration::from_secs(1);
/// Deliveries taken from the ledger at once.
const BATCH: usize = 32;
/// Rounds of claims one call of [`send_due_in`] makes at most.
const ROUNDS: usize = 64;
/// Deliveries of one account sent side by side while the platform answers quickly.
const SENDS_AT_ONCE: usize = 4;
/// Most deliveries of one account in flight at once (each to another chat).
const PARALLEL_SENDS: usize = 16;
/// How long the sends in flight go on before one more starts beside them.
const SEND_ALONE_FOR: Duration = Duration::from_millis(50);
/// How long a claimed delivery is this process's to send: after that (the process died
/// sending it), another sends it.
const CLAIM: Duration = Duration::from_secs(60);

/// How a reply goes out besides its text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reply {
    /// Replace this message (the streamed reply) with the first part instead of sending it.
    pub edit: Option<String>,
    pub reply_to: Option<String>,
    /// Buttons under the last part: (label, data).
    pub buttons: Vec<(String, String)>,
    /// The W3C `traceparent` the deliveries continue (the message's span).
    pub trace: Option<String>,
}

/// What one delivery holds: one message, rendered for its platform.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Body {
    text: String,
    plain: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    edit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reply_to: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    buttons: Vec<(String, String)>,
    /// `text` is markdown not rendered yet: queued where the platform's markup and limits were
    /// not known (a scheduled job's answer). The sender renders it and queues its parts.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    markdown: bool,
    /// The trace its sending continues ([`Reply::trace`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    trace: Option<String>,
}

/// The `format` module's name for a platform's markup.
pub(crate) fn format_of(format: TextFormat) -> Format {
    match format {
        TextFormat::Plain => Format::Plain,
        TextFormat::TelegramHtml => Format::TelegramHtml,
        TextFormat::MatrixHtml => Format::MatrixHtml,
        TextFormat::SlackMrkdwn => Format::Slack,
        TextFormat::DiscordMarkdown => Format::Discord,
    }
}

/// `markdown` as `info`'s platform shows it, cut into messages it takes.
pub(crate) fn render_parts(markdown: &str, info: &AccountInfo) -> Vec<(String, String)> {
    let format = format_of(info.format);
    let parts = format::split(markdown, format, info.max_length);
    let plain = format::split(markdown, Format::Plain, info.max_length);
    if plain.len() == parts.len() {
        parts.into_iter().zip(plain).collect()
    } else {
        parts.into_iter().map(|p| (p.clone(), p)).collect()
    }
}

/// Queue `markdown` to a chat, rendered and cut into the messages the platform takes, one
/// delivery each (`KEY:N`, see [`parts`]).
///
/// Whether every part was kept (a part already kept under its key counts as kept).
pub(crate) async fn queue(
    gateway: &Gateway,
    account: &Account,
    chat_id: &str,
    thread_id: Option<&str>,
    markdown: &str,
    reply: &Reply,
    key: &str,
) -> bool {
    let (mut all, mut n) = (true, 0);
    for (body, key) in parts(account, markdown, reply, key) {
        let new = NewDelivery { platform: &account.name, chat_id, thread_id, body: &body, key: &key };
        match gateway.store.delivery_enqueue(&new).await {
            Ok(_) => n += 1,
            Err(e) => {
                tracing::error!(account = %account.name, "cannot write a reply to the ledger: {e}");
                all = false;
            }
        }
    }
    kept(account, n);
    all
}

/// `n` deliveries of `account` were kept in the ledger: its sender has them to send.
pub(crate) fn kept(account: &Account, n: usize) {
    account.pending.fetch_add(n, Ordering::SeqCst);
    account.outbox.notify_one();
}

/// `markdown` rendered and cut into the messages `account`'s platform takes: each message's
/// body for the ledger, and its key (`KEY:N`). Each is a delivery of its own: a part is sent
/// once, even if queued again (a turn replayed), and a part that failed is retried alone.
pub(crate) fn parts(account: &Account, markdown: &str, reply: &Reply, key: &str) -> Vec<(String, String)> {
    let parts = match &account.info() {
        Some(info) => render_parts(markdown, info),
        None => vec![(markdown.to_string(), markdown.to_string())],
    };
    let count = parts.len();
    let mut bodies = Vec::with_capacity(count);
    for (i, (text, plain)) in parts.into_iter().enumerate() {
        let body = Body {
            text,
            plain,
            edit: if i == 0 { reply.edit.clone() } else { None },
            reply_to: if i == 0 { reply.reply_to.clone() } else { None },
            buttons: if i + 1 == count { reply.buttons.clone() } else { Vec::new() },
            markdown: false,
            trace: reply.trace.clone(),
        };
        bodies.push((serde_json::to_string(&body).unwrap_or_default(), format!("{key}:{i}")));
    }
    bodies
}

/// Send what the ledger holds for `account`, until the gateway stops (then once more, so the
/// replies of turns that just ended go out).
pub(crate) async fn send_loop(gateway: Arc<Gateway>, account: Arc<Account>) {
    loop {
        let stopping = tokio::select! {
            () = gateway.stop.cancelled() => true,
            () = account.outbox.notified() => false,
            () = tokio::time::sleep(TICK) => false,
        };
        if stopping {
            // Turns finishing now queue their replies: wait for the sessions to end first.
            wait_for_sessions(&gateway).await;
            send_due(&gateway, &account).await;
            return;
        }
        send_due(&gateway, &account).await;
    }
}

async fn wait_for_sessions(gateway: &Gateway) {
    for _ in 0..600 {
        if super::lock(&gateway.sessions).is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn send_due(gateway: &Gateway, account: &Account) {
    send_due_in(&gateway.store, account).await;
}

/// Queue `markdown` to a chat of `account` without knowing its platform's markup and limits
/// (its adapter is not connected here): the account's sender renders and cuts it when it
/// sends, each part then a delivery of its own (`KEY:N`).
///
/// # Errors
/// The ledger cannot be written.
pub async fn queue_markdown(
    store: &Store,
    account: &str,
    chat_id: &str,
    thread_id: Option<&str>,
    markdown: &str,
    key: &str,
) -> talaria_core::store::Result<i64> {
    let body = Body { text: markdown.to_string(), markdown: true, ..Body::default() };
    let body = serde_json::to_string(&body).unwrap_or_default();
    store.delivery_enqueue(&NewDelivery { platform: account, chat_id, thread_id, body: &body, key }).await
}

/// Send what the ledger holds for `account` and is due now (rendering markdown queued
/// unrendered first). Each delivery is claimed first, so gateway processes sharing the ledger
/// send it once, and a chat's one after the other.
pub(crate) async fn send_due_in(store: &Store, account: &Account) {
    let Some(info) = account.info() else { return };
    // A chat's next delivery is claimable once the one before it was sent: round after round
    // until nothing is due (or a bound, so one sender never starves the others).
    for _ in 0..ROUNDS {
        let due = match store.deliveries_claim(&account.name, BATCH, CLAIM).await {
            Ok(due) => due,
            Err(e) => return tracing::error!(account = %account.name, "cannot read the ledger: {e}"),
        };
        if due.is_empty() {
            return;
        }
        let mut sends = Vec::with_capacity(due.len());
        for delivery in due {
            let body: Body = match serde_json::from_str(&delivery.body) {
                Ok(body) => body,
                Err(e) => {
                    let e = format!("a ledger entry that is not a message: {e}");
                    if let Err(e) = give_up(store, &delivery, &e).await {
                        tracing::error!(account = %account.name, "cannot record a delivery: {e}");
                    }
                    continue;
                }
            };
            if body.markdown {
                render_queued(store, account, &info, &delivery, &body.text).await;
                continue;
            }
            // (An edit shows the same however often it is made.)
            if delivery.orphaned && body.edit.is_none() {
                tracing::warn!(
                    account = %account.name,
                    chat = %delivery.chat_id,
                    "a process ended while sending this message; sending it again (if the platform took it then, it shows twice)"
                );
            }
            sends.push((delivery, body));
        }
        send_all(store, account, &info, sends).await;
    }
}

/// Send `sends` (of different chats: a claim holds at most one delivery per chat).
/// [`SENDS_AT_ONCE`] side by side while the platform answers quickly (a send is mostly waiting
/// for it, and the replies of a burst of chats would otherwise queue behind each other); a
/// send slower than [`SEND_ALONE_FOR`] lets one more start beside them, up to
/// [`PARALLEL_SENDS`], so with a slow platform one chat's reply does not wait for another's.
///
/// Why not all at once: a send the platform took while this process dies, before it was
/// recorded, is sent again by the next process (the ledger delivers at least once, and the
/// platforms have no way to ask whether a message arrived). Sending few at a time while that
/// costs nothing keeps such doubles to the rare sends that were in flight at the crash.
async fn send_all(store: &Store, account: &Account, info: &AccountInfo, sends: Vec<(Delivery, Body)>) {
    let one = |(delivery, body): (Delivery, Body)| {
        use tracing::Instrument as _;
        let span = tracing::info_span!(
            target: talaria_protocol::trace::TARGET,
            "send",
            otel.name = format!("send {}", account.name),
            otel.kind = "producer",
            messaging.system = %account.name,
            messaging.operation.type = "send",
            talaria.delivery.id = delivery.id,
            talaria.delivery.edit = body.edit.is_some(),
            talaria.outcome = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        talaria_core::telemetry::set_parent(&span, body.trace.as_deref());
        async move {
            let outcome = deliver(account, info, &delivery, body).await;
            let span = tracing::Span::current();
            span.record("talaria.outcome", if outcome.is_ok() { "sent" } else { "failed" });
            if outcome.is_err() {
                span.record("otel.status_code", "ERROR");
            }
            let _ = account.pending.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| Some(n.saturating_sub(1)));
            record(store, account, &delivery, outcome).await;
        }
        .instrument(span)
    };
    let mut waiting = sends.into_iter();
    let mut running = futures_util::stream::FuturesUnordered::new();
    running.extend(waiting.by_ref().take(SENDS_AT_ONCE).map(one));
    while !running.is_empty() {
        tokio::select! {
            // One done: the next takes its place.
            Some(()) = running.next() => running.extend(waiting.next().map(one)),
            // None done for a while: the platform is slow, one more goes beside them.
            () = tokio::time::sleep(SEND_ALONE_FOR), if running.len() < PARALLEL_SENDS && waiting.len() > 0 => {
                running.extend(waiting.next().map(one));
            }
        }
    }
}

/// Queue the parts of markdown that was queued unrendered, and mark it done.
async fn render_queued(store: &Store, account: &Account, info: &AccountInfo, delivery: &Delivery, markdown: &str) {
    let parts = render_parts(markdown, info);
    for (i, (text, plain)) in parts.iter().enumerate() {
        let body = Body { text: text.clone(), plain: plain.clone(), ..Body::default() };
        let body = serde_json::to_string(&body).unwrap_or_default();
        let key = format!("{}:{i}", delivery.key);
        let new = NewDelivery {
            platform: &account.name,
            chat_id: &delivery.chat_id,
            thread_id: delivery.thread_id.as_deref(),
            body: &body,
            key: &key,
        };
        if let Err(e) = store.delivery_enqueue(&new).await {
            return tracing::error!(account = %account.name, "cannot write a reply to the ledger: {e}");
        }
    }
    if let Err(e) = store.delivery_sent(delivery.id, &format!("rendered into {} parts", parts.len())).await {
        tracing::error!(account = %account.name, "cannot record a delivery: {e}");
    }
}

/// Write down how sending `delivery` went.
async fn record(store: &Store, account: &Account, delivery: &Delivery, outcome: Result<String, AdapterError>) {
    let (name, chat, id) = (&account.name, &delivery.chat_id, delivery.id);
    let (recorded, error) = match outcome {
        Ok(sent) => {
            let recorded = store.delivery_sent(id, &sent).await.map(|()| None);
            if recorded.is_ok() {
                tracing::info!(account = %name, chat = %chat, delivery = id, sent = %sent, "reply delivered");
            }
            (recorded, String::new())
        }
        Err(AdapterError::Permanent(e)) => {
            tracing::warn!(account = %name, chat = %chat, delivery = id, "the platform refused a message for good: {e}");
            (give_up(store, delivery, &e).await.map(|()| None), e)
        }
        Err(e) => {
            let e = e.to_string();
            (store.delivery_failed(id, &e).await.map(Some), e)
        }
    };
    match recorded {
        Ok(Some(Failed::Retry { attempts })) => {
            tracing::warn!(account = %name, chat = %chat, delivery = id, attempts, "sending failed ({error}); it will be tried again");
        }
        Ok(Some(Failed::GaveUp)) => {
            tracing::error!(account = %name, chat = %chat, delivery = id, "sending failed too often ({error}); given up");
        }
        Ok(None) => {}
        Err(e) => tracing::error!(account = %name, "cannot record a delivery: {e}"),
    }
}

/// Mark a delivery failed for good.
async fn give_up(store: &Store, delivery: &Delivery, error: &str) -> talaria_core::store::Result<()> {
    while let Failed::Retry { .. } = store.delivery_failed(delivery.id, error).await? {}
    Ok(())
}

/// Send one delivery: a new message, or an edit of the streamed one.
async fn deliver(
    account: &Account,
    info: &AccountInfo,
    delivery: &Delivery,
    body: Body,
) -> Result<String, AdapterError> {
    let message = Outbound {
        chat_id: delivery.chat_id.clone(),
        thread_id: delivery.thread_id.clone(),
        text: body.text,
        plain: body.plain,
        reply_to: body.reply_to,
        buttons: body.buttons.into_iter().map(|(label, data)| Button { label, data }).collect(),
    };
    match body.edit {
        Some(edit) if info.can_edit => match account.adapter.edit(&edit, &message).await {
            Ok(()) => Ok(edit),
            // The streamed message is gone: send the answer anew.
            Err(AdapterError::Permanent(_)) => account.adapter.send(&message).await,
            Err(e) => Err(e),
        },
        _ => account.adapter.send(&message).await,
    }
}
