//! The schema as numbered migrations, applied in order on open and never edited once released:
//! a change is a new migration at the end of [`MIGRATIONS`].
//!
//! 1. `plugin_kv`: each plugin's key-value data.
//! 2. `sessions` and `messages`, plus two FTS5 indexes over the messages' text kept in sync by
//!    triggers: `messages_fts` (words; porter stemming, diacritics folded) and `messages_trigram`
//!    (any substring of three characters or more: CJK text, identifiers, paths). Only active
//!    messages are indexed: turning a message inactive (undo) takes it out of both indexes.
//! 3. `session_leases`: which process is answering a session right now (see [`crate::lease`]).
//! 4. `sessions.estimated_calls`: model calls whose token counts talaria estimated because the
//!    provider reported none (the session's totals are then shown as estimates).
//! 5. Messages are indexed in batches, not one by one: `search_watermark` holds the highest
//!    message id the two indexes have seen (everything up to it that is active is indexed), the
//!    insert trigger is gone, and the delete and update triggers touch the indexes only for rows
//!    at or below the watermark. [`crate::Store::index_pending`] indexes what is above it; every
//!    search calls it, and so does a turn's last commit once [`crate::search::INDEX_BATCH`]
//!    messages wait. A commit then writes three pages to the WAL instead of ten.
//! 6. `pairings`: chat-platform users paired with the gateway, and the codes waiting for the
//!    owner's approval (see [`crate::pairing`]).
//! 7. `deliveries`: the gateway's delivery ledger (see [`crate::delivery`]).
//! 8. `webhook_seen`: webhook delivery ids of the last day, per route ([`crate::Store::webhook_seen`]).
//! 9. `cron_jobs` and `cron_runs`: scheduled jobs and their runs (see [`crate::cron`]).
//! 10. `inbox`: messages the gateway took and has not answered yet (see [`crate::inbox`]), and
//!     `deliveries.claimed_until` and `claimed_by`: a gateway process sending a delivery holds
//!     it till then, so processes sharing the ledger send each delivery once, and a chat's in
//!     order (a claim of a process of this machine that is gone is void at once).
//! 11. `turns`: what each turn took, for the usage and latency charts (see [`crate::turns`]).
//! 12. `turns.sender`, `job` and `cost`: whom a turn was for and what it cost, for the spending
//!     limits of `[budget]`.
//!
//! ```
//! assert_eq!(talaria_store::schema::VERSION, 12);
//! ```

use std::time::{Duration, Instant};

use rusqlite::Connection;
use rusqlite_migration::{M, Migrations};

use crate::{Error, Result};

/// The schema version this code writes (the number of migrations).
pub const VERSION: usize = MIGRATIONS.len();

