//! The batches the engine holds, by id: a slab whose ids name their slot
//! (and the slot's generation), so finding a batch is an index and a
//! compare, not a hash lookup; a freed slot is reused by the next batch.

/// Values by id; ids of removed values are never found again (until a
/// slot's 32-bit generation wraps).
pub(super) struct Slab<T> {
    slots: Vec<Slot<T>>,
    /// Slots without a value.
    free: Vec<u32>,
    len: usize,
}

struct Slot<T> {
    /// The id of the value here, or of the last one.
    id: u64,
    value: Option<T>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab { slots: Vec::new(), free: Vec::new(), len: 0 }
    }
}

fn slot_of(id: u64) -> usize {
    (id & u64::from(u32::MAX)) as usize
}

impl<T> Slab<T> {
    /// Keeps `value`; returns its id.
    pub(super) fn insert(&mut self, value: T) -> u64 {
        self.len += 1;
        match self.free.pop() {
            Some(k) => {
                let slot = &mut self.slots[k as usize];
                let generation = (slot.id >> 32).wrapping_add(1) & u64::from(u32::MAX);
                slot.id = generation << 32 | u64::from(k);
                slot.value = Some(value);
                slot.id
            }
            None => {
                let k = u32::try_from(self.slots.len()).expect("fewer than 2^32 batches at once");
                let id = u64::from(k);
                self.slots.push(Slot { id, value: Some(value) });
                id
            }
        }
    }

    #[inline]
    pub(super) fn get(&self, id: u64) -> Option<&T> {
        self.slots.get(slot_of(id)).filter(|s| s.id == id).and_then(|s| s.value.as_ref())
    }

    #[inline]
    pub(super) fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        self.slots.get_mut(slot_of(id)).filter(|s| s.id == id).and_then(|s| s.value.as_mut())
    }

    pub(super) fn remove(&mut self, id: u64) -> Option<T> {
        let k = slot_of(id);
        let value = self.slots.get_mut(k).filter(|s| s.id == id)?.value.take()?;
        self.free.push(k as u32);
        self.len -= 1;
        Some(value)
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, &T)> {
        self.slots.iter().filter_map(|s| s.value.as_ref().map(|v| (s.id, v)))
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (u64, &mut T)> {
        self.slots.iter_mut().filter_map(|s| s.value.as_mut().map(|v| (s.id, v)))
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().filter_map(|s| s.value.as_ref())
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots.iter_mut().filter_map(|s| s.value.as_mut())
    }
}

impl<T> std::ops::Index<u64> for Slab<T> {
    type Output = T;

    #[inline]
    fn index(&self, id: u64) -> &T {
        self.get(id).expect("a batch the engine holds")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    proptest! {
        /// Against a map: what was inserted is found by its id until it is
        /// removed, and never after (slots are reused under new ids).
        #[test]
        fn behaves_as_a_map_whose_keys_are_never_reused(ops in proptest::collection::vec((any::<bool>(), 0usize..16), 1..200)) {
            let mut slab = Slab::default();
            let mut model: HashMap<u64, usize> = HashMap::new();
            let mut gone = Vec::new();
            for (i, (insert, pick)) in ops.into_iter().enumerate() {
                if insert || model.is_empty() {
                    let id = slab.insert(i);
                    prop_assert!(!model.contains_key(&id) && !gone.contains(&id), "id {} handed out twice", id);
                    model.insert(id, i);
                } else {
                    let mut ids: Vec<u64> = model.keys().copied().collect();
                    ids.sort_unstable();
                    let id = ids[pick % ids.len()];
                    prop_assert_eq!(slab.remove(id), model.remove(&id));
                    prop_assert_eq!(slab.remove(id), None);
                    gone.push(id);
                }
                prop_assert_eq!(slab.len(), model.len());
                for (&id, &v) in &model {
                    prop_assert_eq!(slab.get(id), Some(&v));
                }
                for &id in &gone {
                    prop_assert!(slab.get(id).is_none());
                }
                let mut listed: Vec<(u64, usize)> = slab.iter().map(|(id, v)| (id, *v)).collect();
                let mut want: Vec<(u64, usize)> = model.iter().map(|(&id, &v)| (id, v)).collect();
                listed.sort_unstable();
                want.sort_unstable();
                prop_assert_eq!(listed, want);
            }
        }
    }
}
