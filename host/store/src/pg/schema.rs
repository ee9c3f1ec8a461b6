//! The PostgreSQL schema as numbered migrations, applied in order on connect and never edited
//! once released: a change is a new migration at the end of [`MIGRATIONS`]. The version is kept
//! in `talaria_schema`; every migration runs in one transaction holding an advisory lock, so
//! processes connecting at once migrate one after the other and the later ones find nothing to
//! do.
//!
//! 1. Everything SQLite's nine migrations make ([`crate::schema`]), in PostgreSQL's terms:
//!    `BIGINT` times (Unix milliseconds), `BYTEA` values, identity ids. Search is a `tsvector`
//!    (English stemming, like SQLite's porter tokenizer) with a GIN index for words and phrases,
//!    and `pg_trgm` trigram GIN indexes for substrings, CJK text and code fragments; both cover
//!    only active messages.
//! 2. SQLite's tenth: the gateway's `inbox`, and `deliveries.claimed_until` and `claimed_by`.
//! 3. `messages.cjk`: every one- and two-character run of CJK script in a message (its text,
//!    tool name and call arguments), with a GIN index, for the search terms too short for
//!    `pg_trgm` (which finds nothing in fewer than three characters, and scanned every message
//!    for them). SQLite needs nothing new: the same search there takes 5 ms over 100k messages.
//! 4. Search newest first, a span of ids at a time (see [`crate::pg::search`]): the words index
//!    and one trigram index gain a second column, `ARRAY[id / 256, -1 - id / 8192]` (the
//!    message's buckets of 256 and of 8192 ids), so a scan for a common word reads only the
//!    buckets it names instead of every match, and `ARRAY[role]` and `ARRAY[session_id]`, so a
//!    search for one role or within one session reads only their messages;
//!    `messages.haystack` is the text, tool name and arguments lower-cased in one column, so a
//!    substring is checked with one `LIKE` instead of three `ILIKE`s (which lower-cased each
//!    candidate's text again). Both columns are kept in the row (`STORAGE MAIN`, compressed
//!    when long) rather than moved out of it: a search reads them for every candidate, and the
//!    text, read only for the hits shown, is moved out of a long row first. The four indexes
//!    they replace are dropped first, so the table's rewrite does not rebuild them. The GIN
//!    indexes keep at most 64 kB of new entries in their pending list (4 MB by default), which
//!    every search reads whole: 400 new messages there cost each index scan 1.5 ms.
//! 5. `talaria_cjk_grams` in PL/pgSQL, returning at once for text with no CJK character (almost
//!    every message): as a SQL function its body was parsed and planned again for every row
//!    written, 120 µs of each message's insert (0.16 ms of 0.19 ms without the indexes). The
//!    grams are the same, so the stored column and its index stay as they are.
//! 6. `turns` (SQLite's eleventh), and 7. whom a turn was for and what it cost (its twelfth).
//! 8. A `NOTIFY` costs every commit that sends one a lock of the whole database's notice queue,
//!    and wakes every listening process: 0.12 ms of a gateway turn's 0.85 ms in a one-client
//!    replay, before the listeners' share. So a turn tells only those who wait:
//!    `session_leases.wanted` is set by a process that found the lease held and waits for it,
//!    and the turn's commit sends `lease-freed` only then; `inbox.waiter` is the one process
//!    that waits on a webhook's entry (the one that kept it; nobody, `NULL`, when a request in
//!    another process waits on it too), and the answer's commit sends `inbox-done` only when
//!    another process may be waiting. Entries answered in a chat are waited on by nobody.

use crate::pg::{Client, sql};
use crate::{Error, Result};

/// The advisory lock key migrations hold ("talaria" in ASCII).
const MIGRATION_LOCK: i64 = 0x0074_616c_6172_6961;

