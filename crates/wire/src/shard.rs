//! Where metadata lives when it is spread over K shards (DESIGN §3, issue 23).
//!
//! * A directory entry `(parent id, name)` and the inode of a file made
//!   under it live on shard [`entry_shard`]: a hash of both, so the files of
//!   one directory spread over every shard (mdtest's "hard" shape) and a
//!   create touches one shard.
//! * A file id names its home shard ([`home_shard`]): shard `s` hands out
//!   ids congruent to `s` modulo K, so a request keyed by id (a close, a
//!   change through a mount's inode, a capability renewal) routes without
//!   a lookup.
//! * Directories are kept on every shard (written by their home shard,
//!   which pushes each change to the others in order), so any shard walks a
//!   path and checks its permissions locally: a create is one request to
//!   one shard.
//!
//! With K = 1 every function answers 0: a single server is unchanged.

use crate::FileId;

/// The shard holding entry `name` of directory `parent`.
pub fn entry_shard(parent: FileId, name: &str, shards: u32) -> u32 {
    if shards <= 1 {
        return 0;
    }
    let mut h = blake3::Hasher::new();
    h.update(b"weft entry shard").update(&parent.0.to_le_bytes()).update(name.as_bytes());
    let b = h.finalize();
    let v = u64::from_le_bytes(b.as_bytes()[..8].try_into().expect("8 bytes"));
    (v % u64::from(shards)) as u32
}

/// The shard that made file `id` and keeps its inode.
pub fn home_shard(id: FileId, shards: u32) -> u32 {
    if shards <= 1 { 0 } else { (id.0 % u64::from(shards)) as u32 }
}

/// The first id at or above `at` that shard `shard` of `shards` may hand
/// out (congruent to `shard`), or `None` past `u64::MAX`.
pub fn next_id_of(at: u64, shard: u32, shards: u32) -> Option<u64> {
    if shards <= 1 {
        return Some(at);
    }
    let k = u64::from(shards);
    let s = u64::from(shard);
    let r = at % k;
    let up = if r <= s { s - r } else { k - r + s };
    at.checked_add(up)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn one_shard_is_shard_zero() {
        assert_eq!(entry_shard(FileId(7), "a", 1), 0);
        assert_eq!(home_shard(FileId(7), 1), 0);
        assert_eq!(next_id_of(7, 0, 1), Some(7));
    }

    #[test]
    fn names_of_one_directory_spread_over_every_shard() {
        let mut per = [0u32; 4];
        for i in 0..4000 {
            per[entry_shard(FileId(1), &format!("file.{i}"), 4) as usize] += 1;
        }
        // A fair hash puts about 1000 on each; 800 leaves room for chance.
        assert!(per.iter().all(|&n| n > 800), "{per:?}");
    }

    proptest! {
        #[test]
        fn placement_is_stable_and_in_range(parent in any::<u64>(), name in "[a-z0-9.]{1,20}", k in 1u32..64) {
            let s = entry_shard(FileId(parent), &name, k);
            prop_assert!(s < k);
            prop_assert_eq!(s, entry_shard(FileId(parent), &name, k));
        }

        /// An id handed out by a shard routes back to it, and is the
        /// least such id at or above the counter.
        #[test]
        fn ids_route_home(at in 0u64..u64::MAX / 2, k in 1u32..64, pick in any::<u32>()) {
            let shard = pick % k;
            let id = next_id_of(at, shard, k).unwrap();
            prop_assert!(id >= at && id - at < u64::from(k));
            prop_assert_eq!(home_shard(FileId(id), k), shard);
        }
    }
}
