//! Answers cut off by the output-token limit (`finish_reason: length`, Anthropic's
//! `max_tokens`, Responses' `max_output_tokens`): the user is told, and the answer is kept in
//! the session with a marker at its end, so the record (and the model, on the next turn) shows
//! that it is incomplete. The turn then ends as [`Outcome::Truncated`](talaria_protocol::Outcome),
//! whose text is the answer without the marker ([`mark`] and [`unmarked`] are inverses).

use talaria_protocol::Message;

use crate::model::{Chain, ChainState};

/// Appended to a cut answer before it is stored.
pub(super) const MARKER: &str = "\n\n[talaria: this reply was cut off at the output-token limit]";

/// Adds the marker to an assistant message.
pub(super) fn mark(message: &mut Message) {
    if let Message::Assistant { content, .. } = message
        && !content.ends_with(MARKER)
    {
        content.push_str(MARKER);
    }
}

/// `text` without the marker.
pub(super) fn unmarked(text: &str) -> &str {
    text.strip_suffix(MARKER).unwrap_or(text)
}

/// What the user is told about a cut answer: which limit, where to raise it.
pub(super) fn truncation_notice(reason: Option<&str>, chain: &Chain, state: &ChainState, stream: bool) -> String {
    let provider = chain.active(state);
    let limit = match (provider.max_tokens, provider.output_limit(stream)) {
        (Some(n), _) => format!("max_tokens = {n}"),
        (None, Some(n)) => format!("talaria's default of {n} tokens; set `max_tokens` under [model] to raise it"),
        (None, None) => "the server's default limit; set `max_tokens` under [model] to raise it".to_string(),
    };
    format!(
        "the reply from {} was cut off at the output-token limit (stop reason `{}`; {limit}), or the model's \
         context window filled up; it is kept in the session marked as cut — ask to continue, or raise the limit",
        provider.label(),
        reason.unwrap_or("length"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_comes_off_again() {
        let mut m = Message::assistant("Once upon a");
        mark(&mut m);
        mark(&mut m);
        assert_eq!(m.content(), format!("Once upon a{MARKER}"), "marked once");
        assert_eq!(unmarked(m.content()), "Once upon a");
        assert_eq!(unmarked("plain"), "plain");
    }
}
