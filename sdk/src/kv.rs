//! Persistent key-value storage private to this plugin (needs the `kv` capability).
//!
//! ```ignore
//! talaria_sdk::kv::set_json("last_city", &"Lisbon")?;
//! let city: Option<String> = talaria_sdk::kv::get_json("last_city")?;
//! ```
//!
//! # Several writers
//!
//! Several talaria processes (a REPL, a `chat -q` in another terminal, a gateway) may run your
//! plugin at the same time on the same store, each with its own instance and its own statics.
//! Every function here is atomic on its own, but a [`get`] followed by a [`set`] is not: another
//! process may write in between, and the `set` throws its data away. So:
//!
//! - data that grows (notes, turns, events): one key per item, numbered with [`increment`] and
//!   written with [`create`] (or [`create_json`]), read back with [`list`] / [`list_json`];
//! - one value that several writers change (a set of tags, a summary): [`update_json`], which
//!   reads, applies your change and swaps it in with [`compare_and_set`], again on a lost race;
//! - a cache in a `static`: check something cheap that every writer changes (a counter) before
//!   trusting it, and read what is new.
//!
//! ```ignore
//! use talaria_sdk::kv;
//! // Remember a note, whichever process writes at the same time:
//! let id = kv::increment("next-note", 1)?;
//! kv::create_json(&format!("note/{id:012}"), &note)?;
//! // Every note, oldest first:
//! let notes: Vec<(String, Note)> = kv::list_json("note/")?;
//! // Change one shared value without losing another writer's change:
//! kv::update_json("tags", |tags: Option<Vec<String>>| {
//!     let mut tags = tags.unwrap_or_default();
//!     tags.push("rust".into());
//!     Some(tags)
//! })?;
//! ```
//!
//! [`compare_and_set`], [`create`], [`increment`], [`list`] and the helpers built on them need a
//! talaria whose `kv` interface has `compare-and-set`, `increment` and `list-with-values` (added
//! to API 0.2.0 after it first shipped); an older talaria refuses to load a plugin that calls
//! them. The other functions work with any talaria that speaks API 0.2.0.

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::__bindings::talaria::plugin::kv as host;

/// How many times [`update`] and [`update_json`] read and try again before giving up.
pub const MAX_UPDATE_ATTEMPTS: usize = 100;

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

/// Store `value` under `key`, replacing what was there (whoever wrote it: see the module docs).
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

/// Atomically: if the value under `key` is `expected` (`None`: the key is absent), make it `new`
/// (`None`: delete the key) and return `true`; otherwise change nothing and return `false`.
pub fn compare_and_set(key: &str, expected: Option<&[u8]>, new: Option<&[u8]>) -> Result<bool, Error> {
    host::compare_and_set(key, expected, new).map_err(Error)
}

/// Store `value` under `key` only if the key is absent; `false` (and nothing written) when it
/// exists already.
pub fn create(key: &str, value: &[u8]) -> Result<bool, Error> {
    compare_and_set(key, None, Some(value))
}

/// Atomically add `delta` to the counter under `key` (a missing key counts as 0) and return the
/// new value. No two calls get the same value back, in any process: `increment(key, 1)` hands out
/// unique ids. The counter is kept as decimal text (`get` reads `b"42"`).
pub fn increment(key: &str, delta: i64) -> Result<i64, Error> {
    host::increment(key, delta).map_err(Error)
}

/// Keys that start with `prefix`, sorted, each with its value, read at one instant.
pub fn list(prefix: &str) -> Result<Vec<(String, Vec<u8>)>, Error> {
    host::list_with_values(prefix).map_err(Error)
}

/// Change the value under `key` with `change` (given the current value, `None` when absent;
/// returning `None` deletes the key) without losing another writer's change: when someone else
/// wrote between the read and the write, read again and call `change` again. Returns what was
/// stored.
///
/// # Errors
/// A refusal from the host, or the value kept changing for [`MAX_UPDATE_ATTEMPTS`] attempts.
pub fn update(key: &str, mut change: impl FnMut(Option<&[u8]>) -> Option<Vec<u8>>) -> Result<Option<Vec<u8>>, Error> {
    for _ in 0..MAX_UPDATE_ATTEMPTS {
        let before = get(key)?;
        let after = change(before.as_deref());
        if compare_and_set(key, before.as_deref(), after.as_deref())? {
            return Ok(after);
        }
    }
    Err(contended(key))
}

/// The JSON value stored under `key`.
pub fn get_json<T: DeserializeOwned>(key: &str) -> Result<Option<T>, Error> {
    match get(key)? {
        None => Ok(None),
        Some(bytes) => decode(key, &bytes).map(Some),
    }
}

/// Store `value` as JSON under `key`.
pub fn set_json<T: Serialize + ?Sized>(key: &str, value: &T) -> Result<(), Error> {
    set(key, &encode(value)?)
}

/// Store `value` as JSON under `key` only if the key is absent (see [`create`]).
pub fn create_json<T: Serialize + ?Sized>(key: &str, value: &T) -> Result<bool, Error> {
    create(key, &encode(value)?)
}

/// Keys that start with `prefix`, sorted, with their values decoded from JSON.
///
/// # Errors
/// A refusal from the host, or a value that is not a `T` (the error names its key).
pub fn list_json<T: DeserializeOwned>(prefix: &str) -> Result<Vec<(String, T)>, Error> {
    list(prefix)?.into_iter().map(|(key, bytes)| decode(&key, &bytes).map(|v| (key, v))).collect()
}

/// [`update`] for a JSON value: `change` gets the current value (`None` when absent) and returns
/// the new one (`None` deletes the key). Returns what was stored.
///
/// # Errors
/// As for [`update`]; and a stored value that is not a `T`.
pub fn update_json<T: Serialize + DeserializeOwned>(
    key: &str,
    mut change: impl FnMut(Option<T>) -> Option<T>,
) -> Result<Option<T>, Error> {
    for _ in 0..MAX_UPDATE_ATTEMPTS {
        let before = get(key)?;
        let current = before.as_deref().map(|b| decode(key, b)).transpose()?;
        let after = change(current);
        let bytes = after.as_ref().map(encode).transpose()?;
        if compare_and_set(key, before.as_deref(), bytes.as_deref())? {
            return Ok(after);
        }
    }
    Err(contended(key))
}

/// The error of an update that lost every race.
fn contended(key: &str) -> Error {
    Error(format!(
        "{key}: other writers changed it {MAX_UPDATE_ATTEMPTS} times while this update tried; keep data that several writers add to under one key per item"
    ))
}

fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, Error> {
    serde_json::to_vec(value).map_err(|e| Error(e.to_string()))
}

fn decode<T: DeserializeOwned>(key: &str, bytes: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(bytes).map_err(|e| Error(format!("{key}: {e}")))
}
