//! Retries and fallback: a [`Chain`] is the primary provider followed by the fallback providers,
//! and a [`ChainState`] remembers, within one turn, which of them is answering.
//!
//! One [`Chain::complete`] call:
//! - starts at the active provider (the primary at the start of a turn);
//! - retries transient failures (429, 5xx, 408/409/425, connection failures, connect
//!   timeouts, cut streams, empty answers) up to [`Chain::retries`] times — a stream closed without a word
//!   and an empty answer at most once ([`ModelError::retry_limit`]) — waiting
//!   `base_delay * 2^(n-1)` with jitter (between half and all of it), or the provider's
//!   `Retry-After`, never more than `max_delay`. When `Retry-After` asks for more than
//!   `max_delay` and a fallback remains, it moves on at once instead;
//! - never retries what comes back the same: other 4xx statuses, TLS failures, replies talaria
//!   cannot read;
//! - does not send again a request the server accepted and then left unanswered (a first-byte,
//!   idle or total limit ran out, [`ModelError::may_still_run`]): a local server such as
//!   llama-cpp-python goes on generating after the client leaves, so every retry would queue
//!   one more copy of the same work. It moves to the next provider instead, and says so and
//!   which setting would retry: `retry_timeouts = true` under `[model]` (or in the fallback
//!   entry), [`Provider::retry_timeouts`];
//! - moves to the next provider at once on 401/403/404, TLS failures and configuration errors,
//!   and after the retries on anything else. Every retry and every switch is announced through
//!   `on_notice`, and so is giving up after more than one attempt (how many, over how long).
//!
//! Each attempt is bounded by the provider's [`Timeouts`](super::Timeouts), so the whole call
//! is bounded too.
//!
//! How "at most one switch per turn" (hermes §1) is read here: switching is one-way and sticky
//! for the turn. Once a fallback answers, the rest of the turn's calls go straight to it instead
//! of trying the failing primary again on every call; the primary comes back with
//! [`ChainState::new_turn`]. If the fallback fails completely too, the chain continues down the
//! list rather than giving up while providers remain. A call that exhausts the list returns the
//! last provider's error and leaves the state at the last provider until the next turn.
//!
//! Deltas already streamed by an attempt that then failed are not withdrawn: a renderer should
//! treat a notice as "the answer starts over".
//!
//! ```no_run
//! # async fn demo(primary: talaria_agent::model::Provider, fallback: talaria_agent::model::Provider) {
//! use talaria_agent::model::{Chain, ChainState, Client, ModelRequest};
//! let chain = Chain::new(primary).with_fallbacks([fallback]);
//! let mut state = ChainState::new();
//! let messages = [talaria_protocol::Message::user("hi")];
//! let request = ModelRequest { system: "", messages: &messages, tools: &[], stream: true };
//! let reply = chain.complete(&Client::new(), &mut state, &request, &|_| {}, &|notice| eprintln!("{notice}")).await;
//! # let _ = reply;
//! # }
//! ```

use std::time::Duration;

use super::{Client, Delta, ModelError, ModelReply, ModelRequest, Provider, TimeoutPhase};

/// Default retries of a transient failure on one provider.
pub const DEFAULT_RETRIES: u32 = 3;
/// Default first backoff delay.
pub const DEFAULT_BASE_DELAY: Duration = Duration::from_secs(1);
/// Default longest wait between two attempts.
pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(30);

/// The providers of one task in order of preference, with the retry policy.
#[derive(Debug, Clone)]
pub struct Chain {
    /// `[0]` is the primary, the rest are the fallback providers in order. Must not be empty.
    pub providers: Vec<Provider>,
    /// Retries of a transient failure on each provider (so `retries + 1` attempts).
    pub retries: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl Chain {
    /// The primary model's name ("" when the chain is empty).
    pub fn primary_model(&self) -> String {
        self.providers.first().map(|p| p.model.clone()).unwrap_or_default()
    }
}

/// Which provider of a [`Chain`] answers for the rest of the turn.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChainState {
    active: usize,
}

impl ChainState {
    /// At the primary.
    pub fn new() -> Self {
        Self::default()
    }

    /// Back to the primary: call at the start of every turn.
    pub fn new_turn(&mut self) {
        self.active = 0;
    }

    /// The index in [`Chain::providers`] of the active provider.
    pub fn active_index(&self) -> usize {
        self.active
    }

