//! Journals kept in the earlier layout, moved to one key per entry when first opened:
//!
//! ```text
//! c/00000000   [{"id":0,"ts":1795352532,"session_id":"...","user":"...","assistant":"..."}, ...]
//! c/00000001   up to 64 entries (fewer when they are large), oldest first
//! meta         {"version":1,"next_id":130,"entries":130,"chunks":3,"bytes":201733}
//! ```
//!
//! Each process rewrote the newest chunk from its own copy, which is how entries were lost when
//! several wrote at once. Moving keeps every readable entry and its id.

use serde::Deserialize;

use super::{Entries, Entry, NEXT_ID, Store, entry_key, parse_number};

/// The earlier layout.
const LEGACY_CHUNK_PREFIX: &str = "c/";
const LEGACY_META: &str = "meta";
/// Where an earlier-layout chunk that does not decode is kept, out of the way.
const UNREADABLE_PREFIX: &str = "unreadable/";

impl<S: Store> Entries<S> {
    /// Move a journal in the earlier layout (chunks of entries, and `meta`) to one key per
    /// entry, keeping ids. Safe to run in several processes at once, and again after a crash:
    /// the counter is raised past every old id before any entry moves, an entry is created only
    /// where its key is free (an equal entry there means another process moved it already), and
    /// a chunk is deleted only after its entries moved.
    pub(super) fn migrate_legacy(&mut self, warnings: &mut Vec<String>) -> Result<(), String> {
        let chunks = self.store.list(LEGACY_CHUNK_PREFIX)?;
        if chunks.is_empty() {
            return Ok(());
        }
        let meta_next = self
            .store
            .get(LEGACY_META)?
            .and_then(|bytes| serde_json::from_slice::<LegacyMeta>(&bytes).ok())
            .map_or(0, |m| m.next_id);
        let mut decoded = Vec::new();
        for (key, bytes) in chunks {
            match serde_json::from_slice::<Vec<Entry>>(&bytes) {
                Ok(list) => decoded.push((key, list)),
                Err(e) => {
                    let aside = format!("{UNREADABLE_PREFIX}{key}");
                    self.store.compare_and_set(&aside, None, Some(&bytes))?;
                    self.store.delete(&key)?;
                    warnings.push(format!("journal chunk {key} does not decode and is skipped (kept as {aside}): {e}"));
                }
            }
        }
        let after_last = decoded.iter().flat_map(|(_, list)| list.iter().map(|e| e.id + 1)).max().unwrap_or(0);
        self.raise_counter(meta_next.max(after_last))?;
        // The earlier layout dropped whole chunks, oldest first: ids below the oldest kept are gone.
        if let Some(oldest) = decoded.iter().flat_map(|(_, list)| list.iter().map(|e| e.id)).min() {
            self.raise_floor(oldest)?;
        }
        for (key, list) in decoded {
            for mut entry in list {
                let bytes = serde_json::to_vec(&entry).map_err(|e| e.to_string())?;
                if self.store.compare_and_set(&entry_key(entry.id), None, Some(&bytes))? {
                    continue;
                }
                let there = self.store.get(&entry_key(entry.id))?;
                if there.as_deref().and_then(|b| serde_json::from_slice::<Entry>(b).ok()).as_ref() != Some(&entry) {
                    // Its id was taken by another entry meanwhile: it keeps its text, under a new id.
                    self.create(&mut entry)?;
                }
            }
            self.store.delete(&key)?;
        }
        self.store.delete(LEGACY_META)
    }

    /// Set the id counter to at least `to`.
    fn raise_counter(&mut self, to: u64) -> Result<(), String> {
        loop {
            let current = self.store.get(NEXT_ID)?;
            if current.as_deref().and_then(parse_number).is_some_and(|n| n >= to) {
                return Ok(());
            }
            if self.store.compare_and_set(NEXT_ID, current.as_deref(), Some(to.to_string().as_bytes()))? {
                return Ok(());
            }
        }
    }
}

/// `meta` of the earlier layout; only `next_id` matters.
#[derive(Debug, Deserialize)]
struct LegacyMeta {
    next_id: u64,
}

