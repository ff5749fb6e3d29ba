//! Random numbers for names and ids no other process is likely to pick
//! (no cryptographic strength: std's per-process random hash keys, the
//! pid and the clock).

use std::hash::{BuildHasher, Hasher};

/// 64 random bits.
pub fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.finish()
}
