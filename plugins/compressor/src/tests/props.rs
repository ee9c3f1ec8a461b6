//! Property tests: random valid histories (user and assistant text, assistants with 1-3 tool calls
//! and their results in any order, small and large results, 0-200 messages, sometimes an earlier
//! summary from a previous pass) under random settings, compressed with a working and a failing
//! summary model.

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::{Answer, FakeHost, call, request};
use crate::config::Config;
use crate::engine::compress;
use crate::plan::{CLEAR_OVER_CHARS, Plan};
use crate::sanitize::{LOST_RESULT, check};
use crate::summary::{CARRY_HEADING, END_LINE, MARKER, is_summary};
use talaria_sdk::context::Compressed;
use talaria_sdk::message::{Message, Role};

const MAX_MESSAGES: usize = 200;

/// One user turn: the request, the assistant's tool-call steps, and its closing text.
#[derive(Debug, Clone)]
struct Turn {
    user_chars: usize,
    /// Per step: the sizes of its results, and whether they arrive in reverse order.
    steps: Vec<(Vec<usize>, bool)>,
    /// The closing assistant text (none: the turn ends after tool results, as when interrupted).
    closing: Option<usize>,
    /// Give the assistant messages of this turn an `extra`.
    extra: bool,
}

fn text_chars() -> impl Strategy<Value = usize> {
    prop_oneof![4 => 1..120usize, 1 => 120..3_000usize]
}

fn result_chars() -> impl Strategy<Value = usize> {
    prop_oneof![2 => 0..=CLEAR_OVER_CHARS, 1 => CLEAR_OVER_CHARS..12_000usize]
}

fn turn() -> impl Strategy<Value = Turn> {
    (text_chars(), vec((vec(result_chars(), 1..=3), any::<bool>()), 0..4), option::of(text_chars()), any::<bool>())
        .prop_map(|(user_chars, steps, closing, extra)| Turn { user_chars, steps, closing, extra })
}

/// Builds messages with ids unique across calls, so that a continued history stays unique.
#[derive(Default)]
struct Builder {
    next: usize,
}

impl Builder {
    fn id(&mut self) -> usize {
        self.next += 1;
        self.next
    }

    fn text(&mut self, tag: &str, chars: usize) -> String {
        let id = self.id();
        let mut s = format!("{tag}{id} ");
        while s.len() < chars {
            s.push_str("lorem ipsum ");
        }
        s
    }

    /// Append `turns` to `msgs` (which must be valid and not end with a user message), leaving
    /// the last turn's request unanswered when `pending`. Stops before `MAX_MESSAGES`.
    fn extend(&mut self, msgs: &mut Vec<Message>, turns: &[Turn], pending: bool) {
        for (t, turn) in turns.iter().enumerate() {
            let last = t + 1 == turns.len();
            let mut chunk = vec![Message::user(self.text("u", turn.user_chars))];
            if !(last && pending) {
                for (results, reversed) in &turn.steps {
                    let ids: Vec<String> = results.iter().map(|_| format!("call_{}", self.id())).collect();
                    let args = format!("{{\"path\":\"src/m{}.rs\"}}", self.id());
                    let mut a = call(&ids.iter().map(String::as_str).collect::<Vec<_>>(), "read_file", &args);
                    if turn.extra {
                        a.extra = format!("{{\"sig\":{}}}", self.id());
                    }
                    chunk.push(a);
                    let mut rs: Vec<Message> = ids
                        .iter()
                        .zip(results)
                        .map(|(id, &chars)| Message::tool(id.clone(), "read_file", "r".repeat(chars)))
                        .collect();
                    if *reversed {
                        rs.reverse();
                    }
                    chunk.extend(rs);
                }
                let closing = match (turn.closing, turn.steps.is_empty()) {
                    (Some(chars), _) => Some(chars),
                    (None, true) => Some(10), // user -> user is not valid: answer something
                    (None, false) => None,
                };
                if let Some(chars) = closing {
                    let mut a = Message::assistant(self.text("a", chars));
                    if turn.extra {
                        a.extra = format!("{{\"sig\":{}}}", self.id());
                    }
                    chunk.push(a);
                }
            }
            if msgs.len() + chunk.len() > MAX_MESSAGES {
                break;
            }
            msgs.append(&mut chunk);
        }
    }
}

