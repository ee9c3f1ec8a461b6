//! `[telemetry]`: traces of what talaria does, sent over OTLP to a collector the operator runs
//! (docs/telemetry.md). Off unless this table names an endpoint or the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set.

use std::collections::BTreeMap;

use serde::Deserialize;

/// `[telemetry]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryToml {
    /// Off even when the `OTEL_EXPORTER_OTLP_*` variables are set (`false`); on with them or
    /// [`TelemetryToml::endpoint`] otherwise.
    pub enabled: Option<bool>,
    /// The collector's OTLP/HTTP address, as `OTEL_EXPORTER_OTLP_ENDPOINT` takes it
    /// (`http://localhost:4318`): traces go to `/v1/traces` under it. It wins over the variables.
    pub endpoint: Option<String>,
    /// Headers sent with every export (an API key); `${NAME}` in a value is a secret, from the
    /// home's `.env` or the environment. Added to those of `OTEL_EXPORTER_OTLP_HEADERS`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Let spans carry text: the prompt and answer of a turn, a tool call's arguments and
    /// result. Off: spans carry names, counts, times and outcomes only.
    #[serde(default)]
    pub content: bool,
    /// The `service.name` of the traces (`OTEL_SERVICE_NAME` otherwise, then `talaria`).
    pub service_name: Option<String>,
}
