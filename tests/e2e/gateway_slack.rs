//! `talaria gateway run` serving a Slack app through the bundled adapter, against the Slack
//! double (Web API and Socket Mode on one port), with the mock model behind it.

use std::time::Duration;

use talaria_mock_llm::{MockLlm, Reply, Script, Step};
use talaria_test_support::slack::SlackFake;

use crate::Talaria;
use crate::gateway::Gateway;

const APP_TOKEN: &str = "xapp-1-A0APP0001-test-app-token";
const BOT_TOKEN: &str = "xoxb-0001-test-bot-token";
const ANA: &str = "U0ANA0042";
const GENERAL: &str = "C0GENERAL";
const WAIT: Duration = Duration::from_secs(30);

/// A home with the mock model, both tokens, and the Slack account pointed at `fake`.
fn setup(mock: &MockLlm, fake: &SlackFake, slack: &str) -> Talaria {
    let t = Talaria::new();
    let extra = format!(
        "[gateway]\nworkspaces = \"{}\"\n[gateway.platforms.slack]\nbase_url = \"{}\"\n{slack}\n",
        t.workspace.path().join("chats").display(),
        fake.base_url()
    );
    t.use_mock(mock, "chat_completions", &extra);
    std::fs::write(t.home.path().join(".env"), format!("SLACK_APP_TOKEN={APP_TOKEN}\nSLACK_BOT_TOKEN={BOT_TOKEN}\n"))
        .expect(".env");
    t
}

#[test]
fn a_slack_dm_is_answered_every_envelope_is_acknowledged_and_a_disconnect_reconnects() {
    let fake = SlackFake::start(APP_TOKEN, BOT_TOKEN);
    let answer = "Hello Ana, this answer streams in word by word, slowly enough that the gateway \
                  posts its start first and then updates the message until every word is there.";
    let mock = MockLlm::start(Script::new([
        Reply::text(answer).paced(100).into(),
        Step::text("answered in the channel"),
        Step::text("answered in the thread"),
        Step::text("answered after the refresh"),
    ]));
    let t = setup(&mock, &fake, &format!("allowed_users = [\"{ANA}\"]"));
    let mut gw = Gateway::start(&t);
    fake.wait_connected(1, WAIT);

    // A DM from an allowed user: answered at the top level, streamed by chat.update.
    let dm = SlackFake::dm_channel(ANA);
    fake.dm(ANA, "hello");
    let reply = fake.wait_for(&dm, WAIT, |m| m.text == answer);
    assert!(!reply.edits.is_empty(), "the reply was not streamed by chat.update: {reply:#?}");
    assert!(reply.edits.iter().all(|e| answer.starts_with(e.trim_end())), "{reply:#?}");
    assert_eq!(reply.thread_ts, None, "{reply:#?}");

    // In a channel only a mention is answered, once (Slack sends it as `message` and as
    // `app_mention`): at the top level, and in a thread when it was written in one.
    fake.channel_message(GENERAL, None, ANA, "anyone around?", false);
    let mention = fake.channel_message(GENERAL, None, ANA, "what do you say?", true);
    let reply = fake.wait_for(GENERAL, WAIT, |m| m.text == "answered in the channel");
    assert_eq!(reply.thread_ts, None, "{reply:#?}");
    fake.channel_message(GENERAL, Some(&mention), ANA, "and in the thread?", true);
    let reply = fake.wait_for(GENERAL, WAIT, |m| m.text == "answered in the thread");
    assert_eq!(reply.thread_ts.as_deref(), Some(mention.as_str()), "{reply:#?}");

    // Slack asks for a refresh: a new connection is opened (a new apps.connections.open), the
    // old one closed by the bot, and the chat carries on.
    assert_eq!((fake.opens(), fake.connections()), (1, 1));
    // Slack sends an envelope again on the next connection when it was not acknowledged on its
    // own; the refresh comes once the bot has acknowledged what it was sent (the echo of its
    // last reply included: under load that acknowledgement could trail the reply itself).
    fake.wait_until(WAIT, "every envelope acknowledged before the refresh", |f| f.envelopes().iter().all(|e| e.acked));
    fake.disconnect();
    fake.wait_connected(2, WAIT);
    assert_eq!(fake.opens(), 2);
    fake.wait_until(WAIT, "the old connection closed by the bot", |f| f.closed_by_bot() == 1);
    fake.dm(ANA, "are you still there?");
    fake.wait_for(&dm, WAIT, |m| m.text == "answered after the refresh");

    // Every envelope was acknowledged on the connection it came on; none was sent twice.
    fake.wait_until(WAIT, "every envelope acknowledged", |f| f.envelopes().iter().all(|e| e.acked));
    let envelopes = fake.envelopes();
    assert!(envelopes.iter().all(|e| e.sent_on.len() == 1), "{envelopes:#?}");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    assert_eq!(fake.posted(GENERAL).len(), 2, "{:#?}", fake.posted(GENERAL));
    // The bot's own messages and edits (which come back as events) never reached the model.
    assert_eq!(mock.requests().len(), 4);
    assert_eq!(fake.refused(), 0);
    assert!(fake.calls("auth.test") >= 1);

    let status = gw.terminate();
    assert!(status.success(), "{status:?}\n{}", gw.log());
    let log = gw.log();
    assert!(!log.contains(APP_TOKEN) && !log.contains(BOT_TOKEN), "a token reached the log:\n{log}");
}