#[derive(Debug, Clone)]
struct Case {
    system: bool,
    turns: Vec<Turn>,
    pending: bool,
    more: Vec<Turn>,
    config: Config,
    context_length: u64,
    focus: Option<String>,
    carry: Option<String>,
    force: bool,
}

fn case() -> impl Strategy<Value = Case> {
    let config = (0..6usize, 0..30usize, 0.0..0.5f64).prop_map(|(first, last, tail_ratio)| Config {
        protect_first_n: first,
        protect_last_n: last,
        tail_ratio,
        ..Config::default()
    });
    (
        (any::<bool>(), vec(turn(), 0..40), any::<bool>(), vec(turn(), 0..15)),
        config,
        prop_oneof![Just(8_000u64), Just(32_000), Just(128_000), Just(200_000)],
        option::of("[a-z ]{1,20}"),
        option::of("- \\[ \\] [a-z ]{1,30}"),
        any::<bool>(),
    )
        .prop_map(|((system, turns, pending, more), config, context_length, focus, carry, force)| Case {
            system: system && turns.len() % 5 == 0, // now and then
            turns,
            pending,
            more,
            config,
            context_length,
            focus,
            carry,
            force,
        })
}

fn history(case: &Case, builder: &mut Builder) -> Vec<Message> {
    let mut msgs = Vec::new();
    if case.system {
        msgs.push(Message::system("You are a test."));
    }
    builder.extend(&mut msgs, &case.turns, case.pending);
    msgs
}

/// Compress `input` and check every promise of the result.
fn compress_and_check(
    case: &Case,
    input: &[Message],
    host: &mut FakeHost,
    compressions: u32,
) -> Result<Option<Compressed>, TestCaseError> {
    prop_assert_eq!(check(input), Ok(()), "the generator made an invalid history");
    let plan = Plan::new(input, &case.config, case.context_length);
    let mut req = request(input.to_vec(), case.context_length);
    req.focus = case.focus.clone();
    req.carry = case.carry.clone().unwrap_or_default();
    req.force = case.force;
    req.status.compressions = compressions;
    let result = compress(req, &case.config, host);
    if !plan.has_work() {
        let err = result.err().unwrap_or_default();
        prop_assert!(err.starts_with("nothing to compress"), "{}", err);
        return Ok(None);
    }
    let out = result.map_err(TestCaseError::fail)?;
    let msgs = &out.messages;

    // A valid conversation: roles in order, every call answered right after it, every result
    // answering a call; nothing had to be made up for a valid input.
    prop_assert_eq!(check(msgs), Ok(()));
    prop_assert!(msgs.iter().all(|m| m.content != LOST_RESULT));
    // Never longer.
    prop_assert!(msgs.len() <= input.len(), "{} > {}", msgs.len(), input.len());
    // The head: the first protect_first_n messages (after system ones) up to any earlier summary,
    // unchanged but for large tool results cleared.
    let lead = input.iter().take_while(|m| m.role == Role::System).count();
    let first_summary = input.iter().position(is_summary).unwrap_or(input.len());
    prop_assert!(plan.head_end >= (lead + case.config.protect_first_n).min(first_summary).min(input.len()));
    for (i, (before, after)) in input[..plan.head_end].iter().zip(msgs).enumerate() {
        if i < plan.clear_before && before.role == Role::Tool && before.content.chars().count() > CLEAR_OVER_CHARS {
            prop_assert!(after.content.starts_with("[tool result cleared to save context:"), "{:?}", after);
            prop_assert_eq!(&Message { content: before.content.clone(), ..after.clone() }, before);
        } else {
            prop_assert_eq!(after, before);
        }
    }
    // The tail: unchanged, its first message possibly carrying the summary in front.
    let tail = &input[plan.tail_start..];
    let out_tail = &msgs[msgs.len() - tail.len()..];
    for (i, (before, after)) in tail.iter().zip(out_tail).enumerate() {
        if i == 0 && is_summary(after) {
            if before.content.is_empty() {
                prop_assert!(!after.content.contains(END_LINE));
            } else {
                let kept = format!("\n\n{END_LINE}\n\n{}", before.content);
                prop_assert!(after.content.ends_with(&kept), "merged text lost");
            }
            prop_assert_eq!(&Message { content: before.content.clone(), ..after.clone() }, before);
        } else {
            prop_assert_eq!(after, before);
        }
    }
    // Exactly one summary, numbered, right after the head, carrying the carry text.
    let summaries: Vec<&Message> = msgs.iter().filter(|m| is_summary(m)).collect();
    prop_assert_eq!(summaries.len(), 1);
    let summary = summaries[0];
    let marker = format!("{MARKER} #{}:", compressions + 1);
    prop_assert!(summary.content.starts_with(&marker));
    prop_assert!(std::ptr::eq(summary, &msgs[plan.head_end]));
    if let Some(carry) = &case.carry {
        let carried = format!("{CARRY_HEADING}\n{carry}");
        prop_assert!(summary.content.contains(&carried), "carry missing");
    }
    // The user's latest request is still there, verbatim.
    if let Some(last) = input.iter().rev().find(|m| m.role == Role::User && !is_summary(m)) {
        prop_assert!(
            msgs.iter().any(|m| m.role == Role::User
                && (m.content == last.content || m.content.ends_with(&format!("\n\n{}", last.content)))),
            "last user message lost"
        );
    }
    // Extras: those of kept messages, each once; none of the summarized ones.
    let kept: Vec<&str> =
        input[..plan.head_end].iter().chain(tail).map(|m| m.extra.as_str()).filter(|e| !e.is_empty()).collect();
    let now: Vec<&str> = msgs.iter().map(|m| m.extra.as_str()).filter(|e| !e.is_empty()).collect();
    prop_assert_eq!(kept, now);
    prop_assert!(!out.note.contains('\n'));
    Ok(Some(out))
}

