//! [`crate::turns`] on SQLite.

use rusqlite::params;

use super::{Cached as _, Sqlite};
use crate::Result;
use crate::turns::{Spender, Spent, TurnStat, int};

impl Sqlite {
    pub(crate) fn record_turns(&self, turns: &[TurnStat]) -> Result<()> {
        self.write(|tx| {
            for t in turns {
                tx.run(
                    "INSERT INTO turns (session_id, source, model, ended_at, duration_ms, outcome,
                                        input_tokens, output_tokens, cache_read_tokens, api_calls,
                                        sender, job, cost)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                    params![
                        t.session_id,
                        t.source,
                        t.model,
                        t.ended_at,
                        t.duration_ms,
                        t.outcome,
                        int(t.usage.input_tokens),
                        int(t.usage.output_tokens),
                        int(t.usage.cache_read_tokens),
                        t.api_calls,
                        t.sender,
                        t.job,
                        t.cost
                    ],
                )?;
            }
            Ok(())
        })
    }

    pub(crate) fn turns_since(&self, since: i64) -> Result<Vec<TurnStat>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT session_id, source, model, ended_at, duration_ms, outcome,
                    input_tokens, output_tokens, cache_read_tokens, api_calls, sender, job, cost
             FROM turns WHERE ended_at >= ?1 ORDER BY ended_at, id",
        )?;
        let rows = stmt.query_map([since], |r| {
            let n = |i: usize| r.get::<_, i64>(i).map(|v| u64::try_from(v).unwrap_or(0));
            Ok(TurnStat {
                session_id: r.get(0)?,
                source: r.get(1)?,
                model: r.get(2)?,
                ended_at: r.get(3)?,
                duration_ms: r.get(4)?,
                outcome: r.get(5)?,
                usage: talaria_protocol::Usage {
                    input_tokens: n(6)?,
                    output_tokens: n(7)?,
                    cache_read_tokens: n(8)?,
                    ..Default::default()
                },
                api_calls: r.get(9)?,
                sender: r.get(10)?,
                job: r.get(11)?,
                cost: r.get(12)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    pub(crate) fn spent(&self, who: Spender<'_>, since: i64) -> Result<Spent> {
        let conn = self.conn();
        let sum = "SELECT COALESCE(SUM(input_tokens + output_tokens), 0), COALESCE(SUM(cost), 0.0) FROM turns";
        let read = |r: &rusqlite::Row<'_>| {
            Ok(Spent { tokens: u64::try_from(r.get::<_, i64>(0)?).unwrap_or(0), cost: r.get(1)? })
        };
        let spent = match who.column() {
            None => conn.prepare_cached(&format!("{sum} WHERE ended_at >= ?1"))?.query_row([since], read)?,
            Some((column, value)) => conn
                .prepare_cached(&format!("{sum} WHERE ended_at >= ?1 AND {column} = ?2"))?
                .query_row(params![since, value], read)?,
        };
        Ok(spent)
    }
}
