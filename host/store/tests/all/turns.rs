//! What each turn took (`Store::record_turns`, `Store::turns_since`), on both engines.

use talaria_protocol::Usage;
use talaria_store::Store;
use talaria_store::turns::{Spender, Spent, TurnStat};

crate::on_both_engines!(
    turns_are_kept_in_a_batch_and_read_back_from_a_time_on,
    spend_is_summed_by_source_sender_and_job_from_a_time_on
);

fn stat(session: &str, source: &str, ended_at: i64, duration_ms: i64, input: u64) -> TurnStat {
    TurnStat {
        session_id: session.into(),
        source: source.into(),
        model: "m-1".into(),
        ended_at,
        duration_ms,
        outcome: "completed".into(),
        usage: Usage { input_tokens: input, output_tokens: 7, cache_read_tokens: 3, ..Usage::default() },
        api_calls: 2,
        sender: None,
        job: None,
        cost: None,
    }
}

async fn turns_are_kept_in_a_batch_and_read_back_from_a_time_on(s: &Store) {
    assert_eq!(s.turns_since(0).await.expect("read"), []);
    s.record_turns(&[]).await.expect("nothing to keep");
    let kept =
        [stat("a", "cli", 1_000, 850, 100), stat("b", "api", 3_000, 1_200, 250), stat("a", "cli", 2_000, 90, 40)];
    s.record_turns(&kept).await.expect("record");
    // Oldest first, whatever order they were kept in.
    let all = s.turns_since(0).await.expect("read");
    assert_eq!(all, [kept[0].clone(), kept[2].clone(), kept[1].clone()]);
    let later = s.turns_since(2_000).await.expect("read");
    assert_eq!(later.iter().map(|t| t.ended_at).collect::<Vec<_>>(), [2_000, 3_000]);
    assert_eq!(later[1].usage.input_tokens, 250);
    assert_eq!(later[1].api_calls, 2);
}

async fn spend_is_summed_by_source_sender_and_job_from_a_time_on(s: &Store) {
    assert_eq!(s.spent(Spender::All, 0).await.expect("read"), Spent::default(), "nothing spent yet");
    let mut alice = stat("a", "gateway", 1_000, 10, 100);
    alice.sender = Some("telegram:1".into());
    alice.cost = Some(0.5);
    let mut alice_later = stat("a", "gateway", 5_000, 10, 300);
    alice_later.sender = Some("telegram:1".into());
    let mut bob = stat("b", "gateway", 2_000, 10, 40);
    bob.sender = Some("telegram:2".into());
    bob.cost = Some(0.25);
    let mut job = stat("c", "cron", 3_000, 10, 60);
    job.job = Some("nightly".into());
    job.cost = Some(1.0);
    s.record_turns(&[alice, alice_later, bob, job, stat("d", "cli", 4_000, 10, 1)]).await.expect("record");
    // Each turn's tokens are its input and output (7 each): cached ones are part of the input.
    let spent = |who, since| async move { s.spent(who, since).await.expect("read") };
    assert_eq!(spent(Spender::All, 0).await, Spent { tokens: 100 + 300 + 40 + 60 + 1 + 5 * 7, cost: 1.75 });
    assert_eq!(spent(Spender::Sender("telegram:1"), 0).await, Spent { tokens: 414, cost: 0.5 });
    assert_eq!(spent(Spender::Sender("telegram:1"), 2_000).await, Spent { tokens: 307, cost: 0.0 });
    assert_eq!(spent(Spender::Sender("telegram:3"), 0).await, Spent::default());
    assert_eq!(spent(Spender::Source("gateway"), 1_500).await, Spent { tokens: 47 + 307, cost: 0.25 });
    assert_eq!(spent(Spender::Job("nightly"), 0).await, Spent { tokens: 67, cost: 1.0 });
    let read = s.turns_since(3_000).await.expect("read");
    assert_eq!(read[0].job.as_deref(), Some("nightly"));
    assert_eq!(read[0].cost, Some(1.0));
    assert_eq!(read[2].sender.as_deref(), Some("telegram:1"));
}
