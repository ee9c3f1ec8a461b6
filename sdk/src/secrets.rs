//! Secrets the user granted this plugin. Values never enter the plugin: put
//! [`placeholder`] in a header of a request and the host fills in the value when,
//! and only when, the request goes to the host the secret was granted for.
//!
//! ```ignore
//! if !talaria_sdk::secrets::exists("WEATHER_API_KEY") {
//!     return Err(ToolError::failed("WEATHER_API_KEY is not set: add it to ~/.talaria/.env"));
//! }
//! let resp = http::Request::get(url).header("key", &secrets::placeholder("WEATHER_API_KEY")).send()?;
//! ```

use crate::__bindings::talaria::plugin::secrets as host;

/// Whether the secret is granted to this plugin and has a value.
pub fn exists(name: &str) -> bool {
    host::exists(name)
}

/// The text the host replaces with the secret's value at the HTTP boundary.
pub fn placeholder(name: &str) -> String {
    format!("{{{{secret:{name}}}}}")
}

/// The placeholder as it goes in a URL path (percent-encoded), for a secret the manifest lets
/// go there (`in_path = true`), as Telegram's `/bot<TOKEN>/` wants.
pub fn path_placeholder(name: &str) -> String {
    format!("%7B%7Bsecret:{name}%7D%7D")
}
