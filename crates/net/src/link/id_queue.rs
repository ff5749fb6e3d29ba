//! The calls a connection owes answers, by message id. Ids are posted in
//! increasing order and mostly answered in that order, so a queue sorted
//! by id serves what a hash map did with no hashing: a post appends, an
//! answer to the oldest call pops the front, any other answer is a binary
//! search that leaves a hole. Holes are dropped from either end as they
//! come there, and the whole queue is compacted after any removal that
//! leaves holes outnumbering the calls (a call owed for long, e.g. a lock
//! wait, while thousands pass it), so memory stays proportional to the
//! calls owed. A value alone (a call alone on its connection, the common
//! case) is kept beside the queue, which it then does not touch.

use std::collections::VecDeque;

/// Values by increasing `u64` id.
#[derive(Debug)]
pub struct IdQueue<V> {
    /// The only value, while it is the only one (`slots` is then empty).
    lone: Option<(u64, V)>,
    /// Sorted by id; `None` is a hole left by a removal.
    slots: VecDeque<(u64, Option<V>)>,
    /// Values (slots that are not holes).
    len: usize,
}

impl<V> Default for IdQueue<V> {
    fn default() -> Self {
        IdQueue { lone: None, slots: VecDeque::new(), len: 0 }
    }
}

/// Holes kept at most, beside this many per value (then the queue is compacted).
const SPARE_HOLES: usize = 16;

impl<V> IdQueue<V> {
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Keeps `value` under `id`, replacing a value kept under it. Ids come
    /// in increasing order; one that does not is put in its place.
    pub fn insert(&mut self, id: u64, value: V) {
        if self.len == 0 && self.slots.is_empty() {
            self.lone = Some((id, value));
            self.len = 1;
            return;
        }
        if let Some((first, v)) = self.lone.take() {
            if first == id {
                self.lone = Some((id, value));
                return;
            }
            self.slots.push_back((first, Some(v)));
        }
        match self.slots.back() {
            Some(&(last, _)) if last >= id => match self.find(id) {
                Ok(k) => {
                    let slot = &mut self.slots[k].1;
                    self.len += usize::from(slot.is_none());
                    *slot = Some(value);
                }
                Err(k) => {
                    self.slots.insert(k, (id, Some(value)));
                    self.len += 1;
                }
            },
            _ => {
                self.slots.push_back((id, Some(value)));
                self.len += 1;
            }
        }
    }

    pub fn get(&self, id: u64) -> Option<&V> {
        if let Some((first, v)) = &self.lone {
            return (*first == id).then_some(v);
        }
        self.find(id).ok().and_then(|k| self.slots[k].1.as_ref())
    }

    /// Takes the value kept under `id`.
    pub fn remove(&mut self, id: u64) -> Option<V> {
        if let Some((first, _)) = &self.lone {
            if *first != id {
                return None;
            }
            self.len = 0;
            return self.lone.take().map(|(_, v)| v);
        }
        // Answers mostly come in the order of their requests.
        if let Some((first, slot)) = self.slots.front_mut()
            && *first == id
        {
            let value = slot.take()?;
            self.len -= 1;
            if self.len == 0 {
                // Nothing else owed (a call alone): no holes to walk.
                self.slots.clear();
                return Some(value);
            }
            while self.slots.front().is_some_and(|s| s.1.is_none()) {
                self.slots.pop_front();
            }
            self.compact();
            return Some(value);
        }
        let k = self.find(id).ok()?;
        let value = self.slots[k].1.take()?;
        self.len -= 1;
        while self.slots.back().is_some_and(|s| s.1.is_none()) {
            self.slots.pop_back();
        }
        self.compact();
        Some(value)
    }

    /// Drops the holes once they outnumber the values (beside a few).
    fn compact(&mut self) {
        if self.slots.len() - self.len > self.len + SPARE_HOLES {
            self.slots.retain(|s| s.1.is_some());
        }
    }

