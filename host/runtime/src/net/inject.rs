//! Secret placeholders: a `{{secret:NAME}}` in a request's headers or URL path is replaced with
//! the secret's value only where the plugin's manifest lets that secret go (the headers it names,
//! the path with `in_path = true`), only to a host the secret was granted for, and only over https
//! (or to loopback); a header that may not carry it is dropped, a path that may not carry it
//! refuses the request (step 6 of [`crate::net`]). A WebSocket's headers and messages are filled
//! by the same rules ([`fill`]).

use std::net::IpAddr;

use wasmtime_wasi_http::WasiBody;

use super::Egress;
use super::destination::Destination;
use crate::grant::HostPattern;

pub(super) const PLACEHOLDER_OPEN: &str = "{{secret:";

/// Fill in secret placeholders where they may go; drop every header carrying one anywhere else.
/// Returns the request and why each dropped header was dropped.
pub(super) fn inject_secrets(
    mut request: http::Request<WasiBody>,
    egress: &Egress,
    dest: &Destination,
) -> (http::Request<WasiBody>, Vec<String>) {
    let mut dropped = Vec::new();
    let names: Vec<http::HeaderName> = request.headers().keys().cloned().collect();
    for name in names {
        let values: Vec<http::HeaderValue> = request.headers().get_all(&name).iter().cloned().collect();
        if !values
            .iter()
            .any(|v| v.as_bytes().windows(PLACEHOLDER_OPEN.len()).any(|w| w == PLACEHOLDER_OPEN.as_bytes()))
        {
            continue;
        }
        request.headers_mut().remove(&name);
        for value in values {
            let text = String::from_utf8_lossy(value.as_bytes()).into_owned();
            match fill(&text, name.as_str(), egress, dest) {
                Ok(filled) => match http::HeaderValue::from_str(&filled) {
                    Ok(v) => {
                        request.headers_mut().append(name.clone(), v);
                    }
                    Err(_) => dropped.push(format!("a secret's value is not a valid value for header {name}")),
                },
                Err(reason) => dropped.push(reason),
            }
        }
    }
    (request, dropped)
}

/// Fill in secret placeholders in the URL's path (written as is, or percent-encoded), for
/// secrets the manifest lets go there (`in_path = true`); a placeholder that may not be filled
/// in refuses the request.
pub(super) fn fill_path(
    mut request: http::Request<WasiBody>,
    egress: &Egress,
    dest: &Destination,
) -> Result<http::Request<WasiBody>, String> {
    let Some(path) = request.uri().path_and_query().map(|p| p.as_str().to_string()) else { return Ok(request) };
    let decoded = path.replace("%7B%7B", "{{").replace("%7b%7b", "{{").replace("%7D%7D", "}}").replace("%7d%7d", "}}");
    if !decoded.contains(PLACEHOLDER_OPEN) {
        return Ok(request);
    }
    let filled = fill(&decoded, crate::manifest::PATH_PLACE, egress, dest)?;
    let mut parts = request.uri().clone().into_parts();
    parts.path_and_query =
        Some(filled.parse().map_err(|_| "a secret's value cannot be written in a URL path".to_string())?);
    *request.uri_mut() = http::Uri::from_parts(parts).map_err(|e| e.to_string())?;
    Ok(request)
}