/// Every migration, oldest first.
pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: the whole schema of SQLite's version 9.
    "CREATE EXTENSION IF NOT EXISTS pg_trgm;

    CREATE TABLE plugin_kv (
        plugin     TEXT NOT NULL,
        key        TEXT NOT NULL,
        value      BYTEA NOT NULL,
        updated_at BIGINT NOT NULL DEFAULT (extract(epoch FROM now())::bigint),
        PRIMARY KEY (plugin, key)
    );

    CREATE TABLE sessions (
        id            TEXT PRIMARY KEY,
        source        TEXT NOT NULL,
        model         TEXT NOT NULL,
        provider      TEXT NOT NULL,
        system_prompt TEXT NOT NULL,
        parent_id     TEXT REFERENCES sessions (id) ON DELETE SET NULL,
        title         TEXT,
        cwd           TEXT NOT NULL,
        started_at    BIGINT NOT NULL,
        updated_at    BIGINT NOT NULL,
        ended_at      BIGINT,
        end_reason    TEXT,
        message_count      BIGINT NOT NULL DEFAULT 0,
        tool_call_count    BIGINT NOT NULL DEFAULT 0,
        api_call_count     BIGINT NOT NULL DEFAULT 0,
        input_tokens       BIGINT NOT NULL DEFAULT 0,
        output_tokens      BIGINT NOT NULL DEFAULT 0,
        cache_read_tokens  BIGINT NOT NULL DEFAULT 0,
        cache_write_tokens BIGINT NOT NULL DEFAULT 0,
        reasoning_tokens   BIGINT NOT NULL DEFAULT 0,
        estimated_calls    BIGINT NOT NULL DEFAULT 0
    );
    -- Titles are unique without regard to case, as SQLite's COLLATE NOCASE makes them.
    CREATE UNIQUE INDEX sessions_title ON sessions (lower(title));
    CREATE INDEX sessions_by_update ON sessions (updated_at);
    CREATE INDEX sessions_by_parent ON sessions (parent_id);

    CREATE TABLE messages (
        id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        session_id   TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        role         TEXT NOT NULL,
        active       BOOLEAN NOT NULL DEFAULT TRUE,
        created_at   BIGINT NOT NULL,
        tool_call_id TEXT,
        tool_name    TEXT,
        content      TEXT NOT NULL,
        tool_calls   TEXT,
        reasoning    TEXT,
        extra        TEXT,
        -- Punctuation splits words, as SQLite's unicode61 tokenizer splits them: `containers.conf`
        -- holds the word `conf`, `config_loader` the word `config`.
        words        tsvector GENERATED ALWAYS AS (
            to_tsvector('english', regexp_replace(
                content || ' ' || coalesce(tool_name, '') || ' ' || coalesce(tool_calls, ''),
                '[[:punct:]]', ' ', 'g'))
        ) STORED
    );
    CREATE INDEX messages_by_session ON messages (session_id, id);
    CREATE INDEX messages_words ON messages USING gin (words) WHERE active;
    CREATE INDEX messages_trigram ON messages USING gin (content gin_trgm_ops) WHERE active;
    CREATE INDEX messages_calls_trigram ON messages USING gin (tool_calls gin_trgm_ops) WHERE active;
    CREATE INDEX messages_name_trigram ON messages USING gin (tool_name gin_trgm_ops) WHERE active;

    CREATE TABLE session_leases (
        session_id  TEXT PRIMARY KEY,
        token       TEXT NOT NULL,
        pid         BIGINT NOT NULL,
        host        TEXT NOT NULL,
        holder      TEXT NOT NULL,
        acquired_at BIGINT NOT NULL,
        expires_at  BIGINT NOT NULL
    );

    CREATE TABLE pairings (
        platform     TEXT NOT NULL,
        user_id      TEXT NOT NULL,
        user_name    TEXT NOT NULL,
        code         TEXT,
        requested_at BIGINT NOT NULL,
        expires_at   BIGINT NOT NULL,
        approved_at  BIGINT,
        PRIMARY KEY (platform, user_id)
    );
    CREATE UNIQUE INDEX pairing_codes ON pairings (code) WHERE code IS NOT NULL;

    CREATE TABLE deliveries (
        id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        platform   TEXT NOT NULL,
        chat_id    TEXT NOT NULL,
        thread_id  TEXT,
        body       TEXT NOT NULL,
        key        TEXT NOT NULL UNIQUE,
        state      TEXT NOT NULL DEFAULT 'pending',
        attempts   BIGINT NOT NULL DEFAULT 0,
        next_at    BIGINT NOT NULL,
        last_error TEXT,
        sent_id    TEXT,
        created_at BIGINT NOT NULL,
        done_at    BIGINT
    );
    CREATE INDEX deliveries_due ON deliveries (state, platform, next_at);

    CREATE TABLE webhook_seen (
        route       TEXT NOT NULL,
        delivery_id TEXT NOT NULL,
        seen_at     BIGINT NOT NULL,
        PRIMARY KEY (route, delivery_id)
    );

    CREATE TABLE cron_jobs (
        id               TEXT PRIMARY KEY,
        name             TEXT NOT NULL,
        prompt           TEXT NOT NULL,
        schedule_kind    TEXT NOT NULL,
        schedule_expr    TEXT NOT NULL,
        schedule_display TEXT NOT NULL,
        deliver          TEXT NOT NULL,
        origin           TEXT,
        repeat_times     BIGINT,
        repeat_done      BIGINT NOT NULL DEFAULT 0,
        enabled          BOOLEAN NOT NULL DEFAULT TRUE,
        state            TEXT NOT NULL DEFAULT 'scheduled',
        next_run_at      BIGINT,
        last_run_at      BIGINT,
        last_status      TEXT,
        last_output      TEXT,
        last_error       TEXT,
        model            TEXT,
        provider         TEXT,
        toolsets         TEXT,
        max_turns        BIGINT,
        timeout_secs     BIGINT,
        workspace        TEXT,
        allow            TEXT NOT NULL DEFAULT '[]',
        creator          TEXT NOT NULL,
        created_at       BIGINT NOT NULL,
        updated_at       BIGINT NOT NULL
    );
    CREATE INDEX cron_jobs_due ON cron_jobs (state, next_run_at);
    CREATE TABLE cron_runs (
        id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        job_id      TEXT NOT NULL,
        due_at      BIGINT NOT NULL,
        started_at  BIGINT NOT NULL,
        finished_at BIGINT,
        status      TEXT NOT NULL,
        manual      BOOLEAN NOT NULL DEFAULT FALSE,
        output      TEXT,
        error       TEXT,
        delivery    TEXT,
        session_id  TEXT,
        pid         BIGINT NOT NULL,
        host        TEXT NOT NULL,
        holder      TEXT NOT NULL,
        token       TEXT NOT NULL,
        lease_until BIGINT NOT NULL,
        UNIQUE (job_id, due_at)
    );
    CREATE INDEX cron_runs_running ON cron_runs (status) WHERE status = 'running';",
    // 2: SQLite's tenth, the gateway's inbox and deliveries claimed by the process sending them.
    "CREATE TABLE inbox (
        id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        account       TEXT NOT NULL,
        chat_id       TEXT NOT NULL,
        thread_id     TEXT,
        session_key   TEXT NOT NULL,
        message_id    TEXT NOT NULL,
        kind          TEXT NOT NULL,
        body          TEXT NOT NULL,
        respond       BOOLEAN NOT NULL DEFAULT false,
        state         TEXT NOT NULL DEFAULT 'pending',
        session_id    TEXT,
        started_count BIGINT,
        streamed      TEXT,
        reply         TEXT,
        created_at    BIGINT NOT NULL,
        done_at       BIGINT,
        UNIQUE (account, chat_id, message_id)
    );
    CREATE INDEX inbox_open ON inbox (session_key, id) WHERE state <> 'done';
    ALTER TABLE deliveries ADD COLUMN claimed_until BIGINT NOT NULL DEFAULT 0;
    ALTER TABLE deliveries ADD COLUMN claimed_by TEXT;
    CREATE INDEX deliveries_chat ON deliveries (platform, chat_id, id) WHERE state = 'pending';",
    // 3: CJK unigrams and bigrams, for search terms of one or two CJK characters. The pattern's
    // ranges are `search::query::CJK_RANGES`. The statistics of the new column tell the planner
    // which grams are rare.
    r"CREATE FUNCTION talaria_cjk_grams(t TEXT) RETURNS TEXT[]
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $f$
        SELECT coalesce(array_agg(DISTINCT substr(m.run[1], i, n)), '{}')
        FROM regexp_matches(t, '[\u1100-\u11FF\u2E80-\u2FDF\u3040-\u30FF\u3100-\u318F\u3400-\u4DBF\u4E00-\u9FFF\uAC00-\uD7AF\uF900-\uFAFF\uFF66-\uFF9F\U00020000-\U0003134F]+', 'g') AS m(run),
             generate_series(1, 2) AS n,
             generate_series(1, length(m.run[1]) - n + 1) AS i
    $f$;
    ALTER TABLE messages ADD COLUMN cjk TEXT[] GENERATED ALWAYS AS
        (talaria_cjk_grams(content || ' ' || coalesce(tool_name, '') || ' ' || coalesce(tool_calls, ''))) STORED;
    CREATE INDEX messages_cjk ON messages USING gin (cjk) WHERE active;
    ANALYZE messages;",
    // 4: the search indexes by age, and one lower-cased haystack for substrings. The bucket
    // expression is `pg::search::BUCKET`'s; a newline parts the columns, and no search term
    // holds one, so no term is found across two of them.
    r"DROP INDEX messages_words;
    DROP INDEX messages_trigram;
    DROP INDEX messages_calls_trigram;
    DROP INDEX messages_name_trigram;
    ALTER TABLE messages ALTER COLUMN words SET STORAGE MAIN,
        ADD COLUMN haystack TEXT GENERATED ALWAYS AS
            (lower(content || E'\n' || coalesce(tool_name, '') || E'\n' || coalesce(tool_calls, ''))) STORED,
        ALTER COLUMN haystack SET STORAGE MAIN;
    CREATE INDEX messages_words_by_age ON messages
        USING gin (words, (ARRAY[id / 256, -1 - id / 8192]), (ARRAY[role]), (ARRAY[session_id]))
        WITH (gin_pending_list_limit = 64) WHERE active;
    CREATE INDEX messages_haystack_by_age ON messages
        USING gin (haystack gin_trgm_ops, (ARRAY[id / 256, -1 - id / 8192]), (ARRAY[role]), (ARRAY[session_id]))
        WITH (gin_pending_list_limit = 64) WHERE active;
    ALTER INDEX messages_cjk SET (gin_pending_list_limit = 64);
    ANALYZE messages;",
    // 5: the CJK grams without a plan per row. PL/pgSQL keeps the function compiled, and its
    // statements planned, for the connection's life; the test and the runs are migration 3's
    // pattern, without and with its `+`.
    r"CREATE OR REPLACE FUNCTION talaria_cjk_grams(t TEXT) RETURNS TEXT[]
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $f$
    BEGIN
        IF t !~ '[\u1100-\u11FF\u2E80-\u2FDF\u3040-\u30FF\u3100-\u318F\u3400-\u4DBF\u4E00-\u9FFF\uAC00-\uD7AF\uF900-\uFAFF\uFF66-\uFF9F\U00020000-\U0003134F]' THEN
            RETURN '{}';
        END IF;
        RETURN (
            SELECT coalesce(array_agg(DISTINCT substr(m.run[1], i, n)), '{}')
            FROM regexp_matches(t, '[\u1100-\u11FF\u2E80-\u2FDF\u3040-\u30FF\u3100-\u318F\u3400-\u4DBF\u4E00-\u9FFF\uAC00-\uD7AF\uF900-\uFAFF\uFF66-\uFF9F\U00020000-\U0003134F]+', 'g') AS m(run),
                 generate_series(1, 2) AS n,
                 generate_series(1, length(m.run[1]) - n + 1) AS i
        );
    END
    $f$;",
    // 6: what each turn took (crate::turns), as SQLite's version 11.
    "CREATE TABLE turns (
        id                BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        session_id        TEXT NOT NULL,
        source            TEXT NOT NULL,
        model             TEXT NOT NULL,
        ended_at          BIGINT NOT NULL,
        duration_ms       BIGINT NOT NULL,
        outcome           TEXT NOT NULL,
        input_tokens      BIGINT NOT NULL,
        output_tokens     BIGINT NOT NULL,
        cache_read_tokens BIGINT NOT NULL,
        api_calls         BIGINT NOT NULL
    );
    CREATE INDEX turns_by_end ON turns (ended_at);",
    // 7: whom a turn was for and what it cost, as SQLite's version 12.
    "ALTER TABLE turns ADD COLUMN sender TEXT;
    ALTER TABLE turns ADD COLUMN job TEXT;
    ALTER TABLE turns ADD COLUMN cost DOUBLE PRECISION;",
    // 8: notices only for those who wait (see the module's comment).
    "ALTER TABLE session_leases ADD COLUMN wanted BOOLEAN NOT NULL DEFAULT false;
    ALTER TABLE inbox ADD COLUMN waiter TEXT;",
];

