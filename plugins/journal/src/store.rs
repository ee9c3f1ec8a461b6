//! The journal on disk: entries in chunks of the plugin's kv store.
//!
//! ```text
//! c/00000000   [{"id":0,"ts":1795352532,"session_id":"...","user":"...","assistant":"..."}, ...]
//! c/00000001   up to 64 entries (fewer when they are large), oldest first
//! meta         {"version":1,"next_id":130,"entries":130,"chunks":3,"bytes":201733}
//! ```
//!
//! Only the newest chunk is ever rewritten. The chunks are the truth: `meta` is written after
//! each append for whoever looks, and only its `next_id` is read back. When the journal grows
//! past [`Limits`] the oldest chunks are deleted whole.
//!
//! [`Store`] is the seam: [`KvStore`] is the host's kv, and the tests use an in-memory map.

use serde::{Deserialize, Serialize};

/// Key-value storage, as the journal needs it.
pub trait Store {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, String>;
    fn set(&mut self, key: &str, value: &[u8]) -> Result<(), String>;
    fn delete(&mut self, key: &str) -> Result<(), String>;
    /// Keys starting with `prefix`, sorted.
    fn keys(&self, prefix: &str) -> Result<Vec<String>, String>;
}

/// The plugin's kv store on the host (capability `kv`).
#[derive(Debug, Default)]
pub struct KvStore;

impl Store for KvStore {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        talaria_sdk::kv::get(key).map_err(|e| e.to_string())
    }

    fn set(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
        talaria_sdk::kv::set(key, value).map_err(|e| e.to_string())
    }

    fn delete(&mut self, key: &str) -> Result<(), String> {
        talaria_sdk::kv::delete(key).map_err(|e| e.to_string())
    }

    fn keys(&self, prefix: &str) -> Result<Vec<String>, String> {
        talaria_sdk::kv::keys(prefix).map_err(|e| e.to_string())
    }
}

/// One remembered turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Increasing, never reused.
    pub id: u64,
    /// Seconds since the Unix epoch.
    pub ts: u64,
    pub session_id: String,
    pub user: String,
    pub assistant: String,
}

/// How much the journal keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Entries kept at most; the oldest chunks go first.
    pub max_entries: usize,
    /// Bytes of chunks kept at most (the host allows 10 MiB of kv per plugin).
    pub max_bytes: usize,
    /// Entries per chunk.
    pub chunk_entries: usize,
    /// A chunk is closed once it would grow past this many bytes (the host allows 1 MiB a value).
    pub chunk_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_entries: 20_000, max_bytes: 8 * 1024 * 1024, chunk_entries: 64, chunk_bytes: 256 * 1024 }
    }
}

const META_KEY: &str = "meta";
const CHUNK_PREFIX: &str = "c/";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ChunkInfo {
    n: u64,
    count: usize,
    bytes: usize,
    /// Id of its first entry (`u64::MAX` for a chunk that did not decode).
    first_id: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Meta {
    version: u32,
    next_id: u64,
    entries: usize,
    chunks: usize,
    bytes: usize,
}

/// The chunked journal in a [`Store`].
#[derive(Debug)]
pub struct Chunks<S> {
    store: S,
    limits: Limits,
    /// Oldest first.
    chunks: Vec<ChunkInfo>,
    /// The entries of the newest chunk, which the next append rewrites.
    tail: Vec<Entry>,
    next_id: u64,
}

/// What an append did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    pub entry: Entry,
    /// Entries with an id below this were deleted to stay within the limits.
    pub dropped_before: Option<u64>,
}

impl<S: Store> Chunks<S> {
    /// Open the journal in `store` and read every entry, oldest first. A chunk that does not
    /// decode is reported in `warnings` and left out (it is deleted when its turn to go comes).
    ///
    /// # Errors
    ///
    /// The store failed.
    pub fn open(store: S, limits: Limits, warnings: &mut Vec<String>) -> Result<(Self, Vec<Entry>), String> {
        let mut chunks = Vec::new();
        let mut entries = Vec::new();
        let mut tail = Vec::new();
        for key in store.keys(CHUNK_PREFIX)? {
            let Some(n) = key.strip_prefix(CHUNK_PREFIX).and_then(|n| n.parse::<u64>().ok()) else { continue };
            let Some(bytes) = store.get(&key)? else { continue };
            match serde_json::from_slice::<Vec<Entry>>(&bytes) {
                Ok(list) => {
                    let first_id = list.first().map_or(u64::MAX, |e| e.id);
                    chunks.push(ChunkInfo { n, count: list.len(), bytes: bytes.len(), first_id });
                    tail.clone_from(&list);
                    entries.extend(list);
                }
                Err(e) => {
                    warnings.push(format!("journal chunk {key} does not decode and is skipped: {e}"));
                    chunks.push(ChunkInfo { n, count: 0, bytes: bytes.len(), first_id: u64::MAX });
                    tail.clear();
                }
            }
        }
        let meta: Option<Meta> = match store.get(META_KEY)? {
            Some(bytes) => serde_json::from_slice(&bytes).ok(),
            None => None,
        };
        let after_last = entries.iter().map(|e| e.id + 1).max().unwrap_or(0);
        let next_id = meta.map_or(0, |m| m.next_id).max(after_last);
        Ok((Self { store, limits, chunks, tail, next_id }, entries))
    }

