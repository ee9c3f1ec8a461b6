//! Checking an inbound webhook request before anything reads it: the gateway's HTTP listener
//! runs this for every route, so no unauthenticated body reaches an adapter or the agent.
//!
//! A route names its secret and scheme ([`Secret`]), and each scheme refuses replays as far as
//! what it signs lets it (docs/gateway.md says what each cannot tell apart):
//! - **`slack-v0`** and **`stripe`** sign a timestamp with the body: a signature older than
//!   [`FRESH_FOR`] (or as far ahead) is refused, and one seen before is refused as a replay (the
//!   store remembers signatures for a day, longer than they stay fresh).
//! - **`hmac`** signs the body only, so nothing says when it was sent: a body seen on the route
//!   in the last day is refused (by its SHA-256), whatever delivery id comes with it.
//! - **`token`** signs nothing: only a delivery id seen before is refused.
//!
//! On every route a body over the limit is refused before it is read whole, and a delivery id
//! (`delivery_header`) seen before on the route is refused. The signature is checked before
//! anything is remembered, so a forged request cannot burn a real delivery's id, body or
//! signature.

use hmac::{KeyInit as _, Mac as _};
use sha2::Digest as _;
use subtle::ConstantTimeEq as _;

/// How long a signed timestamp stays fresh, in seconds (Slack's and Stripe's own advice).
pub const FRESH_FOR: i64 = 5 * 60;
/// The header carrying Slack's signed timestamp unless the route names another.
pub const SLACK_TIMESTAMP_HEADER: &str = "X-Slack-Request-Timestamp";

/// How a route authenticates its requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Secret {
    /// `header` holds the hex HMAC-SHA256 of the body under `key` (`sha256=` optional).
    Hmac { header: String, key: Vec<u8> },
    /// Slack's `v0`: `header` holds `v0=HEX`, the HMAC-SHA256 of `v0:TIMESTAMP:BODY` under
    /// `key`, the timestamp (Unix seconds) in `timestamp_header`.
    SlackV0 { header: String, timestamp_header: String, key: Vec<u8> },
    /// Stripe's: `header` holds `t=TIMESTAMP,v1=HEX[,v1=HEX...]`, each `v1` a candidate
    /// HMAC-SHA256 of `TIMESTAMP.BODY` under `key`.
    Stripe { header: String, key: Vec<u8> },
    /// `header` holds the token itself.
    Token { header: String, token: String },
}

/// One route's rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub name: String,
    pub secret: Secret,
    /// Most bytes a body may have.
    pub max_body: usize,
    /// The header naming each delivery (`X-GitHub-Delivery`...), for refusing replays.
    pub delivery_header: Option<String>,
}

/// What a route remembers of the requests it took, to refuse them again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memory {
    /// Delivery ids (`delivery_header`).
    Delivery,
    /// SHA-256 digests of bodies (`hmac` routes).
    Body,
    /// Signatures (`slack-v0`, `stripe` routes).
    Signature,
}

/// Why a request was refused (each maps to an HTTP status for the sender).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the body is larger than the route's {limit} bytes")]
    TooLarge { limit: usize },
    #[error("the request has no {header} header")]
    Unsigned { header: String },
    #[error("the {header} header does not match the body")]
    BadSignature { header: String },
    #[error("the {header} header does not hold the route's token")]
    BadToken { header: String },
    #[error("the {header} header does not hold a timestamp in Unix seconds")]
    BadTimestamp { header: String },
    #[error(
        "the signature's timestamp is {age} s {}: requests signed more than {FRESH_FOR} s from now are refused as possible replays (check the sender's clock)",
        if *age >= 0 { "old" } else { "ahead" }
    )]
    Stale { age: i64 },
    #[error("delivery {id} was received before")]
    Replayed { id: String },
    #[error("this signature was received before: a replay")]
    SignatureSeen,
    #[error(
        "this body was received in the last day: refused as a replay (an hmac route cannot tell a replay from the same event sent twice)"
    )]
    BodySeen,
}

