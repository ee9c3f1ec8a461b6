//! Opening files written by older (and newer) versions.

use rusqlite::Connection;
use talaria_store::{Error, SearchQuery, Store, schema};

use crate::{create, turn};

/// The schema as released with migration 1 only, written by hand so later edits to the
/// migration list cannot change what this test starts from.
const SCHEMA_V1: &str = "CREATE TABLE plugin_kv (
    plugin TEXT NOT NULL,
    key    TEXT NOT NULL,
    value  BLOB NOT NULL,
    updated_at INTEGER NOT NULL DEFAULT (unixepoch()),
    PRIMARY KEY (plugin, key)
) WITHOUT ROWID;";

#[tokio::test]
async fn a_file_with_only_plugin_data_is_migrated_and_keeps_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    {
        let conn = Connection::open(&path).expect("open raw");
        conn.pragma_update(None, "journal_mode", "WAL").expect("wal");
        conn.execute_batch(SCHEMA_V1).expect("v1 schema");
        conn.execute("INSERT INTO plugin_kv (plugin, key, value) VALUES ('weather', 'city', x'4c6973626f6e')", [])
            .expect("kv row");
        conn.pragma_update(None, "user_version", 1).expect("version");
    }
    let s = Store::open(&path).expect("open migrates");
    assert_eq!(s.kv_get("weather", "city").await.expect("kv"), Some(b"Lisbon".to_vec()));
    create(&s, "s").await;
    turn(&s, "s", "after the migration", "fine").await;
    assert_eq!(s.search(&SearchQuery::new("migration")).await.expect("search").len(), 1);
    drop(s);
    let conn = Connection::open(&path).expect("open raw");
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).expect("version");
    assert_eq!(version, schema::VERSION as i64);
}

#[test]
fn a_file_from_a_newer_version_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    Store::open(&path).expect("create");
    Connection::open(&path).expect("open raw").pragma_update(None, "user_version", 99).expect("version");
    let Err(e) = Store::open(&path) else { panic!("a newer file was opened") };
    assert!(matches!(e, Error::Corrupt { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        format!(
            "state database holds something this version cannot read: its schema is version 99, newer than this talaria's {}: update talaria",
            talaria_store::schema::VERSION
        )
    );
}
