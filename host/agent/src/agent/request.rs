//! One model request of a turn: the history as the wire takes it, the deltas streamed as
//! events, a cut answer marked, the usage counted, in a span of its own for traces.

use talaria_protocol::{Event, Message, NoticeLevel};
use tracing::Instrument as _;

use super::truncation::{self, truncation_notice};
use super::{Agent, Turn, lock};
use crate::model::{Delta, ModelRequest, Provider};

impl Agent {
    /// One model call (retries and fallback inside). Streams deltas as events. `extra` (recall,
    /// hook context) is added to the user's message for this call only.
    pub(super) async fn call_model(
        &mut self,
        turn: &mut Turn,
        with_tools: bool,
        extra: &str,
    ) -> Result<Message, String> {
        let mut messages = crate::history::for_wire(crate::history::repair(&self.history));
        if !extra.is_empty()
            && let Some(Message::User { content, .. }) =
                messages.iter_mut().rev().find(|m| matches!(m, Message::User { .. }))
        {
            content.push_str("\n\n");
            content.push_str(extra);
        }
        let estimate = self.estimate_tokens();
        let request = ModelRequest {
            system: &self.system_prompt,
            messages: &messages,
            tools: if with_tools { &self.tools } else { &[] },
            stream: self.shared.config.stream,
        };
        let emitter = self.emitter.clone();
        let streamed = self.streamed.clone();
        lock(&streamed).clear();
        let on_delta = move |d: Delta| match d {
            Delta::Text(text) => {
                lock(&streamed).push_str(&text);
                emitter.emit(Event::TextDelta { text });
            }
            Delta::Reasoning(text) => emitter.emit(Event::ReasoningDelta { text }),
        };
        let notices = self.emitter.clone();
        let on_notice = move |text: String| notices.emit(Event::Notice { level: NoticeLevel::Warn, text });
        let active = self.chain.providers.get(self.chain_state.active_index());
        let model = active.map(Provider::label).unwrap_or_default();
        let span = model_span(active);
        self.emitter.emit(Event::RequestSent { model });
        let result = self
            .chain
            .complete(&self.shared.client, &mut self.chain_state, &request, &on_delta, &on_notice)
            .instrument(span.clone())
            .await;
        turn.api_calls += 1;
        self.api_calls += 1;
        let mut reply = match result {
            Ok(reply) => reply,
            Err(e) => {
                span.record("otel.status_code", "ERROR");
                // A provider's error can quote the request: text, sent only when allowed.
                if talaria_protocol::trace::content() {
                    span.record("otel.status_description", e.to_string());
                }
                turn.partial = e.partial().to_string();
                return Err(e.to_string());
            }
        };
        span.record("gen_ai.response.model", reply.model.as_str());
        span.record("gen_ai.usage.input_tokens", talaria_protocol::trace::int(reply.usage.input_tokens));
        span.record("gen_ai.usage.output_tokens", talaria_protocol::trace::int(reply.usage.output_tokens));
        if let Some(reason) = &reply.finish_reason {
            span.record("gen_ai.response.finish_reasons", reason.as_str());
        }
        self.emitter.emit(Event::MessageEnd);
        let reported = reply.usage.input_tokens;
        if reported > 0 && !reply.usage.estimated {
            self.last_prompt = Some((reported, estimate));
        }
        turn.truncated = reply.truncated();
        if turn.truncated {
            self.emitter.warn(truncation_notice(
                reply.finish_reason.as_deref(),
                &self.chain,
                &self.chain_state,
                self.shared.config.stream,
            ));
            truncation::mark(&mut reply.message);
        }
        turn.usage.add(&reply.usage);
        self.usage.add(&reply.usage);
        self.emitter.emit(Event::Usage { usage: reply.usage, model: reply.model.clone() });
        // Stored with the answer (see `commit`).
        let (mut usage, calls) = self.unrecorded.take().unwrap_or_default();
        usage.add(&reply.usage);
        self.unrecorded = Some((usage, calls + 1));
        Ok(reply.message)
    }
}

/// The span of one model call (retries and fallback inside), named as OpenTelemetry's GenAI
/// conventions name a chat request.
fn model_span(provider: Option<&Provider>) -> tracing::Span {
    use tracing::field::Empty;
    let (name, model) = provider.map_or(("", ""), |p| (p.name.as_str(), p.model.as_str()));
    tracing::info_span!(
        target: talaria_protocol::trace::TARGET,
        "chat",
        otel.name = format!("chat {model}"),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = name,
        gen_ai.request.model = model,
        gen_ai.response.model = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.response.finish_reasons = Empty,
        otel.status_code = Empty,
        otel.status_description = Empty,
    )
}