impl Refusal {
    /// The HTTP status to answer with.
    pub fn status(&self) -> u16 {
        match self {
            Self::TooLarge { .. } => 413,
            Self::Unsigned { .. }
            | Self::BadSignature { .. }
            | Self::BadToken { .. }
            | Self::BadTimestamp { .. }
            | Self::Stale { .. } => 401,
            Self::Replayed { .. } | Self::SignatureSeen | Self::BodySeen => 409,
        }
    }
}

/// The value of header `name` (any letter case) among `headers`.
fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

/// Whether `hex` is the HMAC-SHA256 of `parts` (concatenated) under `key` (constant time).
fn signed(key: &[u8], parts: &[&[u8]], hex: &str) -> bool {
    let Ok(mac) = hex::decode(hex.trim()) else { return false };
    let Ok(mut expected) = hmac::Hmac::<sha2::Sha256>::new_from_slice(key) else { return false };
    for part in parts {
        expected.update(part);
    }
    expected.verify_slice(&mac).is_ok()
}

/// Check that `timestamp` (Unix seconds) is within [`FRESH_FOR`] of `now`.
fn fresh(timestamp: i64, now: i64) -> Result<(), Refusal> {
    let age = now.saturating_sub(timestamp);
    if age.abs() > FRESH_FOR { Err(Refusal::Stale { age }) } else { Ok(()) }
}

/// Check `body` with `headers` against `route` at `now` (Unix seconds): its signature, and how
/// fresh it is. What it returns is what to record, in order, to refuse replays: a delivery id,
/// then a body digest or signature. The caller records each (the store's
/// [`talaria_core::store::Store::webhook_seen`], a day's memory) and refuses with
/// [`Refusal::seen`] at the first recorded before. The signature is checked before anything is
/// recorded, so a forged request cannot burn a real delivery's id.
///
/// # Errors
/// Why the request is refused.
pub fn verify(
    route: &Route,
    headers: &[(String, String)],
    body: &[u8],
    now: i64,
) -> Result<Vec<(Memory, String)>, Refusal> {
    if body.len() > route.max_body {
        return Err(Refusal::TooLarge { limit: route.max_body });
    }
    let unsigned = |name: &str| Refusal::Unsigned { header: name.to_string() };
    let bad = |name: &str| Refusal::BadSignature { header: name.to_string() };
    // What else to remember once the delivery id is new.
    let remember = match &route.secret {
        Secret::Hmac { header: name, key } => {
            let given = header(headers, name).ok_or_else(|| unsigned(name))?.trim();
            if !signed(key, &[body], given.strip_prefix("sha256=").unwrap_or(given)) {
                return Err(bad(name));
            }
            Some((Memory::Body, hex::encode(sha2::Sha256::digest(body))))
        }
        Secret::SlackV0 { header: name, timestamp_header, key } => {
            let given = header(headers, name).ok_or_else(|| unsigned(name))?.trim();
            let stamp = header(headers, timestamp_header).ok_or_else(|| unsigned(timestamp_header))?.trim();
            let mac = given.strip_prefix("v0=").ok_or_else(|| bad(name))?;
            if !signed(key, &[b"v0:", stamp.as_bytes(), b":", body], mac) {
                return Err(bad(name));
            }
            let at = stamp.parse().map_err(|_| Refusal::BadTimestamp { header: timestamp_header.clone() })?;
            fresh(at, now)?;
            Some((Memory::Signature, mac.to_ascii_lowercase()))
        }
        Secret::Stripe { header: name, key } => {
            let given = header(headers, name).ok_or_else(|| unsigned(name))?;
            let fields = given.split(',').filter_map(|f| f.trim().split_once('='));
            let stamp = fields.clone().find(|(k, _)| *k == "t").map(|(_, v)| v).ok_or_else(|| bad(name))?;
            let mac = fields
                .filter(|(k, _)| *k == "v1")
                .map(|(_, v)| v)
                .find(|v| signed(key, &[stamp.as_bytes(), b".", body], v))
                .ok_or_else(|| bad(name))?;
            let at = stamp.parse().map_err(|_| Refusal::BadTimestamp { header: name.clone() })?;
            fresh(at, now)?;
            Some((Memory::Signature, mac.to_ascii_lowercase()))
        }
        Secret::Token { header: name, token } => {
            let given = header(headers, name).ok_or_else(|| unsigned(name))?;
            if !bool::from(given.trim().as_bytes().ct_eq(token.as_bytes())) {
                return Err(Refusal::BadToken { header: name.clone() });
            }
            None
        }
    };
    let delivery = route.delivery_header.as_deref().and_then(|h| header(headers, h));
    Ok(delivery.map(|id| (Memory::Delivery, id.to_string())).into_iter().chain(remember).collect())
}

