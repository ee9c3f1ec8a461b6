//! [`crate::turns`] on PostgreSQL.

use tokio_postgres::types::ToSql;

use super::{Cached as _, Pg, sql};
use crate::Result;
use crate::turns::{Spender, Spent, TurnStat, int};

impl Pg {
    /// One statement for the whole batch (its columns as arrays, `unnest` making them rows
    /// again): a busy gateway's second of turns is one round trip.
    pub(crate) async fn record_turns(&self, turns: &[TurnStat]) -> Result<()> {
        let text = |f: fn(&TurnStat) -> &str| turns.iter().map(|t| f(t).to_string()).collect::<Vec<String>>();
        let (sessions, sources, models, outcomes) =
            (text(|t| &t.session_id), text(|t| &t.source), text(|t| &t.model), text(|t| &t.outcome));
        let number = |f: fn(&TurnStat) -> i64| turns.iter().map(f).collect::<Vec<i64>>();
        let ended = number(|t| t.ended_at);
        let durations = number(|t| t.duration_ms);
        let input = number(|t| int(t.usage.input_tokens));
        let output = number(|t| int(t.usage.output_tokens));
        let cached = number(|t| int(t.usage.cache_read_tokens));
        let calls = number(|t| i64::from(t.api_calls));
        let senders: Vec<Option<String>> = turns.iter().map(|t| t.sender.clone()).collect();
        let jobs: Vec<Option<String>> = turns.iter().map(|t| t.job.clone()).collect();
        let costs: Vec<Option<f64>> = turns.iter().map(|t| t.cost).collect();
        let params: [&(dyn ToSql + Sync); 13] = [
            &sessions, &sources, &models, &ended, &durations, &outcomes, &input, &output, &cached, &calls, &senders,
            &jobs, &costs,
        ];
        let client = self.client().await?;
        client
            .exec(
                "INSERT INTO turns (session_id, source, model, ended_at, duration_ms, outcome,
                                    input_tokens, output_tokens, cache_read_tokens, api_calls, sender, job, cost)
                 SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::text[],
                                      $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::text[],
                                      $12::text[], $13::float8[])",
                &params,
            )
            .await
            .map_err(sql)?;
        Ok(())
    }

    pub(crate) async fn turns_since(&self, since: i64) -> Result<Vec<TurnStat>> {
        let client = self.client().await?;
        let rows = client
            .q(
                "SELECT session_id, source, model, ended_at, duration_ms, outcome,
                        input_tokens, output_tokens, cache_read_tokens, api_calls, sender, job, cost
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
                sender: r.get(10),
                job: r.get(11),
                cost: r.get(12),
            })
            .collect())
    }

    pub(crate) async fn spent(&self, who: Spender<'_>, since: i64) -> Result<Spent> {
        let client = self.client().await?;
        let sum = "SELECT COALESCE(SUM(input_tokens + output_tokens), 0)::bigint, COALESCE(SUM(cost), 0)::float8
                   FROM turns WHERE ended_at >= $1";
        let row = match who.column() {
            None => client.q(sum, &[&since]).await,
            Some((column, value)) => client.q(&format!("{sum} AND {column} = $2"), &[&since, &value]).await,
        }
        .map_err(sql)?;
        let Some(row) = row.first() else { return Ok(Spent::default()) };
        Ok(Spent { tokens: u64::try_from(row.get::<_, i64>(0)).unwrap_or(0), cost: row.get(1) })
    }
}