#[cfg(test)]
mod tests {
    use super::super::{Limits, MemStore};
    use super::*;

    const NOW: u64 = 1_795_352_532;

    fn open(store: &MemStore) -> (Entries<MemStore>, Vec<Entry>) {
        let mut warnings = Vec::new();
        let opened = Entries::open(store.clone(), Limits::default(), NOW, &mut warnings).expect("opens");
        assert!(warnings.is_empty(), "{warnings:?}");
        opened
    }

    fn ids(entries: &[Entry]) -> Vec<u64> {
        entries.iter().map(|e| e.id).collect()
    }

    /// A store in the earlier layout: chunks of `per_chunk` entries with ids `ids`, and `meta`.
    fn legacy(ids: &[u64], per_chunk: usize, meta_next: u64) -> MemStore {
        let store = MemStore::default();
        let entries: Vec<Entry> = ids
            .iter()
            .map(|&id| Entry {
                id,
                ts: 100 + id,
                session_id: "old".into(),
                user: format!("old question {id}"),
                assistant: "old answer".into(),
            })
            .collect();
        for (n, chunk) in entries.chunks(per_chunk).enumerate() {
            store.insert(&format!("c/{n:08}"), &serde_json::to_vec(chunk).expect("json"));
        }
        let meta = format!(r#"{{"version":1,"next_id":{meta_next},"entries":{},"chunks":2,"bytes":0}}"#, ids.len());
        store.insert("meta", meta.as_bytes());
        store
    }

    #[test]
    fn a_journal_in_chunks_moves_to_one_key_per_entry_keeping_ids() {
        // Ids 3 to 7 kept (0 to 2 were dropped); id 8 was lost with its chunk, so 9 is next.
        let store = legacy(&[3, 4, 5, 6, 7], 3, 9);
        let (mut j, entries) = open(&store);
        assert_eq!(ids(&entries), [3, 4, 5, 6, 7]);
        assert_eq!(entries[0].user, "old question 3");
        let keys = store.keys();
        assert!(!keys.iter().any(|k| k.starts_with("c/") || k == "meta"), "{keys:?}");
        assert_eq!(store.get("next-id").expect("get"), Some(b"9".to_vec()));
        assert_eq!(j.append(1, "new", "u", "a").expect("appended").0.id, 9, "old ids are not handed out again");
        let (_, entries) = open(&store);
        assert_eq!(ids(&entries), [3, 4, 5, 6, 7, 9]);
    }

    #[test]
    fn a_move_cut_short_or_raced_loses_nothing() {
        let store = legacy(&[0, 1, 2, 3], 2, 4);
        // A process moved entries 0 and 1 and stopped before deleting their chunk; meanwhile a
        // writer that did not count took key 2 for something else.
        let moved = |id: u64| Entry {
            id,
            ts: 100 + id,
            session_id: "old".into(),
            user: format!("old question {id}"),
            assistant: "old answer".into(),
        };
        store.insert("e/000000000000", &serde_json::to_vec(&moved(0)).expect("json"));
        store.insert("e/000000000001", &serde_json::to_vec(&moved(1)).expect("json"));
        let other =
            Entry { id: 2, ts: 1, session_id: "new".into(), user: "a newer turn".into(), assistant: "x".into() };
        store.insert("e/000000000002", &serde_json::to_vec(&other).expect("json"));
        store.insert("c/00000009", b"[{not json");
        let mut warnings = Vec::new();
        let (_, entries) = Entries::open(store.clone(), Limits::default(), NOW, &mut warnings).expect("opens");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("kept as unreadable/c/00000009"), "{warnings:?}");
        assert_eq!(store.get("unreadable/c/00000009").expect("get"), Some(b"[{not json".to_vec()));
        let mut users: Vec<&str> = entries.iter().map(|e| e.user.as_str()).collect();
        users.sort_unstable();
        assert_eq!(users, ["a newer turn", "old question 0", "old question 1", "old question 2", "old question 3"]);
        let mut all = ids(&entries);
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 5, "unique ids: {all:?}");
        // The old entry 2 got the next free id.
        assert_eq!(entries.iter().find(|e| e.user == "old question 2").map(|e| e.id), Some(4));
    }
}
