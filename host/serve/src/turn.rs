//! One API turn: a conversation of the host's started for it (a named session resumed, or a new
//! one), the user's text submitted, and its events made into [`Piece`]s for the client. The
//! turn is stopped when the client goes away or asks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use talaria_core::{Platform, Start};
use talaria_protocol::{Decision, Event, Op, Outcome, Usage};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::{Approvals, Served};

/// What the client asked for.
pub(crate) struct Asked {
    /// The title of the conversation's session (`api:NAME`, `a2a:CONTEXT`): made on first use
    /// and continued after; none: a session of its own.
    pub title: Option<String>,
    /// The text of the turn for a session that keeps its own history: the user's message
    /// (see [`crate::openai`]).
    pub text: String,
    /// The text of the turn for a new session: the earlier messages before it, as a transcript.
    pub transcript: String,
    /// Stops the turn when cancelled (as the client going away does).
    pub stop: CancellationToken,
    /// How its approvals are answered (the caller's token says).
    pub approvals: Approvals,
    /// The trace the turn continues ([`crate::Caller::trace`]).
    pub trace: Option<String>,
}

/// What a turn sends the client, in order: text as it comes, then how it ended.
pub(crate) enum Piece {
    Text(String),
    /// One message of the turn ended (text before a tool call): the next text, if any, is
    /// another, parted from it by a blank line.
    Break,
    Done(Done),
}

/// How a turn ended.
pub(crate) struct Done {
    pub outcome: Outcome,
    pub usage: Usage,
    /// What was refused for want of an approval, one line each, as the client is told.
    pub refused: Vec<String>,
}

/// Why a turn could not run at all.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Failed {
    #[error("{0}")]
    Start(String),
}

/// One request at a time for each named conversation (a second waits for the first's answer,
/// as a chat's next message would).
#[derive(Default)]
pub(crate) struct Named(Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

impl Named {
    /// Wait for `name`'s turn.
    async fn hold(&self, name: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut names = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            // Names nobody holds or waits for are forgotten, so the map stays as small as what
            // is in flight.
            names.retain(|_, lock| Arc::strong_count(lock) > 1);
            names.entry(name.to_ascii_lowercase()).or_default().clone()
        };
        lock.lock_owned().await
    }
}

/// Run `asked` and send its pieces to `out`; stops the turn when `out` is closed or
/// `asked.stop` is cancelled.
pub(crate) async fn run(served: Arc<Served>, asked: Asked, out: mpsc::Sender<Piece>) -> Result<(), Failed> {
    let _held = match &asked.title {
        Some(title) => Some(served.sessions.hold(title).await),
        None => None,
    };
    let resume = match &asked.title {
        Some(title) => match served.host.store().resolve_session(title).await {
            Ok(info) => Some(info.id),
            Err(talaria_core::store::Error::SessionNotFound { .. }) => None,
            Err(e) => return Err(Failed::Start(e.to_string())),
        },
        None => None,
    };
    let resumed = resume.is_some();
    let named = resume.is_none().then_some(asked.title.as_deref()).flatten();
    let start = Start {
        source: "api".into(),
        platform: Platform::Api,
        holder: "talaria serve".into(),
        interactive: true,
        stream: Some(true),
        resume,
        ..Start::default()
    };
    let mut conversation = served.host.start(start).await.map_err(|e| Failed::Start(e.to_string()))?;
    let approvals = asked.approvals;
    let text = if resumed { asked.text } else { asked.transcript };
    let turn = conversation.submit(Op::UserTurn { text, images: Vec::new(), sender: None, trace: asked.trace });
    let mut refused = Vec::new();
    // The client went away: the turn is stopped, and the rest of it only waited for.
    let mut gone = false;
    // Asked to stop: the turn is interrupted, and still told to the end.
    let mut interrupted = false;
    loop {
        let stamped = tokio::select! {
            stamped = conversation.next_event() => stamped,
            () = out.closed(), if !gone => {
                gone = true;
                if !std::mem::replace(&mut interrupted, true) {
                    conversation.submit(Op::Interrupt);
                }
                continue;
            }
            () = asked.stop.cancelled(), if !interrupted => {
                interrupted = true;
                conversation.submit(Op::Interrupt);
                continue;
            }
        };
        let Some(stamped) = stamped else { break };
        let piece = match stamped.event {
            Event::ApprovalNeeded(asked) => {
                let decision = match approvals {
                    Approvals::Allow => Decision::Once,
                    Approvals::Deny => {
                        refused.push(format!(
                            "plugin '{}' wanted to {} `{}` ({}): refused, as approvals are not given through this API",
                            asked.plugin,
                            if asked.kind == talaria_protocol::ApprovalKind::Network { "connect to" } else { "run" },
                            asked.command,
                            asked.reason
                        ));
                        Decision::Deny
                    }
                };
                conversation.submit(Op::Approve { id: asked.id, decision });
                None
            }
            Event::ClarifyNeeded(question) => {
                let text = "Nobody can answer questions through this API: go on with your best judgement.".into();
                conversation.submit(Op::Answer { id: question.id, text });
                None
            }
            Event::TextDelta { text } if stamped.op == turn => Some(Piece::Text(text)),
            Event::MessageEnd if stamped.op == turn => Some(Piece::Break),
            Event::TurnEnd(end) if stamped.op == turn => {
                let done = Done { outcome: end.outcome, usage: end.usage, refused: std::mem::take(&mut refused) };
                if !gone {
                    let _ = out.send(Piece::Done(done)).await;
                }
                break;
            }
            _ => None,
        };
        if let Some(piece) = piece
            && !gone
            && out.send(piece).await.is_err()
        {
            gone = true;
            if !std::mem::replace(&mut interrupted, true) {
                conversation.submit(Op::Interrupt);
            }
        }
    }
    // A new session is named once its first turn saved it (a title needs a saved session);
    // the name's next request waits for this.
    if let Some(title) = named {
        conversation.run(Op::SetTitle { title: title.to_string() }, |_| {}).await;
    }
    conversation.shutdown().await;
    Ok(())
}