    /// Append a turn (already clipped) and apply the limits.
    ///
    /// # Errors
    ///
    /// The store failed; the entry may then be missing, but the journal stays readable.
    pub fn append(&mut self, ts: u64, session_id: &str, user: &str, assistant: &str) -> Result<Appended, String> {
        let entry = Entry {
            id: self.next_id,
            ts,
            session_id: session_id.to_string(),
            user: user.to_string(),
            assistant: assistant.to_string(),
        };
        let entry_bytes = serde_json::to_vec(&entry).map_err(|e| e.to_string())?.len();
        let fits = self.chunks.last().is_some_and(|last| {
            last.first_id != u64::MAX
                && last.count < self.limits.chunk_entries
                && last.bytes + entry_bytes < self.limits.chunk_bytes
        });
        let n = match self.chunks.last() {
            Some(last) if fits => last.n,
            Some(last) => {
                self.tail.clear();
                last.n + 1
            }
            None => 0,
        };
        let mut list = self.tail.clone();
        list.push(entry.clone());
        let bytes = serde_json::to_vec(&list).map_err(|e| e.to_string())?;
        self.store.set(&chunk_key(n), &bytes)?;
        let info = ChunkInfo { n, count: list.len(), bytes: bytes.len(), first_id: list[0].id };
        if fits {
            if let Some(last) = self.chunks.last_mut() {
                *last = info;
            }
        } else {
            self.chunks.push(info);
        }
        self.tail = list;
        self.next_id += 1;

        let dropped_before = self.enforce_limits()?;
        self.write_meta()?;
        Ok(Appended { entry, dropped_before })
    }

    /// How many entries are kept.
    pub fn len(&self) -> usize {
        self.chunks.iter().map(|c| c.count).sum()
    }

    /// Delete the oldest chunks until the journal is within its limits (the newest chunk always
    /// stays). Returns the first id kept when anything went.
    fn enforce_limits(&mut self) -> Result<Option<u64>, String> {
        let mut dropped = false;
        while self.chunks.len() > 1 && (self.len() > self.limits.max_entries || self.bytes() > self.limits.max_bytes) {
            let oldest = self.chunks[0];
            self.store.delete(&chunk_key(oldest.n))?;
            self.chunks.remove(0);
            dropped = true;
        }
        Ok(dropped.then(|| self.chunks.iter().map(|c| c.first_id).min().unwrap_or(u64::MAX)))
    }

    fn bytes(&self) -> usize {
        self.chunks.iter().map(|c| c.bytes).sum()
    }

    fn write_meta(&mut self) -> Result<(), String> {
        let meta = Meta {
            version: 1,
            next_id: self.next_id,
            entries: self.len(),
            chunks: self.chunks.len(),
            bytes: self.bytes(),
        };
        let bytes = serde_json::to_vec(&meta).map_err(|e| e.to_string())?;
        self.store.set(META_KEY, &bytes)
    }

    /// The store underneath (for tests).
    #[cfg(test)]
    pub fn store(&self) -> &S {
        &self.store
    }
}

fn chunk_key(n: u64) -> String {
    format!("{CHUNK_PREFIX}{n:08}")
}

/// A [`Store`] in memory, for tests.
#[cfg(test)]
#[derive(Debug, Default, Clone)]
pub struct MemStore {
    pub map: std::collections::BTreeMap<String, Vec<u8>>,
}