/// Replace every placeholder in the value of `header`, or say why not.
pub(super) fn fill(text: &str, header: &str, egress: &Egress, dest: &Destination) -> Result<String, String> {
    let plugin = egress.plugin.as_str();
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(PLACEHOLDER_OPEN) {
        out.push_str(&rest[..start]);
        let after = &rest[start + PLACEHOLDER_OPEN.len()..];
        let end = after.find("}}").ok_or("unterminated secret placeholder")?;
        let name = &after[..end];
        let not_granted = || format!("secret {name} is not granted to plugin '{plugin}'");
        let hosts: Vec<&HostPattern> = egress.grants.secret_hosts(name).collect();
        if hosts.is_empty() {
            return Err(not_granted());
        }
        let allowed = egress.secret_headers.of(name).ok_or_else(not_granted)?;
        if !allowed.iter().any(|h| h == header) {
            let places: Vec<String> = allowed.iter().map(|h| crate::manifest::place_name(h)).collect();
            return Err(format!(
                "secret {name} may only be sent in {}, not {}",
                places.join(", "),
                crate::manifest::place_name(header)
            ));
        }
        if !hosts.iter().any(|h| h.matches(&dest.host, dest.port)) {
            let hosts: Vec<String> = hosts.iter().map(ToString::to_string).collect();
            return Err(format!("secret {name} may only be sent to {}, not {}", hosts.join(" or "), dest.authority()));
        }
        let loopback = dest.host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
        if !dest.tls && !loopback {
            return Err(format!("secret {name} is only sent over https (this request is plain http)"));
        }
        let value = egress.secrets.value(name).ok_or_else(|| format!("secret {name} has no value"))?;
        out.push_str(&value);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::approval::Unattended;
    use crate::net::tests::{egress, request};

    const SECRET: &str = "secrets = [{ name = \"KEY\", host = \"api.example.com\" }]";

    fn injected(egress: &Egress, url: &str, headers: &[(&str, &str)]) -> (Vec<(String, String)>, Vec<String>) {
        let req = request(url, headers);
        let dest = Destination::of(&req).expect("dest");
        let (req, dropped) = inject_secrets(req, egress, &dest);
        let sent = req.headers().iter().map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("?").to_string())).collect();
        (sent, dropped)
    }

    #[test]
    fn secrets_fill_only_their_headers_over_https_to_their_host() {
        let e = egress(SECRET, Arc::new(Unattended { yolo: false }), &[]);
        let ph = "Bearer {{secret:KEY}}";
        let (sent, dropped) = injected(&e, "https://api.example.com/x", &[("authorization", ph), ("x-api-key", ph)]);
        assert_eq!(
            sent,
            [("authorization".into(), "Bearer s3cret".into()), ("x-api-key".into(), "Bearer s3cret".into())]
        );
        assert!(dropped.is_empty(), "{dropped:?}");
        // Plain http, or another host: the header is dropped, and the reason kept.
        let (sent, dropped) = injected(&e, "http://api.example.com/x", &[("authorization", ph)]);
        assert_eq!(
            (sent, dropped),
            (vec![], vec!["secret KEY is only sent over https (this request is plain http)".into()])
        );
        let (sent, dropped) = injected(&e, "https://other.example.com/x", &[("authorization", ph)]);
        assert_eq!(
            (sent, dropped),
            (vec![], vec!["secret KEY may only be sent to api.example.com, not other.example.com:443".into()])
        );
        // Any header the manifest does not name for the secret, echoed back or not.
        for header in ["origin", "referer", "cookie", "x-forwarded-host", "x-key"] {
            let (sent, dropped) = injected(&e, "https://api.example.com/x", &[(header, ph), ("x-a", "b")]);
            assert_eq!(sent, [("x-a".to_string(), "b".to_string())], "{header}");
            assert_eq!(
                dropped,
                [format!("secret KEY may only be sent in header authorization, header x-api-key, not header {header}")]
            );
        }
        // Headers without placeholders pass untouched.
        assert_eq!(
            injected(&e, "https://other.example.com/", &[("x-a", "b")]),
            (vec![("x-a".into(), "b".into())], vec![])
        );
    }

    #[test]
    fn a_secret_goes_into_the_headers_its_request_names() {
        let named = SECRET.replace(" }]", ", headers = [\"Key\"] }]");
        let e = egress(&named, Arc::new(Unattended { yolo: false }), &[]);
        let ph = "{{secret:KEY}}";
        assert_eq!(
            injected(&e, "https://api.example.com/", &[("key", ph)]),
            (vec![("key".into(), "s3cret".into())], vec![])
        );
        let (sent, dropped) = injected(&e, "https://api.example.com/", &[("authorization", ph)]);
        assert!(sent.is_empty());
        assert_eq!(dropped, ["secret KEY may only be sent in header key, not header authorization"]);
    }

    #[test]
    fn a_secret_requested_for_two_hosts_goes_to_either_and_nowhere_else() {
        let two = "secrets = [{ name = \"KEY\", host = \"api.example.com\" }, { name = \"KEY\", host = \"gateway.example.com\" }]";
        let e = egress(two, Arc::new(Unattended { yolo: false }), &[]);
        let ph = "Bot {{secret:KEY}}";
        for host in ["api.example.com", "gateway.example.com"] {
            let (sent, dropped) = injected(&e, &format!("https://{host}/x"), &[("authorization", ph)]);
            assert_eq!((sent, dropped), (vec![("authorization".into(), "Bot s3cret".into())], vec![]), "{host}");
        }
        let (sent, dropped) = injected(&e, "https://other.example.com/x", &[("authorization", ph)]);
        assert!(sent.is_empty());
        assert_eq!(
            dropped,
            ["secret KEY may only be sent to api.example.com or gateway.example.com, not other.example.com:443"]
        );
    }

    fn path_filled(egress: &Egress, url: &str) -> Result<String, String> {
        let req = request(url, &[]);
        let dest = Destination::of(&req).expect("dest");
        fill_path(req, egress, &dest).map(|r| r.uri().to_string())
    }

    #[test]
    fn a_secret_goes_into_the_url_path_only_when_its_manifest_says_in_path() {
        let e = egress(SECRET, Arc::new(Unattended { yolo: false }), &[]);
        assert_eq!(
            path_filled(&e, "https://api.example.com/bot%7B%7Bsecret:KEY%7D%7D/getMe"),
            Err("secret KEY may only be sent in header authorization, header x-api-key, not the URL path".into())
        );
        let in_path = SECRET.replace(" }]", ", in_path = true }]");
        let e = egress(&in_path, Arc::new(Unattended { yolo: false }), &[]);
        assert_eq!(
            path_filled(&e, "https://api.example.com/bot%7B%7Bsecret:KEY%7D%7D/getMe?x=1").as_deref(),
            Ok("https://api.example.com/bots3cret/getMe?x=1")
        );
        // Still only to its own host, and only over https.
        assert_eq!(
            path_filled(&e, "https://evil.example.net/bot%7B%7Bsecret:KEY%7D%7D/x"),
            Err("secret KEY may only be sent to api.example.com, not evil.example.net:443".into())
        );
        assert_eq!(
            path_filled(&e, "http://api.example.com/bot%7B%7Bsecret:KEY%7D%7D/x"),
            Err("secret KEY is only sent over https (this request is plain http)".into())
        );
        // A path without placeholders is left alone.
        assert_eq!(path_filled(&e, "https://evil.example.net/x").as_deref(), Ok("https://evil.example.net/x"));
    }
}
