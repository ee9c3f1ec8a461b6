//! `doctor`'s question to a platform: whose is the account's token? Asked of the bundled
//! adapters' platforms only, with the token as the adapter would send it.

use std::time::Duration;

use super::Report;

/// How long a platform gets to say whose a token is.
const IDENTITY_TIMEOUT: Duration = Duration::from_secs(10);

/// Ask a bundled adapter's platform whose the account's token is (Telegram `getMe`, Matrix
/// `whoami`, Slack `auth.test`, Discord `/users/@me`): ok with the bot's name, or a failure
/// quoting the platform's answer. Another adapter's token is only checked to be set.
pub(super) async fn check(
    at: &str,
    plugin: &str,
    base_url: Option<&str>,
    token: &dyn Fn(&str) -> Option<String>,
    r: &mut Report,
) {
    let Some(ask) = identity_request(plugin, base_url, token) else { return };
    let client = match talaria_agent::model::http_client(IDENTITY_TIMEOUT) {
        Ok(client) => client,
        Err(e) => return r.warn("gateway", &format!("{at}: cannot check the token: {e}")),
    };
    let request = if ask.post { client.post(&ask.url) } else { client.get(&ask.url) };
    let request = match &ask.authorization {
        Some(value) => request.header("authorization", value),
        None => request,
    };
    let answer = async {
        // (Without the URL: Telegram's holds the token.)
        let response = request.send().await.map_err(|e| e.without_url().to_string())?;
        let status = response.status().as_u16();
        let body: serde_json::Value = response.json().await.unwrap_or_default();
        Ok::<_, String>((status, body))
    };
    let (status, body) = match tokio::time::timeout(IDENTITY_TIMEOUT, answer).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => return r.warn("gateway", &format!("{at}: cannot reach {} to check the token: {e}", ask.what)),
        Err(_) => {
            return r.warn(
                "gateway",
                &format!("{at}: {} did not answer within {} s", ask.what, IDENTITY_TIMEOUT.as_secs()),
            );
        }
    };
    match (ask.read)(status, &body) {
        Ok(who) => {
            r.ok("gateway", &format!("{at}: {} says the token is {}", ask.what, talaria_runtime::visible(&who, 200)))
        }
        Err(refusal) => r.fail(
            "gateway",
            &format!("{at}: {} refused the token: {}", ask.what, talaria_runtime::visible(&refusal, 500)),
        ),
    }
}

/// The request that asks a platform whose a token is, and how its answer reads.
struct IdentityRequest {
    what: String,
    url: String,
    post: bool,
    authorization: Option<String>,
    /// The bot's name from a good answer, or what the platform said against the token.
    read: fn(u16, &serde_json::Value) -> Result<String, String>,
}

fn identity_request(
    plugin: &str,
    base_url: Option<&str>,
    token: &dyn Fn(&str) -> Option<String>,
) -> Option<IdentityRequest> {
    let base = |default: &str| base_url.unwrap_or(default).trim_end_matches('/').to_string();
    Some(match plugin {
        "telegram" => IdentityRequest {
            what: "Telegram getMe".into(),
            url: format!("{}/bot{}/getMe", base("https://api.telegram.org"), token("TELEGRAM_BOT_TOKEN")?),
            post: true,
            authorization: None,
            read: |status, body| match body["result"]["username"].as_str() {
                Some(name) if body["ok"] == true => Ok(format!("@{name}")),
                _ => Err(format!(
                    "{} {}",
                    body["error_code"].as_i64().unwrap_or(i64::from(status)),
                    body["description"].as_str().unwrap_or("(no description)")
                )),
            },
        },
        "matrix" => IdentityRequest {
            what: "Matrix whoami".into(),
            url: format!("{}/_matrix/client/v3/account/whoami", base("https://matrix-client.matrix.org")),
            post: false,
            authorization: Some(format!("Bearer {}", token("MATRIX_ACCESS_TOKEN")?)),
            read: |status, body| match body["user_id"].as_str() {
                Some(user) if status == 200 => Ok(user.to_string()),
                _ => Err(format!(
                    "{status} {} {}",
                    body["errcode"].as_str().unwrap_or_default(),
                    body["error"].as_str().unwrap_or_default()
                )),
            },
        },
        "slack" => IdentityRequest {
            what: "Slack auth.test".into(),
            url: format!("{}/api/auth.test", base("https://slack.com")),
            post: true,
            authorization: Some(format!("Bearer {}", token("SLACK_BOT_TOKEN")?)),
            read: |status, body| match body["user"].as_str() {
                Some(user) if body["ok"] == true => Ok(user.to_string()),
                _ => Err(format!("{status} {}", body["error"].as_str().unwrap_or("(no error named)"))),
            },
        },
        "discord" => IdentityRequest {
            what: "Discord /users/@me".into(),
            url: format!("{}/api/v10/users/@me", base("https://discord.com")),
            post: false,
            authorization: Some(format!("Bot {}", token("DISCORD_BOT_TOKEN")?)),
            read: |status, body| match body["username"].as_str() {
                Some(name) if status == 200 => Ok(name.to_string()),
                _ => Err(format!("{status} {}", body["message"].as_str().unwrap_or_default())),
            },
        },
        _ => return None,
    })
}
