//! `talaria gateway run` serving a Discord bot through the bundled adapter, against the Discord
//! double (REST and Gateway on one port), with the mock model behind it.

use std::time::Duration;

use talaria_mock_llm::{MockLlm, Reply, Script, Step};
use talaria_test_support::discord::DiscordFake;

use crate::Talaria;
use crate::gateway::Gateway;

const TOKEN: &str = "MTEwMDAw.discord-test.token-value";
const ANA: &str = "1000000000000000042";
const GUILD_CHANNEL: &str = "1200000000000000777";
const WAIT: Duration = Duration::from_secs(30);

/// A home with the mock model, the bot's token, and the Discord account pointed at `fake`.
fn setup(mock: &MockLlm, fake: &DiscordFake, discord: &str) -> Talaria {
    let t = Talaria::new();
    let extra = format!(
        "[gateway]\nworkspaces = \"{}\"\n[gateway.platforms.discord]\nbase_url = \"{}\"\n{discord}\n",
        t.workspace.path().join("chats").display(),
        fake.base_url()
    );
    t.use_mock(mock, "chat_completions", &extra);
    std::fs::write(t.home.path().join(".env"), format!("DISCORD_BOT_TOKEN={TOKEN}\n")).expect(".env");
    t
}

#[test]
fn a_discord_dm_is_answered_by_edits_heartbeats_are_kept_and_the_session_resumes_after_a_drop() {
    let fake = DiscordFake::start(TOKEN);
    let answer = "Hello Ana, this answer streams in word by word, slowly enough that the gateway \
                  posts its start first and then edits the message until every word is there.";
    let mock = MockLlm::start(Script::new([
        Reply::text(answer).paced(100).into(),
        Step::text("answered in the guild"),
        Step::text("still here after the drop"),
        Step::text("answered in a new session"),
    ]));
    let t = setup(&mock, &fake, &format!("allowed_users = [\"{ANA}\"]"));
    let mut gw = Gateway::start(&t);
    let session = fake.wait_session(1, WAIT);

    // IDENTIFY asked for guild messages, DMs and message content.
    let identifies = fake.identifies();
    assert_eq!(identifies.len(), 1, "{identifies:?}");
    let wanted = (1 << 9) | (1 << 12) | (1 << 15);
    assert_eq!(identifies[0].intents & wanted, wanted, "{identifies:?}");

    // A DM from an allowed user: answered, streamed by edits, with typing shown, and nobody
    // pinged by the answer.
    let dm = fake.dm_channel(ANA);
    fake.dm(ANA, "Ana", "hello");
    let reply = fake.wait_for(&dm, WAIT, |m| m.content == answer);
    assert!(!reply.edits.is_empty(), "the reply was not streamed by edits: {reply:#?}");
    assert!(reply.edits.iter().all(|e| answer.starts_with(e.trim_end())), "{reply:#?}");
    assert_eq!(reply.allowed_mentions, serde_json::json!({ "parse": [] }), "{reply:#?}");
    assert!(fake.typing(&dm) >= 1, "no typing indicator");

    // In a guild channel only a mention is answered.
    fake.guild_message(GUILD_CHANNEL, ANA, "Ana", "anyone around?", false);
    fake.guild_message(GUILD_CHANNEL, ANA, "Ana", "what do you say?", true);
    fake.wait_for(GUILD_CHANNEL, WAIT, |m| m.content == "answered in the guild");
    assert_eq!(fake.posted(GUILD_CHANNEL).len(), 1, "{:#?}", fake.posted(GUILD_CHANNEL));

    // While idle, heartbeats go out on time (the first may have crossed the bot's own last
    // message on the wire), each carrying the last sequence number. Each is acknowledged, and the
    // adapter, seeing the acknowledgements, keeps its one connection.
    let before = fake.heartbeats().len();
    fake.wait_until(WAIT, "four heartbeats while idle", |f| f.heartbeats().len() >= before + 4);
    let idle = fake.heartbeats().split_off(before);
    assert!(idle.iter().all(|h| h.seq.is_some() && h.acked), "{idle:?}");
    assert!(idle[1..].iter().all(|h| h.seq == h.last_sent && h.seq == fake.last_seq()), "{idle:?}");
    assert_eq!(fake.connections(), 1, "the adapter reconnected without cause:\n{}", gw.log());

    // The connection drops; a message sent meanwhile comes with the RESUME of the session.
    let seq = fake.last_seq();
    fake.drop_connection();
    fake.dm(ANA, "Ana", "are you still there?");
    fake.wait_until(WAIT, "a RESUME", |f| !f.resumes().is_empty());
    let resume = fake.resumes()[0].clone();
    assert_eq!((resume.session_id.as_str(), resume.seq), (session.as_str(), seq), "{resume:?}");
    fake.wait_for(&dm, WAIT, |m| m.content == "still here after the drop");
    assert_eq!(fake.identifies().len(), 1, "the adapter identified again instead of resuming");

    // The gateway stops acknowledging heartbeats: the connection is a zombie, and the adapter
    // resumes on a new one.
    fake.stop_acks();
    fake.wait_until(WAIT, "a RESUME after unacknowledged heartbeats", |f| f.resumes().len() == 2);
    assert_eq!(fake.resumes()[1].session_id, session);
    assert_eq!(fake.connections(), 3);

    // An invalid session: the adapter identifies anew, and is answered in the new session.
    fake.invalidate_session();
    let renewed = fake.wait_session(2, WAIT);
    assert_ne!(renewed, session);
    fake.dm(ANA, "Ana", "and now?");
    fake.wait_for(&dm, WAIT, |m| m.content == "answered in a new session");

    // The bot's own messages (which come back as MESSAGE_CREATE) never reached the model.
    assert_eq!(mock.requests().len(), 4);
    assert_eq!(fake.refused(), 0);
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    let status = gw.terminate();
    assert!(status.success(), "{status:?}\n{}", gw.log());
    let log = gw.log();
    assert!(!log.contains(TOKEN), "the token reached the log:\n{log}");
}
