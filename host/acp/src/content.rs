//! What a prompt asks: the user's text with what the editor attached, or one of the session's
//! commands (`/compact`, `/undo`...).

use agent_client_protocol_schema::v1::{ContentBlock, EmbeddedResourceResource};
use talaria_protocol::Op;

/// The commands a prompt may be: name, description, what follows the name (if anything).
pub const COMMANDS: [(&str, &str, Option<&str>); 7] = [
    ("compact", "Summarize older messages now to free context", Some("optional focus")),
    ("undo", "Forget the last message and its answer", None),
    ("retry", "Send the last message again", None),
    ("model", "Use another model from the next call on", Some("[provider:]model")),
    ("title", "Name this session", Some("title")),
    ("context", "How full the context window is", None),
    ("rollback", "List the files kept before tools changed them, or put back the last N changes", Some("[N] [force]")),
];

/// Longest embedded resource text passed on, in characters.
const MAX_RESOURCE_CHARS: usize = 200_000;

/// What a prompt asks.
#[derive(Debug, PartialEq)]
pub enum Command {
    /// A user turn with this text.
    Turn(String),
    /// A session command.
    Op(Op),
    /// A command used wrongly: this says how to use it.
    Unknown(String),
}

/// The request a prompt's `blocks` make, and notes for the user about what was left out.
pub fn request(blocks: &[ContentBlock]) -> (Command, Vec<String>) {
    let mut text = String::new();
    let mut attached = Vec::new();
    let mut notes = Vec::new();
    for block in blocks {
        match block {
            ContentBlock::Text(t) => {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(&t.text);
            }
            ContentBlock::ResourceLink(link) => {
                attached.push(format!("The user attached {} ({}); read it if you need it.", link.name, link.uri));
            }
            ContentBlock::Resource(r) => match &r.resource {
                EmbeddedResourceResource::TextResourceContents(c) => {
                    let body: String = c.text.chars().take(MAX_RESOURCE_CHARS).collect();
                    let cut = if body.len() < c.text.len() { "\n[... cut: the rest was not sent]" } else { "" };
                    attached.push(format!("<attachment uri=\"{}\">\n{body}{cut}\n</attachment>", c.uri));
                }
                EmbeddedResourceResource::BlobResourceContents(c) => {
                    notes.push(format!("{} is binary and was not sent to the model.", c.uri));
                }
                _ => notes.push("An attachment of a kind talaria does not know was left out.".into()),
            },
            ContentBlock::Image(_) => notes.push(
                "An image was attached, but talaria sends only text to the model in this version: it was left out."
                    .into(),
            ),
            ContentBlock::Audio(_) => {
                notes.push("Audio was attached but cannot be sent to the model: left out.".into())
            }
            _ => notes.push("A part of the prompt of a kind talaria does not know was left out.".into()),
        }
    }
    if attached.is_empty()
        && let Some(command) = command(&text)
    {
        return (command, notes);
    }
    for a in attached {
        text.push_str("\n\n");
        text.push_str(&a);
    }
    (Command::Turn(text), notes)
}

/// `text` as a command, if it is one (`/name args`); other text starting with `/` (a path) is
/// a message.
fn command(text: &str) -> Option<Command> {
    let rest = text.trim().strip_prefix('/')?;
    let (name, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let args = args.trim();
    let usage = |hint: &str| Command::Unknown(format!("Usage: /{name} {hint}"));
    Some(match name {
        "compact" => Command::Op(Op::Compact { focus: (!args.is_empty()).then(|| args.to_string()) }),
        "undo" => Command::Op(Op::Undo),
        "retry" => Command::Op(Op::Retry),
        "context" => Command::Op(Op::ContextReport),
        "rollback" => {
            let mut steps = None;
            let mut force = false;
            for word in args.split_whitespace() {
                match (word, word.parse::<u32>()) {
                    ("force", _) => force = true,
                    (_, Ok(n)) if n > 0 && steps.is_none() => steps = Some(n),
                    _ => return Some(usage("[N] [force]")),
                }
            }
            Command::Op(Op::Rollback { steps, force })
        }
        "model" if args.is_empty() => usage("[provider:]model"),
        "model" => Command::Op(Op::SetModel { model: args.to_string() }),
        "title" if args.is_empty() => usage("title"),
        "title" => Command::Op(Op::SetTitle { title: args.to_string() }),
        _ => return None,
    })
}

/// Unix milliseconds as RFC 3339.
pub fn rfc3339(ms: i64) -> Option<String> {
    jiff::Timestamp::from_millisecond(ms).ok().map(|t| t.to_string())
}

#[cfg(test)]
mod tests {
    use agent_client_protocol_schema::v1::{
        EmbeddedResource, ImageContent, ResourceLink, TextContent, TextResourceContents,
    };

    use super::*;

    fn text(t: &str) -> ContentBlock {
        ContentBlock::Text(TextContent::new(t))
    }

    #[test]
    fn commands_are_ops_and_paths_are_messages() {
        assert_eq!(request(&[text("/undo")]).0, Command::Op(Op::Undo));
        assert_eq!(
            request(&[text(" /compact the parser ")]).0,
            Command::Op(Op::Compact { focus: Some("the parser".into()) })
        );
        assert_eq!(request(&[text("/model")]).0, Command::Unknown("Usage: /model [provider:]model".into()));
        assert_eq!(request(&[text("/usr/bin is odd")]).0, Command::Turn("/usr/bin is odd".into()));
    }

    #[test]
    fn attachments_are_sent_with_the_text_and_what_cannot_be_is_noted() {
        let embedded = ContentBlock::Resource(EmbeddedResource::new(EmbeddedResourceResource::TextResourceContents(
            TextResourceContents::new("fn main() {}", "file:///w/src/main.rs"),
        )));
        let link = ContentBlock::ResourceLink(ResourceLink::new("notes.md", "file:///w/notes.md"));
        let image = ContentBlock::Image(ImageContent::new("aGk=", "image/png"));
        let (got, notes) = request(&[text("explain"), embedded, link, image]);
        let Command::Turn(t) = got else { panic!("{got:?}") };
        assert!(
            t.starts_with("explain\n\n<attachment uri=\"file:///w/src/main.rs\">\nfn main() {}\n</attachment>"),
            "{t}"
        );
        assert!(t.contains("The user attached notes.md (file:///w/notes.md)"), "{t}");
        assert_eq!(notes.len(), 1);
        assert!(notes[0].contains("image"), "{notes:?}");
    }
}