/// Run a first pass, continue the conversation, run a second pass.
fn two_passes(case: &Case, answer: Answer) -> Result<(), TestCaseError> {
    let mut builder = Builder::default();
    let input = history(case, &mut builder);
    let mut host = FakeHost::with(answer.clone());
    let Some(first) = compress_and_check(case, &input, &mut host, 0)? else {
        return Ok(());
    };
    let mut next = first.messages;
    if next.last().is_some_and(|m| m.role == Role::User) {
        next.push(Message::assistant("answering the pending request"));
    }
    builder.extend(&mut next, &case.more, case.pending);
    let asked = host.requests.len();
    host.now += 3_600; // past any backoff
    let Some(second) = compress_and_check(case, &next, &mut host, 1)? else {
        return Ok(());
    };
    let plan = Plan::new(&next, &case.config, case.context_length);
    if plan.previous.is_some() && matches!(answer, Answer::Text(_)) {
        prop_assert_eq!(host.requests.len(), asked + 1);
        prop_assert!(host.last_prompt().contains("UPDATE the existing summary"));
        prop_assert!(host.last_prompt().contains("summary from the model"));
    }
    prop_assert_eq!(second.messages.iter().filter(|m| is_summary(m)).count(), 1);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn compression_keeps_the_conversation_valid(case in case()) {
        two_passes(&case, Answer::Text("## Goal\nsummary from the model".into()))?;
    }

    #[test]
    fn fallback_summaries_keep_the_conversation_valid(case in case()) {
        two_passes(&case, Answer::Fail("no model".into()))?;
    }

    #[test]
    fn sanitize_makes_anything_valid(roles in vec((0..4u8, 0..3usize, 0..4usize), 0..60)) {
        // Arbitrary sequences, ids drawn from a small set so results sometimes match calls.
        let msgs: Vec<Message> = roles
            .iter()
            .enumerate()
            .map(|(i, &(role, calls, id))| match role {
                0 => Message::user(format!("u{i}")),
                1 => {
                    let ids: Vec<String> = (0..calls).map(|c| format!("c{}", (id + c) % 4)).collect();
                    let mut m = call(&ids.iter().map(String::as_str).collect::<Vec<_>>(), "t", "{}");
                    m.content = format!("a{i}");
                    m
                }
                2 => Message::tool(format!("c{id}"), "t", format!("r{i}")),
                _ => Message::system(format!("s{i}")),
            })
            .collect();
        let fixed = crate::sanitize::sanitize(msgs.clone());
        prop_assert_eq!(check(&fixed), Ok(()));
        if check(&msgs).is_ok() {
            prop_assert_eq!(fixed, msgs, "a valid history is left alone");
        }
    }
}