/// Every migration, oldest first.
pub const MIGRATIONS: &[&str] = &[
    // 1: plugin key-value data.
    "CREATE TABLE plugin_kv (
        plugin TEXT NOT NULL,
        key    TEXT NOT NULL,
        value  BLOB NOT NULL,
        updated_at INTEGER NOT NULL DEFAULT (unixepoch()),
        PRIMARY KEY (plugin, key)
    ) WITHOUT ROWID;",
    // 2: sessions, messages and their full-text indexes. Times are Unix milliseconds.
    "CREATE TABLE sessions (
        id            TEXT PRIMARY KEY NOT NULL,
        source        TEXT NOT NULL,
        model         TEXT NOT NULL,
        provider      TEXT NOT NULL,
        system_prompt TEXT NOT NULL,
        parent_id     TEXT REFERENCES sessions (id) ON DELETE SET NULL,
        title         TEXT UNIQUE COLLATE NOCASE,
        cwd           TEXT NOT NULL,
        started_at    INTEGER NOT NULL,
        updated_at    INTEGER NOT NULL,
        ended_at      INTEGER,
        end_reason    TEXT,
        message_count      INTEGER NOT NULL DEFAULT 0,
        tool_call_count    INTEGER NOT NULL DEFAULT 0,
        api_call_count     INTEGER NOT NULL DEFAULT 0,
        input_tokens       INTEGER NOT NULL DEFAULT 0,
        output_tokens      INTEGER NOT NULL DEFAULT 0,
        cache_read_tokens  INTEGER NOT NULL DEFAULT 0,
        cache_write_tokens INTEGER NOT NULL DEFAULT 0,
        reasoning_tokens   INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX sessions_by_update ON sessions (updated_at);
    CREATE INDEX sessions_by_parent ON sessions (parent_id);

    -- Small columns first: search filters on them for thousands of rows, and a column stored
    -- after a long content would be read through the content's overflow pages.
    CREATE TABLE messages (
        id           INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id   TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        role         TEXT NOT NULL,
        active       INTEGER NOT NULL DEFAULT 1,
        created_at   INTEGER NOT NULL,
        tool_call_id TEXT,
        tool_name    TEXT,
        content      TEXT NOT NULL,
        tool_calls   TEXT,
        reasoning    TEXT,
        extra        TEXT
    );
    CREATE INDEX messages_by_session ON messages (session_id, id);

    CREATE VIRTUAL TABLE messages_fts USING fts5 (
        content, tool_name, tool_calls,
        content = 'messages', content_rowid = 'id',
        tokenize = 'porter unicode61 remove_diacritics 2'
    );
    CREATE VIRTUAL TABLE messages_trigram USING fts5 (
        content, tool_name, tool_calls,
        content = 'messages', content_rowid = 'id',
        tokenize = 'trigram'
    );

    CREATE TRIGGER messages_indexed AFTER INSERT ON messages WHEN new.active BEGIN
        INSERT INTO messages_fts (rowid, content, tool_name, tool_calls)
            VALUES (new.id, new.content, new.tool_name, new.tool_calls);
        INSERT INTO messages_trigram (rowid, content, tool_name, tool_calls)
            VALUES (new.id, new.content, new.tool_name, new.tool_calls);
    END;
    CREATE TRIGGER messages_unindexed AFTER DELETE ON messages WHEN old.active BEGIN
        INSERT INTO messages_fts (messages_fts, rowid, content, tool_name, tool_calls)
            VALUES ('delete', old.id, old.content, old.tool_name, old.tool_calls);
        INSERT INTO messages_trigram (messages_trigram, rowid, content, tool_name, tool_calls)
            VALUES ('delete', old.id, old.content, old.tool_name, old.tool_calls);
    END;
    -- Old entry out first (if it was indexed), new one in (if it is active).
    CREATE TRIGGER messages_reindexed AFTER UPDATE OF content, tool_name, tool_calls, active ON messages BEGIN
        INSERT INTO messages_fts (messages_fts, rowid, content, tool_name, tool_calls)
            SELECT 'delete', old.id, old.content, old.tool_name, old.tool_calls WHERE old.active;
        INSERT INTO messages_trigram (messages_trigram, rowid, content, tool_name, tool_calls)
            SELECT 'delete', old.id, old.content, old.tool_name, old.tool_calls WHERE old.active;
        INSERT INTO messages_fts (rowid, content, tool_name, tool_calls)
            SELECT new.id, new.content, new.tool_name, new.tool_calls WHERE new.active;
        INSERT INTO messages_trigram (rowid, content, tool_name, tool_calls)
            SELECT new.id, new.content, new.tool_name, new.tool_calls WHERE new.active;
    END;",
    // 3: who is answering a session (one writer per session, across processes).
    "CREATE TABLE session_leases (
        session_id  TEXT PRIMARY KEY,
        token       TEXT NOT NULL,
        pid         INTEGER NOT NULL,
        host        TEXT NOT NULL,
        holder      TEXT NOT NULL,
        acquired_at INTEGER NOT NULL,
        expires_at  INTEGER NOT NULL
    ) WITHOUT ROWID;",
    // 4: model calls whose usage was estimated.
    "ALTER TABLE sessions ADD COLUMN estimated_calls INTEGER NOT NULL DEFAULT 0;",
    // 5: the indexes catch up in batches (up to the watermark), not on every insert.
    "CREATE TABLE search_watermark (
        one     INTEGER PRIMARY KEY CHECK (one = 1),
        indexed INTEGER NOT NULL
    );
    -- Every message so far was indexed by the insert trigger.
    INSERT INTO search_watermark (one, indexed) VALUES (1, (SELECT coalesce(max(id), 0) FROM messages));
    DROP TRIGGER messages_indexed;
    DROP TRIGGER messages_unindexed;
    DROP TRIGGER messages_reindexed;
    CREATE TRIGGER messages_unindexed AFTER DELETE ON messages
        WHEN old.active AND old.id <= (SELECT indexed FROM search_watermark) BEGIN
        INSERT INTO messages_fts (messages_fts, rowid, content, tool_name, tool_calls)
            VALUES ('delete', old.id, old.content, old.tool_name, old.tool_calls);
        INSERT INTO messages_trigram (messages_trigram, rowid, content, tool_name, tool_calls)
            VALUES ('delete', old.id, old.content, old.tool_name, old.tool_calls);
    END;
    -- Above the watermark nothing is indexed yet: the batch will take the row as it is then.
    CREATE TRIGGER messages_reindexed AFTER UPDATE OF content, tool_name, tool_calls, active ON messages
        WHEN old.id <= (SELECT indexed FROM search_watermark) BEGIN
        INSERT INTO messages_fts (messages_fts, rowid, content, tool_name, tool_calls)
            SELECT 'delete', old.id, old.content, old.tool_name, old.tool_calls WHERE old.active;
        INSERT INTO messages_trigram (messages_trigram, rowid, content, tool_name, tool_calls)
            SELECT 'delete', old.id, old.content, old.tool_name, old.tool_calls WHERE old.active;
        INSERT INTO messages_fts (rowid, content, tool_name, tool_calls)
            SELECT new.id, new.content, new.tool_name, new.tool_calls WHERE new.active;
        INSERT INTO messages_trigram (rowid, content, tool_name, tool_calls)
            SELECT new.id, new.content, new.tool_name, new.tool_calls WHERE new.active;
    END;",
    // 6: chat-platform users paired with the gateway, and the codes waiting for the owner.
    "CREATE TABLE pairings (
        platform     TEXT NOT NULL,
        user_id      TEXT NOT NULL,
        user_name    TEXT NOT NULL,
        code         TEXT,
        requested_at INTEGER NOT NULL,
        expires_at   INTEGER NOT NULL,
        approved_at  INTEGER,
        PRIMARY KEY (platform, user_id)
    ) WITHOUT ROWID;
    CREATE UNIQUE INDEX pairing_codes ON pairings (code) WHERE code IS NOT NULL;",
    // 7: the gateway's delivery ledger: what it sends, written first, retried until acknowledged.
    "CREATE TABLE deliveries (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        platform   TEXT NOT NULL,
        chat_id    TEXT NOT NULL,
        thread_id  TEXT,
        body       TEXT NOT NULL,
        key        TEXT NOT NULL UNIQUE,
        state      TEXT NOT NULL DEFAULT 'pending',
        attempts   INTEGER NOT NULL DEFAULT 0,
        next_at    INTEGER NOT NULL,
        last_error TEXT,
        sent_id    TEXT,
        created_at INTEGER NOT NULL,
        done_at    INTEGER
    );
    CREATE INDEX deliveries_due ON deliveries (state, platform, next_at);",
    // 8: webhook delivery ids seen in the last day, per route (replays are refused).
    "CREATE TABLE webhook_seen (
        route       TEXT NOT NULL,
        delivery_id TEXT NOT NULL,
        seen_at     INTEGER NOT NULL,
        PRIMARY KEY (route, delivery_id)
    ) WITHOUT ROWID;",
    // 9: scheduled jobs and their runs (one run per job and due time).
    "CREATE TABLE cron_jobs (
        id               TEXT PRIMARY KEY,
        name             TEXT NOT NULL,
        prompt           TEXT NOT NULL,
        schedule_kind    TEXT NOT NULL,
        schedule_expr    TEXT NOT NULL,
        schedule_display TEXT NOT NULL,
        deliver          TEXT NOT NULL,
        origin           TEXT,
        repeat_times     INTEGER,
        repeat_done      INTEGER NOT NULL DEFAULT 0,
        enabled          INTEGER NOT NULL DEFAULT 1,
        state            TEXT NOT NULL DEFAULT 'scheduled',
        next_run_at      INTEGER,
        last_run_at      INTEGER,
        last_status      TEXT,
        last_output      TEXT,
        last_error       TEXT,
        model            TEXT,
        provider         TEXT,
        toolsets         TEXT,
        max_turns        INTEGER,
        timeout_secs     INTEGER,
        workspace        TEXT,
        allow            TEXT NOT NULL DEFAULT '[]',
        creator          TEXT NOT NULL,
        created_at       INTEGER NOT NULL,
        updated_at       INTEGER NOT NULL
    );
    CREATE INDEX cron_jobs_due ON cron_jobs (state, next_run_at);
    CREATE TABLE cron_runs (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id      TEXT NOT NULL,
        due_at      INTEGER NOT NULL,
        started_at  INTEGER NOT NULL,
        finished_at INTEGER,
        status      TEXT NOT NULL,
        manual      INTEGER NOT NULL DEFAULT 0,
        output      TEXT,
        error       TEXT,
        delivery    TEXT,
        session_id  TEXT,
        pid         INTEGER NOT NULL,
        host        TEXT NOT NULL,
        holder      TEXT NOT NULL,
        token       TEXT NOT NULL,
        lease_until INTEGER NOT NULL,
        UNIQUE (job_id, due_at)
    );
    CREATE INDEX cron_runs_running ON cron_runs (status) WHERE status = 'running';",
    // 10: the gateway's inbox, and deliveries claimed by the process sending them.
    "CREATE TABLE inbox (
        id            INTEGER PRIMARY KEY AUTOINCREMENT,
        account       TEXT NOT NULL,
        chat_id       TEXT NOT NULL,
        thread_id     TEXT,
        session_key   TEXT NOT NULL,
        message_id    TEXT NOT NULL,
        kind          TEXT NOT NULL,
        body          TEXT NOT NULL,
        respond       INTEGER NOT NULL DEFAULT 0,
        state         TEXT NOT NULL DEFAULT 'pending',
        session_id    TEXT,
        started_count INTEGER,
        streamed      TEXT,
        reply         TEXT,
        created_at    INTEGER NOT NULL,
        done_at       INTEGER,
        UNIQUE (account, chat_id, message_id)
    );
    CREATE INDEX inbox_open ON inbox (session_key, id) WHERE state <> 'done';
    ALTER TABLE deliveries ADD COLUMN claimed_until INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE deliveries ADD COLUMN claimed_by TEXT;
    CREATE INDEX deliveries_chat ON deliveries (platform, chat_id, id) WHERE state = 'pending';",
    // 11: what each turn took (crate::turns).
    "CREATE TABLE turns (
        id                INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id        TEXT NOT NULL,
        source            TEXT NOT NULL,
        model             TEXT NOT NULL,
        ended_at          INTEGER NOT NULL,
        duration_ms       INTEGER NOT NULL,
        outcome           TEXT NOT NULL,
        input_tokens      INTEGER NOT NULL,
        output_tokens     INTEGER NOT NULL,
        cache_read_tokens INTEGER NOT NULL,
        api_calls         INTEGER NOT NULL
    );
    CREATE INDEX turns_by_end ON turns (ended_at);",
    // 12: whom a turn was for and what it cost (crate::turns::Spender).
    "ALTER TABLE turns ADD COLUMN sender TEXT;
    ALTER TABLE turns ADD COLUMN job TEXT;
    ALTER TABLE turns ADD COLUMN cost REAL;",
];

