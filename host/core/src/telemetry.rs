//! Traces over OTLP (HTTP, protobuf), for an operator's collector: one trace per turn, with a
//! span for each model request, tool call, plugin instance call, hook, approval, store
//! transaction and gateway delivery (docs/telemetry.md).
//!
//! Off unless `[telemetry]` names an endpoint or the standard `OTEL_EXPORTER_OTLP_ENDPOINT` /
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set; `OTEL_SDK_DISABLED=true` and
//! `[telemetry] enabled = false` keep it off. Off, no layer wants the spans and each costs a
//! cached check. On, the spans of target [`talaria_protocol::trace::TARGET`] go to a
//! batch exporter on a thread of its own; no log event is exported, and text only with
//! `content = true`.
//!
//! A request's W3C `traceparent` (an ACP `_meta`, an API or webhook header) is passed to the
//! conversation with its turn ([`talaria_protocol::Op::UserTurn`]), whose span continues it
//! ([`set_parent`]).

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::Layer as _;

use crate::config::TelemetryToml;

/// The layer that exports, for the process's subscriber.
pub type Layer = Box<dyn tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync>;

/// How long the exit waits for the last spans to be sent.
const FLUSH: Duration = Duration::from_secs(3);

/// An export that takes longer is given up (`OTEL_EXPORTER_OTLP_TIMEOUT` wins).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where traces go and what they carry, from `[telemetry]` and the `OTEL_*` variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The traces endpoint (`…/v1/traces`); `None`: the exporter reads the variables.
    pub endpoint: Option<String>,
    /// Headers from `[telemetry] headers`, secrets filled in.
    pub headers: HashMap<String, String>,
    /// Spans may carry text.
    pub content: bool,
    /// `service.name`, when `[telemetry]` or nothing else names it.
    pub service_name: Option<String>,
}

impl Settings {
    /// What `[telemetry]` and the environment (`env`) ask for; `None` when traces are off.
    ///
    /// # Errors
    /// An endpoint that is not an `http(s)://` URL, a header that cannot be sent, or a secret
    /// `${NAME}` that is not set: the message names it.
    pub fn resolve(
        toml: &TelemetryToml,
        env: impl Fn(&str) -> Option<String>,
        secret: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, String> {
        let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let disabled = set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        let from_env =
            set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some() || set("OTEL_EXPORTER_OTLP_ENDPOINT").is_some();
        if disabled || toml.enabled == Some(false) || (toml.endpoint.is_none() && !from_env) {
            return Ok(None);
        }
        let endpoint = match &toml.endpoint {
            Some(base) => {
                let base = base.trim().trim_end_matches('/');
                if !(base.starts_with("http://") || base.starts_with("https://")) || base.parse::<http::Uri>().is_err()
                {
                    return Err(format!(
                        "[telemetry] endpoint `{base}` is not an OTLP/HTTP address: write it as http://HOST:4318 (traces go to /v1/traces under it)"
                    ));
                }
                Some(if base.ends_with("/v1/traces") { base.to_string() } else { format!("{base}/v1/traces") })
            }
            None => None,
        };
        let mut headers = HashMap::new();
        for (name, value) in &toml.headers {
            let value =
                talaria_mcp::config::expand(value, &secret).map_err(|e| format!("[telemetry] headers.{name}: {e}"))?;
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() || http::HeaderValue::from_str(&value).is_err() {
                return Err(format!(
                    "[telemetry] headers.{name}: not a header that can be sent (a name of letters, digits and -, a value of visible characters)"
                ));
            }
            headers.insert(name.clone(), value);
        }
        let service_name =
            toml.service_name.clone().or_else(|| set("OTEL_SERVICE_NAME").is_none().then(|| "talaria".into()));
        Ok(Some(Self { endpoint, headers, content: toml.content, service_name }))
    }
}

/// The exporter running: flush it when the process ends ([`Tracing::finish`]).
pub struct Tracing {
    provider: SdkTracerProvider,
}

impl Tracing {
    /// Send what is still waiting (waiting at most 3 s), and stop.
    pub fn finish(self) {
        if let Err(e) = self.provider.shutdown_with_timeout(FLUSH) {
            tracing::warn!("the last traces were not all sent: {e}");
        }
    }
}

/// Start exporting as `home`'s `[telemetry]` and the environment ask: the layer for the
/// process's subscriber and the exporter to finish at exit; `None` when traces are off.
/// A `service` (the gateway, `serve`) tries a failed export again, with OTLP's recommended
/// back-off; a command that soon exits tries once, so a collector that is down does not hold
/// its exit.
///
/// # Errors
/// What [`Settings::resolve`] finds wrong, or an exporter that cannot be built.
pub fn start(home: &Path, service: bool) -> Result<Option<(Layer, Tracing)>, String> {
    let toml = crate::config::ConfigToml::load(home).map(|c| c.telemetry).unwrap_or_default();
    let secrets = talaria_runtime::Secrets::load(&home.join(".env"));
    let Some(settings) = Settings::resolve(&toml, |n| std::env::var(n).ok(), |n| secrets.value(n))? else {
        return Ok(None);
    };
    talaria_protocol::trace::allow_content(settings.content);
    // The exporter's HTTP client takes the process's TLS provider (even for http://).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_headers(settings.headers.clone())
        .with_retry_policy(if service {
            opentelemetry_otlp::RetryPolicy::default()
        } else {
            opentelemetry_otlp::RetryPolicy::disabled()
        });
    let timeout = ["OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"]
        .iter()
        .find_map(|name| std::env::var(name).ok()?.trim().parse().ok())
        .map_or(EXPORT_TIMEOUT, Duration::from_millis);
    let secure = settings
        .endpoint
        .iter()
        .cloned()
        .chain(
            ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"]
                .iter()
                .filter_map(|n| std::env::var(n).ok()),
        )
        .any(|e| e.trim().starts_with("https://"));
    exporter = exporter.with_http_client(client(secure, timeout)?);
    if let Some(endpoint) = &settings.endpoint {
        exporter = exporter.with_endpoint(endpoint.clone());
    }
    let exporter = exporter.build().map_err(|e| format!("cannot start sending traces: {e}"))?;
    let mut resource = opentelemetry_sdk::Resource::builder()
        .with_attribute(opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    if let Some(name) = settings.service_name {
        resource = resource.with_service_name(name);
    }
    let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource.build()).build();
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("talaria"))
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_level(false)
        .with_tracked_inactivity(false)
        .with_context_activation(false)
        .with_filter(tracing_subscriber::filter::filter_fn(|meta| meta.target() == talaria_protocol::trace::TARGET));
    Ok(Some((Box::new(layer), Tracing { provider })))
}

