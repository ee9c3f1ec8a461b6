//! The journal in the plugin's kv store, one key per entry, safe with several writers.
//!
//! ```text
//! e/000000000042   {"id":42,"ts":1795352532,"session_id":"...","user":"...","assistant":"..."}
//! next-id          "43"   ids handed out so far (a kv counter): never handed out again
//! floor            "17"   entries below this id were dropped to keep within the limits
//! ```
//!
//! Several talaria processes (a REPL, a `chat -q` in another terminal, a gateway) may record
//! turns at the same moment, each with its own copy of the journal in memory. What keeps them
//! from losing each other's entries:
//!
//! 1. An entry's id comes from `increment(next-id)`: no two writers ever get the same one.
//! 2. An entry is written once, under its own key, by `compare-and-set` from nothing, and never
//!    rewritten: no writer overwrites anything it has not read.
//! 3. Retention deletes single entries, oldest first, after raising `floor` (only ever up, by
//!    compare-and-set), and does so *before* the writer takes its id, so whoever sees the new
//!    `next-id` also sees the new `floor`.
//! 4. A copy in memory is brought up to date ([`Entries::sync`]) before it is used: one read of
//!    `next-id` when nothing changed; else `floor` and the entries with the new ids. An id handed
//!    out but not yet written (its writer is between `increment` and `compare-and-set`) is asked
//!    for again at each sync, for [`PENDING_SECS`].
//!
//! Journals kept in the earlier layout (`c/NNNNNNNN` chunks of up to 64 entries, and `meta`) are
//! moved to this one when first opened, keeping their ids ([`legacy`]).
//!
//! [`Store`] is the seam: [`KvStore`] is the host's kv, and the tests use a map in memory that
//! several journals can share, like processes sharing one store.

mod legacy;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Key-value storage, as the journal needs it: the host's kv operations, each atomic.
pub trait Store {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, String>;
    fn delete(&mut self, key: &str) -> Result<(), String>;
    /// Make the value `new` if it is `expected` (`None`: absent); whether it did.
    fn compare_and_set(&mut self, key: &str, expected: Option<&[u8]>, new: Option<&[u8]>) -> Result<bool, String>;
    /// Add `delta` to the counter (decimal text) under `key`; its new value.
    fn increment(&mut self, key: &str, delta: i64) -> Result<i64, String>;
    /// Keys starting with `prefix`, sorted, with their values.
    fn list(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, String>;
}

/// The plugin's kv store on the host (capability `kv`).
#[derive(Debug, Default)]
pub struct KvStore;

impl Store for KvStore {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        talaria_sdk::kv::get(key).map_err(|e| e.to_string())
    }

    fn delete(&mut self, key: &str) -> Result<(), String> {
        talaria_sdk::kv::delete(key).map_err(|e| e.to_string())
    }

    fn compare_and_set(&mut self, key: &str, expected: Option<&[u8]>, new: Option<&[u8]>) -> Result<bool, String> {
        talaria_sdk::kv::compare_and_set(key, expected, new).map_err(|e| e.to_string())
    }

    fn increment(&mut self, key: &str, delta: i64) -> Result<i64, String> {
        talaria_sdk::kv::increment(key, delta).map_err(|e| e.to_string())
    }

    fn list(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, String> {
        talaria_sdk::kv::list(prefix).map_err(|e| e.to_string())
    }
}

/// One remembered turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Unique, never reused; increasing in the order writers took them.
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
    /// Entries kept at most; the oldest go first.
    pub max_entries: usize,
    /// Bytes of entries (keys and values) kept at most (the host allows 10 MiB of kv per plugin).
    pub max_bytes: usize,
    /// Once over a limit, drop this many entries more than needed (and this many bytes more)
    /// so the next drop, and every copy's index rebuild, comes only this many appends later.
    pub drop_entries: usize,
    pub drop_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_entries: 20_000, max_bytes: 8 * 1024 * 1024, drop_entries: 64, drop_bytes: 256 * 1024 }
    }
}