impl Refusal {
    /// The refusal of a request whose `key`, kept in `memory`, was seen before.
    pub fn seen(memory: Memory, key: &str) -> Self {
        match memory {
            Memory::Delivery => Self::Replayed { id: key.to_string() },
            Memory::Body => Self::BodySeen,
            Memory::Signature => Self::SignatureSeen,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;

    fn route(secret: Secret) -> Route {
        Route { name: "ci".into(), secret, max_body: 64, delivery_header: Some("X-Delivery".into()) }
    }

    fn mac(key: &[u8], parts: &[&[u8]]) -> String {
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("key");
        for part in parts {
            mac.update(part);
        }
        hex::encode(mac.finalize().into_bytes())
    }

    fn sign(key: &[u8], body: &[u8]) -> String {
        format!("sha256={}", mac(key, &[body]))
    }

    fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect()
    }

    /// [`super::verify`], then the memories it names recorded in `seen` as the listener does.
    fn verify(
        route: &Route,
        headers: &[(String, String)],
        body: &[u8],
        now: i64,
        seen: &mut impl FnMut(Memory, &str) -> bool,
    ) -> Result<(), Refusal> {
        for (memory, key) in super::verify(route, headers, body, now)? {
            if seen(memory, &key) {
                return Err(Refusal::seen(memory, &key));
            }
        }
        Ok(())
    }

    /// A memory like the store's: everything recorded, by kind.
    fn memory() -> impl FnMut(Memory, &str) -> bool {
        let mut kept: Vec<(Memory, String)> = Vec::new();
        move |kind, id| {
            let again = kept.iter().any(|(k, i)| *k == kind && i == id);
            kept.push((kind, id.to_string()));
            again
        }
    }

    #[test]
    fn a_signed_request_passes_once_and_forgeries_replays_and_big_bodies_do_not() {
        let r = route(Secret::Hmac { header: "X-Signature-256".into(), key: b"s3cret".to_vec() });
        let body = br#"{"event":"push"}"#;
        let mut seen = memory();
        let good = h(&[("x-signature-256", &sign(b"s3cret", body)), ("X-Delivery", "d1")]);
        assert_eq!(verify(&r, &good, body, NOW, &mut seen), Ok(()));
        assert_eq!(verify(&r, &good, body, NOW, &mut seen), Err(Refusal::Replayed { id: "d1".into() }));
        let forged = h(&[("X-Signature-256", &sign(b"guess", body)), ("X-Delivery", "d2")]);
        let refused = verify(&r, &forged, body, NOW, &mut seen).expect_err("forged");
        assert_eq!(refused, Refusal::BadSignature { header: "X-Signature-256".into() });
        assert_eq!(refused.status(), 401);
        // A forgery did not burn its delivery id: the real d2 still goes through.
        let real = h(&[("X-Signature-256", &sign(b"s3cret", b"{}")), ("X-Delivery", "d2")]);
        assert_eq!(verify(&r, &real, b"{}", NOW, &mut seen), Ok(()));
        let tampered = h(&[("X-Signature-256", &sign(b"s3cret", body)), ("X-Delivery", "d3")]);
        assert!(verify(&r, &tampered, br#"{"event":"push!"}"#, NOW, &mut seen).is_err(), "another body");
        assert_eq!(
            verify(&r, &h(&[]), body, NOW, &mut seen),
            Err(Refusal::Unsigned { header: "X-Signature-256".into() })
        );
        let big = vec![b'x'; 65];
        assert_eq!(verify(&r, &good, &big, NOW, &mut seen).map_err(|e| e.status()), Err(413));
        assert_eq!(
            verify(&r, &h(&[("X-Signature-256", "sha256=zz")]), body, NOW, &mut seen).map_err(|e| e.status()),
            Err(401)
        );
    }

    #[test]
    fn an_hmac_body_seen_before_is_refused_with_a_new_delivery_id_or_none() {
        let r = route(Secret::Hmac { header: "X-Sig".into(), key: b"k".to_vec() });
        let body = br#"{"n":1}"#;
        let mut seen = memory();
        let sig = sign(b"k", body);
        assert_eq!(verify(&r, &h(&[("X-Sig", &sig), ("X-Delivery", "a")]), body, NOW, &mut seen), Ok(()));
        let again = verify(&r, &h(&[("X-Sig", &sig), ("X-Delivery", "b")]), body, NOW, &mut seen);
        assert_eq!(again, Err(Refusal::BodySeen));
        assert_eq!(verify(&r, &h(&[("X-Sig", &sig)]), body, NOW, &mut seen).map_err(|e| e.status()), Err(409));
        // Another body on the same route is new.
        let other = br#"{"n":2}"#;
        assert_eq!(verify(&r, &h(&[("X-Sig", &sign(b"k", other))]), other, NOW, &mut seen), Ok(()));
    }

    #[test]
    fn slack_v0_refuses_stale_future_replayed_and_moved_timestamps() {
        let r = route(Secret::SlackV0 {
            header: "X-Slack-Signature".into(),
            timestamp_header: SLACK_TIMESTAMP_HEADER.into(),
            key: b"slack-key".to_vec(),
        });
        let body = b"token=x&text=hi";
        let slack = |at: i64| {
            let stamp = at.to_string();
            let sig = format!("v0={}", mac(b"slack-key", &[b"v0:", stamp.as_bytes(), b":", body]));
            h(&[("X-Slack-Signature", &sig), ("X-Slack-Request-Timestamp", &stamp)])
        };
        let mut seen = memory();
        assert_eq!(verify(&r, &slack(NOW - 10), body, NOW, &mut seen), Ok(()));
        // The same request again, within the five minutes: a replay.
        assert_eq!(verify(&r, &slack(NOW - 10), body, NOW, &mut seen), Err(Refusal::SignatureSeen));
        // The same body signed at another time is another request.
        assert_eq!(verify(&r, &slack(NOW - 20), body, NOW, &mut seen), Ok(()));
        let stale = verify(&r, &slack(NOW - 360), body, NOW, &mut seen).expect_err("stale");
        assert_eq!((stale.status(), stale.to_string().contains("360 s old")), (401, true), "{stale}");
        assert!(verify(&r, &slack(NOW + 400), body, NOW, &mut seen).expect_err("ahead").to_string().contains("ahead"));
        // A timestamp moved without signing it again: the signature no longer matches.
        let mut moved = slack(NOW - 360);
        moved[1].1 = NOW.to_string();
        assert_eq!(
            verify(&r, &moved, body, NOW, &mut seen),
            Err(Refusal::BadSignature { header: "X-Slack-Signature".into() })
        );
        let no_stamp = h(&[("X-Slack-Signature", "v0=00")]);
        assert_eq!(
            verify(&r, &no_stamp, body, NOW, &mut seen),
            Err(Refusal::Unsigned { header: SLACK_TIMESTAMP_HEADER.into() })
        );
    }

    #[test]
    fn stripe_signatures_are_checked_for_freshness_and_replays() {
        let r = route(Secret::Stripe { header: "Stripe-Signature".into(), key: b"whsec".to_vec() });
        let body = br#"{"id":"evt_1"}"#;
        let stripe = |at: i64| {
            let good = mac(b"whsec", &[at.to_string().as_bytes(), b".", body]);
            // A rolled secret: an old signature beside the current one.
            h(&[("Stripe-Signature", &format!("t={at},v1={},v1={good},v0=ignored", "ab".repeat(32)))])
        };
        let mut seen = memory();
        assert_eq!(verify(&r, &stripe(NOW), body, NOW, &mut seen), Ok(()));
        assert_eq!(verify(&r, &stripe(NOW), body, NOW, &mut seen), Err(Refusal::SignatureSeen));
        assert!(matches!(verify(&r, &stripe(NOW - 301), body, NOW, &mut seen), Err(Refusal::Stale { age: 301 })));
        let forged = h(&[("Stripe-Signature", &format!("t={NOW},v1={}", "cd".repeat(32)))]);
        assert_eq!(verify(&r, &forged, body, NOW, &mut seen).map_err(|e| e.status()), Err(401));
        let no_time = h(&[("Stripe-Signature", "v1=abcd")]);
        assert_eq!(verify(&r, &no_time, body, NOW, &mut seen).map_err(|e| e.status()), Err(401));
    }

    #[test]
    fn a_token_route_compares_the_token() {
        let r = route(Secret::Token { header: "X-Token".into(), token: "t0ken".into() });
        let mut never = |_: Memory, _: &str| false;
        assert_eq!(verify(&r, &h(&[("X-Token", "t0ken")]), b"{}", NOW, &mut never), Ok(()));
        assert_eq!(
            verify(&r, &h(&[("X-Token", "t0ke")]), b"{}", NOW, &mut never),
            Err(Refusal::BadToken { header: "X-Token".into() })
        );
        assert!(verify(&r, &h(&[("X-Token", "t0kenX")]), b"{}", NOW, &mut never).is_err());
    }

    /// Fuzzed: whatever headers and body arrive, a route lets through only what its secret
    /// signed: the input's first line is the signature header's value, the rest the body.
    #[test]
    fn fuzz_webhook_requests() {
        let hmac = route(Secret::Hmac { header: "X-Sig".into(), key: b"k".to_vec() });
        let stripe = route(Secret::Stripe { header: "Stripe-Signature".into(), key: b"k".to_vec() });
        let slack = route(Secret::SlackV0 {
            header: "X-Slack-Signature".into(),
            timestamp_header: "X-Slack-Request-Timestamp".into(),
            key: b"k".to_vec(),
        });
        talaria_fuzz::bytes("webhook", |input| {
            let (value, body) = match input.iter().position(|b| *b == b'\n') {
                Some(i) => (String::from_utf8_lossy(&input[..i]).into_owned(), &input[i + 1..]),
                None => (String::from_utf8_lossy(input).into_owned(), &[][..]),
            };
            let headers = h(&[
                ("X-Sig", &value),
                ("Stripe-Signature", &value),
                ("X-Slack-Signature", &value),
                ("X-Slack-Request-Timestamp", &NOW.to_string()),
                ("X-Delivery", "d"),
            ]);
            // Let through only with the body's true MAC in the header (however it is spaced).
            let accepted = super::verify(&hmac, &headers, body, NOW).is_ok();
            let carries = value.to_ascii_lowercase().contains(&mac(b"k", &[body]));
            assert!(!accepted || carries, "accepted a wrong signature: {value:?}");
            assert!(super::verify(&stripe, &headers, body, NOW).is_err() || value.contains("v1="));
            assert!(super::verify(&slack, &headers, body, NOW).is_err() || value.starts_with("v0="));
        });
    }
}
