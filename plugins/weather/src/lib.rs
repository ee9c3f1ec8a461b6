//! The weather tool: the example every plugin author starts from.
//!
//! The plugin never sees WEATHER_API_KEY: it sends a placeholder header and the host fills in the
//! key only for the host the key was granted for. `[plugins.weather.config] base_url` points it
//! at another endpoint with the same API (a proxy, or a test server).

use serde::Deserialize;
use talaria_sdk::http::Request;
use talaria_sdk::{Context, JsonSchema, ToolError, config, export_tools, secrets};

const DEFAULT_BASE_URL: &str = "https://api.weatherapi.com/v1";

#[derive(Deserialize, JsonSchema)]
struct WeatherArgs {
    /// Place name, postcode, or "lat,lon".
    location: String,
}

fn get_weather(args: WeatherArgs, _ctx: &Context) -> Result<String, ToolError> {
    if !secrets::exists("WEATHER_API_KEY") {
        return Err(ToolError::failed(
            "WEATHER_API_KEY is not available: put it in ~/.talaria/.env (or the environment) and grant it",
        ));
    }
    let base = config::get_str("base_url").unwrap_or_else(|| DEFAULT_BASE_URL.to_string());
    let url = format!("{}/current.json?q={}", base.trim_end_matches('/'), encode(&args.location));
    let resp = Request::get(url).header("key", &secrets::placeholder("WEATHER_API_KEY")).send()?;
    if !resp.is_success() {
        return Err(ToolError::failed(format!("weather API answered {}: {}", resp.status, resp.text())));
    }
    let body: serde_json::Value = resp.json()?;
    let (place, now) = (&body["location"], &body["current"]);
    Ok(format!(
        "{}, {}: {}, {}°C (feels like {}°C), wind {} km/h, humidity {}%",
        place["name"].as_str().unwrap_or(&args.location),
        place["country"].as_str().unwrap_or("?"),
        now["condition"]["text"].as_str().unwrap_or("unknown"),
        now["temp_c"],
        now["feelslike_c"],
        now["wind_kph"],
        now["humidity"],
    ))
}

/// Percent-encode a query value.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b',' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

export_tools! {
    /// Current weather for a place: conditions, temperature, wind and humidity.
    get_weather,
}
