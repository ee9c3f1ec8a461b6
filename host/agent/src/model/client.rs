//! The shared HTTP client and the dispatch of one call to its wire format.
//!
//! Building the client is cheap on purpose (it sits on the start-up path of `talaria chat -q`):
//! rustls runs on the *ring* provider, passed explicitly rather than installed process-wide, and
//! the system's root certificates are loaded only when the first TLS handshake needs them (the
//! platform verifier reads and parses the whole system store, which costs milliseconds). A call
//! to a loopback `http://` server never loads them at all.
//!
//! Nothing here spawns a task: dropping the future of [`Client::complete`] drops the response
//! and with it the connection (HTTP/1) or the stream (HTTP/2).
//!
//! The connect limit is a setting of the HTTP client, not of a request, so a provider whose
//! `connect_timeout_secs` differs from the default gets a client of its own (built on first
//! use and kept); every other limit is applied per request (see `transport`).
//!
//! ```no_run
//! # async fn demo() {
//! use talaria_agent::model::{Client, ModelRequest, Provider};
//! let client = Client::new();
//! let provider = Provider::preset("ollama", "llama3.2", None).expect("preset");
//! let messages = [talaria_protocol::Message::user("hi")];
//! let request = ModelRequest { system: "", messages: &messages, tools: &[], stream: false };
//! let reply = client.complete(&provider, &request, &|_| {}).await;
//! # let _ = reply;
//! # }
//! ```

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use talaria_protocol::Usage;

use super::reply::estimated_usage;
use super::{
    ApiMode, Client, Delta, ModelError, ModelReply, ModelRequest, Provider, Timeouts, anthropic, chat, responses,
};

impl Client {
    /// A client with its own connection pool.
    ///
    /// # Panics
    /// Only if the TLS stack cannot be set up at all ([`Client::try_new`] reports that instead),
    /// which the fixed configuration used here rules out.
    pub fn new() -> Self {
        Self::try_new().unwrap_or_else(|e| panic!("{e}"))
    }

    /// A client with its own connection pool.
    ///
    /// # Errors
    /// [`ModelError::Config`] if the TLS or HTTP stack cannot be set up.
    pub fn try_new() -> Result<Self, ModelError> {
        let connect = Timeouts::default().connect;
        Ok(Self { http: http_client(connect)?, others: Arc::new(Mutex::new(Vec::new())) })
    }

    /// The HTTP client for `provider`'s connect limit.
    fn http_for(&self, provider: &Provider) -> Result<reqwest::Client, ModelError> {
        let connect = provider.timeouts.connect;
        if connect == Timeouts::default().connect {
            return Ok(self.http.clone());
        }
        let mut others = self.others.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, http)) = others.iter().find(|(limit, _)| *limit == connect) {
            return Ok(http.clone());
        }
        let http = http_client(connect)?;
        others.push((connect, http.clone()));
        Ok(http)
    }

    /// One attempt at one provider: no retries, no fallback (see [`super::Chain`]). With
    /// `request.stream`, text and reasoning arrive through `on_delta` as they come. The request
    /// carries [`Provider::output_limit`] (so a whole reply is bounded even without
    /// `max_tokens`).
    ///
    /// # Errors
    /// Whatever went wrong, classified as [`ModelError`] (see [`ModelError::is_transient`]).
    pub async fn complete(
        &self,
        provider: &Provider,
        request: &ModelRequest<'_>,
        on_delta: &(dyn Fn(Delta) + Send + Sync),
    ) -> Result<ModelReply, ModelError> {
        if provider.base_url.trim().is_empty() {
            return Err(ModelError::Config(format!("provider `{}` has no base_url", provider.name)));
        }
        // The limit the request carries, resolved once here for every wire format (and for the
        // messages about a reply that ran into it).
        let bounded;
        let provider = match (provider.max_tokens, provider.output_limit(request.stream)) {
            (None, Some(limit)) => {
                bounded = Provider { max_tokens: Some(limit), ..provider.clone() };
                &bounded
            }
            (Some(_), _) | (None, None) => provider,
        };
        let label = provider.label();
        tracing::debug!(provider = %label, api_mode = %provider.api_mode, stream = request.stream, "model call");
        let http = self.http_for(provider)?;
        let mut reply = match provider.api_mode {
            ApiMode::ChatCompletions => chat::complete(&http, provider, request, on_delta).await,
            ApiMode::AnthropicMessages => anthropic::complete(&http, provider, request, on_delta).await,
            ApiMode::Responses => responses::complete(&http, provider, request, on_delta).await,
        }?;
        if reply.usage == Usage::default() {
            reply.usage = estimated_usage(request, &reply.message);
        }
        Ok(reply)
    }
}

