//! The endpoint's connections, by server and rail ([`ConnKey`]) and by a
//! small id ([`ConnId`]) that is also the connection's poll token: a poll
//! event, or a thread that has looked a connection up once (a call alone,
//! `solo.rs`), finds it again by index and generation instead of hashing
//! (paper 003's count: a hash lookup was a twentieth of a small request).
//!
//! An id names one connection's life: a slot freed and used again gets a
//! new generation, so a stale id (an event of a connection dropped since)
//! finds nothing.

use super::engine::{ConnKey, Slot};
use mio::Token;
// Keys are its cluster's addresses: a fast hash.
use rustc_hash::FxHashMap as HashMap;

/// A connection's id: its slot and the slot's generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ConnId(u64);

// A poll token carries the whole id, generation included (a token cut to
// 32 bits would make a reused slot's events never match it).
const _: () = assert!(usize::BITS >= 64, "connection ids are poll tokens of 64 bits");

impl ConnId {
    fn new(index: u32, generation: u32) -> Self {
        ConnId(u64::from(generation) << 32 | u64::from(index))
    }

    fn index(self) -> usize {
        (self.0 & u64::from(u32::MAX)) as usize
    }

    /// The poll token its transport is registered under.
    pub(super) fn token(self) -> Token {
        Token(self.0 as usize)
    }

    pub(super) fn of_token(t: Token) -> Self {
        ConnId(t.0 as u64)
    }
}

struct Entry {
    key: ConnKey,
    generation: u32,
    slot: Option<Slot>,
}

#[derive(Default)]
pub(super) struct Conns {
    ids: HashMap<ConnKey, ConnId>,
    entries: Vec<Entry>,
    /// Entries without a slot.
    free: Vec<u32>,
}

impl Conns {
    pub(super) fn contains_key(&self, key: &ConnKey) -> bool {
        self.ids.contains_key(key)
    }

    pub(super) fn id_of(&self, key: &ConnKey) -> Option<ConnId> {
        self.ids.get(key).copied()
    }

    pub(super) fn get(&self, key: &ConnKey) -> Option<&Slot> {
        let id = self.ids.get(key)?;
        self.entries[id.index()].slot.as_ref()
    }

    pub(super) fn get_mut(&mut self, key: &ConnKey) -> Option<&mut Slot> {
        let id = self.ids.get(key)?;
        self.entries[id.index()].slot.as_mut()
    }

    /// Whether entry `e` (at `id`'s index) is still of `id`'s generation.
    #[inline]
    fn is_of(e: &Entry, id: ConnId) -> bool {
        ConnId::new(id.index() as u32, e.generation) == id
    }

    /// Whether `id` names a connection still there.
    #[inline]
    pub(super) fn holds(&self, id: ConnId) -> bool {
        self.entries.get(id.index()).is_some_and(|e| Self::is_of(e, id) && e.slot.is_some())
    }

    /// The connection `id` names, if it is still there.
    #[inline]
    pub(super) fn by_id_mut(&mut self, id: ConnId) -> Option<(ConnKey, &mut Slot)> {
        let e = self.entries.get_mut(id.index()).filter(|e| Self::is_of(e, id))?;
        let key = e.key;
        e.slot.as_mut().map(|s| (key, s))
    }

    /// Keeps `slot` for `key` (in place of the one it had, under the same
    /// id); returns its id.
    pub(super) fn insert(&mut self, key: ConnKey, slot: Slot) -> ConnId {
        if let Some(&id) = self.ids.get(&key) {
            self.entries[id.index()].slot = Some(slot);
            return id;
        }
        let id = match self.free.pop() {
            Some(k) => {
                let e = &mut self.entries[k as usize];
                e.generation = e.generation.wrapping_add(1);
                e.key = key;
                e.slot = Some(slot);
                ConnId::new(k, e.generation)
            }
            None => {
                // The last index (and generation) is the waker's token.
                let k = u32::try_from(self.entries.len()).ok().filter(|&k| k < u32::MAX).expect("fewer than 2^32 - 1 connections");
                self.entries.push(Entry { key, generation: 0, slot: Some(slot) });
                ConnId::new(k, 0)
            }
        };
        self.ids.insert(key, id);
        id
    }

    pub(super) fn remove(&mut self, key: &ConnKey) -> Option<Slot> {
        let id = self.ids.remove(key)?;
        let slot = self.entries[id.index()].slot.take();
        self.free.push(id.index() as u32);
        slot
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&ConnKey, &Slot)> {
        self.entries.iter().filter_map(|e| e.slot.as_ref().map(|s| (&e.key, s)))
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (&ConnKey, &mut Slot)> {
        self.entries.iter_mut().filter_map(|e| e.slot.as_mut().map(|s| (&e.key, s)))
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Slot> {
        self.entries.iter().filter_map(|e| e.slot.as_ref())
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut Slot> {
        self.entries.iter_mut().filter_map(|e| e.slot.as_mut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap as Model;

    fn key(k: u8) -> ConnKey {
        ConnKey { peer: std::net::SocketAddr::from(([127, 0, 0, 1], 7000 + u16::from(k % 4))), rail: k / 4 }
    }

    proptest! {
        /// Against a map: what was inserted is found by its key, and by
        /// its id until it is removed, never after (ids are not reused:
        /// a stale event finds nothing); ids and tokens map both ways.
        #[test]
        fn behaves_as_a_map_whose_ids_are_never_reused(ops in proptest::collection::vec((any::<bool>(), 0u8..12), 1..200)) {
            let mut conns = Conns::default();
            let mut model: Model<u8, ConnId> = Model::new();
            let mut gone: Vec<ConnId> = Vec::new();
            for (insert, k) in ops {
                if insert {
                    let id = conns.insert(key(k), Slot::Connecting);
                    if let Some(&old) = model.get(&k) {
                        prop_assert_eq!(id, old, "a key kept its id");
                    } else {
                        prop_assert!(!gone.contains(&id), "id {:?} handed out again", id);
                    }
                    model.insert(k, id);
                } else {
                    let removed = conns.remove(&key(k));
                    prop_assert_eq!(removed.is_some(), model.contains_key(&k));
                    if let Some(id) = model.remove(&k) {
                        gone.push(id);
                    }
                }
                for (&k, &id) in &model {
                    prop_assert!(conns.get(&key(k)).is_some());
                    prop_assert_eq!(conns.id_of(&key(k)), Some(id));
                    prop_assert_eq!(ConnId::of_token(id.token()), id);
                    prop_assert_eq!(conns.by_id_mut(id).map(|(found, _)| found), Some(key(k)));
                    prop_assert!(conns.holds(id));
                }
                for &id in &gone {
                    prop_assert!(conns.by_id_mut(id).is_none());
                    prop_assert!(!conns.holds(id));
                }
                prop_assert_eq!(conns.iter().count(), model.len());
            }
        }
    }
}