/// The schema version this code writes.
pub(crate) const VERSION: i64 = MIGRATIONS.len() as i64;

/// Bring the database to [`VERSION`], one transaction per migration, under the advisory lock.
pub(crate) async fn migrate(client: &mut Client) -> Result<()> {
    loop {
        let tx = client.transaction().await.map_err(sql)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).await.map_err(sql)?;
        tx.batch_execute("CREATE TABLE IF NOT EXISTS talaria_schema (version BIGINT NOT NULL)").await.map_err(sql)?;
        let at: i64 =
            tx.query_opt("SELECT version FROM talaria_schema", &[]).await.map_err(sql)?.map_or(0, |row| row.get(0));
        if at > VERSION {
            return Err(Error::Corrupt {
                what: format!("its schema is version {at}, newer than this talaria's {VERSION}: update talaria"),
            });
        }
        if at == VERSION {
            return tx.commit().await.map_err(sql);
        }
        let index = usize::try_from(at).unwrap_or_default();
        tx.batch_execute(MIGRATIONS[index]).await.map_err(sql)?;
        tx.execute("DELETE FROM talaria_schema", &[]).await.map_err(sql)?;
        tx.execute("INSERT INTO talaria_schema (version) VALUES ($1)", &[&(at + 1)]).await.map_err(sql)?;
        tx.commit().await.map_err(sql)?;
    }
}

