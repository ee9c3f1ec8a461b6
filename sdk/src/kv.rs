//! Persistent key-value storage private to this plugin (needs the `kv` capability).
//!
//! ```ignore
//! talaria_sdk::kv::set_json("last_city", &"Lisbon")?;
//! let city: Option<String> = talaria_sdk::kv::get_json("last_city")?;
//! ```

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::__bindings::talaria::plugin::kv as host;

/// A refusal or failure from the host's store, or a value that did not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kv: {}", self.0)
    }
}

impl std::error::Error for Error {}

/// The bytes stored under `key`.
pub fn get(key: &str) -> Result<Option<Vec<u8>>, Error> {
    host::get(key).map_err(Error)
}

/// Store `value` under `key`, replacing what was there.
pub fn set(key: &str, value: &[u8]) -> Result<(), Error> {
    host::set(key, value).map_err(Error)
}

/// Remove `key`; removing a missing key is not an error.
pub fn delete(key: &str) -> Result<(), Error> {
    host::delete(key).map_err(Error)
}

/// Keys that start with `prefix`, sorted.
pub fn keys(prefix: &str) -> Result<Vec<String>, Error> {
    host::list_keys(prefix).map_err(Error)
}

/// The JSON value stored under `key`.
pub fn get_json<T: DeserializeOwned>(key: &str) -> Result<Option<T>, Error> {
    match get(key)? {
        None => Ok(None),
        Some(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| Error(format!("{key}: {e}"))),
    }
}

/// Store `value` as JSON under `key`.
pub fn set_json<T: Serialize + ?Sized>(key: &str, value: &T) -> Result<(), Error> {
    let bytes = serde_json::to_vec(value).map_err(|e| Error(e.to_string()))?;
    set(key, &bytes)
}