/// The id counter.
const NEXT_ID: &str = "next-id";
/// Ids below this were dropped.
const FLOOR: &str = "floor";
const ENTRY_PREFIX: &str = "e/";
/// How long an id handed out but not yet written is asked for again (its writer crashed, or
/// failed to write, if it is still missing by then).
pub const PENDING_SECS: u64 = 60;
/// How many of the newest ids a full read treats as possibly still being written.
const PENDING_WINDOW: u64 = 64;
/// More new ids than this since the last sync: read everything in one listing instead of one
/// by one.
const RELOAD_AFTER: u64 = 256;

fn entry_key(id: u64) -> String {
    format!("{ENTRY_PREFIX}{id:012}")
}

/// What a sync or an append changed in the copy in memory.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Update {
    /// Everything was read again: `added` holds every entry, and the copy is replaced.
    pub reloaded: bool,
    /// Entries with an id below this are gone.
    pub dropped_below: Option<u64>,
    /// Entries new to this copy (a writer's own included), in the order they were read.
    pub added: Vec<Entry>,
}

/// The journal's entries in a [`Store`]: what this copy knows of them (ids and sizes; the
/// entries themselves go to the caller), and how to bring it up to date.
#[derive(Debug)]
pub struct Entries<S> {
    store: S,
    limits: Limits,
    /// `next-id` as last read: every id below it is known, pending, dropped, or never written.
    seen: u64,
    floor: u64,
    /// Every id in the copy (undecodable entries too, so they count and go in turn), with its
    /// size in bytes (key and value); oldest first.
    sizes: BTreeMap<u64, usize>,
    bytes: usize,
    /// Ids handed out but not yet readable, with when they were first missed (seconds).
    pending: BTreeMap<u64, u64>,
    /// A sync or append failed half-way, and its caller never learnt what changed: read
    /// everything again at the next sync.
    stale: bool,
}

impl<S: Store> Entries<S> {
    /// Open the journal in `store` and read every entry, oldest first, moving a journal in the
    /// earlier layout over first. Entries that do not decode are reported in `warnings` and
    /// left out (they are deleted when their turn to go comes).
    ///
    /// # Errors
    ///
    /// The store failed.
    pub fn open(store: S, limits: Limits, now: u64, warnings: &mut Vec<String>) -> Result<(Self, Vec<Entry>), String> {
        let mut entries = Self {
            store,
            limits,
            seen: 0,
            floor: 0,
            sizes: BTreeMap::new(),
            bytes: 0,
            pending: BTreeMap::new(),
            stale: false,
        };
        entries.migrate_legacy(warnings)?;
        let update = entries.reload(now, warnings)?;
        Ok((entries, update.added))
    }

