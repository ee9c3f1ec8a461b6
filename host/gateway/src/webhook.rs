//! Checking an inbound webhook request before anything reads it: the gateway's HTTP listener
//! runs this for every route, so no unauthenticated body reaches an adapter or the agent.
//!
//! A route names its secret: an HMAC-SHA256 key (the signature header holds the body's MAC in
//! hex, optionally prefixed `sha256=`, as GitHub and most senders do) or a shared token (compared
//! in constant time). A body over the route's limit is refused before it is read whole, and a
//! delivery id seen before on the route is refused (the store keeps the ids of the last day).

use hmac::{KeyInit as _, Mac as _};
use subtle::ConstantTimeEq as _;

/// How a route authenticates its requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Secret {
    /// `header` holds the hex HMAC-SHA256 of the body under `key`.
    Hmac { header: String, key: Vec<u8> },
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
    #[error("delivery {id} was received before")]
    Replayed { id: String },
}

impl Refusal {
    /// The HTTP status to answer with.
    pub fn status(&self) -> u16 {
        match self {
            Self::TooLarge { .. } => 413,
            Self::Unsigned { .. } | Self::BadSignature { .. } | Self::BadToken { .. } => 401,
            Self::Replayed { .. } => 409,
        }
    }
}

/// The value of header `name` (any letter case) among `headers`.
fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

/// Check `body` with `headers` against `route`; `seen` records a delivery id and says whether
/// it was recorded before (the store's [`talaria_store::Store::webhook_seen`]). The signature is
/// checked before the id is recorded, so a forged request cannot burn a real delivery's id.
///
/// # Errors
/// Why the request is refused.
pub fn verify(
    route: &Route,
    headers: &[(String, String)],
    body: &[u8],
    seen: &mut dyn FnMut(&str) -> bool,
) -> Result<(), Refusal> {
    if body.len() > route.max_body {
        return Err(Refusal::TooLarge { limit: route.max_body });
    }
    match &route.secret {
        Secret::Hmac { header: name, key } => {
            let given = header(headers, name).ok_or_else(|| Refusal::Unsigned { header: name.clone() })?;
            let hex = given.trim().strip_prefix("sha256=").unwrap_or(given.trim());
            let bad = || Refusal::BadSignature { header: name.clone() };
            let mac = hex::decode(hex).map_err(|_| bad())?;
            let mut expected = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).map_err(|_| bad())?;
            expected.update(body);
            expected.verify_slice(&mac).map_err(|_| bad())?;
        }
        Secret::Token { header: name, token } => {
            let given = header(headers, name).ok_or_else(|| Refusal::Unsigned { header: name.clone() })?;
            if !bool::from(given.trim().as_bytes().ct_eq(token.as_bytes())) {
                return Err(Refusal::BadToken { header: name.clone() });
            }
        }
    }
    if let Some(id) = route.delivery_header.as_deref().and_then(|h| header(headers, h))
        && seen(id)
    {
        return Err(Refusal::Replayed { id: id.to_string() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(secret: Secret) -> Route {
        Route { name: "ci".into(), secret, max_body: 64, delivery_header: Some("X-Delivery".into()) }
    }

    fn sign(key: &[u8], body: &[u8]) -> String {
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("key");
        mac.update(body);
        format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
    }

    fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect()
    }

    #[test]
    fn a_signed_request_passes_once_and_forgeries_replays_and_big_bodies_do_not() {
        let r = route(Secret::Hmac { header: "X-Signature-256".into(), key: b"s3cret".to_vec() });
        let body = br#"{"event":"push"}"#;
        let mut ids: Vec<String> = Vec::new();
        let mut seen = |id: &str| {
            let again = ids.iter().any(|i| i == id);
            ids.push(id.to_string());
            again
        };
        let good = h(&[("x-signature-256", &sign(b"s3cret", body)), ("X-Delivery", "d1")]);
        assert_eq!(verify(&r, &good, body, &mut seen), Ok(()));
        assert_eq!(verify(&r, &good, body, &mut seen), Err(Refusal::Replayed { id: "d1".into() }));
        let forged = h(&[("X-Signature-256", &sign(b"guess", body)), ("X-Delivery", "d2")]);
        let refused = verify(&r, &forged, body, &mut seen).expect_err("forged");
        assert_eq!(refused, Refusal::BadSignature { header: "X-Signature-256".into() });
        assert_eq!(refused.status(), 401);
        // A forgery did not burn its delivery id: the real d2 still goes through.
        let real = h(&[("X-Signature-256", &sign(b"s3cret", b"{}")), ("X-Delivery", "d2")]);
        assert_eq!(verify(&r, &real, b"{}", &mut seen), Ok(()));
        let tampered = h(&[("X-Signature-256", &sign(b"s3cret", body)), ("X-Delivery", "d3")]);
        assert!(verify(&r, &tampered, br#"{"event":"push!"}"#, &mut seen).is_err(), "another body");
        assert_eq!(verify(&r, &h(&[]), body, &mut seen), Err(Refusal::Unsigned { header: "X-Signature-256".into() }));
        let big = vec![b'x'; 65];
        assert_eq!(verify(&r, &good, &big, &mut seen).map_err(|e| e.status()), Err(413));
        assert_eq!(
            verify(&r, &h(&[("X-Signature-256", "sha256=zz")]), body, &mut seen).map_err(|e| e.status()),
            Err(401)
        );
    }

    #[test]
    fn a_token_route_compares_the_token() {
        let r = route(Secret::Token { header: "X-Token".into(), token: "t0ken".into() });
        let mut never = |_: &str| false;
        assert_eq!(verify(&r, &h(&[("X-Token", "t0ken")]), b"{}", &mut never), Ok(()));
        assert_eq!(
            verify(&r, &h(&[("X-Token", "t0ke")]), b"{}", &mut never),
            Err(Refusal::BadToken { header: "X-Token".into() })
        );
        assert!(verify(&r, &h(&[("X-Token", "t0kenX")]), b"{}", &mut never).is_err());
    }
}