    /// Whether a fallback is answering instead of the primary.
    pub fn on_fallback(&self) -> bool {
        self.active > 0
    }
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Next {
    Retry(Duration),
    MoveOn,
    /// Move on without sending again a request the server may still be working on.
    NotRepeated,
}

impl Chain {
    /// A chain of one provider with the default retry policy.
    pub fn new(primary: Provider) -> Self {
        Self {
            providers: vec![primary],
            retries: DEFAULT_RETRIES,
            base_delay: DEFAULT_BASE_DELAY,
            max_delay: DEFAULT_MAX_DELAY,
        }
    }

    /// Appends fallback providers, tried in order after the primary.
    pub fn with_fallbacks(mut self, fallbacks: impl IntoIterator<Item = Provider>) -> Self {
        self.providers.extend(fallbacks);
        self
    }

    /// The provider answering for the rest of this turn.
    ///
    /// # Panics
    /// When `providers` is empty.
    pub fn active(&self, state: &ChainState) -> &Provider {
        &self.providers[state.active.min(self.providers.len().saturating_sub(1))]
    }

    /// One model call with retries and fallback; see the module documentation.
    ///
    /// # Errors
    /// The last provider's error when every provider failed; [`ModelError::Config`] for a chain
    /// without providers.
    pub async fn complete(
        &self,
        client: &Client,
        state: &mut ChainState,
        request: &ModelRequest<'_>,
        on_delta: &(dyn Fn(Delta) + Send + Sync),
        on_notice: &(dyn Fn(String) + Send + Sync),
    ) -> Result<ModelReply, ModelError> {
        let mut last_error = ModelError::Config("no model provider is configured".into());
        let start = state.active.min(self.providers.len());
        let started = std::time::Instant::now();
        let mut attempts = 0u32;
        for (index, provider) in self.providers.iter().enumerate().skip(start) {
            state.active = index;
            let has_next = index + 1 < self.providers.len();
            let mut retry = 0;
            let (error, not_repeated) = loop {
                attempts += 1;
                let error = match client.complete(provider, request, on_delta).await {
                    Ok(reply) => return Ok(reply),
                    Err(error) => error,
                };
                match self.next_step(provider, &error, retry, has_next) {
                    Next::Retry(delay) => {
                        retry += 1;
                        on_notice(format!(
                            "{} from {}, retrying in {:.1}s ({retry}/{})",
                            what_failed(&error),
                            provider.label(),
                            delay.as_secs_f64(),
                            self.retries
                        ));
                        tokio::time::sleep(delay).await;
                    }
                    Next::MoveOn => break (error, false),
                    Next::NotRepeated => break (error, true),
                }
            };
            let next = self.providers.get(index + 1);
            if not_repeated {
                let setting = if index == 0 { "under [model]" } else { "in its [[fallback_providers]] entry" };
                let then = next.map_or_else(
                    || "; no fallback provider remains".to_string(),
                    |next| format!(" — trying fallback {}", next.label()),
                );
                on_notice(format!(
                    "{} {}; not retried, since a server may keep generating after the client leaves (set \
                     `retry_timeouts = true` {setting} to retry){then}",
                    provider.label(),
                    left_unanswered(&error),
                ));
            } else if let Some(next) = next {
                on_notice(format!(
                    "{} failed ({}); falling back to {}",
                    provider.label(),
                    reason(&error),
                    next.label()
                ));
            }
            last_error = error;
        }
        if attempts > 1 {
            on_notice(format!(
                "giving up after {attempts} attempts over {:.1}s ({})",
                started.elapsed().as_secs_f64(),
                what_failed(&last_error)
            ));
        }
        Err(last_error)
    }

    /// Retry (after how long) or move on, after the `retry`-th retry at `provider` failed with
    /// `error`.
    fn next_step(&self, provider: &Provider, error: &ModelError, retry: u32, has_next: bool) -> Next {
        if error.may_still_run() && !provider.retry_timeouts {
            return Next::NotRepeated;
        }
        let limit = error.retry_limit().map_or(self.retries, |cap| cap.min(self.retries));
        if error.is_fatal_for_provider() || !error.is_transient() || retry >= limit {
            return Next::MoveOn;
        }
        let asked = match error {
            ModelError::Http { retry_after, .. } => *retry_after,
            ModelError::Connect { .. }
            | ModelError::Tls { .. }
            | ModelError::Network { .. }
            | ModelError::Timeout { .. }
            | ModelError::Malformed { .. }
            | ModelError::Cut { .. }
            | ModelError::Empty { .. }
            | ModelError::Config(_) => None,
        };
        match asked {
            Some(wait) if wait > self.max_delay && has_next => Next::MoveOn,
            Some(wait) => Next::Retry(wait.min(self.max_delay)),
            None => Next::Retry(self.backoff(retry + 1)),
        }
    }