#[cfg(test)]
mod tests {
    use super::MIGRATIONS;
    use crate::search::query::CJK_RANGES;

    /// PostgreSQL's gram pattern and the query's CJK test agree on what is CJK.
    #[test]
    fn the_gram_pattern_spells_the_cjk_ranges() {
        let escape = |c: u32| if c > 0xFFFF { format!("\\U{c:08X}") } else { format!("\\u{c:04X}") };
        let class: String = CJK_RANGES.iter().map(|&(from, to)| format!("{}-{}", escape(from), escape(to))).collect();
        assert!(MIGRATIONS[2].contains(&format!("'[{class}]+'")), "{class}");
        assert!(MIGRATIONS[4].contains(&format!("t !~ '[{class}]'")), "{class}");
        assert!(MIGRATIONS[4].contains(&format!("'[{class}]+'")), "{class}");
    }

    /// The search's buckets are the indexes' buckets.
    #[test]
    fn the_index_buckets_are_the_search_buckets() {
        use crate::pg::search::spans::{BUCKET, COARSE_BUCKET};
        let bucket = format!("(ARRAY[id / {BUCKET}, -1 - id / {COARSE_BUCKET}])");
        assert_eq!(MIGRATIONS[3].matches(&bucket).count(), 2, "{bucket}");
    }
}