#[cfg(test)]
impl Store for MemStore {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        Ok(self.map.get(key).cloned())
    }

    fn set(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
        self.map.insert(key.to_string(), value.to_vec());
        Ok(())
    }

    fn delete(&mut self, key: &str) -> Result<(), String> {
        self.map.remove(key);
        Ok(())
    }

    fn keys(&self, prefix: &str) -> Result<Vec<String>, String> {
        Ok(self.map.keys().filter(|k| k.starts_with(prefix)).cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(chunk_entries: usize) -> Limits {
        Limits { chunk_entries, ..Limits::default() }
    }

    fn open(store: MemStore, limits: Limits) -> (Chunks<MemStore>, Vec<Entry>) {
        let mut warnings = Vec::new();
        let opened = Chunks::open(store, limits, &mut warnings).expect("opens");
        assert!(warnings.is_empty(), "{warnings:?}");
        opened
    }

    #[test]
    fn entries_round_trip_through_chunks() {
        let (mut j, entries) = open(MemStore::default(), limits(3));
        assert!(entries.is_empty());
        for i in 0..7 {
            let a = j.append(100 + i, "s1", &format!("question {i}"), &format!("answer {i}")).expect("appended");
            assert_eq!((a.entry.id, a.dropped_before), (i, None));
        }
        let keys: Vec<&str> = j.store().map.keys().map(String::as_str).collect();
        assert_eq!(keys, ["c/00000000", "c/00000001", "c/00000002", "meta"]);
        let meta: serde_json::Value = serde_json::from_slice(&j.store().map["meta"]).expect("meta is JSON");
        assert_eq!(
            (meta["next_id"].as_u64(), meta["entries"].as_u64(), meta["chunks"].as_u64()),
            (Some(7), Some(7), Some(3))
        );

        let (mut again, entries) = open(j.store().clone(), limits(3));
        assert_eq!(entries.iter().map(|e| e.id).collect::<Vec<_>>(), [0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(
            entries[4],
            Entry { id: 4, ts: 104, session_id: "s1".into(), user: "question 4".into(), assistant: "answer 4".into() }
        );
        // Appending after reopening fills the last chunk and goes on numbering.
        assert_eq!(again.append(200, "s2", "u", "a").expect("appended").entry.id, 7);
        let (_, entries) = open(again.store().clone(), limits(3));
        assert_eq!(entries.len(), 8);
        assert_eq!(entries.last().map(|e| e.session_id.as_str()), Some("s2"));
    }

    #[test]
    fn the_oldest_chunks_go_when_the_journal_is_full() {
        let (mut j, _) = open(MemStore::default(), Limits { max_entries: 5, chunk_entries: 2, ..Limits::default() });
        let mut dropped = Vec::new();
        for i in 0..9 {
            dropped.push(j.append(i, "s", "u", "a").expect("appended").dropped_before);
        }
        // 2 per chunk, at most 5 entries: appending the 6th drops chunk 0 (ids 0 and 1), ...
        assert_eq!(dropped, [None, None, None, None, None, Some(2), None, Some(4), None]);
        let (_, entries) = open(j.store().clone(), limits(2));
        assert_eq!(entries.iter().map(|e| e.id).collect::<Vec<_>>(), [4, 5, 6, 7, 8]);
    }

    #[test]
    fn a_byte_budget_closes_chunks_and_drops_old_ones() {
        let big = "x".repeat(1000);
        let small = Limits { max_entries: 1000, max_bytes: 5_000, chunk_entries: 64, chunk_bytes: 2_500 };
        let (mut j, _) = open(MemStore::default(), small);
        for i in 0..10 {
            j.append(i, "s", &big, "a").expect("appended");
        }
        assert!(j.store().map.values().all(|v| v.len() < 2_500 + 1_100), "chunks stay near their byte limit");
        assert!(j.bytes() <= 5_000);
        let (_, entries) = open(j.store().clone(), small);
        assert_eq!(entries.last().map(|e| e.id), Some(9));
        assert!(entries.len() < 10);
    }

    #[test]
    fn next_id_survives_a_lost_tail_and_corrupt_chunks_are_skipped() {
        let (mut j, _) = open(MemStore::default(), limits(2));
        for i in 0..5 {
            j.append(i, "s", "u", "a").expect("appended");
        }
        let mut store = j.store().clone();
        store.map.remove("c/00000002"); // the newest chunk, holding id 4
        store.map.insert("c/00000000".into(), b"not json".to_vec());
        let mut warnings = Vec::new();
        let (mut j, entries) = Chunks::open(store, limits(2), &mut warnings).expect("opens");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert_eq!(entries.iter().map(|e| e.id).collect::<Vec<_>>(), [2, 3]);
        assert_eq!(j.append(9, "s", "u", "a").expect("appended").entry.id, 5, "ids are never reused");
    }
}
