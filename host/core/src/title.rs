//! Automatic session titles: after a session's first answer, the auxiliary model is asked for a
//! few words naming it, in the background (the answer is never delayed). The title is made
//! unique (`Rust lifetimes 2`) and never replaces one the user gave meanwhile, so it works with
//! `--resume TITLE` and `sessions show TITLE`.

use std::sync::Arc;
use std::time::Duration;

use talaria_agent::Emitter;
use talaria_protocol::{Event, Role};
use talaria_runtime::{LlmBackend, LlmRequest};
use talaria_store::{Error as StoreError, Store};

/// Longest the title call may take.
const TIMEOUT: Duration = Duration::from_secs(20);
/// Characters of the first message and answer the model sees.
const EXCERPT: usize = 1_500;
/// Longest title kept, in characters.
const MAX_CHARS: usize = 48;

const PROMPT: &str = "You name conversations. Reply with a title of 2 to 6 words for the conversation below, in \
the language of the user's message, naming its subject. Reply with the title alone: no quotes, no \"Title:\", no \
full stop.";

/// Ask for a title for session `id` and store it, unless it has one (then no model call is
/// made) or gets one meanwhile; emits [`Event::TitleChanged`] when it was set.
pub async fn suggest(
    aux: Arc<dyn LlmBackend>,
    store: Arc<Store>,
    id: String,
    prompt: String,
    answer: String,
    emitter: Emitter,
) {
    let untitled = store.session(&id).await.ok().flatten().is_some_and(|s| s.title.is_none());
    if !untitled {
        return;
    }
    let request = LlmRequest {
        purpose: "session title".into(),
        messages: vec![
            (Role::System, PROMPT.into()),
            (Role::User, format!("User: {}\n\nAssistant: {}", excerpt(&prompt), excerpt(&answer))),
        ],
        max_tokens: Some(30),
        temperature: Some(0.2),
    };
    let text = match tokio::time::timeout(TIMEOUT, aux.complete("talaria", request)).await {
        Ok(Ok(done)) => done.text,
        Ok(Err(e)) => return tracing::info!("no session title: {e}"),
        Err(_) => return tracing::info!("no session title: the auxiliary model took over {}s", TIMEOUT.as_secs()),
    };
    let Some(base) = clean(&text) else {
        return tracing::info!("no session title: the model's answer held none");
    };
    for n in 1..=50 {
        let title = if n == 1 { base.clone() } else { format!("{base} {n}") };
        match store.suggest_title(&id, &title).await {
            Ok(true) => return emitter.emit(Event::TitleChanged { title }),
            Ok(false) => return,
            Err(StoreError::TitleTaken { .. }) => {}
            Err(e) => return tracing::info!("no session title: {e}"),
        }
    }
}

fn excerpt(text: &str) -> String {
    match text.char_indices().nth(EXCERPT) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// A title from what the model answered: its first line, without quotes, markup, a `Title:`
/// label or end punctuation, spaces collapsed, at most [`MAX_CHARS`] (cut at a word); `None`
/// when nothing usable is left. The reserved `latest` is refused.
pub fn clean(answer: &str) -> Option<String> {
    let line = answer.lines().map(str::trim).find(|l| !l.is_empty())?;
    let line = line.strip_prefix("Title:").or_else(|| line.strip_prefix("title:")).unwrap_or(line);
    let line: String = line
        .chars()
        .filter(|c| !matches!(c, '"' | '\'' | '`' | '*' | '#' | '“' | '”' | '«' | '»'))
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let mut words: Vec<&str> = line.split_whitespace().collect();
    let mut title = String::new();
    for w in words.drain(..) {
        let next = if title.is_empty() { w.to_string() } else { format!("{title} {w}") };
        if next.chars().count() > MAX_CHARS {
            break;
        }
        title = next;
    }
    let title = title.trim_end_matches(['.', ',', ';', ':', '!', '?', '-']).trim().to_string();
    (!title.is_empty() && !title.eq_ignore_ascii_case("latest")).then_some(title)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_are_cleaned_of_what_models_add() {
        assert_eq!(clean("\"Rebasing a Git branch.\"\n").as_deref(), Some("Rebasing a Git branch"));
        assert_eq!(clean("\n  Title: **Trip to Lisbon**").as_deref(), Some("Trip to Lisbon"));
        assert_eq!(clean("one two\tthree\u{1b}[2J").as_deref(), Some("one two three [2J"));
        let long = clean(&"word ".repeat(30)).expect("a title");
        assert!(long.chars().count() <= MAX_CHARS && long.ends_with("word"), "{long}");
        assert_eq!(clean("  \n\"\"\n"), None);
        assert_eq!(clean("Latest."), None, "reserved");
    }
}
