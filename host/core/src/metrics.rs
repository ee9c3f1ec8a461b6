//! What the host did, counted for Prometheus: every conversation's events pass through
//! `Metrics::observe`, and a front door that serves `/metrics` (the gateway's listener,
//! `talaria serve`) writes them with [`Metrics::scrape`] in the OpenMetrics text format, with
//! the gateway's queue and ledger read from the store at that moment.
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `talaria_turns_total` | `source`, `outcome` | turns that ended (`completed`, `failed`, `refused`...) |
//! | `talaria_tool_calls_total` | `tool`, `outcome` | tool calls that finished, `ok` or `error` |
//! | `talaria_errors_total` | `kind` | `turn_failed` (every provider failed), `tool_error`, `op_error` (a request refused) |
//! | `talaria_model_call_seconds` | `model` | from a model request sent to its usage known (histogram) |
//! | `talaria_model_call_tokens` | `model` | input and output tokens of one model call (histogram) |
//! | `talaria_tokens_total` | `model`, `kind` | `input` and `output` tokens |
//! | `talaria_cost_usd_total` | `model` | US dollars, for models with a known price |
//! | `talaria_approvals_waiting` | | approvals asked and not answered yet |
//! | `talaria_queue_depth` | | messages taken and not answered yet (gateway) |
//! | `talaria_deliveries` | `state` | the delivery ledger: `pending`, `failed` (gateway) |
//! | `talaria_plugin_faults_total` | `plugin`, `kind` | plugin instances stopped: `deadline`, `crashed` (a trap, a memory cap) |
//!
//! Labels hold names talaria chose or the operator configured (a source, a model, a tool
//! name), never text from a chat or a prompt.

use std::sync::atomic::AtomicU64;
use std::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric as _};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use talaria_protocol::Event;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TurnLabels {
    source: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    tool: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    model: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FaultLabels {
    plugin: String,
    kind: String,
}

/// Plugin instance faults, as the runtime counts them where each instance call ends
/// ([`talaria_runtime::plugin_faults`]): read at each scrape.
#[derive(Debug)]
struct Faults(fn() -> Vec<(String, &'static str, u64)>);

impl Collector for Faults {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let help = "Plugin instances stopped, by plugin and kind";
        let mut family = encoder.encode_descriptor("plugin_faults", help, None, MetricType::Counter)?;
        for (plugin, kind, n) in (self.0)() {
            let labels = FaultLabels { plugin, kind: kind.into() };
            ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// Seconds a model call may take: 50 ms to about 100 s.
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.05, 2.0, 12))
}

/// Tokens of one model call: 100 to about 400,000.
fn tokens() -> Histogram {
    Histogram::new(exponential_buckets(100.0, 2.0, 13))
}

/// The host's counters (one per process; every conversation adds to them).
pub struct Metrics {
    registry: Registry,
    turns: Family<TurnLabels, Counter>,
    tool_calls: Family<ToolLabels, Counter>,
    errors: Family<KindLabels, Counter>,
    model_seconds: Family<ModelLabels, Histogram, fn() -> Histogram>,
    model_tokens: Family<ModelLabels, Histogram, fn() -> Histogram>,
    tokens: Family<TokenLabels, Counter>,
    cost: Family<ModelLabels, Counter<f64, AtomicU64>>,
    approvals_waiting: Gauge,
    queue: Gauge,
    deliveries: Family<StateLabels, Gauge>,
    /// The tool and model names labelled so far: a name the model makes up (a tool that does
    /// not exist) must not grow the page without end, so past [`NAMES_KEPT`] the rest are `other`.
    names: std::sync::Mutex<std::collections::HashSet<String>>,
}

/// Distinct tool and model names labelled before the others count as `other`.
const NAMES_KEPT: usize = 256;

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("talaria");
        let turns = Family::default();
        registry.register("turns", "Turns that ended, by source and outcome", turns.clone());
        let tool_calls = Family::default();
        registry.register("tool_calls", "Tool calls that finished, by tool and outcome", tool_calls.clone());
        let errors = Family::default();
        registry.register("errors", "Errors by kind", errors.clone());
        let model_seconds = Family::new_with_constructor(seconds as fn() -> Histogram);
        registry.register("model_call_seconds", "Time of one model call", model_seconds.clone());
        let model_tokens = Family::new_with_constructor(tokens as fn() -> Histogram);
        registry.register("model_call_tokens", "Input and output tokens of one model call", model_tokens.clone());
        let token_counts = Family::default();
        registry.register("tokens", "Tokens, by model and kind (input, output)", token_counts.clone());
        let cost = Family::default();
        registry.register("cost_usd", "US dollars, for models with a known price", cost.clone());
        let approvals_waiting = Gauge::default();
        registry.register("approvals_waiting", "Approvals asked and not answered yet", approvals_waiting.clone());
        let queue = Gauge::default();
        registry.register("queue_depth", "Messages taken and not answered yet", queue.clone());
        let deliveries = Family::default();
        registry.register("deliveries", "Deliveries in the ledger, by state", deliveries.clone());
        registry.register_collector(Box::new(Faults(talaria_runtime::plugin_faults)));
        Self {
            registry,
            turns,
            tool_calls,
            errors,
            model_seconds,
            model_tokens,
            tokens: token_counts,
            cost,
            approvals_waiting,
            queue,
            deliveries,
            names: std::sync::Mutex::default(),
        }
    }
}

