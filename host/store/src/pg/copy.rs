//! Copying a SQLite home's state into an empty PostgreSQL database (`talaria store migrate`):
//! every table but the leases (they belong to running processes), in one PostgreSQL
//! transaction, ids kept, then every table's rows counted on both sides.

use rusqlite::types::ValueRef;
use tokio_postgres::types::ToSql;

use super::{Pg, sql};
use crate::{Engine, Error, Result, Store};

/// How a column is read from SQLite and written to PostgreSQL.
#[derive(Clone, Copy)]
enum Kind {
    Int,
    Text,
    Bytes,
    /// An SQLite integer that is a PostgreSQL boolean.
    Bool,
}

use Kind::{Bool, Bytes, Int, Text};

/// The tables copied, parents first, with their columns.
const TABLES: &[(&str, &[(&str, Kind)])] = &[
    (
        "sessions",
        &[
            ("id", Text),
            ("source", Text),
            ("model", Text),
            ("provider", Text),
            ("system_prompt", Text),
            ("parent_id", Text),
            ("title", Text),
            ("cwd", Text),
            ("started_at", Int),
            ("updated_at", Int),
            ("ended_at", Int),
            ("end_reason", Text),
            ("message_count", Int),
            ("tool_call_count", Int),
            ("api_call_count", Int),
            ("input_tokens", Int),
            ("output_tokens", Int),
            ("cache_read_tokens", Int),
            ("cache_write_tokens", Int),
            ("reasoning_tokens", Int),
            ("estimated_calls", Int),
        ],
    ),
    (
        "messages",
        &[
            ("id", Int),
            ("session_id", Text),
            ("role", Text),
            ("active", Bool),
            ("created_at", Int),
            ("tool_call_id", Text),
            ("tool_name", Text),
            ("content", Text),
            ("tool_calls", Text),
            ("reasoning", Text),
            ("extra", Text),
        ],
    ),
    ("plugin_kv", &[("plugin", Text), ("key", Text), ("value", Bytes), ("updated_at", Int)]),
    (
        "pairings",
        &[
            ("platform", Text),
            ("user_id", Text),
            ("user_name", Text),
            ("code", Text),
            ("requested_at", Int),
            ("expires_at", Int),
            ("approved_at", Int),
        ],
    ),
    (
        "deliveries",
        &[
            ("id", Int),
            ("platform", Text),
            ("chat_id", Text),
            ("thread_id", Text),
            ("body", Text),
            ("key", Text),
            ("state", Text),
            ("attempts", Int),
            ("next_at", Int),
            ("last_error", Text),
            ("sent_id", Text),
            ("created_at", Int),
            ("done_at", Int),
            ("claimed_until", Int),
            ("claimed_by", Text),
        ],
    ),
    (
        "inbox",
        &[
            ("id", Int),
            ("account", Text),
            ("chat_id", Text),
            ("thread_id", Text),
            ("session_key", Text),
            ("message_id", Text),
            ("kind", Text),
            ("body", Text),
            ("respond", Bool),
            ("state", Text),
            ("session_id", Text),
            ("started_count", Int),
            ("streamed", Text),
            ("reply", Text),
            ("created_at", Int),
            ("done_at", Int),
        ],
    ),
    ("webhook_seen", &[("route", Text), ("delivery_id", Text), ("seen_at", Int)]),
    (
        "cron_jobs",
        &[
            ("id", Text),
            ("name", Text),
            ("prompt", Text),
            ("schedule_kind", Text),
            ("schedule_expr", Text),
            ("schedule_display", Text),
            ("deliver", Text),
            ("origin", Text),
            ("repeat_times", Int),
            ("repeat_done", Int),
            ("enabled", Bool),
            ("state", Text),
            ("next_run_at", Int),
            ("last_run_at", Int),
            ("last_status", Text),
            ("last_output", Text),
            ("last_error", Text),
            ("model", Text),
            ("provider", Text),
            ("toolsets", Text),
            ("max_turns", Int),
            ("timeout_secs", Int),
            ("workspace", Text),
            ("allow", Text),
            ("creator", Text),
            ("created_at", Int),
            ("updated_at", Int),
        ],
    ),
    (
        "cron_runs",
        &[
            ("id", Int),
            ("job_id", Text),
            ("due_at", Int),
            ("started_at", Int),
            ("finished_at", Int),
            ("status", Text),
            ("manual", Bool),
            ("output", Text),
            ("error", Text),
            ("delivery", Text),
            ("session_id", Text),
            ("pid", Int),
            ("host", Text),
            ("holder", Text),
            ("token", Text),
            ("lease_until", Int),
        ],
    ),
    (
        "turns",
        &[
            ("session_id", Text),
            ("source", Text),
            ("model", Text),
            ("ended_at", Int),
            ("duration_ms", Int),
            ("outcome", Text),
            ("input_tokens", Int),
            ("output_tokens", Int),
            ("cache_read_tokens", Int),
            ("api_calls", Int),
        ],
    ),
];

/// Tables whose ids PostgreSQL generates: their sequences go on after the copied ids.
const IDENTITY: &[&str] = &["messages", "deliveries", "inbox", "cron_runs"];

