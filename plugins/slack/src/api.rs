//! Slack's Web API (<https://api.slack.com/web>): `POST {base_url}/api/METHOD` with
//! `Authorization: Bearer {{secret:TOKEN}}`, answered `{"ok": true, ...}` or `{"ok": false,
//! "error": CODE}` (HTTP 200 either way; 429 with `Retry-After` when rate limited).

use serde_json::Value;
use talaria_sdk::adapter::Error;
use talaria_sdk::{config, http, secrets};

const DEFAULT_BASE_URL: &str = "https://slack.com";

/// How a method takes its arguments: write methods a JSON body, read methods a query string.
pub enum Body<'a> {
    Json(&'a Value),
    Query(&'a [(&'a str, &'a str)]),
}

/// Error codes worth trying again.
const TRANSIENT: &[&str] =
    &["ratelimited", "rate_limited", "fatal_error", "internal_error", "service_unavailable", "request_timeout"];

fn base_url() -> String {
    config::get_str("base_url").unwrap_or_else(|| DEFAULT_BASE_URL.to_string()).trim_end_matches('/').to_string()
}

/// Call `method` with the secret `token`; the answer, once `ok`.
///
/// # Errors
/// The request failed, or Slack answered with an error (transient for rate limits and Slack's
/// own failures).
pub fn call(token: &str, method: &str, body: Body<'_>) -> Result<Value, Error> {
    let url = format!("{}/api/{method}", base_url());
    let request = match body {
        Body::Json(body) => http::Request::post(url)
            .header("content-type", "application/json; charset=utf-8")
            .body(serde_json::to_vec(body).map_err(|e| Error::permanent(e.to_string()))?),
        Body::Query(pairs) => {
            let query: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={}", http::encode(v))).collect();
            http::Request::get(format!("{url}?{}", query.join("&")))
        }
    };
    let response = request.header("authorization", &format!("Bearer {}", secrets::placeholder(token))).send()?;
    let retry = response.header("retry-after").and_then(|s| s.parse::<u32>().ok()).map(|s| s.saturating_mul(1000));
    let answer: Value = response.json().map_err(|_| {
        Error::from_status(
            response.status,
            format!("Slack {method}: HTTP {} with a body that is not JSON", response.status),
            retry,
        )
    })?;
    if answer["ok"].as_bool() == Some(true) {
        return Ok(answer);
    }
    let code = answer["error"].as_str().unwrap_or("unknown_error");
    let message = format!("Slack {method}: {code}");
    if response.status == 429 || TRANSIENT.contains(&code) {
        Err(Error::transient(message, retry))
    } else {
        Err(Error::from_status(response.status, message, retry))
    }
}
