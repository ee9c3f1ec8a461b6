//! Bearer tokens on a listener, with a lockout for a client that keeps guessing.
//!
//! [`Bearer::require`] is a middleware: a request passes when its `Authorization: Bearer TOKEN`
//! matches (compared in constant time); otherwise it is answered `401` with
//! `WWW-Authenticate: Bearer`. A client address (an IPv6 /64 counts as one, as for the
//! connection caps) that fails [`LOCKOUT_AFTER`] times within [`LOCKOUT_WINDOW`] is answered
//! `429 Too Many Requests` with `Retry-After` until the window has passed, right token or not,
//! and the lockout is logged once, as a warning naming the door and the address. A request that
//! passes forgets its address's failures.
//!
//! The client address comes from the connection ([`crate::serve`] puts it in each request's
//! extensions as [`axum::extract::ConnectInfo`]), never from a header a client writes.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::response::{IntoResponse as _, Response};
use subtle::ConstantTimeEq as _;

/// Failed authentications from one address that lock it out...
pub const LOCKOUT_AFTER: usize = 10;
/// ...when they fall within this long.
pub const LOCKOUT_WINDOW: Duration = Duration::from_secs(60);

/// A listener's token, and who failed to give it.
pub struct Bearer {
    /// The tokens that pass; a check says which one did.
    tokens: Vec<String>,
    /// Who keeps failing to give one.
    lockout: crate::limit::Lockout,
}

/// Why a request was not let through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No token, or a wrong one.
    Unauthorized,
    /// Too many failures from its address: it may try again after this long.
    LockedOut(Duration),
}

impl Bearer {
    /// Requests must carry `token`; `door` names the listener in the log.
    pub fn new(token: impl Into<String>, door: &'static str) -> Arc<Self> {
        Self::with_lockout(token, door, LOCKOUT_AFTER, LOCKOUT_WINDOW)
    }

    /// [`Bearer::new`] locking an address out after `after` failures within `window`.
    pub fn with_lockout(token: impl Into<String>, door: &'static str, after: usize, window: Duration) -> Arc<Self> {
        Arc::new(Self { tokens: vec![token.into()], lockout: crate::limit::Lockout::new(door, after, window) })
    }

    /// Requests must carry one of `tokens` ([`Bearer::which`] says which); `door` names the
    /// listener in the log.
    pub fn any_of(tokens: Vec<String>, door: &'static str) -> Arc<Self> {
        Arc::new(Self { tokens, lockout: crate::limit::Lockout::new(door, LOCKOUT_AFTER, LOCKOUT_WINDOW) })
    }

    /// How long `peer` is still locked out for failing too often, if it is (nothing is
    /// counted).
    pub fn locked_out(&self, peer: Option<IpAddr>) -> Option<Duration> {
        self.lockout.locked_out(peer)
    }

    /// Whether a request from `peer` with the `Authorization` header `given` may pass.
    ///
    /// # Errors
    /// The [`Refusal`] to answer with.
    pub fn check(&self, peer: Option<IpAddr>, given: Option<&str>) -> Result<(), Refusal> {
        self.which(peer, given).map(|_| ())
    }

    /// [`Bearer::check`], saying which of the tokens passed (its index in the order given).
    ///
    /// # Errors
    /// The [`Refusal`] to answer with.
    pub fn which(&self, peer: Option<IpAddr>, given: Option<&str>) -> Result<usize, Refusal> {
        if let Some(wait) = self.lockout.locked_out(peer) {
            return Err(Refusal::LockedOut(wait));
        }
        let token = given.and_then(|v| v.strip_prefix("Bearer ")).map(str::trim).unwrap_or_default();
        // Every token is compared, each in constant time, so the time taken says nothing of
        // which came close.
        let mut passed = None;
        for (i, known) in self.tokens.iter().enumerate() {
            if bool::from(token.as_bytes().ct_eq(known.as_bytes())) && !known.is_empty() {
                passed = passed.or(Some(i));
            }
        }
        if let Some(i) = passed {
            self.lockout.passed(peer);
            return Ok(i);
        }
        self.lockout.failed(peer);
        Err(Refusal::Unauthorized)
    }

    /// The middleware: `request` goes on to `next` only with the token (see the module's
    /// documentation for the answers otherwise).
    pub async fn require(self: Arc<Self>, request: axum::extract::Request, next: axum::middleware::Next) -> Response {
        let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
        let given = request.headers().get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        match self.check(peer, given) {
            Ok(()) => next.run(request).await,
            Err(refusal) => refusal.into_response(),
        }
    }
}