/// What one conversation remembers between its events, for the figures that span two.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    /// When the model call in flight was sent.
    sent: Option<Instant>,
    /// Approvals it asked that wait.
    waiting: i64,
}

impl Metrics {
    /// Count `event` of a conversation of `source`; `price` gives a model's cost of a usage.
    pub(crate) fn observe(
        &self,
        source: &str,
        event: &Event,
        watch: &mut Watch,
        price: impl Fn(&str, &talaria_protocol::Usage) -> Option<f64>,
    ) {
        match event {
            Event::RequestSent { .. } => watch.sent = Some(Instant::now()),
            Event::Usage { usage, model } => {
                // Priced by its own name, labelled by its bounded one.
                let cost = price(model, usage);
                let model = &self.name(model);
                let labels = ModelLabels { model: model.clone() };
                if let Some(sent) = watch.sent.take() {
                    self.model_seconds.get_or_create(&labels).observe(sent.elapsed().as_secs_f64());
                }
                let total = usage.input_tokens + usage.output_tokens;
                self.model_tokens.get_or_create(&labels).observe(total as f64);
                for (kind, n) in [("input", usage.input_tokens), ("output", usage.output_tokens)] {
                    self.tokens.get_or_create(&TokenLabels { model: model.clone(), kind: kind.into() }).inc_by(n);
                }
                if let Some(cost) = cost {
                    self.cost.get_or_create(&labels).inc_by(cost);
                }
            }
            Event::ToolFinished(f) => {
                let outcome = if f.ok { "ok" } else { "error" };
                self.tool_calls.get_or_create(&ToolLabels { tool: self.name(&f.name), outcome: outcome.into() }).inc();
                if !f.ok {
                    self.error("tool_error");
                }
            }
            Event::ApprovalNeeded(_) => {
                watch.waiting += 1;
                self.approvals_waiting.inc();
            }
            Event::ApprovalResolved { .. } if watch.waiting > 0 => {
                watch.waiting -= 1;
                self.approvals_waiting.dec();
            }
            Event::TurnEnd(end) => {
                let labels = TurnLabels { source: source.to_string(), outcome: end.outcome.name().to_string() };
                self.turns.get_or_create(&labels).inc();
                if matches!(end.outcome, talaria_protocol::Outcome::Failed(_)) {
                    self.error("turn_failed");
                }
                // A turn's unanswered approvals are over with it.
                self.approvals_waiting.dec_by(watch.waiting);
                watch.waiting = 0;
                watch.sent = None;
            }
            Event::Error { .. } => self.error("op_error"),
            _ => {}
        }
    }

    /// `name` as a label: itself while few names are labelled, else `other`.
    fn name(&self, name: &str) -> String {
        let mut names = self.names.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if names.contains(name) || (names.len() < NAMES_KEPT && names.insert(name.to_string())) {
            name.to_string()
        } else {
            "other".to_string()
        }
    }

    fn error(&self, kind: &str) {
        self.errors.get_or_create(&KindLabels { kind: kind.into() }).inc();
    }