    /// The jittered wait before retry number `n` (1-based).
    fn backoff(&self, n: u32) -> Duration {
        let full = self.base_delay.saturating_mul(2u32.saturating_pow(n.saturating_sub(1))).min(self.max_delay);
        full.mul_f64(0.5 + fastrand::f64() * 0.5)
    }
}

/// The failure in a few words, for retry notices: `HTTP 429`, `no reply within 120 s
/// (first_byte_timeout_secs)`, ...
fn what_failed(error: &ModelError) -> String {
    match error {
        ModelError::Http { status, .. } => format!("HTTP {status}"),
        ModelError::Connect { .. } => "cannot connect".into(),
        ModelError::Tls { .. } => "TLS failure".into(),
        ModelError::Network { .. } => "connection failed".into(),
        ModelError::Timeout { phase, limit, partial, .. } => {
            let (limit, key, kept) = (super::provider::seconds(*limit), phase.key(), not_kept(partial));
            match phase {
                TimeoutPhase::Connect => format!("no connection within {limit} ({key})"),
                TimeoutPhase::FirstByte => format!("no reply within {limit} ({key})"),
                TimeoutPhase::Idle => format!("reply stopped: silent for {limit} ({key}{kept})"),
                TimeoutPhase::Total => format!("reply took longer than {limit} ({key}{kept})"),
            }
        }
        ModelError::Malformed { .. } => "unreadable reply".into(),
        ModelError::Cut { silent: true, .. } => "stream closed before any reply".into(),
        ModelError::Cut { partial, .. } if partial.is_empty() => "reply cut off".into(),
        ModelError::Cut { partial, .. } => {
            format!("reply cut off after {} characters (not kept)", partial.chars().count())
        }
        ModelError::Empty { .. } => "empty reply".into(),
        ModelError::Config(_) => "configuration error".into(),
    }
}

/// `; N characters of the reply were not kept`, or nothing when none arrived.
fn not_kept(partial: &str) -> String {
    if partial.is_empty() {
        String::new()
    } else {
        format!("; {} characters of the reply were not kept", partial.chars().count())
    }
}

/// What a provider did with a request it accepted and never finished answering, for the
/// notice that says why it was not sent again: `did not answer within 120 s
/// (first_byte_timeout_secs) after accepting the request`.
fn left_unanswered(error: &ModelError) -> String {
    match error {
        ModelError::Timeout { phase, limit, partial, .. } => {
            let (limit, key, kept) = (super::provider::seconds(*limit), phase.key(), not_kept(partial));
            match phase {
                TimeoutPhase::FirstByte => format!("did not answer within {limit} ({key}) after accepting the request"),
                TimeoutPhase::Idle => format!("went silent for {limit} ({key}) in the middle of its reply{kept}"),
                TimeoutPhase::Total => format!("took longer than {limit} ({key}) over its reply{kept}"),
                TimeoutPhase::Connect => format!("failed ({})", what_failed(error)),
            }
        }
        ModelError::Connect { .. }
        | ModelError::Tls { .. }
        | ModelError::Http { .. }
        | ModelError::Network { .. }
        | ModelError::Malformed { .. }
        | ModelError::Cut { .. }
        | ModelError::Empty { .. }
        | ModelError::Config(_) => format!("failed ({})", reason(error)),
    }
}

/// The failure with its details, for fallback notices: `HTTP 500: upstream overloaded`.
fn reason(error: &ModelError) -> String {
    match error {
        ModelError::Config(message) => super::transport::truncate(message, 160),
        ModelError::Http { message, .. }
        | ModelError::Connect { message, .. }
        | ModelError::Tls { message, .. }
        | ModelError::Network { message, .. }
        | ModelError::Malformed { message, .. }
        | ModelError::Cut { message, .. }
        | ModelError::Empty { message, .. } => {
            format!("{}: {}", what_failed(error), super::transport::truncate(message, 160))
        }
        ModelError::Timeout { .. } => what_failed(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(retries: u32) -> Chain {
        let provider = Provider::preset("ollama", "m", None).expect("preset");
        Chain {
            providers: vec![provider.clone(), provider],
            retries,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(10),
        }
    }

    fn http(status: u16, retry_after: Option<Duration>) -> ModelError {
        ModelError::Http { provider: "p".into(), url: "u".into(), status, message: "m".into(), retry_after }
    }

    #[test]
    fn backoff_doubles_with_jitter_and_stays_under_the_cap() {
        let c = chain(5);
        for n in 1..=6 {
            let full = Duration::from_secs(1 << (n - 1)).min(Duration::from_secs(10));
            let d = c.backoff(n);
            assert!(d >= full / 2 && d <= full, "retry {n}: {d:?}");
        }
    }

    #[test]
    fn next_step_follows_the_policy() {
        let c = chain(3);
        let p = &c.providers[0];
        assert_eq!(c.next_step(p, &http(401, None), 0, true), Next::MoveOn);
        assert_eq!(c.next_step(p, &ModelError::Config("x".into()), 0, true), Next::MoveOn);
        assert_eq!(c.next_step(p, &http(400, None), 0, true), Next::MoveOn, "not transient: no retry");
        for status in [400, 401, 403, 404, 413, 422] {
            assert_eq!(c.next_step(p, &http(status, None), 0, false), Next::MoveOn, "{status} is not retried");
        }
        for status in [408, 409, 425, 429, 500, 502, 503, 529] {
            assert!(matches!(c.next_step(p, &http(status, None), 0, false), Next::Retry(_)), "{status} is retried");
        }
        let silent = ModelError::Cut {
            provider: "p".into(),
            url: "u".into(),
            message: "closed".into(),
            partial: String::new(),
            silent: true,
        };
        assert!(matches!(c.next_step(p, &silent, 0, false), Next::Retry(_)), "one retry for an empty stream");
        assert_eq!(c.next_step(p, &silent, 1, false), Next::MoveOn, "only one");
        let tls = ModelError::Tls { provider: "p".into(), url: "u".into(), message: "bad certificate".into() };
        assert_eq!(c.next_step(p, &tls, 0, false), Next::MoveOn);
        assert!(matches!(c.next_step(p, &http(500, None), 0, true), Next::Retry(_)));
        assert_eq!(c.next_step(p, &http(500, None), 3, true), Next::MoveOn, "retries spent");
        assert_eq!(
            c.next_step(p, &http(429, Some(Duration::from_secs(4))), 0, true),
            Next::Retry(Duration::from_secs(4))
        );
        assert_eq!(c.next_step(p, &http(429, Some(Duration::from_secs(3600))), 0, true), Next::MoveOn);
        assert_eq!(
            c.next_step(p, &http(429, Some(Duration::from_secs(3600))), 0, false),
            Next::Retry(Duration::from_secs(10)),
            "the last provider waits the longest it may"
        );
    }

    #[test]
    fn a_request_left_unanswered_is_not_sent_again_unless_asked() {
        let mut c = chain(3);
        let timeout = |phase| ModelError::Timeout {
            provider: "p".into(),
            url: "u".into(),
            phase,
            limit: Duration::from_secs(120),
            partial: String::new(),
        };
        for phase in [TimeoutPhase::FirstByte, TimeoutPhase::Idle, TimeoutPhase::Total] {
            assert_eq!(c.next_step(&c.providers[0], &timeout(phase), 0, true), Next::NotRepeated, "{phase:?}");
            assert_eq!(c.next_step(&c.providers[0], &timeout(phase), 0, false), Next::NotRepeated, "{phase:?}");
        }
        assert!(
            matches!(c.next_step(&c.providers[0], &timeout(TimeoutPhase::Connect), 0, true), Next::Retry(_)),
            "no connection: nothing runs on the server"
        );
        let refused = ModelError::Connect { provider: "p".into(), url: "u".into(), message: "refused".into() };
        assert!(matches!(c.next_step(&c.providers[0], &refused, 0, true), Next::Retry(_)));
        c.providers[0].retry_timeouts = true;
        assert!(matches!(c.next_step(&c.providers[0], &timeout(TimeoutPhase::FirstByte), 0, true), Next::Retry(_)));
        assert_eq!(c.next_step(&c.providers[0], &timeout(TimeoutPhase::FirstByte), 3, true), Next::MoveOn);
        assert_eq!(
            left_unanswered(&timeout(TimeoutPhase::FirstByte)),
            "did not answer within 120 s (first_byte_timeout_secs) after accepting the request"
        );
    }

    #[test]
    fn state_is_sticky_until_a_new_turn() {
        let c = chain(0);
        let mut s = ChainState::new();
        s.active = 1;
        assert!(s.on_fallback());
        assert_eq!(c.active(&s).name, "ollama");
        s.new_turn();
        assert_eq!(s.active_index(), 0);
    }
}