impl Refusal {
    /// The answer: `401` with `WWW-Authenticate: Bearer`, or `429` with `Retry-After`.
    pub fn into_response(self) -> Response {
        match self {
            Self::Unauthorized => (
                http::StatusCode::UNAUTHORIZED,
                [(http::header::WWW_AUTHENTICATE, "Bearer")],
                "a bearer token is required",
            )
                .into_response(),
            Self::LockedOut(wait) => {
                let secs = wait.as_secs().max(1);
                (
                    http::StatusCode::TOO_MANY_REQUESTS,
                    [(http::header::RETRY_AFTER, secs.to_string())],
                    format!("too many failed authentications from this address: try again in {secs} s"),
                )
                    .into_response()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Option<IpAddr> = Some(IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1)));
    const B: Option<IpAddr> = Some(IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 2)));

    #[test]
    fn only_the_token_passes() {
        let bearer = Bearer::new("s3cret", "test");
        assert_eq!(bearer.check(A, Some("Bearer s3cret")), Ok(()));
        for wrong in
            [None, Some("Bearer s3cre"), Some("Bearer s3cret2"), Some("s3cret"), Some("Basic s3cret"), Some("")]
        {
            assert_eq!(bearer.check(A, wrong), Err(Refusal::Unauthorized), "{wrong:?}");
        }
    }

    #[test]
    fn an_address_that_keeps_guessing_is_locked_out_and_others_are_not() {
        let bearer = Bearer::with_lockout("s3cret", "test", 3, Duration::from_secs(60));
        for _ in 0..3 {
            assert_eq!(bearer.check(A, Some("Bearer guess")), Err(Refusal::Unauthorized));
        }
        // Locked out: even the right token waits, and says for how long.
        match bearer.check(A, Some("Bearer s3cret")) {
            Err(Refusal::LockedOut(wait)) => assert!(wait > Duration::from_secs(58) && wait <= Duration::from_secs(60)),
            other => panic!("expected a lockout, got {other:?}"),
        }
        assert_eq!(bearer.check(B, Some("Bearer s3cret")), Ok(()), "another address is not locked out");
    }

    #[test]
    fn any_of_several_tokens_passes_and_says_which() {
        let bearer = Bearer::any_of(vec!["first".into(), "second".into(), String::new()], "test");
        assert_eq!(bearer.which(A, Some("Bearer first")), Ok(0));
        assert_eq!(bearer.which(A, Some("Bearer second")), Ok(1));
        assert_eq!(bearer.which(A, Some("Bearer ")), Err(Refusal::Unauthorized), "an empty token never passes");
        assert_eq!(bearer.which(A, Some("Bearer third")), Err(Refusal::Unauthorized));
    }

    #[test]
    fn reading_a_lockout_counts_nothing() {
        let bearer = Bearer::with_lockout("s3cret", "test", 2, Duration::from_secs(60));
        assert_eq!(bearer.locked_out(A), None);
        assert_eq!(bearer.check(A, Some("Bearer guess")), Err(Refusal::Unauthorized));
        for _ in 0..5 {
            assert_eq!(bearer.locked_out(A), None, "one failure of two");
        }
        assert_eq!(bearer.check(A, Some("Bearer guess")), Err(Refusal::Unauthorized));
        assert!(bearer.locked_out(A).is_some_and(|wait| wait > Duration::from_secs(58)));
        assert_eq!(bearer.locked_out(B), None);
    }

    #[test]
    fn the_lockout_ends_with_its_window_and_a_pass_forgets_failures() {
        let bearer = Bearer::with_lockout("s3cret", "test", 2, Duration::from_millis(200));
        assert_eq!(bearer.check(A, Some("Bearer guess")), Err(Refusal::Unauthorized));
        assert_eq!(bearer.check(A, Some("Bearer s3cret")), Ok(()));
        // The failure before the pass no longer counts.
        assert_eq!(bearer.check(A, Some("Bearer guess")), Err(Refusal::Unauthorized));
        assert_eq!(bearer.check(A, Some("Bearer s3cret")), Ok(()));
        assert_eq!(bearer.check(A, Some("Bearer guess")), Err(Refusal::Unauthorized));
        assert_eq!(bearer.check(A, Some("Bearer guess")), Err(Refusal::Unauthorized));
        assert!(matches!(bearer.check(A, Some("Bearer s3cret")), Err(Refusal::LockedOut(_))));
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(bearer.check(A, Some("Bearer s3cret")), Ok(()));
    }

    #[test]
    fn addresses_of_one_ipv6_network_share_a_lockout() {
        let bearer = Bearer::with_lockout("s3cret", "test", 2, Duration::from_secs(60));
        let one: IpAddr = "2001:db8:1:2::1".parse().expect("ip");
        let other: IpAddr = "2001:db8:1:2::ffff".parse().expect("ip");
        assert_eq!(bearer.check(Some(one), None), Err(Refusal::Unauthorized));
        assert_eq!(bearer.check(Some(other), None), Err(Refusal::Unauthorized));
        assert!(matches!(bearer.check(Some(one), Some("Bearer s3cret")), Err(Refusal::LockedOut(_))));
    }
}
