//! Canned answers to outgoing HTTP requests, for `talaria plugin test`.
//!
//! With stubs set ([`HttpStubs::set`]), a request a plugin makes is still checked against its
//! network grant, but never reaches the network: the first stub matching its method and URL
//! answers it, and a request no stub matches is refused, saying so. With none set, requests go
//! out as usual.
//!
//! ```
//! use talaria_runtime::HttpStub;
//! let stub = HttpStub { method: None, url: "https://api.example.com/v1/*".into(), status: 200, headers: vec![], body: b"{}".to_vec() };
//! assert!(stub.matches("GET", "https://api.example.com/v1/forecast?q=Oslo"));
//! assert!(!stub.matches("GET", "https://api.example.com/v2/"));
//! ```

use std::sync::Mutex;

/// One canned answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpStub {
    /// The method it answers (any when `None`), case-insensitive.
    pub method: Option<String>,
    /// The whole URL it answers, or a prefix of it when it ends in `*`.
    pub url: String,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpStub {
    /// Whether it answers `method` `url`.
    pub fn matches(&self, method: &str, url: &str) -> bool {
        let method_ok = self.method.as_deref().is_none_or(|m| m.eq_ignore_ascii_case(method));
        let url_ok = match self.url.strip_suffix('*') {
            Some(prefix) => url.starts_with(prefix),
            None => url == self.url,
        };
        method_ok && url_ok
    }
}

/// The stubs in force, shared by every plugin of a runtime; `None` inside: requests go out.
#[derive(Debug, Default)]
pub struct HttpStubs(Mutex<Option<Vec<HttpStub>>>);

/// What the stubs say about one request.
pub(crate) enum StubAnswer {
    /// No stubs are set: send it.
    Network,
    Answer(HttpStub),
    /// Stubs are set and none matches.
    NoMatch,
}

impl HttpStubs {
    /// Answer requests from `stubs` from now on (`None`: let them go out again).
    pub fn set(&self, stubs: Option<Vec<HttpStub>>) {
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = stubs;
    }

    pub(crate) fn answer(&self, method: &str, url: &str) -> StubAnswer {
        let stubs = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match stubs.as_ref() {
            None => StubAnswer::Network,
            Some(list) => {
                list.iter().find(|s| s.matches(method, url)).cloned().map_or(StubAnswer::NoMatch, StubAnswer::Answer)
            }
        }
    }
}