/// The exporter's HTTP client, with its `timeout`. Loading the system's root certificates
/// costs milliseconds at every start, and a collector reached over plain HTTP (a local agent, a
/// sidecar) needs none: they are loaded only for an https:// one (`secure`). Built on a thread
/// of its own, as a blocking client must be outside any async runtime.
fn client(secure: bool, timeout: Duration) -> Result<reqwest::blocking::Client, String> {
    let built = std::thread::spawn(move || {
        let builder = reqwest::blocking::Client::builder().timeout(timeout);
        let builder = if secure { builder } else { builder.tls_certs_only([]) };
        builder.build()
    })
    .join()
    .map_err(|_| "cannot start sending traces: making the HTTP client panicked".to_string())?;
    built.map_err(|e| format!("cannot start sending traces: {e}"))
}

/// Make `span` (not yet entered) continue the trace of `traceparent`, a W3C header value the
/// front door checked ([`talaria_protocol::trace::traceparent`]). Nothing when traces are off
/// or there is none.
pub fn set_parent(span: &tracing::Span, traceparent: Option<&str>) {
    let Some(value) = traceparent else { return };
    if span.is_disabled() {
        return;
    }
    let carrier = HashMap::from([("traceparent".to_string(), value.to_string())]);
    let _ = span.set_parent(TraceContextPropagator::new().extract(&carrier));
}

/// The W3C `traceparent` of `span`, for work that continues it elsewhere (a delivery sent later,
/// by this process or another); `None` when traces are off.
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    if span.is_disabled() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&span.context(), &mut carrier);
    carrier.remove("traceparent")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn traces_are_off_unless_an_endpoint_is_named_and_not_switched_off() {
        let none = |_: &str| None;
        assert_eq!(Settings::resolve(&TelemetryToml::default(), none, none), Ok(None));
        let with_env = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")]);
        let on = Settings::resolve(&TelemetryToml::default(), &with_env, none).expect("valid").expect("on");
        assert_eq!(on.endpoint, None, "the exporter reads the variable itself");
        assert_eq!(on.service_name.as_deref(), Some("talaria"));
        let off = TelemetryToml { enabled: Some(false), ..TelemetryToml::default() };
        assert_eq!(Settings::resolve(&off, &with_env, none), Ok(None));
        let disabled = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"), ("OTEL_SDK_DISABLED", "TRUE")]);
        assert_eq!(Settings::resolve(&TelemetryToml::default(), disabled, none), Ok(None));
    }

    #[test]
    fn the_configured_endpoint_gets_the_traces_path_and_secrets_fill_headers() {
        let toml = TelemetryToml {
            endpoint: Some("http://127.0.0.1:4318/".into()),
            headers: [("x-api-key".to_string(), "key ${OTEL_KEY}".to_string())].into(),
            service_name: Some("team-bot".into()),
            ..TelemetryToml::default()
        };
        let secret = env(&[("OTEL_KEY", "s3cret")]);
        let s = Settings::resolve(&toml, |_| None, &secret).expect("valid").expect("on");
        assert_eq!(s.endpoint.as_deref(), Some("http://127.0.0.1:4318/v1/traces"));
        assert_eq!(s.headers.get("x-api-key").map(String::as_str), Some("key s3cret"));
        assert_eq!(s.service_name.as_deref(), Some("team-bot"));
        assert!(!s.content);

        let e = Settings::resolve(&toml, |_| None, |_| None).expect_err("unset secret");
        assert!(e.contains("headers.x-api-key") && e.contains("OTEL_KEY"), "{e}");
        let bad = TelemetryToml { endpoint: Some("collector:4318".into()), ..TelemetryToml::default() };
        let e = Settings::resolve(&bad, |_| None, |_| None).expect_err("not a URL");
        assert!(e.contains("http://HOST:4318"), "{e}");
        let header = TelemetryToml {
            endpoint: Some("http://c:4318".into()),
            headers: [("bad name".to_string(), "v".to_string())].into(),
            ..TelemetryToml::default()
        };
        let e = Settings::resolve(&header, |_| None, |_| None).expect_err("bad header");
        assert!(e.contains("headers.bad name"), "{e}");
    }
}
