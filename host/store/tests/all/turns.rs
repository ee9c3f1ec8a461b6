//! What each turn took (`Store::record_turns`, `Store::turns_since`), on both engines.

use talaria_protocol::Usage;
use talaria_store::Store;
use talaria_store::turns::TurnStat;

crate::on_both_engines!(turns_are_kept_in_a_batch_and_read_back_from_a_time_on);

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
