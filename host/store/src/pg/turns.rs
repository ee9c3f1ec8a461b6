//! [`crate::turns`] on PostgreSQL.

use tokio_postgres::types::ToSql;

use super::{Cached as _, Pg, sql};
use crate::Result;
use crate::turns::{TurnStat, int};

impl Pg {
    pub(crate) async fn record_turns(&self, turns: &[TurnStat]) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(sql)?;
        for t in turns {
            let (input, output, cached) =
                (int(t.usage.input_tokens), int(t.usage.output_tokens), int(t.usage.cache_read_tokens));
            let calls = i64::from(t.api_calls);
            let params: [&(dyn ToSql + Sync); 10] = [
                &t.session_id,
                &t.source,
                &t.model,
                &t.ended_at,
                &t.duration_ms,
                &t.outcome,
                &input,
                &output,
                &cached,
                &calls,
            ];
            tx.exec(
                "INSERT INTO turns (session_id, source, model, ended_at, duration_ms, outcome,
                                    input_tokens, output_tokens, cache_read_tokens, api_calls)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                &params,
            )
            .await
            .map_err(sql)?;
        }
        tx.commit().await.map_err(sql)
    }

    pub(crate) async fn turns_since(&self, since: i64) -> Result<Vec<TurnStat>> {
        let client = self.client().await?;
        let rows = client
            .q(
                "SELECT session_id, source, model, ended_at, duration_ms, outcome,
                        input_tokens, output_tokens, cache_read_tokens, api_calls
                 FROM turns WHERE ended_at >= $1 ORDER BY ended_at, id",
                &[&since],
            )
            .await
            .map_err(sql)?;
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        Ok(rows
            .iter()
            .map(|r| TurnStat {
                session_id: r.get(0),
                source: r.get(1),
                model: r.get(2),
                ended_at: r.get(3),
                duration_ms: r.get(4),
                outcome: r.get(5),
                usage: talaria_protocol::Usage {
                    input_tokens: n(r.get(6)),
                    output_tokens: n(r.get(7)),
                    cache_read_tokens: n(r.get(8)),
                    ..Default::default()
                },
                api_calls: u32::try_from(r.get::<_, i64>(9)).unwrap_or(0),
            })
            .collect())
    }
}
