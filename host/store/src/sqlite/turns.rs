//! [`crate::turns`] on SQLite.

use rusqlite::params;

use super::{Cached as _, Sqlite};
use crate::Result;
use crate::turns::{TurnStat, int};

impl Sqlite {
    pub(crate) fn record_turns(&self, turns: &[TurnStat]) -> Result<()> {
        self.write(|tx| {
            for t in turns {
                tx.run(
                    "INSERT INTO turns (session_id, source, model, ended_at, duration_ms, outcome,
                                        input_tokens, output_tokens, cache_read_tokens, api_calls)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
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
                        t.api_calls
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
                    input_tokens, output_tokens, cache_read_tokens, api_calls
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
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }
}