fn migrations() -> Migrations<'static> {
    Migrations::new(MIGRATIONS.iter().copied().map(M::up).collect())
}

/// Bring `conn` to [`VERSION`]. The connection's default transaction behaviour must be
/// `IMMEDIATE`. Another process may be migrating the same file at the same moment: then our
/// attempt fails on the tables it already created, and we try again from the version it reached.
pub(crate) fn migrate(conn: &mut Connection) -> Result<()> {
    let deadline = Instant::now() + crate::BUSY_RETRY_FOR;
    loop {
        let before = user_version(conn)?;
        if before > i64::try_from(VERSION).unwrap_or(i64::MAX) {
            // Written by a newer talaria: this one cannot know what its tables hold.
            return Err(Error::Corrupt {
                what: format!("its schema is version {before}, newer than this talaria's {VERSION}: update talaria"),
            });
        }
        match migrations().to_latest(conn) {
            Ok(()) => return Ok(()),
            Err(e) => {
                let e = Error::from(e);
                let raced = user_version(conn).is_ok_and(|after| after != before);
                if (raced || e.is_busy()) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(fastrand::u64(5..=60)));
                    continue;
                }
                return Err(e);
            }
        }
    }
}

fn user_version(conn: &Connection) -> Result<i64> {
    Ok(conn.query_row("PRAGMA user_version", [], |r| r.get(0))?)
}