    /// How many entries the copy holds.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.sizes.len()
    }

    /// Bring the copy up to date with what every writer did since the last sync.
    ///
    /// # Errors
    ///
    /// The store failed; the next sync then reads everything again.
    pub fn sync(&mut self, now: u64, warnings: &mut Vec<String>) -> Result<Update, String> {
        let result = self.try_sync(now, warnings);
        self.stale = result.is_err();
        result
    }

    fn try_sync(&mut self, now: u64, warnings: &mut Vec<String>) -> Result<Update, String> {
        let next = self.read_number(NEXT_ID)?;
        if next == self.seen && self.pending.is_empty() && !self.stale {
            return Ok(Update::default());
        }
        if self.stale || next < self.seen || next - self.seen > RELOAD_AFTER {
            // Cleared (the counter went back), or much was written: one listing is cheaper.
            return self.reload(now, warnings);
        }
        let mut update = Update::default();
        let floor = self.read_number(FLOOR)?;
        if floor > self.floor {
            self.forget_below(floor);
            update.dropped_below = Some(floor);
        }
        let retry: Vec<(u64, u64)> = self.pending.iter().map(|(&id, &since)| (id, since)).collect();
        for (id, since) in retry {
            if !self.fetch(id, warnings, &mut update.added)? && now.saturating_sub(since) > PENDING_SECS {
                self.pending.remove(&id);
            }
        }
        for id in self.seen.max(self.floor)..next {
            if !self.sizes.contains_key(&id)
                && !self.pending.contains_key(&id)
                && !self.fetch(id, warnings, &mut update.added)?
            {
                self.pending.insert(id, now);
            }
        }
        self.seen = next;
        Ok(update)
    }

    /// Append a turn (already clipped) under a new id, dropping the oldest entries first when
    /// the limits need it. Counts what the copy knows: [`Entries::sync`] first.
    ///
    /// # Errors
    ///
    /// The store failed; the entry may then be missing, but nothing else is, and the next sync
    /// reads everything again.
    pub fn append(
        &mut self,
        ts: u64,
        session_id: &str,
        user: &str,
        assistant: &str,
    ) -> Result<(Entry, Update), String> {
        let result = self.try_append(ts, session_id, user, assistant);
        self.stale |= result.is_err();
        result
    }

    fn try_append(
        &mut self,
        ts: u64,
        session_id: &str,
        user: &str,
        assistant: &str,
    ) -> Result<(Entry, Update), String> {
        let mut entry = Entry {
            id: self.seen,
            ts,
            session_id: session_id.to_string(),
            user: user.to_string(),
            assistant: assistant.to_string(),
        };
        let estimate = entry_key(entry.id).len() + serde_json::to_vec(&entry).map_err(|e| e.to_string())?.len();
        let mut update = Update { dropped_below: self.make_room(estimate)?, ..Update::default() };
        let (id, size) = self.create(&mut entry)?;
        self.sizes.insert(id, size);
        self.bytes += size;
        if id == self.seen {
            // Nobody took an id since the last sync: the copy is still complete.
            self.seen = id + 1;
        }
        update.added.push(entry.clone());
        Ok((entry, update))
    }

    /// Store `entry` under a new id (set in it); its id and stored size.
    fn create(&mut self, entry: &mut Entry) -> Result<(u64, usize), String> {
        // The id is fresh, so the key is free; a key taken all the same (written by hand, or by
        // a writer that did not count) is left alone and the next id tried.
        for _ in 0..8 {
            entry.id = self.next_id()?;
            let key = entry_key(entry.id);
            let bytes = serde_json::to_vec(&*entry).map_err(|e| e.to_string())?;
            if self.store.compare_and_set(&key, None, Some(&bytes))? {
                return Ok((entry.id, key.len() + bytes.len()));
            }
        }
        Err(format!(
            "journal: the keys of 8 fresh ids up to {} were taken already; is another plugin writing `{ENTRY_PREFIX}` keys in this space?",
            entry.id
        ))
    }

    /// A fresh id from the shared counter.
    fn next_id(&mut self) -> Result<u64, String> {
        let next = self.store.increment(NEXT_ID, 1)?;
        u64::try_from(next - 1)
            .map_err(|_| format!("journal: the id counter `{NEXT_ID}` is negative ({next}); delete it to start over"))
    }

    /// Drop the oldest entries when one of `incoming` bytes more would pass a limit, until the
    /// journal with it is [`Limits::drop_entries`] - 1 entries (and [`Limits::drop_bytes`])
    /// below the limits. Raises `floor` first, so other copies drop them too. Returns the new
    /// floor when anything went.
    fn make_room(&mut self, incoming: usize) -> Result<Option<u64>, String> {
        let l = self.limits;
        if self.sizes.len() < l.max_entries && self.bytes + incoming <= l.max_bytes {
            return Ok(None);
        }
        let keep_entries = l.max_entries.saturating_sub(l.drop_entries);
        let keep_bytes = l.max_bytes.saturating_sub(l.drop_bytes);
        let mut dropped = Vec::new();
        let mut count = self.sizes.len();
        let mut bytes = self.bytes;
        for (&id, &size) in &self.sizes {
            if count <= keep_entries && bytes + incoming <= keep_bytes {
                break;
            }
            dropped.push(id);
            count -= 1;
            bytes -= size;
        }
        let Some(&last) = dropped.last() else { return Ok(None) };
        let floor = last + 1;
        self.raise_floor(floor)?;
        for id in &dropped {
            self.store.delete(&entry_key(*id))?;
        }
        self.forget_below(floor);
        Ok(Some(floor))
    }

    /// Set `floor` to at least `to`, whatever other writers set it to meanwhile.
    fn raise_floor(&mut self, to: u64) -> Result<(), String> {
        loop {
            let current = self.store.get(FLOOR)?;
            if current.as_deref().and_then(parse_number).is_some_and(|f| f >= to) {
                return Ok(());
            }
            if self.store.compare_and_set(FLOOR, current.as_deref(), Some(to.to_string().as_bytes()))? {
                return Ok(());
            }
        }
    }

    /// Forget the ids below `floor` (they are gone from the store, or going).
    fn forget_below(&mut self, floor: u64) {
        self.floor = self.floor.max(floor);
        let kept = self.sizes.split_off(&floor);
        self.bytes -= self.sizes.values().sum::<usize>();
        self.sizes = kept;
        self.pending = self.pending.split_off(&floor);
    }

    /// Read entry `id` into the copy; whether it was there.
    fn fetch(&mut self, id: u64, warnings: &mut Vec<String>, added: &mut Vec<Entry>) -> Result<bool, String> {
        let key = entry_key(id);
        let Some(bytes) = self.store.get(&key)? else { return Ok(false) };
        self.pending.remove(&id);
        self.take(id, &key, &bytes, warnings, added);
        Ok(true)
    }

    /// Add a stored entry to the copy (and to `added` when it decodes).
    fn take(&mut self, id: u64, key: &str, bytes: &[u8], warnings: &mut Vec<String>, added: &mut Vec<Entry>) {
        let size = key.len() + bytes.len();
        if let Some(old) = self.sizes.insert(id, size) {
            self.bytes -= old;
        }
        self.bytes += size;
        match serde_json::from_slice::<Entry>(bytes) {
            Ok(entry) if entry.id == id => added.push(entry),
            Ok(entry) => warnings.push(format!("journal entry {key} holds id {}, not {id}; it is skipped", entry.id)),
            Err(e) => warnings.push(format!("journal entry {key} does not decode and is skipped: {e}")),
        }
    }

    /// Read everything again: every entry at or above `floor`; older ones left behind by a
    /// writer that stopped half-way are deleted.
    fn reload(&mut self, now: u64, warnings: &mut Vec<String>) -> Result<Update, String> {
        // The counter first: every entry below it that is not listed was dropped, is being
        // written, or never will be.
        let next = self.read_number(NEXT_ID)?;
        let floor = self.read_number(FLOOR)?;
        let listed = self.store.list(ENTRY_PREFIX)?;
        self.sizes.clear();
        self.bytes = 0;
        self.pending.clear();
        self.floor = floor;
        let mut added = Vec::new();
        for (key, bytes) in listed {
            let Some(id) = key.strip_prefix(ENTRY_PREFIX).and_then(|n| n.parse::<u64>().ok()) else { continue };
            if id < floor {
                self.store.delete(&key)?;
                continue;
            }
            self.take(id, &key, &bytes, warnings, &mut added);
        }
        for id in next.saturating_sub(PENDING_WINDOW).max(floor)..next {
            if !self.sizes.contains_key(&id) {
                self.pending.insert(id, now);
            }
        }
        self.seen = next;
        Ok(Update { reloaded: true, dropped_below: None, added })
    }

    /// A counter's value; 0 when absent or not a number.
    fn read_number(&self, key: &str) -> Result<u64, String> {
        Ok(self.store.get(key)?.as_deref().and_then(parse_number).unwrap_or(0))
    }

    /// The store underneath (for tests).
    #[cfg(test)]
    pub fn store(&self) -> &S {
        &self.store
    }
}