impl Client {
    /// `GET {base_url}/models` with the provider's authentication: whether the endpoint answers
    /// and accepts the key, without spending a token; and the ids of the models it lists
    /// (`None` when it lists none: 404, 405, or an answer not shaped as OpenAI's and Anthropic's
    /// `{"data": [{"id": …}]}`).
    ///
    /// # Errors
    /// As a model call would fail: no connection, TLS, a timeout, or the HTTP error (401 and
    /// 403 say to check the key).
    pub async fn models(&self, provider: &Provider) -> Result<Option<Vec<String>>, ModelError> {
        let http = self.http_for(provider)?;
        let url = provider.url("models");
        let mut request = http.get(&url);
        if let Some(key) = &provider.api_key {
            request = match provider.api_mode {
                ApiMode::AnthropicMessages => {
                    request.header("x-api-key", key).header("anthropic-version", anthropic::VERSION)
                }
                ApiMode::ChatCompletions | ApiMode::Responses => request.bearer_auth(key),
            };
        }
        let sent = match super::transport::send(provider, &url, request).await {
            Ok(sent) => sent,
            Err(ModelError::Http { status: 404 | 405, .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        // A list that does not arrive whole within the limits is no list, not a failure.
        let Ok(body) = sent.response.json::<serde_json::Value>().await else { return Ok(None) };
        let ids = body["data"]
            .as_array()
            .map(|models| models.iter().filter_map(|m| m["id"].as_str()).map(str::to_string).collect::<Vec<_>>());
        Ok(ids)
    }
}

/// An HTTP client as the model calls use (rustls on *ring*, the platform's roots, HTTP/2),
/// whose connections must be up within `connect`: for other services talaria itself talks to
/// (MCP servers over HTTP).
///
/// # Errors
/// TLS cannot be set up.
pub fn http_client(connect: Duration) -> Result<reqwest::Client, ModelError> {
    let setup = |e: &dyn std::fmt::Display| ModelError::Config(format!("cannot set up the HTTP client: {e}"));
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls_config().map_err(|e| setup(&e))?)
        .connect_timeout(connect)
        .tcp_keepalive(Duration::from_secs(30))
        .user_agent(concat!("talaria/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| setup(&e))
}

/// rustls on *ring*, verifying servers against the platform's roots (loaded on first use),
/// offering HTTP/2 and HTTP/1.1.
fn tls_config() -> Result<rustls::ClientConfig, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(LazyPlatformVerifier { provider }))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// The platform verifier, created at the first handshake of the process.
static PLATFORM: OnceLock<Result<Arc<rustls_platform_verifier::Verifier>, String>> = OnceLock::new();

/// The platform's certificate verification, with the root store loaded on first use.
#[derive(Debug)]
struct LazyPlatformVerifier {
    provider: Arc<CryptoProvider>,
}

impl LazyPlatformVerifier {
    fn platform(&self) -> Result<&rustls_platform_verifier::Verifier, rustls::Error> {
        PLATFORM
            .get_or_init(|| {
                rustls_platform_verifier::Verifier::new(self.provider.clone()).map(Arc::new).map_err(|e| e.to_string())
            })
            .as_deref()
            .map_err(|e| rustls::Error::General(format!("cannot load the system's root certificates: {e}")))
    }
}

impl ServerCertVerifier for LazyPlatformVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.platform()?.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.platform()?.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.platform()?.verify_tls13_signature(message, cert, dss)
    }

    /// Asked for the ClientHello, before any certificate: answered without loading the roots
    /// (the platform verifier answers the same from the same provider).
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_builds_without_loading_root_certificates() {
        let _client = Client::new();
        // Other tests may have made TLS connections; none do in this crate, so the store stays cold.
        assert!(PLATFORM.get().is_none(), "root certificates were loaded eagerly");
        let verifier = LazyPlatformVerifier { provider: Arc::new(rustls::crypto::ring::default_provider()) };
        assert!(verifier.supported_verify_schemes().contains(&SignatureScheme::ECDSA_NISTP256_SHA256));
        assert!(PLATFORM.get().is_none());
    }
}