/// One value, as PostgreSQL takes it.
type Value = Box<dyn ToSql + Sync + Send>;

fn value(v: ValueRef<'_>, kind: Kind, at: &str) -> Result<Value> {
    let bad = || Error::Corrupt { what: format!("{at} holds a value of an unexpected type") };
    Ok(match (kind, v) {
        (Int, ValueRef::Null) => Box::new(None::<i64>),
        (Text, ValueRef::Null) => Box::new(None::<String>),
        (Bytes, ValueRef::Null) => Box::new(None::<Vec<u8>>),
        (Bool, ValueRef::Null) => Box::new(None::<bool>),
        (Int, ValueRef::Integer(i)) => Box::new(i),
        (Bool, ValueRef::Integer(i)) => Box::new(i != 0),
        (Text, ValueRef::Text(t)) => Box::new(String::from_utf8_lossy(t).into_owned()),
        (Bytes, ValueRef::Blob(b) | ValueRef::Text(b)) => Box::new(b.to_vec()),
        _ => return Err(bad()),
    })
}

impl Store {
    /// Copy this SQLite store's state into `to`, an empty PostgreSQL store; returns each table
    /// with its rows, counted on both sides after the copy.
    ///
    /// # Errors
    /// This store is not SQLite or `to` not PostgreSQL, `to` holds sessions already, a value
    /// cannot be read, the copy fails (nothing is written then), or the counts differ.
    pub async fn copy_into(&self, to: &Store, progress: &dyn Fn(&str, u64)) -> Result<Vec<(String, u64)>> {
        let Engine::Postgres(pg) = &to.engine else {
            return Err(Error::Pg("the destination of a copy must be PostgreSQL".into()));
        };
        let Engine::Sqlite(db) = &self.engine else { return Err(Error::NotOnPostgres { what: "this operation" }) };
        let mut tables: Vec<(String, String, Vec<Vec<Value>>)> = Vec::new();
        {
            let conn = db.conn();
            for (table, columns) in TABLES {
                let names: Vec<&str> = columns.iter().map(|(c, _)| *c).collect();
                let mut stmt = conn.prepare(&format!("SELECT {} FROM {table}", names.join(", ")))?;
                let mut rows = stmt.query([])?;
                let mut out = Vec::new();
                while let Some(row) = rows.next()? {
                    let mut values = Vec::with_capacity(columns.len());
                    for (i, (column, kind)) in columns.iter().enumerate() {
                        values.push(value(row.get_ref(i)?, *kind, &format!("{table}.{column}"))?);
                    }
                    out.push(values);
                }
                progress(table, out.len() as u64);
                let placeholders: Vec<String> = (1..=columns.len()).map(|i| format!("${i}")).collect();
                let overriding = if IDENTITY.contains(table) { " OVERRIDING SYSTEM VALUE" } else { "" };
                let insert = format!(
                    "INSERT INTO {table} ({}){overriding} VALUES ({})",
                    names.join(", "),
                    placeholders.join(", ")
                );
                tables.push(((*table).to_string(), insert, out));
            }
        }
        pg.copy_in(tables).await?;
        let counted = pg.count_rows(TABLES.iter().map(|(t, _)| (*t).to_string()).collect()).await?;
        let conn = db.conn();
        for (table, rows) in &counted {
            let here: i64 = conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))?;
            if u64::try_from(here).ok() != Some(*rows) {
                return Err(Error::Pg(format!(
                    "{table}: {here} rows in SQLite but {rows} in PostgreSQL after the copy"
                )));
            }
        }
        Ok(counted)
    }
}

impl Pg {
    /// Insert every table's rows in one transaction, into a database with no sessions yet.
    async fn copy_in(&self, tables: Vec<(String, String, Vec<Vec<Value>>)>) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(sql)?;
        let sessions: i64 = tx.query_one("SELECT count(*) FROM sessions", &[]).await.map_err(sql)?.get(0);
        if sessions > 0 {
            let noun = if sessions == 1 { "session" } else { "sessions" };
            return Err(Error::Pg(format!("the database holds {sessions} {noun} already; copy into an empty one")));
        }
        for (table, insert, rows) in &tables {
            let statement = tx.prepare(insert).await.map_err(sql)?;
            for row in rows {
                let params: Vec<&(dyn ToSql + Sync)> = row.iter().map(|v| &**v as &(dyn ToSql + Sync)).collect();
                tx.execute(&statement, &params).await.map_err(sql)?;
            }
            if IDENTITY.contains(&table.as_str()) {
                tx.execute(
                    &format!(
                        "SELECT setval(pg_get_serial_sequence('{table}', 'id'), coalesce(max(id), 0) + 1, false) FROM {table}"
                    ),
                    &[],
                )
                .await
                .map_err(sql)?;
            }
        }
        tx.commit().await.map_err(sql)
    }

    async fn count_rows(&self, tables: Vec<String>) -> Result<Vec<(String, u64)>> {
        let client = self.client().await?;
        let mut out = Vec::new();
        for table in tables {
            let n: i64 = client.query_one(&format!("SELECT count(*) FROM {table}"), &[]).await.map_err(sql)?.get(0);
            out.push((table, n.unsigned_abs()));
        }
        Ok(out)
    }
}