/// A counter's decimal text.
fn parse_number(bytes: &[u8]) -> Option<u64> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// A [`Store`] in memory, for tests: clones share one map, like processes sharing one store.
#[cfg(test)]
#[derive(Debug, Default, Clone)]
pub struct MemStore {
    pub map: std::rc::Rc<std::cell::RefCell<BTreeMap<String, Vec<u8>>>>,
    /// While set, every read fails, as a store that went away would.
    pub broken: std::rc::Rc<std::cell::Cell<bool>>,
}

#[cfg(test)]
impl MemStore {
    /// A store of its own holding a copy of this one's data.
    pub fn snapshot(&self) -> Self {
        Self { map: std::rc::Rc::new(std::cell::RefCell::new(self.map.borrow().clone())), broken: Default::default() }
    }

    pub fn keys(&self) -> Vec<String> {
        self.map.borrow().keys().cloned().collect()
    }

    pub fn insert(&self, key: &str, value: &[u8]) {
        self.map.borrow_mut().insert(key.to_string(), value.to_vec());
    }
}

#[cfg(test)]
impl Store for MemStore {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        if self.broken.get() {
            return Err("the store is broken".into());
        }
        Ok(self.map.borrow().get(key).cloned())
    }

    fn delete(&mut self, key: &str) -> Result<(), String> {
        self.map.borrow_mut().remove(key);
        Ok(())
    }

    fn compare_and_set(&mut self, key: &str, expected: Option<&[u8]>, new: Option<&[u8]>) -> Result<bool, String> {
        let mut map = self.map.borrow_mut();
        if map.get(key).map(Vec::as_slice) != expected {
            return Ok(false);
        }
        match new {
            Some(new) => map.insert(key.to_string(), new.to_vec()),
            None => map.remove(key),
        };
        Ok(true)
    }

    fn increment(&mut self, key: &str, delta: i64) -> Result<i64, String> {
        let mut map = self.map.borrow_mut();
        let current = match map.get(key) {
            None => 0,
            Some(v) => std::str::from_utf8(v).ok().and_then(|t| t.parse::<i64>().ok()).ok_or("not a counter")?,
        };
        let next = current + delta;
        map.insert(key.to_string(), next.to_string().into_bytes());
        Ok(next)
    }

    fn list(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, String> {
        Ok(self
            .map
            .borrow()
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_795_352_532;

    fn limits(max_entries: usize, drop_entries: usize) -> Limits {
        Limits { max_entries, drop_entries, ..Limits::default() }
    }

    fn open(store: &MemStore, limits: Limits) -> (Entries<MemStore>, Vec<Entry>) {
        let mut warnings = Vec::new();
        let opened = Entries::open(store.clone(), limits, NOW, &mut warnings).expect("opens");
        assert!(warnings.is_empty(), "{warnings:?}");
        opened
    }

    fn ids(entries: &[Entry]) -> Vec<u64> {
        entries.iter().map(|e| e.id).collect()
    }

    fn sync(e: &mut Entries<MemStore>) -> Update {
        let mut warnings = Vec::new();
        let update = e.sync(NOW, &mut warnings).expect("syncs");
        assert!(warnings.is_empty(), "{warnings:?}");
        update
    }

    #[test]
    fn entries_round_trip_one_key_each() {
        let store = MemStore::default();
        let (mut j, entries) = open(&store, Limits::default());
        assert!(entries.is_empty());
        for i in 0..3 {
            let (entry, update) =
                j.append(100 + i, "s1", &format!("question {i}"), &format!("answer {i}")).expect("appended");
            assert_eq!((entry.id, update.dropped_below, ids(&update.added)), (i, None, vec![i]));
        }
        assert_eq!(store.keys(), ["e/000000000000", "e/000000000001", "e/000000000002", "next-id"]);
        assert_eq!(store.get("next-id").expect("get"), Some(b"3".to_vec()));

        let (mut again, entries) = open(&store, Limits::default());
        assert_eq!(ids(&entries), [0, 1, 2]);
        assert_eq!(
            entries[1],
            Entry { id: 1, ts: 101, session_id: "s1".into(), user: "question 1".into(), assistant: "answer 1".into() }
        );
        assert_eq!(again.append(200, "s2", "u", "a").expect("appended").0.id, 3);
        assert_eq!(again.len(), 4);
    }

    #[test]
    fn two_copies_writing_in_turn_keep_every_entry_with_its_own_id() {
        // Two processes, each with its copy in memory, on one store.
        let store = MemStore::default();
        let (mut a, _) = open(&store, Limits::default());
        let (mut b, _) = open(&store, Limits::default());
        let mut taken = Vec::new();
        for i in 0..5 {
            taken.push(a.append(i, "sa", &format!("a{i}"), "x").expect("a appends").0.id);
            taken.push(b.append(i, "sb", &format!("b{i}"), "x").expect("b appends").0.id);
        }
        taken.sort_unstable();
        assert_eq!(taken, (0..10).collect::<Vec<u64>>(), "no id handed out twice");
        // Each copy learns of the other's entries when it syncs, and only those.
        let seen_by_a = sync(&mut a);
        assert!(!seen_by_a.reloaded);
        assert_eq!(seen_by_a.added.iter().map(|e| e.user.as_str()).collect::<Vec<_>>(), ["b0", "b1", "b2", "b3", "b4"]);
        assert_eq!(a.len(), 10);
        assert_eq!(sync(&mut a), Update::default(), "nothing new: one read of the counter");
        assert_eq!(sync(&mut b).added.len(), 5);
        let (_, all) = open(&store, Limits::default());
        assert_eq!(ids(&all), (0..10).collect::<Vec<u64>>());
    }

    #[test]
    fn an_id_taken_but_not_yet_written_is_picked_up_later() {
        let store = MemStore::default();
        let (mut a, _) = open(&store, Limits::default());
        a.append(1, "s", "first", "x").expect("appended");
        // Another writer took id 1 and has not written it yet; then a third wrote id 2.
        let mut writer = store.clone();
        assert_eq!(writer.increment("next-id", 1), Ok(2));
        let (mut c, _) = open(&store, Limits::default());
        c.append(2, "s", "third", "x").expect("appended");
        assert_eq!(ids(&sync(&mut a).added), [2]);
        // The slow writer finishes: the next sync finds it although the counter did not move.
        let slow = Entry { id: 1, ts: 3, session_id: "s".into(), user: "second".into(), assistant: "x".into() };
        store.insert("e/000000000001", &serde_json::to_vec(&slow).expect("json"));
        assert_eq!(sync(&mut a).added, [slow]);
        assert_eq!(a.len(), 3);
        assert_eq!(sync(&mut a), Update::default());

        // An id whose writer never writes is given up after a while.
        writer.increment("next-id", 1).expect("taken");
        assert!(sync(&mut a).added.is_empty());
        let later = a.sync(NOW + PENDING_SECS + 1, &mut Vec::new()).expect("syncs");
        assert!(later.added.is_empty());
        assert!(a.pending.is_empty());
    }

    #[test]
    fn the_oldest_entries_go_when_the_journal_is_full_in_every_copy() {
        let store = MemStore::default();
        let (mut j, _) = open(&store, limits(5, 2));
        let (mut other, _) = open(&store, limits(5, 2));
        let mut dropped = Vec::new();
        for i in 0..9 {
            sync(&mut j);
            dropped.push(j.append(i, "s", "u", "a").expect("appended").1.dropped_below);
        }
        // At most 5 entries: appending the 6th drops the two oldest, and so on.
        assert_eq!(dropped, [None, None, None, None, None, Some(2), None, Some(4), None]);
        let (_, entries) = open(&store, limits(5, 2));
        assert_eq!(ids(&entries), [4, 5, 6, 7, 8]);
        assert_eq!(store.get("floor").expect("get"), Some(b"4".to_vec()));
        assert_eq!(store.keys().iter().filter(|k| k.starts_with("e/")).count(), 5);
        // The other copy is told what went.
        let update = sync(&mut other);
        assert_eq!((update.reloaded, update.dropped_below), (false, Some(4)));
        assert_eq!(ids(&update.added), [4, 5, 6, 7, 8]);
        assert_eq!(other.len(), 5);
    }

    #[test]
    fn a_byte_budget_drops_old_entries() {
        let big = "x".repeat(1000);
        let small = Limits { max_entries: 1000, max_bytes: 5_000, drop_entries: 1, drop_bytes: 1_500 };
        let store = MemStore::default();
        let (mut j, _) = open(&store, small);
        for i in 0..10 {
            j.append(i, "s", &big, "a").expect("appended");
            assert!(j.bytes <= 5_000, "{} bytes after {i}", j.bytes);
        }
        let (_, entries) = open(&store, small);
        assert_eq!(entries.last().map(|e| e.id), Some(9));
        assert!(entries.len() < 5, "{}", entries.len());
    }

    #[test]
    fn ids_are_never_reused_and_bad_entries_are_skipped() {
        let store = MemStore::default();
        let (mut j, _) = open(&store, Limits::default());
        for i in 0..5 {
            j.append(i, "s", "u", "a").expect("appended");
        }
        store.map.borrow_mut().remove("e/000000000004"); // the newest
        store.insert("e/000000000000", b"not json");
        let mut warnings = Vec::new();
        let (mut j, entries) = Entries::open(store.clone(), Limits::default(), NOW, &mut warnings).expect("opens");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("e/000000000000 does not decode"), "{warnings:?}");
        assert_eq!(ids(&entries), [1, 2, 3]);
        assert_eq!(j.append(9, "s", "u", "a").expect("appended").0.id, 5, "ids are never reused");
        // A key in the way (written by someone not counting) is left alone.
        store.insert("e/000000000006", b"someone else's");
        assert_eq!(j.append(9, "s", "u", "a").expect("appended").0.id, 7);
        assert_eq!(store.get("e/000000000006").expect("get"), Some(b"someone else's".to_vec()));
    }

    #[test]
    fn a_sync_that_failed_half_way_is_followed_by_a_full_read() {
        let store = MemStore::default();
        let (mut a, _) = open(&store, Limits::default());
        let (mut b, _) = open(&store, Limits::default());
        b.append(1, "s", "from b", "x").expect("appended");
        store.broken.set(true);
        assert_eq!(a.sync(NOW, &mut Vec::new()), Err("the store is broken".into()));
        store.broken.set(false);
        let update = sync(&mut a);
        assert!(update.reloaded, "{update:?}");
        assert_eq!(update.added.iter().map(|e| e.user.as_str()).collect::<Vec<_>>(), ["from b"]);
        assert_eq!(sync(&mut a), Update::default());
    }

    #[test]
    fn a_cleared_journal_is_read_again() {
        let store = MemStore::default();
        let (mut j, _) = open(&store, Limits::default());
        j.append(1, "s", "u", "a").expect("appended");
        j.append(2, "s", "u", "a").expect("appended");
        store.map.borrow_mut().clear();
        let update = sync(&mut j);
        assert!(update.reloaded && update.added.is_empty());
        assert_eq!(j.len(), 0);
        assert_eq!(j.append(3, "s", "u", "a").expect("appended").0.id, 0);
    }
}