    /// Everything, with the gateway's queue read from `store` now: messages waiting to be
    /// answered, and deliveries pending and failed in its ledger (left as they were when the
    /// store cannot be read).
    pub async fn scrape(&self, store: &talaria_store::Store) -> String {
        match store.inbox_waiting().await {
            Ok(waiting) => {
                self.queue.set(waiting);
            }
            Err(e) => tracing::warn!("metrics: cannot read the gateway's queue: {e}"),
        }
        match store.delivery_counts().await {
            Ok(counts) => {
                self.deliveries.get_or_create(&StateLabels { state: "pending".into() }).set(counts.pending);
                self.deliveries.get_or_create(&StateLabels { state: "failed".into() }).set(counts.failed);
            }
            Err(e) => tracing::warn!("metrics: cannot read the delivery ledger: {e}"),
        }
        self.encode()
    }

    /// Everything counted so far, in the OpenMetrics text format ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!("cannot write the metrics: {e}");
        }
        out
    }
}

/// The content type of [`Metrics::encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use talaria_protocol::{Outcome, ToolFinished, TurnEnd, Usage};

    use super::*;

    #[test]
    fn plugin_faults_are_counters_labelled_by_plugin_and_kind() {
        let mut registry = Registry::with_prefix("talaria");
        registry.register_collector(Box::new(Faults(|| {
            vec![("evil".into(), "crashed", 2), ("slow".into(), "deadline", 1)]
        })));
        let mut page = String::new();
        prometheus_client::encoding::text::encode(&mut page, &registry).expect("encoded");
        assert!(page.contains("# TYPE talaria_plugin_faults counter\n"), "{page}");
        assert!(page.contains("talaria_plugin_faults_total{plugin=\"evil\",kind=\"crashed\"} 2\n"), "{page}");
        assert!(page.contains("talaria_plugin_faults_total{plugin=\"slow\",kind=\"deadline\"} 1\n"), "{page}");
    }

    #[test]
    fn a_turn_with_a_tool_call_is_counted_as_it_happened() {
        let metrics = Metrics::default();
        let mut watch = Watch::default();
        let price = |_: &str, u: &Usage| Some(u.input_tokens as f64 / 1_000_000.0);
        let usage = Usage { input_tokens: 1_000, output_tokens: 50, ..Usage::default() };
        let events = [
            Event::RequestSent { model: "custom/m".into() },
            Event::Usage { usage, model: "m".into() },
            Event::ToolFinished(ToolFinished {
                call_id: "c1".into(),
                name: "read_file".into(),
                ok: false,
                preview: String::new(),
                result: String::new(),
                duration_ms: 3,
                changes: Vec::new(),
            }),
            Event::TurnEnd(TurnEnd {
                outcome: Outcome::Completed,
                text: "done".into(),
                partial: String::new(),
                usage,
                api_calls: 1,
            }),
        ];
        for e in &events {
            metrics.observe("gateway", e, &mut watch, price);
        }
        let text = metrics.encode();
        for line in [
            "talaria_turns_total{source=\"gateway\",outcome=\"completed\"} 1",
            "talaria_tool_calls_total{tool=\"read_file\",outcome=\"error\"} 1",
            "talaria_errors_total{kind=\"tool_error\"} 1",
            "talaria_tokens_total{model=\"m\",kind=\"input\"} 1000",
            "talaria_tokens_total{model=\"m\",kind=\"output\"} 50",
            "talaria_model_call_seconds_count{model=\"m\"} 1",
            "talaria_model_call_tokens_sum{model=\"m\"} 1050.0",
            "talaria_cost_usd_total{model=\"m\"} 0.001",
            "talaria_approvals_waiting 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn made_up_tool_names_cannot_grow_the_page_without_end() {
        let metrics = Metrics::default();
        let mut watch = Watch::default();
        for i in 0..NAMES_KEPT + 50 {
            let finished = ToolFinished {
                call_id: "c".into(),
                name: format!("invented_{i}"),
                ok: false,
                preview: String::new(),
                result: String::new(),
                duration_ms: 1,
                changes: Vec::new(),
            };
            metrics.observe("cli", &Event::ToolFinished(finished), &mut watch, |_, _| None);
        }
        let text = metrics.encode();
        let tool_lines = text.lines().filter(|l| l.starts_with("talaria_tool_calls_total{")).count();
        assert_eq!(tool_lines, NAMES_KEPT + 1, "each kept name and `other`");
        assert!(text.contains("talaria_tool_calls_total{tool=\"other\",outcome=\"error\"} 50"), "{text}");
    }
}