    /// The values, in id order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.lone.iter().map(|(_, v)| v).chain(self.slots.iter().filter_map(|(_, v)| v.as_ref()))
    }

    /// The ids and values, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &V)> {
        self.lone.iter().map(|(id, v)| (*id, v)).chain(self.slots.iter().filter_map(|(id, v)| v.as_ref().map(|v| (*id, v))))
    }

    /// Takes every value, in id order.
    pub fn drain(&mut self) -> impl Iterator<Item = V> + '_ {
        self.len = 0;
        self.lone.take().map(|(_, v)| v).into_iter().chain(self.slots.drain(..).filter_map(|(_, v)| v))
    }

    /// Where `id`'s slot is (or would go).
    fn find(&self, id: u64) -> Result<usize, usize> {
        self.slots.binary_search_by_key(&id, |s| s.0)
    }

    /// Slots held, holes included (what memory it takes).
    #[cfg(test)]
    fn slots(&self) -> usize {
        self.slots.len() + usize::from(self.lone.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    enum Op {
        /// Insert the next id (`step` past the last), or an old one.
        Insert { step: u64, old: Option<usize> },
        /// Remove the `k`th id ever inserted (mod their number), or the oldest.
        Remove(Option<usize>),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (1u64..4, proptest::option::weighted(0.1, 0usize..64)).prop_map(|(step, old)| Op::Insert { step, old }),
            4 => proptest::option::weighted(0.7, 0usize..64).prop_map(Op::Remove),
        ]
    }

    proptest! {
        /// Whatever the order of inserts and removals, it answers as a
        /// map would, and holds at most about twice the values it keeps.
        #[test]
        fn it_answers_as_a_map(ops in proptest::collection::vec(op(), 1..400)) {
            let mut owed = IdQueue::default();
            let mut model = BTreeMap::new();
            let mut ids: Vec<u64> = Vec::new();
            let mut next = 1u64;
            for (n, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Insert { step, old } => {
                        let id = match old {
                            Some(k) if !ids.is_empty() => ids[k % ids.len()],
                            _ => {
                                next += step;
                                ids.push(next);
                                next
                            }
                        };
                        owed.insert(id, n);
                        model.insert(id, n);
                    }
                    Op::Remove(which) => {
                        let id = match which {
                            Some(k) if !ids.is_empty() => ids[k % ids.len()],
                            _ => model.keys().next().copied().unwrap_or(0),
                        };
                        prop_assert_eq!(owed.remove(id), model.remove(&id));
                    }
                }
                prop_assert_eq!(owed.len(), model.len());
                prop_assert_eq!(owed.is_empty(), model.is_empty());
                prop_assert!(owed.slots() <= 2 * owed.len() + SPARE_HOLES + 1, "{} slots for {} values", owed.slots(), owed.len());
                for &id in &ids {
                    prop_assert_eq!(owed.get(id), model.get(&id));
                }
                let got: Vec<(u64, usize)> = owed.iter().map(|(id, &v)| (id, v)).collect();
                let want: Vec<(u64, usize)> = model.iter().map(|(&id, &v)| (id, v)).collect();
                prop_assert_eq!(got, want);
            }
            let drained: Vec<usize> = owed.drain().collect();
            prop_assert_eq!(drained, model.values().copied().collect::<Vec<_>>());
            prop_assert!(owed.is_empty());
        }
    }

    /// Holes left in the middle, then the front answered: the holes are
    /// dropped with the front's removal too, not only with one in the middle.
    #[test]
    fn holes_go_whichever_end_is_answered() {
        let mut owed = IdQueue::default();
        for id in 1..=24 {
            owed.insert(id, id);
        }
        for id in 4..=23 {
            assert_eq!(owed.remove(id), Some(id));
        }
        assert_eq!((owed.remove(1), owed.remove(2)), (Some(1), Some(2)));
        assert_eq!(owed.len(), 2);
        assert!(owed.slots() <= 2 * 2 + SPARE_HOLES, "{} slots held for two values", owed.slots());
    }

    #[test]
    fn a_call_owed_for_long_does_not_keep_the_holes_of_those_that_passed_it() {
        let mut owed = IdQueue::default();
        owed.insert(1, "lock wait");
        for id in 2..100_000 {
            owed.insert(id, "ping");
            assert_eq!(owed.remove(id), Some("ping"));
        }
        assert_eq!(owed.len(), 1);
        assert!(owed.slots() <= 2, "{} slots held for one call", owed.slots());
        // Answered out of order, between the lock wait and a newer call:
        // each answer leaves a hole in the middle.
        owed.insert(100_000, "ping");
        for id in 100_001..200_000 {
            owed.insert(id, "ping");
            assert_eq!(owed.remove(id - 1), Some("ping"));
        }
        assert_eq!(owed.len(), 2);
        assert!(owed.slots() <= 2 * 2 + SPARE_HOLES + 1, "{} slots held for two calls", owed.slots());
        assert_eq!(owed.remove(1), Some("lock wait"));
        assert_eq!(owed.remove(199_999), Some("ping"));
        assert!(owed.is_empty());
    }
}
