//! Operator settings: the `[plugins.NAME.config]` table of the user's config.toml.
//!
//! ```ignore
//! let base = talaria_sdk::config::get_str("base_url").unwrap_or_else(|| DEFAULT.to_string());
//! ```

use serde::de::DeserializeOwned;

use crate::__bindings::talaria::plugin::config as host;

/// A setting decoded into `T`; `None` when it is unset or has another type.
pub fn get<T: DeserializeOwned>(key: &str) -> Option<T> {
    host::get(key).and_then(|json| serde_json::from_str(&json).ok())
}

/// A string setting.
pub fn get_str(key: &str) -> Option<String> {
    get::<String>(key)
}
